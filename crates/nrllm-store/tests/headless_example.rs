//! Runs the headless example as separate processes on one SQLite file: the run suspends in one
//! process and is decided and finished in another.

use std::path::PathBuf;
use std::process::Command;

fn example() -> PathBuf {
    // Test binaries live in target/<profile>/deps; cargo builds examples into target/<profile>/examples.
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    profile_dir
        .join("examples")
        .join(format!("headless{}", std::env::consts::EXE_SUFFIX))
}

fn run(args: &[&str]) -> (bool, String) {
    let output = Command::new(example())
        .args(args)
        .output()
        .expect("the example runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text.trim().to_owned())
}

/// `run <id> <status> …` → the id.
fn run_id(line: &str) -> String {
    line.split_whitespace().nth(1).expect("a run id").to_owned()
}

#[test]
fn suspend_in_one_process_and_approve_in_another() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("runs.db").display());
    let notes = dir.path().join("notes.txt");
    let n = notes.to_str().unwrap();

    let (ok, out) = run(&["start", &db, n, "buy milk"]);
    assert!(ok, "{out}");
    assert!(
        out.ends_with("waiting_for_approval append_note({\"line\":\"buy milk\"})"),
        "{out}"
    );
    assert!(!notes.exists(), "nothing runs before the decision");
    let id = run_id(&out);

    let (ok, out) = run(&["resume", &db, n, &id, "approve"]);
    assert!(ok, "{out}");
    assert_eq!(
        out,
        format!("run {id} completed: Finished: appended \"buy milk\"")
    );
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "buy milk\n");

    // A second decision finds the run decided and runs nothing.
    let (ok, out) = run(&["resume", &db, n, &id, "approve"]);
    assert!(!ok, "{out}");
    assert!(out.contains("already decided (approved) at"), "{out}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "buy milk\n");
}

#[test]
fn a_denial_reaches_the_model_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("runs.db").display());
    let notes = dir.path().join("notes.txt");
    let n = notes.to_str().unwrap();
    let (ok, out) = run(&["start", &db, n, "buy milk"]);
    assert!(ok, "{out}");
    let id = run_id(&out);
    let (ok, out) = run(&["resume", &db, n, &id, "deny", "we have milk"]);
    assert!(ok, "{out}");
    assert_eq!(
        out,
        format!("run {id} completed: Finished: denied by the operator: we have milk")
    );
    assert!(!notes.exists());
}
