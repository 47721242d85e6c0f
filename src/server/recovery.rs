//! What the server does at start about runs the last stop cut off.
//!
//! With the embedded SQLite database this process is the only instance, so a run still `running`
//! can only be one that was running when the server stopped (crash, kill, restart): it is ended as
//! failed / `interrupted`, with a summary that says what that means. On Postgres several
//! instances may share the database and a `running` run may be alive in another one; telling
//! those apart needs leases, so nothing is touched there.

use nrllm_core::clock::now_ms;
use nrllm_core::store::RunStore;
use nrllm_store::db::Backend;

/// What an operator reads on a run that the last stop of the server cut off.
pub const INTERRUPTED_SUMMARY: &str = "The server stopped while this run was running, so it ended \
here. Steps after the last saved one are lost, and a tool approved just before the stop may or may \
not have run: check its target before you run the prompt again.";

/// Ends the runs that the last stop cut off (see the module); how many.
pub async fn mark_interrupted_runs(store: &dyn RunStore, backend: Backend) -> Result<u64, String> {
    match backend {
        Backend::Sqlite => store
            .interrupt_running(INTERRUPTED_SUMMARY, now_ms())
            .await
            .map_err(|err| err.to_string()),
        Backend::Postgres => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nrllm_core::store::{NewRun, RunConfiguration, RunStatus};
    use nrllm_store::db::Database;
    use nrllm_store::SqlRunStore;

    #[tokio::test]
    async fn at_start_runs_cut_off_are_explained_on_sqlite_and_left_alone_on_postgres() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}/runs.db", dir.path().display());
        let db = Database::connect(&url).await.unwrap();
        let store = SqlRunStore::new(db.clone());
        let new_run = || NewRun {
            id: uuid::Uuid::new_v4(),
            configuration: RunConfiguration {
                provider: "demo".into(),
                model: "demo-1".into(),
                prompt: "p".into(),
                system_prompt: None,
                skills: Vec::new(),
                settings: Default::default(),
            },
            requested_by: "operator".into(),
        };
        let first = store.create(&new_run(), now_ms()).await.unwrap();
        // Another instance may be running it: with Postgres nothing is touched.
        assert_eq!(
            mark_interrupted_runs(&store, Backend::Postgres).await,
            Ok(0)
        );
        assert_eq!(
            store.get(first.id).await.unwrap().unwrap().status,
            RunStatus::Running
        );
        assert_eq!(mark_interrupted_runs(&store, db.backend()).await, Ok(1));
        let run = store.get(first.id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Failed);
        assert_eq!(run.error_summary.as_deref(), Some(INTERRUPTED_SUMMARY));
        // Started again, nothing is left to mark.
        assert_eq!(mark_interrupted_runs(&store, db.backend()).await, Ok(0));
    }
}
