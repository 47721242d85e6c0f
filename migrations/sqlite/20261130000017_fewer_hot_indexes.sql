-- Every index a transition moves is one more page each commit writes (issue #19: the approve
-- cycle wrote ~32 pages in 4 commits, and these two were ~6 of them).
--
-- The lease sweep reads the running runs through agent_run_status_created instead: running runs
-- are the ones being driven right now, few at any time, where the lease index was moved by
-- every transition (a run enters or leaves `running` in each).
DROP INDEX agent_run_lease;
-- Only runs that have a deadline are in the deadline sweep's index; the sweep's
-- `approval_deadline_ms <= $1` implies the column is not null, so it still reads through it.
DROP INDEX agent_run_deadline;
CREATE INDEX agent_run_deadline ON agent_run (approval_deadline_ms)
    WHERE status IN ('waiting_for_approval', 'waiting_for_input')
    AND approval_deadline_ms IS NOT NULL;
