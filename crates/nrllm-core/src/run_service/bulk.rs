//! A bulk decision: several waiting runs approved or denied whole with one press. It is no door of
//! its own: each run is claimed on its own, with the digest of the turn the operator saw, through
//! the same authority and claim as its own form's button ([`RunService::claim_submission`]), so
//! one run's refusal (changed since it was seen, expired, four-eyes, decided already) leaves the
//! others as they are.

use uuid::Uuid;

use super::errors::ResumeError;
use super::RunService;
use crate::authority::Actor;
use crate::moves::{BulkVerdict, Pick, MAX_BULK_RUNS};

impl RunService {
    /// Claims each picked run, one after another, as its own form's "Approve all" or "Deny all"
    /// would (a denial with `reason`; an approval never carries one): what each came to, in the
    /// order picked. A run picked twice is claimed once. Claimed runs are queued for a worker.
    pub async fn claim_each(
        &self,
        picks: &[Pick],
        verdict: BulkVerdict,
        reason: Option<&str>,
        actor: &Actor,
    ) -> Vec<(Uuid, Result<(), ResumeError>)> {
        let submission = verdict.submission(reason);
        let mut outcomes: Vec<(Uuid, Result<(), ResumeError>)> = Vec::new();
        for pick in picks.iter().take(MAX_BULK_RUNS) {
            if outcomes.iter().any(|(id, _)| *id == pick.id) {
                continue;
            }
            let claimed = self
                .claim_submission(pick.id, &submission, actor, Some(&pick.digest))
                .await
                .map(|_| ());
            outcomes.push((pick.id, claimed));
        }
        outcomes
    }
}
