//! What the benches that run the server binary share: a token made in its database before it
//! starts, and the process itself (killed when dropped).

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The server binary a bench was told to run, or (none named) the one cargo built with it.
pub fn binary_or_own(named: String) -> String {
    match named.is_empty() {
        true => env!("CARGO_BIN_EXE_nrllm-playground").to_owned(),
        false => named,
    }
}

/// An API token of `role` for the bench `name`, made in the SQLite database at `url` (which it
/// creates and migrates); the database is closed again for the server to open.
pub async fn token(url: &str, role: nrllm_types::Role, name: &str) -> String {
    let db = nrllm_store::db::Database::connect(url)
        .await
        .expect("the database");
    let token = nrllm_store::accounts::AccountStore::new(db.clone())
        .create_program_token("bench", role, name, nrllm_core::clock::now_ms())
        .await
        .expect("a token");
    db.pool().close().await;
    token
}

/// The server binary running for a bench, on its own folder; killed when dropped.
pub struct Server {
    pub child: Child,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `binary` with the settings file `settings` (written in `dir`), on `addr` and the
    /// database at `url`, with `env` besides.
    pub fn start(
        binary: &str,
        dir: tempfile::TempDir,
        settings: &str,
        (addr, url): (&str, &str),
        env: &[(&str, &str)],
    ) -> Server {
        let config = dir.path().join("bench.toml");
        std::fs::write(&config, settings).expect("the settings file");
        let child = Command::new(binary)
            .env("NRLLM_CONFIG", &config)
            .env("NRLLM_SITE_ADDR", addr)
            .env("NRLLM_DATABASE_URL", url)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {binary}: {err}"));
        Server { child, _dir: dir }
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
