//! Which audit key the runs' logs are chained by ([`nrllm_store::chain`]): `NRLLM_AUDIT_KEY` (the
//! key itself, 64 hexadecimal characters; how instances sharing a Postgres database share it), else
//! the `audit_key_file` setting, else the file beside an SQLite database (the store's own
//! default), else `data/audit.key` for Postgres. A file that does not exist yet is made (mode 0600).

use std::path::PathBuf;

use nrllm_store::chain::AuditKey;
use nrllm_store::db::{Backend, Database};

use crate::settings::Settings;

/// Where a Postgres database's audit key lives unless the settings say.
const POSTGRES_KEY_FILE: &str = "data/audit.key";

/// `db` with the audit key the settings and the environment (`env`) choose.
pub fn with_audit_key(
    db: Database,
    settings: &Settings,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Database, String> {
    if let Some(text) = env("NRLLM_AUDIT_KEY").filter(|text| !text.trim().is_empty()) {
        let key = AuditKey::from_hex(&text).map_err(|err| format!("NRLLM_AUDIT_KEY: {err}"))?;
        return Ok(db.with_audit_key(key));
    }
    let file = match (&settings.audit_key_file, db.backend()) {
        (Some(file), _) => file.clone(),
        (None, Backend::Sqlite) => return Ok(db),
        (None, Backend::Postgres) => PathBuf::from(POSTGRES_KEY_FILE),
    };
    let (key, created) = AuditKey::load_or_create(&file)
        .map_err(|err| format!("setting `audit_key_file`: {err}"))?;
    if created {
        tracing::warn!(
            file = %file.display(),
            "made a new audit key; keep it safe and apart from the database (instances sharing \
             one database must share it: NRLLM_AUDIT_KEY or audit_key_file)"
        );
    }
    Ok(db.with_audit_key(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_environment_wins_then_the_setting_then_the_file_beside_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("runs.db").display());
        let db = Database::connect(&url).await.unwrap();
        let beside = AuditKey::load_or_create(&dir.path().join("runs.db.audit-key"))
            .unwrap()
            .0;
        let mut settings = Settings::default();
        let none = |_: &str| None;
        let db = with_audit_key(db, &settings, none).unwrap();
        assert_eq!(db.audit_key().id(), beside.id());

        settings.audit_key_file = Some(dir.path().join("elsewhere.key"));
        let db = with_audit_key(db, &settings, none).unwrap();
        let elsewhere = AuditKey::load_or_create(&dir.path().join("elsewhere.key"))
            .unwrap()
            .0;
        assert_eq!(db.audit_key().id(), elsewhere.id());
        assert_ne!(elsewhere.id(), beside.id());

        let hex = "ab".repeat(32);
        let db = with_audit_key(db, &settings, |name| {
            (name == "NRLLM_AUDIT_KEY").then(|| hex.clone())
        })
        .unwrap();
        assert_eq!(db.audit_key().id(), AuditKey::from_hex(&hex).unwrap().id());

        let err = with_audit_key(db, &settings, |_| Some("short".into())).unwrap_err();
        assert!(
            err.contains("NRLLM_AUDIT_KEY") && err.contains("64 hexadecimal"),
            "{err}"
        );
    }
}
