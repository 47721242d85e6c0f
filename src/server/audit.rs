//! Which audit key the runs' logs are chained by ([`nrllm_store::chain`]): `NRLLM_AUDIT_KEY` (the
//! key itself, 64 hexadecimal characters; how instances sharing a Postgres database share it), else
//! the `audit_key_file` setting, else the file beside an SQLite database (the store's own
//! default), else `data/audit.key` for Postgres. A file that does not exist yet is made (mode 0600).

use std::path::PathBuf;

use nrllm_store::chain::AuditKey;
use nrllm_store::db::Backend;

use crate::settings::Settings;

/// Where a Postgres database's audit key lives unless the settings say.
const POSTGRES_KEY_FILE: &str = "data/audit.key";

/// The audit key the settings and the environment (`env`) choose for the database they name;
/// `None`: the store's default, the file beside the SQLite database.
pub fn audit_key(
    settings: &Settings,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<AuditKey>, String> {
    if let Some(text) = env("NRLLM_AUDIT_KEY").filter(|text| !text.trim().is_empty()) {
        let key = AuditKey::from_hex(&text).map_err(|err| format!("NRLLM_AUDIT_KEY: {err}"))?;
        return Ok(Some(key));
    }
    let file = match (
        &settings.audit_key_file,
        Backend::from_url(&settings.database_url),
    ) {
        (Some(file), _) => file.clone(),
        (None, Some(Backend::Postgres)) => PathBuf::from(POSTGRES_KEY_FILE),
        (None, _) => return Ok(None),
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
    Ok(Some(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nrllm_store::db::{Database, DbOptions};

    #[tokio::test]
    async fn the_environment_wins_then_the_setting_then_the_file_beside_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("runs.db").display());
        let beside = dir.path().join("runs.db.audit-key");
        let mut settings = Settings {
            database_url: url.clone(),
            ..Settings::default()
        };
        let none = |_: &str| None;
        let open = |key: Option<AuditKey>| {
            let url = url.clone();
            async move {
                let options = DbOptions {
                    audit_key: key,
                    ..DbOptions::default()
                };
                Database::connect_with(&url, options).await.unwrap()
            }
        };

        // A key given (here by the environment) is the one used, and no file is made beside.
        let hex = "ab".repeat(32);
        let given = audit_key(&settings, |name| {
            (name == "NRLLM_AUDIT_KEY").then(|| hex.clone())
        })
        .unwrap();
        let db = open(given).await;
        assert_eq!(db.audit_key().id(), AuditKey::from_hex(&hex).unwrap().id());
        assert!(!beside.exists(), "no key file beside the database");
        db.pool().close().await;

        assert!(audit_key(&settings, none).unwrap().is_none());
        let db = open(None).await;
        let made = AuditKey::load_or_create(&beside).unwrap().0;
        assert_eq!(db.audit_key().id(), made.id());
        db.pool().close().await;

        settings.audit_key_file = Some(dir.path().join("elsewhere.key"));
        let elsewhere = audit_key(&settings, none).unwrap().unwrap();
        assert_eq!(
            elsewhere.id(),
            AuditKey::load_or_create(&dir.path().join("elsewhere.key"))
                .unwrap()
                .0
                .id()
        );
        assert_ne!(elsewhere.id(), made.id());

        let err = audit_key(&settings, |_| Some("short".into())).unwrap_err();
        assert!(
            err.contains("NRLLM_AUDIT_KEY") && err.contains("64 hexadecimal"),
            "{err}"
        );
    }
}
