//! The approval panel: the one form that decides a waiting run, on the run page and in the inbox.
//! It shows each pending call — the model's arguments, an edit box, the preview of its effect, a
//! choice and a reason — and posts everything it shows to `nrllm_tool_resume`, which applies
//! exactly that (edited text runs, each reason reaches its call). It works as a plain form post;
//! with JavaScript, [`crate::islands::ApprovalGuard`] asks before a button drops typed text.

use leptos::prelude::*;

use crate::approval_count::ApprovalCount;

use crate::api::{NrllmToolResume, SubmittedCall};
use crate::components::{op_options, TextArea, BUTTON_APPROVE, BUTTON_DENY, BUTTON_PRIMARY, INPUT};
use crate::field;
use crate::forms::{action, list_field, CsrfField};
use crate::page_data::{CallState, PendingCallView, PreviewView, QuestionView, RunView};
use crate::question::QuestionField;
use crate::times::deadline_line;

/// The form name of a field of the `index`th call of the turn (`calls[2][reason]`).
fn call_field(index: usize, field: &str) -> String {
    list_field(field!(NrllmToolResume, calls), index, field)
}

/// Arguments and previews longer than this many lines fold behind their line count.
const FOLD_LINES: usize = 12;

/// `body` (of `lines` lines), folded behind "`what` (N lines)" when it is long.
fn fold_long(what: String, lines: usize, body: AnyView) -> AnyView {
    if lines <= FOLD_LINES {
        return body;
    }
    view! {
        <details data-testid="folded">
            <summary class="cursor-pointer text-xs font-medium text-slate-600 dark:text-slate-400">{format!("{what} ({lines} lines)")}</summary>
            {body}
        </details>
    }
    .into_any()
}

/// The element id of a field of the `index`th call in the panel `prefix`.
fn call_element(prefix: &str, index: usize, field: &str) -> String {
    format!("{prefix}-call-{index}-{field}")
}

/// A diff's lines, removed and added ones marked by colour as well as by their sign.
fn diff_lines(lines: Vec<crate::page_data::DiffLine>) -> AnyView {
    let lines = lines
        .into_iter()
        .map(|line| {
            let class = match line.op {
                '-' => "bg-rose-50 text-rose-900 dark:bg-rose-950 dark:text-rose-200",
                '+' => "bg-emerald-50 text-emerald-900 dark:bg-emerald-950 dark:text-emerald-200",
                _ => "text-slate-600 dark:text-slate-400",
            };
            view! { <div class=class>{format!("{} {}", line.op, line.text)}</div> }
        })
        .collect_view();
    view! {
        <pre class="mt-1 max-h-96 overflow-auto whitespace-pre-wrap rounded border border-slate-200 p-2 text-xs dark:border-slate-700">{lines}</pre>
    }
    .into_any()
}

/// One argument against the tool's schema: its name, value, description and kind.
fn argument_row(f: nrllm_types::ArgumentField) -> impl IntoView {
    let about = match (&f.kind, f.required, f.unexpected) {
        (_, _, true) => "not in the tool's schema".to_owned(),
        (Some(kind), true, _) => format!("{kind}, required"),
        (Some(kind), false, _) => kind.clone(),
        (None, true, _) => "required".to_owned(),
        (None, false, _) => String::new(),
    };
    view! {
        <tr class="align-top" data-testid="argument-field">
            <td class="pr-2 font-mono">{f.name}</td>
            <td class="pr-2 font-mono whitespace-pre-wrap break-all">{f.value.unwrap_or_else(|| "(not sent)".to_owned())}</td>
            <td class="text-slate-500">
                {f.description.unwrap_or_default()}
                {(!about.is_empty()).then(|| view! { <span class="ml-1 italic">{format!("({about})")}</span> })}
            </td>
        </tr>
    }
}

/// The effect of one call: a diff, a text, or why there is none.

#[component]
fn Preview(preview: PreviewView) -> impl IntoView {
    match preview {
        PreviewView::Change {
            target,
            lines,
            changed,
            download,
        } => {
            let count = lines.len();
            let body = match download {
                Some(href) => view! {
                    <p class="mt-1 text-xs" data-testid="diff-too-large">
                        {format!("Too large to show here: {changed} lines changed. ")}
                        <a href=href class="underline" download="">"Download the whole diff"</a>
                    </p>
                }
                .into_any(),
                None => fold_long(format!("Effect on {target}"), count, diff_lines(lines)),
            };
            view! {
                <div class="mt-2" data-testid="preview">
                    <p class="text-xs font-medium text-slate-500">{format!("Effect on {target}")}</p>
                    {body}
                </div>
            }
            .into_any()
        }
        PreviewView::Text { text } => view! {
            <div class="mt-2" data-testid="preview">
                <p class="text-xs font-medium text-slate-500">"Effect"</p>
                <pre class="mt-1 whitespace-pre-wrap rounded border border-slate-200 p-2 text-xs dark:border-slate-700">{text}</pre>
            </div>
        }
        .into_any(),
        PreviewView::Arguments { fields } => {
            let rows = fields.into_iter().map(argument_row).collect_view();
            view! {
                <div class="mt-2" data-testid="schema-preview">
                    <p class="text-xs font-medium text-slate-500">"No preview from the tool: its arguments against its schema"</p>
                    <table class="mt-1 w-full text-xs">{rows}</table>
                </div>
            }
            .into_any()
        }
        PreviewView::Unavailable { reason } => view! {
            <p class="mt-2 text-xs text-amber-800 dark:text-amber-300" data-testid="preview">{format!("No preview: {reason}")}</p>
        }
        .into_any(),
    }
}

/// A pending call's choices: approve (as is or edited), deny with a reason, or answer it
/// without running it, and the rule to remember with the decision.
fn decide_call(
    prefix: &str,
    index: usize,
    call: &PendingCallView,
    (configuration, remember): (Option<String>, bool),
) -> AnyView {
    let name = |field: &str| call_field(index, field);
    let id = |field: &str| call_element(prefix, index, field);
    let prefix = prefix.to_owned();
    view! {
        <fieldset class="mt-3 flex flex-wrap gap-4 text-sm">
            <legend class="sr-only">{format!("Decision for {}", call.tool)}</legend>
            <label class="flex items-center gap-1">
                <input type="radio" name=name(field!(SubmittedCall, choice)) value="approve" checked=true id=id("approve") />" Approve"
            </label>
            <label class="flex items-center gap-1">
                <input type="radio" name=name(field!(SubmittedCall, choice)) value="deny" id=id("deny") />" Deny"
            </label>
            <label class="flex items-center gap-1">
                <input type="radio" name=name(field!(SubmittedCall, choice)) value="respond" id=id("respond") />" Answer it myself (not run)"
            </label>
        </fieldset>
        <div class="mt-2 grid gap-2 sm:grid-cols-2">
            <div>
                <label for=id("arguments") class="text-xs font-medium">"Arguments it runs with (edit to change them)"</label>
                <TextArea id=id("arguments") name=name(field!(SubmittedCall, arguments)) rows=4 class=format!("{INPUT} font-mono text-xs")
                    value=call.arguments.clone() maxlength=crate::page_data::MAX_EDIT_CHARS />
            </div>
            <div>
                <label for=id("reason") class="text-xs font-medium">"Reason if denied (the model reads it)"</label>
                <input id=id("reason") name=name(field!(SubmittedCall, reason)) class=INPUT maxlength=crate::page_data::MAX_REASON_CHARS />
                <label for=id("result") class="mt-2 block text-xs font-medium">"Your answer, with “Answer it myself” (the model reads it as the result; nothing runs)"</label>
                <TextArea id=id("result") name=name(field!(SubmittedCall, result)) rows=2 class=INPUT maxlength=crate::page_data::MAX_EDIT_CHARS />
            </div>
        </div>
        {(remember && call.gated).then(|| view! { <Remember prefix=prefix.clone() index tool=call.tool.clone() arguments=call.argument_names.clone() configuration=configuration.clone() /> })}
    }.into_any()
}

/// The choices for a call whose outcome is unknown after a restart: run it again under the same
/// effect key, record what happened, or tell the model it failed.
fn decide_unknown(
    prefix: &str,
    index: usize,
    tool: &str,
    dispatched_at: &str,
    effect_key: &str,
) -> AnyView {
    let name = |field: &str| call_field(index, field);
    let id = |field: &str| call_element(prefix, index, field);
    view! {
        <p class="mt-2 rounded border border-rose-300 bg-rose-50 p-2 text-sm text-rose-900 dark:border-rose-800 dark:bg-rose-950 dark:text-rose-100" data-testid="outcome-unknown">
            {format!("Outcome unknown: this call was dispatched at {dispatched_at} (effect key {effect_key}), then the server stopped before its result was recorded. It may or may not have taken effect — check its target, then choose.")}
        </p>
        <fieldset class="mt-3 flex flex-wrap gap-4 text-sm">
            <legend class="sr-only">{format!("Decision for {tool}")}</legend>
            <label class="flex items-center gap-1">
                <input type="radio" name=name(field!(SubmittedCall, choice)) value="approve" checked=true id=id("again") />" Run it again (same effect key)"
            </label>
            <label class="flex items-center gap-1">
                <input type="radio" name=name(field!(SubmittedCall, choice)) value="respond" id=id("respond") />" Record what happened"
            </label>
            <label class="flex items-center gap-1">
                <input type="radio" name=name(field!(SubmittedCall, choice)) value="failed" id=id("failed") />" Tell the model it failed"
            </label>
        </fieldset>
        <div class="mt-2 grid gap-2 sm:grid-cols-2">
            <div>
                <label for=id("result") class="text-xs font-medium">"What happened (the model reads it, with “Record what happened”)"</label>
                <TextArea id=id("result") name=name(field!(SubmittedCall, result)) rows=3 class=INPUT maxlength=crate::page_data::MAX_EDIT_CHARS />
            </div>
            <div>
                <label for=id("reason") class="text-xs font-medium">"Note (the model reads it, with “Tell the model it failed”)"</label>
                <input id=id("reason") name=name(field!(SubmittedCall, reason)) class=INPUT maxlength=crate::page_data::MAX_REASON_CHARS />
            </div>
        </div>
    }.into_any()
}

/// "Always approve <tool> for this run (or configuration), [only when <argument> <op> <value>]":
/// the rule to add with this decision, for an approved call.
#[component]
fn Remember(
    prefix: String,
    index: usize,
    tool: String,
    arguments: Vec<String>,
    configuration: Option<String>,
) -> impl IntoView {
    let name = |field: &str| call_field(index, field);
    let id = |field: &str| call_element(&prefix, index, field);
    let arguments = arguments
        .into_iter()
        .map(|a| view! { <option value=a.clone()>{a.clone()}</option> })
        .collect_view();
    view! {
        <details class="mt-2 text-xs" data-testid="remember">
            <summary class="cursor-pointer font-medium text-slate-600 dark:text-slate-400">"Decide without asking from now on…"</summary>
        <div class="mt-2 flex flex-wrap items-center gap-2">
            <label for=id("remember") class="font-medium">"Decide without asking from now on"</label>
            <select id=id("remember") name=name(field!(SubmittedCall, remember)) class=INPUT>
                <option value="" selected=true>"no, ask each time"</option>
                <option value="run">{format!("always approve {tool} for this run")}</option>
                {configuration.clone().map(|c| view! { <option value="configuration">{format!("always approve {tool} in configuration {c}")}</option> })}
                <option value="never_run">{format!("never allow {tool} in this run (deny it now)")}</option>
                {configuration.map(|c| view! { <option value="never_configuration">{format!("never allow {tool} in configuration {c} (deny it now)")}</option> })}
            </select>
            <label for=id("rule-argument")>"only when"</label>
            <select id=id("rule-argument") name=name(field!(SubmittedCall, rule_argument)) class=INPUT>
                <option value="" selected=true>"(any arguments)"</option>
                {arguments}
            </select>
            <select name=name(field!(SubmittedCall, rule_op)) class=INPUT aria-label="compares">{op_options()}</select>
            <input name=name(field!(SubmittedCall, rule_value)) class=INPUT placeholder="value" aria-label="value" maxlength=nrllm_types::RULE_VALUE_CHARS />
        </div>
        </details>
    }
}

#[component]
fn PendingCall(
    prefix: String,
    index: usize,
    call: PendingCallView,
    /// The run's configuration, when the viewer may add rules for all of it.
    configuration: Option<String>,
    /// A rule may be asked for with the decision (not on a turn that needs several approvals).
    remember: bool,
) -> impl IntoView {
    let name = |field: &str| call_field(index, field);
    let refused = match &call.ruled {
        Some((false, note)) => Some(note.clone()),
        _ => None,
    };
    view! {
        <li class="rounded-md border border-slate-200 p-3 dark:border-slate-700" data-testid="pending-call" data-tool=call.tool.clone()>
            <input type="hidden" name=name(field!(SubmittedCall, call_id)) value=call.call_id.clone() />
            <div class="flex flex-wrap items-center gap-2">
                <span class="font-mono font-semibold">{call.tool.clone()}</span>
                {if let Some((allow, note)) = call.ruled.clone() {
                    view! { <span class="rounded bg-slate-100 px-1 text-xs dark:bg-slate-800" data-testid="ruled" data-allow=allow.to_string()>{note}</span> }.into_any()
                } else if call.gated {
                    view! { <span class="rounded bg-amber-100 px-1 text-xs text-amber-900 dark:bg-amber-900/40 dark:text-amber-200">"needs approval"</span> }.into_any()
                } else {
                    view! { <span class="rounded bg-slate-100 px-1 text-xs dark:bg-slate-800">"held with this turn"</span> }.into_any()
                }}
            </div>
            {fold_long(
                "Arguments".to_owned(),
                call.arguments.lines().count(),
                view! { <pre class="mt-2 overflow-auto whitespace-pre-wrap rounded bg-slate-50 p-2 text-xs dark:bg-slate-950" data-testid="call-arguments">{call.arguments.clone()}</pre> }.into_any(),
            )}
            {call.preview.clone().map(|preview| view! { <Preview preview /> })}
            {match call.state.clone() {
                CallState::Pending if call.question.is_some() => view! {
                    <QuestionInCall prefix=prefix.clone() index question=call.question.clone().unwrap_or_default() />
                }.into_any(),
                CallState::Pending if refused.is_some() => view! {
                    <input type="hidden" name=name(field!(SubmittedCall, choice)) value="deny" />
                    <p class="mt-2 text-sm text-rose-800 dark:text-rose-300" data-testid="call-refused-by-rule">
                        {format!("Refused whatever is chosen here: {}", refused.clone().unwrap_or_default())}
                    </p>
                }.into_any(),
                CallState::Pending => {
                    decide_call(&prefix, index, &call, (configuration.clone(), remember))
                }
                CallState::Answered { result } => view! {
                    <input type="hidden" name=name(field!(SubmittedCall, choice)) value="approve" />
                    <p class="mt-2 text-sm" data-testid="call-answered">"It ran before the server restarted; its journaled result is used and it does not run again:"</p>
                    <pre class="mt-1 whitespace-pre-wrap rounded bg-slate-50 p-2 text-xs dark:bg-slate-950">{result}</pre>
                }.into_any(),
                CallState::OutcomeUnknown { dispatched_at, effect_key } => {
                    decide_unknown(&prefix, index, &call.tool, &dispatched_at, &effect_key)
                }
            }}
        </li>
    }
}

/// A question asked in a turn whose other calls wait for a decision too: answered in the same
/// decision, by the call's entry (choice `answer`; a choice from a list, the fields of its form,
/// or free text), checked against the question when the decision is claimed.
#[component]
fn QuestionInCall(prefix: String, index: usize, question: QuestionView) -> impl IntoView {
    let name = |field: &str| call_field(index, field);
    let id = format!("{prefix}-call-{index}-answer");
    let answer = if !question.choices.is_empty() {
        view! {
            <select id=id.clone() name=name(field!(SubmittedCall, answer)) class=INPUT data-testid="question-choice">
                <option value="">"— choose an answer —"</option>
                {question.choices.iter().map(|choice| view! { <option value=choice.clone()>{choice.clone()}</option> }).collect_view()}
            </select>
        }
        .into_any()
    } else if !question.fields.is_empty() {
        let base = name(field!(SubmittedCall, fields));
        view! {
            <div class="grid gap-2 sm:grid-cols-2">
                {question.fields.iter().cloned().map(|field| view! {
                    <QuestionField prefix=format!("{prefix}-call-{index}") base=base.clone() field />
                }).collect_view()}
            </div>
        }
        .into_any()
    } else {
        view! { <TextArea id=id.clone() name=name(field!(SubmittedCall, answer)) rows=2 class=INPUT maxlength=nrllm_types::MAX_ANSWER_CHARS /> }.into_any()
    };
    view! {
        <input type="hidden" name=name(field!(SubmittedCall, choice)) value="answer" />
        <label for=id class="mt-2 block text-sm font-medium" data-testid="question">
            {format!("The run asks: {}", question.text)}
        </label>
        <p class="text-xs text-slate-500">"Your answer is this call's result; it decides nothing else of the turn."</p>
        {answer}
    }
}

/// The panel's heading: what the viewer is asked, or that their approval counts already.
fn panel_heading(run: &RunView, count: usize) -> String {
    match &run.approvals {
        Some(approvals) if approvals.yours => format!(
            "Your approval counts — waiting for more approvals; {count} call(s) hold this turn"
        ),
        _ => format!("Needs your decision — {count} call(s) hold this turn"),
    }
}

/// The decision form for one waiting run. `shortcuts`: this is the page's only panel, so the
/// buttons carry the `a` / `d` keys and the ids the keyboard shortcuts look for. `then` (from the
/// inbox: `next?<its filters>`): where the browser goes after the decision.
#[component]
pub fn ApprovalPanel(
    run: RunView,
    shortcuts: bool,
    #[prop(optional)] then: Option<String>,
) -> impl IntoView {
    let count = run.pending.len();
    // No rule rides on an approval that counts toward several (the core refuses it).
    let remember = run.approvals.is_none();
    let heading = panel_heading(&run, count);
    // Element ids are unique on a page that shows several panels (the inbox).
    let prefix = format!("run-{}", run.summary.id);
    let configuration = run
        .rules_for_configuration
        .then(|| run.summary.configuration.clone());
    let calls = run
        .pending
        .iter()
        .cloned()
        .enumerate()
        .map(|(index, call)| view! { <PendingCall prefix=prefix.clone() index call configuration=configuration.clone() remember /> })
        .collect_view();
    let reason_id = format!("{prefix}-reason");
    let key = |label: &str, key: &str| {
        if shortcuts {
            format!("{label} ({key})")
        } else {
            label.to_owned()
        }
    };
    if let Some(block) = run.decide_block.clone() {
        // The calls and their previews, without the buttons: this person cannot decide.
        return view! {
            <section class="mt-4 rounded-lg border-2 border-amber-300 bg-amber-50/50 p-4 dark:border-amber-800 dark:bg-amber-950/30" data-testid="approval-panel">
                <h2 class="font-semibold">{format!("Waiting for a decision — {count} call(s) hold this turn")}</h2>
                <p class="mt-2 text-sm font-medium" data-testid="cannot-decide">{block}</p>
                {deadline_line(&run)}
                <ApprovalCount approvals=run.approvals.clone() />
                <ol class="mt-3 space-y-3">{calls}</ol>
            </section>
        }
        .into_any();
    }
    view! {
        <section class="mt-4 rounded-lg border-2 border-amber-300 bg-amber-50/50 p-4 dark:border-amber-800 dark:bg-amber-950/30" data-testid="approval-panel">
            <h2 class="font-semibold" tabindex="-1" data-panel-heading="">{heading}</h2>
            {deadline_line(&run)}
            <ApprovalCount approvals=run.approvals.clone() />
            <form method="post" action={action::<NrllmToolResume>()} class="mt-3 space-y-3" data-approval-form="">
                <CsrfField />
                <input type="hidden" name=field!(NrllmToolResume, run_id) value=run.summary.id.clone() />
                <input type="hidden" name=field!(NrllmToolResume, digest) value=run.digest.clone().unwrap_or_default() data-testid="digest" />
                <input type="hidden" name=field!(NrllmToolResume, acknowledge_discard) value="" />
                {then.map(|then| view! { <input type="hidden" name=field!(NrllmToolResume, then) value=then /> })}
                <ol class="space-y-3">{calls}</ol>
                <div>
                    <label for=reason_id.clone() class="text-sm font-medium">"Reason for every denied call without its own (the model reads it)"</label>
                    <input id=reason_id name=field!(NrllmToolResume, reason) class=INPUT maxlength=crate::page_data::MAX_REASON_CHARS />
                </div>
                <div class="flex flex-wrap items-center gap-2">
                    <button type="submit" name=field!(NrllmToolResume, decision) value="approve_all" id=shortcuts.then_some("approve-all") class=BUTTON_APPROVE>{key("Approve all", "a")}</button>
                    <button type="submit" name=field!(NrllmToolResume, decision) value="deny_all" id=shortcuts.then_some("deny-all") class=BUTTON_DENY>{key("Deny all", "d")}</button>
                    <button type="submit" name=field!(NrllmToolResume, decision) value="per_call" class=BUTTON_PRIMARY>"Apply the choices above"</button>
                    {shortcuts.then(|| view! {
                        <p class="text-xs text-slate-500">
                            "Keyboard: " <kbd class="rounded border px-1">"a"</kbd> " approve all, "
                            <kbd class="rounded border px-1">"d"</kbd> " deny all"
                        </p>
                    })}
                </div>
                <p class="text-xs text-slate-500">
                    "Approving runs each call with the arguments in its box. A button that would drop text you typed asks first (without JavaScript it refuses and says so)."
                </p>
            </form>
        </section>
    }
    .into_any()
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    #[test]
    fn long_arguments_fold_behind_their_line_count_and_short_ones_do_not() {
        let body = |text: &str| view! { <pre>{text.to_owned()}</pre> }.into_any();
        let long = (1..=20)
            .map(|n| format!("line {n}"))
            .collect::<Vec<_>>()
            .join("\n");
        let folded = fold_long("Arguments".into(), 20, body(&long)).to_html();
        assert!(folded.contains("<details"), "{folded}");
        assert!(folded.contains("Arguments (20 lines)"), "{folded}");
        assert!(
            folded.contains("line 20"),
            "the text is all there: {folded}"
        );
        let short = fold_long("Arguments".into(), FOLD_LINES, body("{}")).to_html();
        assert!(!short.contains("<details"), "{short}");
    }

    #[test]
    fn the_rule_controls_fold_behind_one_line() {
        let html = view! {
            <Remember prefix="p".into() index=0 tool="send_message".into()
                arguments=vec!["to".into()] configuration=Some("demo".into()) />
        }
        .to_html();
        let details = html.find("<details").expect("a fold");
        let summary = html.find("<summary").expect("a summary");
        let select = html.find("<select").expect("the rule's select");
        assert!(
            details < summary && summary < select,
            "the controls are inside the fold: {html}"
        );
        assert!(
            html.contains("Decide without asking from now on…"),
            "{html}"
        );
    }
}
