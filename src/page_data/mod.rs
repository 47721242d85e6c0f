//! What the pages show, as plain serialisable data. The server builds these from runs and events
//! (`server::present`); server functions return them and islands receive them as props.

use serde::{Deserialize, Serialize};

mod budget;
pub mod inbox;
mod progress;
mod question;
pub use budget::*;
pub use progress::ProgressView;
pub use question::*;
pub mod system;

pub use nrllm_types::{RunStatus, TerminationReason};

/// The longest texts an operator may type (the core refuses longer ones).
pub use nrllm_types::submission::{MAX_EDIT_CHARS, MAX_REASON_CHARS};
/// The steps a run page shows at once; older ones are a link away.
pub const STEP_WINDOW: usize = 100;

/// A run as listed and as shown in the summary strip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: String,
    /// `queued`, `running`, `waiting_for_approval`, … (stable, for clients).
    pub status: RunStatus,
    pub prompt: String,
    pub configuration: String,
    pub model: String,
    pub requested_by: String,
    /// `2026-11-30 06:41:29 UTC`.
    pub created_at: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub rounds: u32,
    pub tool_calls: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Responses whose usage the provider did not report: the counts above (and the cost) are
    /// then a lower bound.
    #[serde(default)]
    pub unreported_usage: u32,
    /// Of the prompt tokens, read from and written to the provider's cache; of the completion
    /// tokens, spent reasoning.
    #[serde(default)]
    pub usage_parts: (u64, u64, u64),
    /// `$0.0012`, when the configuration has prices (`at least $0.0012` when some usage was
    /// not reported).
    pub estimated_cost: Option<String>,
    /// From start to finish (or to now, for a live run), in milliseconds.
    pub wall_ms: Option<i64>,
    pub truncated: bool,
    pub termination_reason: Option<String>,
    pub error_summary: Option<String>,
    pub final_answer: Option<String>,
    /// "approved by bob at …", once decided (not while the run waits for its next decision).
    pub decision: Option<String>,
    /// Who made that decision (a user's name), the same while it applies.
    #[serde(default)]
    pub decided_by: Option<String>,
    /// When that decision was made, and as the text writes it in UTC.
    #[serde(default)]
    pub decided_at: Option<(i64, String)>,
    /// Tools of the calls waiting for a decision.
    pub pending_tools: Vec<String>,
    /// How long the run has been waiting for a decision, while it waits.
    pub waiting_for_ms: Option<i64>,
    /// While it waits with an approval deadline: by when to decide, and how long is left.
    pub deadline: Option<String>,
    /// That deadline: when, and as the text writes it in UTC.
    #[serde(default)]
    pub deadline_at: Option<(i64, String)>,
    /// While it is queued: its place in the queue (1 = next), where the page asked for it.
    pub queue_position: Option<u64>,
    /// While it runs: "Cancel asked by olga (reason) …", until the run stops.
    pub cancel_requested: Option<String>,
    /// "temperature 0.7 (configuration) · max tokens 512 (form) · max rounds 5": the model
    /// options the run uses and where each came from.
    pub model_options: String,
    /// The run this one goes on from (a fork or a retry), with how.
    #[serde(default)]
    pub parent: Option<(String, String)>,
}

impl RunSummary {
    /// The run's total tokens, marked `+` when some responses did not report their usage.
    pub fn total_tokens_text(&self) -> String {
        match self.unreported_usage {
            0 => self.total_tokens.to_string(),
            _ => format!("{}+", self.total_tokens),
        }
    }

    /// "tokens 120 (100 + 20)", with the parts priced apart ("60 cached, 5 reasoning") when
    /// there are any, saying how many responses' usage is missing from the count.
    pub fn tokens_fact(&self) -> String {
        let (cached, written, reasoning) = self.usage_parts;
        let parts: Vec<String> = [
            (cached, "cached"),
            (written, "written to cache"),
            (reasoning, "reasoning"),
        ]
        .iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, what)| format!("{count} {what}"))
        .collect();
        let parts = match parts.is_empty() {
            true => String::new(),
            false => format!("; {}", parts.join(", ")),
        };
        let counted = format!(
            "tokens {} ({} + {}{parts})",
            self.total_tokens_text(),
            self.prompt_tokens,
            self.completion_tokens
        );
        match self.unreported_usage {
            0 => counted,
            1 => format!("{counted}; usage of 1 response not reported"),
            n => format!("{counted}; usage of {n} responses not reported"),
        }
    }
}

/// One line of a before/after diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffLine {
    /// `-` removed, `+` added, ` ` unchanged, `…` unchanged lines left out between hunks.
    pub op: char,
    pub text: String,
}

/// What an approved call would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PreviewView {
    Change {
        target: String,
        /// The diff's hunks (empty when it is too large to show).
        lines: Vec<DiffLine>,
        /// Lines removed plus lines added.
        changed: usize,
        /// Where the whole diff can be downloaded, when it is too large to show.
        download: Option<String>,
    },
    Text {
        text: String,
    },
    Unavailable {
        reason: String,
    },
    /// The tool offers no preview: the arguments against its input schema.
    Arguments {
        fields: Vec<nrllm_types::ArgumentField>,
    },
}

/// One call of the turn waiting for a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingCallView {
    pub call_id: String,
    pub tool: String,
    /// The arguments as the model sent them, pretty-printed JSON (or the raw text if not JSON).
    pub arguments: String,
    /// This call's tool requires approval (the others are held with it).
    pub gated: bool,
    pub preview: Option<PreviewView>,
    /// Where the call stands: waiting for its decision, or found after a restart.
    pub state: CallState,
    /// An approval rule or the tool's own check decided this call: the rule's words; `allow`
    /// false means it is refused whatever is chosen here.
    #[serde(default)]
    pub ruled: Option<(bool, String)>,
    /// The call's top-level arguments with plain values: what an "always approve … when"
    /// condition can compare.
    #[serde(default)]
    pub argument_names: Vec<String>,
    /// The call is a question for the operator (`ask_operator`): what it asks and how to answer.
    #[serde(default)]
    pub question: Option<QuestionView>,
}

/// Where a pending call stands.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CallState {
    /// Waiting for its decision.
    #[default]
    Pending,
    /// It was dispatched before a restart and nothing says whether it took effect: run it again
    /// (same effect key), record what happened, or tell the model it failed.
    OutcomeUnknown {
        /// `2026-11-30 06:41:29 UTC`.
        dispatched_at: String,
        effect_key: String,
    },
    /// It ran before a restart and its result is journaled: it is not run again.
    Answered { result: String },
}

/// One row of the step list: what happened, in one line. Its detail is a [`StepDetail`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepView {
    pub sequence: i64,
    pub kind: String,
    /// One line: what happened.
    pub title: String,
    pub round: Option<u32>,
    pub duration_ms: Option<u64>,
    pub tokens: Option<u64>,
    pub ok: bool,
    /// What the step used toward the run's budget (a live step's, for the live budget strip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<StepSpent>,
}

/// A model response as it is being written, shown under the step list until its step lands.
/// A live message carries what came since the one before it; with `reset`, everything so far (it
/// replaces what the page shows: a browser that connects mid-response, a retry that starts over).
/// Its texts are the model's: shown as text, and bounded ([`FORMING_BYTES`] each).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forming {
    pub round: u32,
    #[serde(default)]
    pub reset: bool,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub thinking: String,
    #[serde(default)]
    pub calls: Vec<FormingCall>,
    /// Some of it was left out (past the bound); the step will have it all.
    #[serde(default)]
    pub cut: bool,
}

/// A tool call being written: its name once known, its arguments' JSON text so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FormingCall {
    pub index: usize,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: String,
}

/// The most bytes of each forming text (the answer, the thinking, a call's arguments) that reach
/// the page live.
pub const FORMING_BYTES: usize = 32 * 1024;
/// The most tool calls a forming response shows.
pub const FORMING_CALLS: usize = 32;

impl Forming {
    /// Nothing written yet.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.thinking.is_empty() && self.calls.is_empty()
    }

    /// Adds `more` (what was written after this) to it, within the bounds.
    pub fn extend(&mut self, more: &Forming) {
        self.cut |= more.cut;
        self.cut |=
            !append(&mut self.text, &more.text) | !append(&mut self.thinking, &more.thinking);
        for call in &more.calls {
            self.call(call.index, call.name.as_deref(), &call.arguments);
        }
    }

    /// Adds to call `index`: its name (when it comes) and more of its arguments.
    pub fn call(&mut self, index: usize, name: Option<&str>, arguments: &str) {
        let at = match self.calls.iter().position(|c| c.index == index) {
            Some(at) => at,
            None if self.calls.len() < FORMING_CALLS => {
                self.calls.push(FormingCall {
                    index,
                    ..FormingCall::default()
                });
                self.calls.len() - 1
            }
            None => {
                self.cut = true;
                return;
            }
        };
        let call = &mut self.calls[at];
        if let Some(name) = name {
            call.name = Some(name.chars().take(200).collect());
        }
        self.cut |= !append(&mut call.arguments, arguments);
    }

    /// Adds `text` to the answer (`thinking`: to the thinking).
    pub fn write(&mut self, text: &str, thinking: bool) {
        let to = if thinking {
            &mut self.thinking
        } else {
            &mut self.text
        };
        self.cut |= !append(to, text);
    }
}

/// Appends `more` to `text` up to [`FORMING_BYTES`] (at a character's edge); false when some
/// was left out.
fn append(text: &mut String, more: &str) -> bool {
    let room = FORMING_BYTES.saturating_sub(text.len());
    if more.len() <= room {
        text.push_str(more);
        return true;
    }
    let mut end = room;
    while !more.is_char_boundary(end) {
        end -= 1;
    }
    text.push_str(&more[..end]);
    false
}

/// One tab of a step's detail. Text is shown as text, never as HTML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepTab {
    /// Stable key for links: `arguments`, `result`, `messages`, `transcript`, `tools`, `raw`.
    pub key: String,
    pub label: String,
    pub text: String,
}

/// The detail of the selected step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepDetail {
    pub step: StepView,
    pub tabs: Vec<StepTab>,
    /// The key of the tab shown.
    pub selected: String,
}

/// Everything `/runs/:id` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub summary: RunSummary,
    /// A window of the steps: the latest [`STEP_WINDOW`], or those before `steps_before`.
    pub steps: Vec<StepView>,
    /// There are older steps than the window shows: the sequence to ask for them before.
    pub older_before: Option<i64>,
    /// The window ends with the latest step (live updates continue it).
    pub latest: bool,
    /// The selected step's detail (the latest step unless another was asked for).
    pub detail: Option<StepDetail>,
    pub pending: Vec<PendingCallView>,
    /// Digest of the pending turn and its previews, sent back with a decision: a decision made on
    /// a page whose turn or previewed targets changed since is refused.
    pub digest: Option<String>,
    pub last_sequence: i64,
    /// The run's log checked against its hash chain.
    pub log: Option<LogCheck>,
    /// Why the person looking cannot decide this run (their role, or four-eyes), if they cannot.
    pub decide_block: Option<String>,
    /// The webhook deliveries that announced this run's waiting turns, the latest first.
    pub webhooks: Vec<WebhookView>,
    /// Who was told that it waits, and how (mails), each with where it stands.
    pub notifications: Vec<WebhookView>,
    /// The viewer may add rules for the run's whole configuration (an administrator).
    #[serde(default)]
    pub rules_for_configuration: bool,
    /// The approval rules that hold for this run (its own and its configuration's).
    #[serde(default)]
    pub rules: Vec<RuleView>,
    /// The runs that go on from this one (its forks and retries).
    #[serde(default)]
    pub children: Vec<ChildView>,
    /// Each limit of the run's budget, used against its value.
    #[serde(default)]
    pub budget: Vec<LimitView>,
    /// While it waits at its budget: where it stopped.
    #[serde(default)]
    pub budget_stop: Option<BudgetStopView>,
    /// While its turn waits for several people's approvals: where they stand.
    #[serde(default)]
    pub approvals: Option<ApprovalsView>,
    /// Its place in a distributed trace (OpenTelemetry), for runs that have one.
    #[serde(default)]
    pub trace: Option<TraceView>,
}

/// A run's trace: its ids (lower-case hex), the trace it is linked to (a fork's or retry's
/// parent run's), and where to look at it when `trace_url_template` is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceView {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: Option<String>,
    pub linked_trace_id: Option<String>,
    pub url: Option<String>,
}

/// Where a turn that needs several people's approvals stands (M-of-N).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalsView {
    /// How many distinct people must approve the same choices.
    pub required: u32,
    /// "1 of 2 approvals: alice" (and who approved other choices, which do not count for them).
    pub text: String,
    /// Who approved the choices that lead, in the order they came.
    pub approved_by: Vec<String>,
    /// Who else may approve them (the authority says), at most a few names.
    pub may_still_approve: Vec<String>,
    /// The viewer's own approval counts for them.
    pub yours: bool,
}

/// A run that goes on from another one's journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildView {
    pub id: String,
    pub status: RunStatus,
    /// "forked at step 4 with a new prompt; …".
    pub note: String,
    pub requested_by: String,
    pub created_at: String,
    #[serde(default)]
    pub created_at_ms: i64,
}

/// One approval rule, as the rules page and the run page list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleView {
    pub id: i64,
    /// "always approve send_message when to ends with “@example.com” for this run".
    pub description: String,
    /// The run it holds for, if it is a run's rule.
    pub run_id: Option<String>,
    /// The configuration it holds for, if it is a configuration's rule.
    pub configuration: Option<String>,
    pub tool: String,
    /// `allow` or `deny`.
    pub effect: String,
    pub created_by: String,
    pub created: String,
    /// The viewer may remove it.
    pub removable: bool,
}

/// The rules page: every rule, and what a new one can name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesView {
    pub rules: Vec<RuleView>,
    pub tools: Vec<String>,
    pub configurations: Vec<String>,
    /// The viewer may add configuration rules (an administrator).
    pub can_add: bool,
}

/// One webhook delivery or notification as the run page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookView {
    /// `pending`, `delivered`, `failed` or `obsolete`.
    pub state: String,
    pub attempts: i64,
    /// `delivered at … after 3 attempts`, `attempt 2 failed (HTTP 500); next at …`, …
    pub text: String,
}

/// What checking a run's log against its hash chain found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogCheck {
    pub verified: bool,
    /// The log shows tampering (or another key): said in red. Neither: an older form.
    pub failed: bool,
    /// `log verified (12 steps)`, or where and why it does not hold.
    pub text: String,
}

/// A provider configuration offered in the playground form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigurationView {
    pub name: String,
    pub model: String,
    pub available: bool,
    /// Why it is unavailable (e.g. a missing API key).
    pub reason: Option<String>,
    /// Its default temperature and token limit (`None`: the provider's own).
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
}

/// A tool offered in the playground form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolView {
    pub name: String,
    pub description: String,
    pub group: String,
    pub requires_approval: bool,
    /// Whether a call needs approval depends on its arguments (the tool decides per call).
    #[serde(default)]
    pub approval_per_call: bool,
    pub enabled: bool,
}

/// What the playground form offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlaygroundOptions {
    pub configurations: Vec<ConfigurationView>,
    pub tools: Vec<ToolView>,
    pub example_prompts: Vec<String>,
}

/// A decision accepted: the run continues in the background.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeAccepted {
    pub run_id: String,
    pub status: RunStatus,
    /// A turn that needs several approvals and was not claimed by this one: where the count
    /// stands now (the run still waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalsView>,
}

/// A page of runs, newest first; `next_after` (or, for older clients, `next_before`) continues
/// the list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunList {
    pub runs: Vec<RunSummary>,
    pub next_before: Option<i64>,
    /// The cursor of the next page (`after`), with the same filters.
    #[serde(default)]
    pub next_after: Option<String>,
}

/// Tailwind classes for a status badge (the label always carries the meaning too).
pub fn status_classes(status: RunStatus) -> &'static str {
    match status {
        RunStatus::WaitingForApproval
        | RunStatus::WaitingForInput
        | RunStatus::WaitingForBudget => {
            "bg-amber-100 text-amber-900 ring-amber-300 dark:bg-amber-900/40 dark:text-amber-200"
        }
        RunStatus::Running | RunStatus::Queued => {
            "bg-sky-100 text-sky-900 ring-sky-300 dark:bg-sky-900/40 dark:text-sky-200"
        }
        RunStatus::Completed => "bg-emerald-100 text-emerald-900 ring-emerald-300 dark:bg-emerald-900/40 dark:text-emerald-200",
        RunStatus::Failed => "bg-rose-100 text-rose-900 ring-rose-300 dark:bg-rose-900/40 dark:text-rose-200",
        RunStatus::Cancelled => "bg-slate-100 text-slate-800 ring-slate-300 dark:bg-slate-800 dark:text-slate-200",
    }
}

/// What a mailed decision link's page shows (`/decide?token=…`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkView {
    pub run_id: String,
    /// Approves the turn (else denies it).
    pub approve: bool,
    /// The user it was sent to.
    pub sent_to: String,
    /// Who is logged in.
    pub you: String,
    /// Why it decides nothing now (another user, expired, used, the run moved on), if so.
    pub blocked: Option<String>,
    /// The turn's calls, as the mail showed them.
    pub calls: Vec<LinkCall>,
    /// When the link stops counting.
    pub expires: String,
    /// The token, for the confirming form.
    pub token: String,
}

/// One call of a turn on a decision link's page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkCall {
    pub tool: String,
    /// Cut short.
    pub arguments: String,
    pub preview: Option<String>,
    /// It waits for approval (else it runs with the turn).
    pub gated: bool,
}
