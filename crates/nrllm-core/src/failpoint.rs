//! Named points in the life of a run where a crash test may stop the process: "after the claim
//! commits", "during a model call", … The core only names them; what happens there is up to the
//! program, which may install one hook (the playground does so only when `NRLLM_FAILPOINT` is
//! set, to park the process at that point so a harness can kill it with SIGKILL). Without a hook,
//! reaching a point does nothing.

use std::sync::OnceLock;

type Hook = Box<dyn Fn(&'static str) + Send + Sync>;

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Installs the hook called at every point (once per process; a second hook is ignored).
pub fn install(hook: impl Fn(&'static str) + Send + Sync + 'static) {
    let _ = HOOK.set(Box::new(hook));
}

/// Whether a hook is installed: a crash test may stop the process at the points.
pub fn armed() -> bool {
    HOOK.get().is_some()
}

/// The run reached point `name`.
pub fn reach(name: &'static str) {
    if let Some(hook) = HOOK.get() {
        hook(name);
    }
}

/// Every point, for documentation and for the crash harness.
pub const POINTS: &[&str] = &[
    "after_claim_commit",
    "during_automatic_decision_commit",
    "after_automatic_decision",
    "before_approved_tool",
    "in_tool_after_effect",
    "after_results_before_model",
    "during_model_call",
    "during_suspend_commit",
    "during_budget_suspend_commit",
    "during_finish_commit",
];
