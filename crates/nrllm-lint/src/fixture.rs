//! Small crates written to a scratch folder, for the lint's own tests.

use std::path::PathBuf;

/// A fresh folder holding `files` (path, text), named for the test and this process.
pub fn crate_dir(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nrllm-lint-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (file, text) in files {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().expect("a file in a folder")).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}
