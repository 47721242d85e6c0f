//! Approval rules added and removed through the authority.

use super::errors::ServiceError;
use super::RunService;
use crate::authority::{authorize, Act, Actor};
use crate::rules::{ApprovalRule, RuleDraft, RuleScope};

impl RunService {
    /// Adds an approval rule for `actor`: a run's rule if they may decide that run (its lineage
    /// may not, under four-eyes), a configuration's if they are an administrator.
    pub async fn add_rule(
        &self,
        actor: &Actor,
        draft: &RuleDraft,
    ) -> Result<ApprovalRule, ServiceError> {
        self.may_rule(actor, &draft.scope).await?;
        draft.check().map_err(ServiceError::InvalidRule)?;
        let rule = self
            .store
            .add_rule(draft, &actor.name, self.clock.now_ms())
            .await?;
        tracing::info!(by = %actor.label(), rule = rule.id, what = %rule.describe(), "approval rule added");
        Ok(rule)
    }

    /// Removes approval rule `id` for `actor`, who must be allowed to add it; the rule as it was.
    pub async fn remove_rule(&self, actor: &Actor, id: i64) -> Result<ApprovalRule, ServiceError> {
        let missing = || ServiceError::NotFound(format!("There is no rule {id}."));
        let rule = self.store.rule(id).await?.ok_or_else(missing)?;
        self.may_rule(actor, &rule.scope).await?;
        let removed = self.store.remove_rule(id).await?.ok_or_else(missing)?;
        tracing::info!(by = %actor.label(), rule = id, what = %removed.describe(), "approval rule removed");
        Ok(removed)
    }

    pub(super) async fn may_rule(
        &self,
        actor: &Actor,
        scope: &RuleScope,
    ) -> Result<(), ServiceError> {
        let refused = match scope {
            RuleScope::Run(run) => {
                let run = self
                    .store
                    .get(*run)
                    .await?
                    .ok_or_else(|| ServiceError::NotFound(format!("There is no run {run}.")))?;
                self.may(actor, Act::Rule(scope), &run).await?.err()
            }
            // A configuration's rule is about no run.
            RuleScope::Configuration(_) => authorize(actor, Act::Rule(scope), None).err(),
        };
        match refused {
            Some(refusal) => {
                tracing::warn!(who = %actor.label(), %refusal, "refused: an approval rule");
                Err(ServiceError::Refused(refusal))
            }
            None => Ok(()),
        }
    }
}
