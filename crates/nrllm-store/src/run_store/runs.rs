//! A run's transitions: created, suspended, claimed, decided, finished, failed, cancelled,
//! purged.

use async_trait::async_trait;
use nrllm_core::events::Event;
use nrllm_core::quorum::Vote;
use nrllm_core::run_store::{
    Claim, ClaimRecord, Finish, NewRun, PurgeReport, RunRecord, RunStatus, RunStore,
    SequencedEvent, StoreError, TerminationReason,
};
use nrllm_core::state::Kept;
use uuid::Uuid;

use crate::error::backend;
use crate::notify::Notice;
use crate::transition::{Cells, Statement, Transition};

use super::queries::*;
use super::write::*;
use super::*;

#[async_trait]
impl RunStore for SqlRunStore {
    async fn create(
        &self,
        run: &NewRun,
        now_ms: i64,
        drive_here: bool,
    ) -> Result<RunRecord, StoreError> {
        let configuration = serde_json::to_string(&run.configuration)
            .map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let (status, owner, until, queued) = self.placement(drive_here, now_ms);
        let insert = Statement::new(format!(
            "INSERT INTO agent_run (id, status, configuration, requested_by, truncated, version, last_sequence, \
             created_at_ms, updated_at_ms, started_at_ms, provider, lease_owner, lease_until_ms, queued_at_ms, \
             parent_id, trace) \
             VALUES ($1, $2, $3, $4, 0, 0, $12, $5, $5, $9, $6, $7, $8, $10, $11, $13) \
             RETURNING {RUN_COLUMNS}"
        ))
        .bind(run.id.to_string())
        .bind(status.as_str())
        .bind(configuration)
        .bind(&run.requested_by)
        .bind(now_ms)
        .bind(&run.configuration.provider)
        .bind(owner)
        .bind(until)
        .bind(drive_here.then_some(now_ms))
        .bind(queued)
        .bind(
            run.configuration
                .continues
                .as_ref()
                .map(|c| c.parent.to_string()),
        )
        .bind(last_sequence(&run.copied).unwrap_or(0))
        .bind(run.trace.to_json());
        let mut transition = Transition::new(insert, run.id.to_string());
        if !run.copied.is_empty() {
            self.add_steps(&mut transition, run.id, &run.copied)?;
        }
        if queued.is_some() {
            self.announce(&mut transition, Notice::Queued);
        }
        let row = self.write(transition).await?.ok_or_else(|| {
            StoreError::Corrupt(format!("the insert of run {} returned no row", run.id))
        })?;
        read_run(&row)
    }

    async fn suspend(
        &self,
        id: Uuid,
        version: i64,
        kept: Kept<'_>,
        events: &[SequencedEvent],
        now_ms: i64,
        deadline_ms: Option<i64>,
    ) -> Result<RunRecord, StoreError> {
        let state = kept.state;
        let held = state
            .elicited
            .as_ref()
            .is_some_and(|wait| wait.asked.held_until_ms.is_some());
        let ChainSql { set, returning } = self.chain_sql();
        let fence = Statement::new(format!(
            "UPDATE agent_run SET status = $1, suspended_state = $2, iterations = $3, tool_calls = $4, \
             prompt_tokens = $5, completion_tokens = $6, total_tokens = $7, \
             last_sequence = CASE WHEN $8 > last_sequence THEN $8 ELSE last_sequence END, \
             version = version + 1, updated_at_ms = $9, pending_tools = $13, \
             decided_by = NULL, decided_at_ms = NULL, decision = NULL, decision_record = NULL, \
             lease_owner = NULL, lease_until_ms = 0, approval_deadline_ms = $15, \
             unreported_usage = $16, cached_input_tokens = $17, cache_write_tokens = $18, \
             reasoning_tokens = $19, approvals_required = $20, held_by = $21, held_until_ms = $22 \
             {set}WHERE id = $10 AND status = $11 AND version = $12 AND lease_owner = $14 \
             AND cancel_by IS NULL RETURNING {RUN_COLUMNS}, {returning}",
        ))
        .bind(state.waiting_for().as_str())
        .bind(kept.json.into_owned())
        .bind(i64::from(state.counters.iterations))
        .bind(i64::from(state.counters.tool_calls))
        .bind(to_i64(state.counters.usage.prompt_tokens))
        .bind(to_i64(state.counters.usage.completion_tokens))
        .bind(to_i64(state.counters.usage.total()))
        .bind(last_sequence(events).unwrap_or(0))
        .bind(now_ms)
        .bind(id.to_string())
        .bind(RunStatus::Running.as_str())
        .bind(version)
        .bind(pending_tools(state))
        .bind(&*self.owner)
        .bind(deadline_ms)
        .bind(i64::from(state.counters.usage.unreported))
        .bind_usage_parts(&state.counters.usage)
        .bind(i64::from(state.approvals_required.max(1)))
        // A server's call held open here for the question it asked: only this instance can
        // answer through it, so the run is held for it (renewed by its heartbeat).
        .bind(held.then(|| self.owner.to_string()))
        .bind(held.then_some(now_ms + self.lease_ms));
        let mut transition = self.transition(fence, id, events)?;
        transition.before_commit = Some(match state.budget {
            Some(_) => "during_budget_suspend_commit",
            None => "during_suspend_commit",
        });
        read_run(&self.fenced(transition, id, version).await?)
    }

    async fn claim_for_resume(
        &self,
        id: Uuid,
        version: i64,
        claim: &ClaimRecord,
        now_ms: i64,
        drive_here: bool,
    ) -> Result<Claim, StoreError> {
        let (status, owner, until, queued) = self.placement(drive_here, now_ms);
        // The compare-and-set: exactly one claimer's update matches the row, and only while
        // the run's steps are as the claimer read them (an approval counted meanwhile adds one).
        let ChainSql { set, returning } = self.chain_sql();
        let fence = Statement::new(format!(
            "UPDATE agent_run SET status = $1, decided_by = $2, decided_at_ms = $3, decision = $4, \
             decision_record = $5, version = version + 1, updated_at_ms = $3, \
             last_sequence = CASE WHEN $6 > last_sequence THEN $6 ELSE last_sequence END, \
             lease_owner = $10, lease_until_ms = $11, queued_at_ms = $12, approved_bases = $9, \
             approval_deadline_ms = NULL \
             {set}WHERE id = $7 AND {waiting} AND version = $8 AND last_sequence = $13 \
             RETURNING version, {returning}",
            waiting = RunStatus::sql_any("status", &RunStatus::WAITING)
        ))
        .bind(status.as_str())
        .bind(&claim.decided_by)
        .bind(now_ms)
        .bind(claim.verdict.as_str())
        .bind(&claim.decision)
        .bind(last_sequence(&claim.events).unwrap_or(0))
        .bind(id.to_string())
        .bind(version)
        .bind(&claim.approved_bases)
        .bind(owner)
        .bind(until)
        .bind(queued)
        .bind(claim.events.first().map_or(0, |e| e.sequence - 1));
        let mut transition = self.transition(fence, id, &claim.events)?;
        if queued.is_some() {
            // The decision waits in the queue: every instance's worker looks.
            self.announce(&mut transition, Notice::Queued);
        }
        transition.then.extend(claim_rows(id, claim, now_ms));
        if let Some(vote) = &claim.vote {
            transition.then.push(vote_upsert(id, version, vote));
        }
        let Some(row) = self.write(transition).await? else {
            return Ok(Claim::Lost(Box::new(self.status_of(id).await?)));
        };
        Ok(Claim::Won {
            version: row.required_int("version")?,
        })
    }

    async fn count_approval(
        &self,
        id: Uuid,
        (version, last_sequence): (i64, i64),
        vote: &Vote,
        step: &SequencedEvent,
    ) -> Result<bool, StoreError> {
        // The run stays at its version (open pages' digests hold); only its steps move on.
        let ChainSql { set, returning } = self.chain_sql();
        let fence = Statement::new(format!(
            "UPDATE agent_run SET last_sequence = last_sequence + 1 \
             {set}WHERE id = $1 AND version = $2 AND last_sequence = $3 AND {} \
             RETURNING last_sequence, {returning}",
            RunStatus::sql_any("status", &RunStatus::WAITING)
        ))
        .bind(id.to_string())
        .bind(version)
        .bind(last_sequence);
        let mut transition = self.transition(fence, id, std::slice::from_ref(step))?;
        transition.numbered_by_fence = true;
        transition.then.push(vote_upsert(id, version, vote));
        Ok(self.write(transition).await?.is_some())
    }

    async fn decide_running(
        &self,
        id: Uuid,
        version: i64,
        kept: Kept<'_>,
        claim: &ClaimRecord,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let state = kept.state;
        let ChainSql { set, returning } = self.chain_sql();
        let fence = Statement::new(format!(
            "UPDATE agent_run SET suspended_state = $1, iterations = $2, tool_calls = $3, \
             prompt_tokens = $4, completion_tokens = $5, total_tokens = $6, \
             last_sequence = CASE WHEN $7 > last_sequence THEN $7 ELSE last_sequence END, \
             version = version + 1, updated_at_ms = $8, pending_tools = $9, \
             decided_by = $10, decided_at_ms = $8, decision = $11, decision_record = $12, \
             approved_bases = $13, unreported_usage = $18, cached_input_tokens = $19, \
             cache_write_tokens = $20, reasoning_tokens = $21 \
             {set}WHERE id = $14 AND status = $15 AND version = $16 AND lease_owner = $17 \
             AND cancel_by IS NULL RETURNING {returning}"
        ))
        .bind(kept.json.into_owned())
        .bind(i64::from(state.counters.iterations))
        .bind(i64::from(state.counters.tool_calls))
        .bind(to_i64(state.counters.usage.prompt_tokens))
        .bind(to_i64(state.counters.usage.completion_tokens))
        .bind(to_i64(state.counters.usage.total()))
        .bind(last_sequence(&claim.events).unwrap_or(0))
        .bind(now_ms)
        .bind(pending_tools(state))
        .bind(&claim.decided_by)
        .bind(claim.verdict.as_str())
        .bind(&claim.decision)
        .bind(&claim.approved_bases)
        .bind(id.to_string())
        .bind(RunStatus::Running.as_str())
        .bind(version)
        .bind(&*self.owner)
        .bind(i64::from(state.counters.usage.unreported))
        .bind_usage_parts(&state.counters.usage);
        let mut transition = self.transition(fence, id, &claim.events)?;
        transition.then.extend(claim_rows(id, claim, now_ms));
        transition.before_commit = Some("during_automatic_decision_commit");
        self.fenced(transition, id, version).await?;
        Ok(version + 1)
    }

    async fn finish(
        &self,
        id: Uuid,
        version: i64,
        finish: &Finish,
        events: &[SequencedEvent],
        now_ms: i64,
    ) -> Result<RunRecord, StoreError> {
        if !finish.status.is_terminal() {
            return Err(StoreError::InvalidTransition {
                id,
                status: finish.status,
                action: "a finishing status",
            });
        }
        let ChainSql { set, returning } = self.chain_sql();
        let fence = Statement::new(format!(
            "UPDATE agent_run SET status = $1, termination_reason = $2, iterations = $3, tool_calls = $4, \
             prompt_tokens = $5, completion_tokens = $6, total_tokens = $7, truncated = $8, final_answer = $9, \
             error_summary = $10, estimated_cost_micros = $11, suspended_state = NULL, \
             decision_record = NULL, \
             last_sequence = CASE WHEN $12 > last_sequence THEN $12 ELSE last_sequence END, \
             version = version + 1, updated_at_ms = $13, finished_at_ms = $13, \
             lease_owner = NULL, lease_until_ms = 0, unreported_usage = $18, \
             cached_input_tokens = $19, cache_write_tokens = $20, reasoning_tokens = $21 \
             {set}WHERE id = $14 AND version = $15 AND NOT {} \
             AND (status <> $16 OR lease_owner = $17) RETURNING {RUN_COLUMNS}, {returning}",
            RunStatus::sql_any("status", &RunStatus::TERMINAL)
        ))
        .bind(finish.status.as_str())
        .bind(finish.reason.as_str())
        .bind(i64::from(finish.counters.iterations))
        .bind(i64::from(finish.counters.tool_calls))
        .bind(to_i64(finish.counters.usage.prompt_tokens))
        .bind(to_i64(finish.counters.usage.completion_tokens))
        .bind(to_i64(finish.counters.usage.total()))
        .bind(i64::from(finish.truncated))
        .bind(finish.final_answer.as_deref())
        .bind(finish.error_summary.as_deref())
        .bind(finish.estimated_cost_micros)
        .bind(last_sequence(events).unwrap_or(0))
        .bind(now_ms)
        .bind(id.to_string())
        .bind(version)
        .bind(RunStatus::Running.as_str())
        .bind(&*self.owner)
        .bind(i64::from(finish.counters.usage.unreported))
        .bind_usage_parts(&finish.counters.usage);
        let mut transition = self.transition(fence, id, events)?;
        transition.before_commit = Some("during_finish_commit");
        read_run(&self.fenced(transition, id, version).await?)
    }

    async fn fail_corrupted(
        &self,
        id: Uuid,
        version: i64,
        summary: &str,
        event: &Event,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let ChainSql { set, returning } = self.chain_sql();
        let fence = Statement::new(format!(
            "UPDATE agent_run SET status = $1, termination_reason = $2, error_summary = $3, \
             version = version + 1, updated_at_ms = $4, finished_at_ms = $4, \
             last_sequence = last_sequence + 1 \
             {set}WHERE id = $5 AND version = $6 AND NOT {} \
             RETURNING last_sequence, {returning}",
            RunStatus::sql_any("status", &RunStatus::TERMINAL)
        ))
        .bind(RunStatus::Failed.as_str())
        .bind(TerminationReason::StateCorrupted.as_str())
        .bind(summary)
        .bind(now_ms)
        .bind(id.to_string())
        .bind(version);
        let step = SequencedEvent {
            sequence: 0,
            event: event.clone(),
            created_at_ms: now_ms,
        };
        let mut transition = self.transition(fence, id, std::slice::from_ref(&step))?;
        transition.numbered_by_fence = true;
        self.fenced(transition, id, version).await?;
        Ok(())
    }

    async fn cancel(
        &self,
        id: Uuid,
        by: &str,
        reason: Option<&str>,
        now_ms: i64,
    ) -> Result<RunRecord, StoreError> {
        let step = SequencedEvent {
            sequence: 0,
            event: Event::Cancelled {
                by: by.to_owned(),
                reason: reason.map(str::to_owned),
                abandoned: None,
                unknown: Vec::new(),
            },
            created_at_ms: now_ms,
        };
        // A run that moves between the two steps below (running → waiting) is tried again while
        // it is in a status one of them takes.
        let mut attempts = 0;
        loop {
            let ChainSql { set, returning } = self.chain_sql();
            let fence = Statement::new(format!(
                "UPDATE agent_run SET status = $1, termination_reason = $2, \
                 suspended_state = NULL, decided_by = $3, decided_at_ms = $4, \
                 decision = 'cancelled', decision_record = NULL, version = version + 1, \
                 updated_at_ms = $4, finished_at_ms = $4, last_sequence = last_sequence + 1 \
                 {set}WHERE id = $5 AND {} RETURNING {RUN_COLUMNS}, {returning}",
                RunStatus::sql_any("status", &RunStatus::CANCELLABLE)
            ))
            .bind(RunStatus::Cancelled.as_str())
            .bind(TerminationReason::Cancelled.as_str())
            .bind(by)
            .bind(now_ms)
            .bind(id.to_string());
            let mut transition = self.transition(fence, id, std::slice::from_ref(&step))?;
            transition.numbered_by_fence = true;
            if let Some(row) = self.write(transition).await? {
                return read_run(&row);
            }
            // Running: the request is recorded (the first one stands), and the instance driving
            // the run stops it at its next step.
            let request = Statement::new(format!(
                "UPDATE agent_run SET cancel_by = COALESCE(cancel_by, $1), \
                 cancel_reason = CASE WHEN cancel_by IS NULL THEN $2 ELSE cancel_reason END \
                 WHERE id = $3 AND status = $4 RETURNING {RUN_COLUMNS}"
            ))
            .bind(by)
            .bind(reason)
            .bind(id.to_string())
            .bind(RunStatus::Running.as_str());
            let mut transition = Transition::new(request, id.to_string());
            self.announce(&mut transition, Notice::Cancel(id));
            if let Some(row) = self.write(transition).await? {
                return read_run(&row);
            }
            let run = self.status_of(id).await?;
            attempts += 1;
            let movable =
                run.status == RunStatus::Running || RunStatus::CANCELLABLE.contains(&run.status);
            if !movable || attempts == CANCEL_ATTEMPTS {
                return Err(StoreError::InvalidTransition {
                    id,
                    status: run.status,
                    action: "cancelled",
                });
            }
        }
    }

    async fn purge(
        &self,
        terminal_before_ms: i64,
        waiting_before_ms: i64,
        chunk: u32,
    ) -> Result<PurgeReport, StoreError> {
        let mut report = PurgeReport::default();
        let chunk = i64::from(chunk.max(1));
        let mut after = String::new();
        loop {
            let mut tx = self.db.begin_write().await.map_err(backend)?;
            // Which runs are due: checked again on each row, under its lock, just below.
            let due = format!(
                "(({} AND finished_at_ms < $1) OR ({} AND updated_at_ms < $2))",
                RunStatus::sql_any("status", &RunStatus::TERMINAL),
                RunStatus::sql_any("status", &RunStatus::WAITING)
            );
            let ids: Vec<String> = sqlx::query_scalar(&format!(
                "SELECT id FROM agent_run WHERE {due} AND id > $3 ORDER BY id LIMIT $4"
            ))
            .bind(terminal_before_ms)
            .bind(waiting_before_ms)
            .bind(&after)
            .bind(chunk)
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
            let Some(last) = ids.last().cloned() else {
                return Ok(report);
            };
            after = last;
            // In id order, so that two purges lock rows in the same order and never deadlock.
            for id in &ids {
                // Locks the row and checks it is still due: a run claimed (or decided) since the
                // select is left alone, and a claim waiting on the lock finds it gone.
                let still_due = sqlx::query(&format!(
                    "UPDATE agent_run SET version = version WHERE id = $3 AND {due}"
                ))
                .bind(terminal_before_ms)
                .bind(waiting_before_ms)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
                if still_due.rows_affected() != 1 {
                    continue;
                }
                for table in [
                    "agent_run_effect",
                    "webhook_delivery",
                    "notification",
                    "notification_round",
                    "decision_link_use",
                    "turn_approval",
                    "agent_run_search_queue",
                ] {
                    sqlx::query(&format!("DELETE FROM {table} WHERE run_id = $1"))
                        .bind(id)
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                }
                let events = sqlx::query("DELETE FROM agent_run_event WHERE run_id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                sqlx::query("DELETE FROM agent_run WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                report.events += events.rows_affected();
                report.runs += 1;
            }
            tx.commit().await.map_err(backend)?;
        }
    }
}
