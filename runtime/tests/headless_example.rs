//! Runs the headless example as two separate processes: suspend in one, decide and finish in another.

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
    (output.status.success(), text)
}

#[test]
fn suspend_in_one_process_and_approve_in_another() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let notes = dir.path().join("notes.txt");
    let (s, n) = (state.to_str().unwrap(), notes.to_str().unwrap());

    let (ok, out) = run(&["start", s, n, "buy milk"]);
    assert!(ok, "{out}");
    assert!(
        out.starts_with("suspended: waiting for approval of append_note"),
        "{out}"
    );
    assert!(state.exists());
    assert!(!notes.exists(), "nothing runs before the decision");

    let (ok, out) = run(&["resume", s, n, "approve"]);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "completed: Finished: appended \"buy milk\"");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "buy milk\n");

    // A second decision finds no waiting run and runs nothing.
    let (ok, out) = run(&["resume", s, n, "approve"]);
    assert!(!ok, "{out}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "buy milk\n");
}

#[test]
fn a_denial_reaches_the_model_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let notes = dir.path().join("notes.txt");
    let (s, n) = (state.to_str().unwrap(), notes.to_str().unwrap());
    assert!(run(&["start", s, n, "buy milk"]).0);
    let (ok, out) = run(&["resume", s, n, "deny", "we have milk"]);
    assert!(ok, "{out}");
    assert_eq!(
        out.trim(),
        "completed: Finished: denied by the operator: we have milk"
    );
    assert!(!notes.exists());
}
