//! What the demo model does next for a task, given what has happened so far in the transcript.

use super::tasks::*;
use nrllm_core::transcript::{Message, ToolCall, ToolOutcome};
use serde_json::{json, Value};

/// One answered call: its tool, result and how it went.
pub(super) struct Step {
    pub(super) tool: String,
    pub(super) result: String,
    pub(super) outcome: ToolOutcome,
}

pub(super) fn steps(messages: &[Message]) -> Vec<Step> {
    let mut calls: Vec<&ToolCall> = Vec::new();
    let mut steps = Vec::new();
    for message in messages {
        match message {
            Message::Assistant { tool_calls, .. } => calls.extend(tool_calls.iter()),
            Message::Tool {
                tool_call_id,
                content,
                outcome,
            } => {
                if let Some(call) = calls.iter().find(|c| &c.id == tool_call_id) {
                    steps.push(Step {
                        tool: call.name.clone(),
                        result: content.clone(),
                        outcome: *outcome,
                    });
                }
            }
            _ => {}
        }
    }
    steps
}

/// A denied call's reason: the text after the refusal's opening words, which the loop writes
/// (`denied by the operator: <reason>`).
pub(super) fn denial(step: &Step) -> Option<&str> {
    (step.outcome == ToolOutcome::Denied).then(|| {
        step.result
            .strip_prefix("denied by the operator")
            .unwrap_or(&step.result)
            .trim_start_matches(':')
            .trim()
    })
}

/// What the demo model does next.
pub(super) enum Next {
    Call(Vec<(&'static str, Value)>),
    /// One call of a tool whose name is known only from what is offered (an MCP server's).
    CallOffered(String, Value),
    Answer(String),
}

/// One call of the offered tool whose name ends with `__<suffix>` (an MCP server's tool, whatever
/// the server is called), then the answer its result makes.
pub(super) fn through_mcp(
    done: &[Step],
    offered: &[String],
    suffix: &str,
    arguments: Value,
) -> Next {
    let wanted = format!("__{suffix}");
    match (done.last(), offered.iter().find(|t| t.ends_with(&wanted))) {
        (Some(step), _) => Next::Answer(outcome_sentence(step)),
        (None, Some(tool)) => Next::CallOffered(tool.clone(), arguments),
        (None, None) => Next::Answer(format!(
            "I cannot do that here: no MCP notes server's `{suffix}` tool is offered to this run \
             (connect one with [[mcp_servers]]; see the system page)."
        )),
    }
}

pub(super) fn outcome_sentence(step: &Step) -> String {
    match denial(step) {
        Some(reason) if reason.starts_with('(') || reason.is_empty() => {
            format!(
                "I did not run `{}`: the operator denied it without giving a reason.",
                step.tool
            )
        }
        Some(reason) => format!(
            "I did not run `{}`: the operator denied it — \"{reason}\".",
            step.tool
        ),
        None if step.outcome == ToolOutcome::Error => {
            format!(
                "`{}` failed: {}",
                step.tool,
                step.result.trim_start_matches("Error:").trim()
            )
        }
        None => step.result.clone(),
    }
}

pub(super) fn capabilities() -> String {
    let mut text = String::from(
        "I am the offline demo model. I can look at and change the demo site (changes wait for your approval). Try one of these:\n",
    );
    for prompt in DEMO_PROMPTS {
        text.push_str("- ");
        text.push_str(prompt);
        text.push('\n');
    }
    text
}

/// Before writing, look at the page; the write comes after a successful look, and its outcome
/// is the answer.
fn look_then(
    done: &[Step],
    has: &dyn Fn(&str) -> bool,
    slug: &str,
    write: (&'static str, Value),
) -> Next {
    match done.iter().find(|s| s.tool == "get_page") {
        None if has("get_page") => Next::Call(vec![("get_page", json!({ "slug": slug }))]),
        Some(look) if look.outcome == ToolOutcome::Error => Next::Answer(outcome_sentence(look)),
        _ if done.iter().any(|s| s.tool == write.0) => {
            let step = done
                .iter()
                .rev()
                .find(|s| s.tool == write.0)
                .map(outcome_sentence);
            Next::Answer(step.unwrap_or_default())
        }
        _ if has(write.0) => Next::Call(vec![write]),
        _ => Next::Answer(format!(
            "I cannot do that here: the `{}` tool is not available to this run.",
            write.0
        )),
    }
}

/// A new page: created as a draft, then its outcome is the answer.
fn create_next(last: Option<&Step>, has: &dyn Fn(&str) -> bool, slug: &str, title: &str) -> Next {
    match last {
        None if has("create_page") => Next::Call(vec![(
            "create_page",
            json!({ "slug": slug, "title": title, "body": format!("{title}. (Draft written by the demo model.)") }),
        )]),
        None => Next::Answer(
            "I cannot create pages here: the `create_page` tool is not available to this run."
                .into(),
        ),
        Some(step) => Next::Answer(outcome_sentence(step)),
    }
}

/// A page published, and someone told, in one turn; then the outcomes are the answer.
fn publish_next(done: &[Step], slug: &str, notify: Option<&str>) -> Next {
    if !done.is_empty() {
        let outcomes: Vec<String> = done.iter().map(outcome_sentence).collect();
        return Next::Answer(outcomes.join("\n"));
    }
    let mut calls = vec![("publish_page", json!({ "slug": slug }))];
    if let Some(to) = notify {
        calls.push((
            "send_message",
            json!({ "to": to, "subject": format!("Page {slug} is live"), "body": format!("The page `{slug}` has just been published.") }),
        ));
    }
    Next::Call(calls)
}

/// Decides the next turn from the task and what has happened so far.
pub(super) fn next(task: &Task, done: &[Step], offered: &[String]) -> Next {
    let last = done.last();
    let has = |name: &str| offered.iter().any(|t| t == name);
    let look_then = |slug: &str, write| look_then(done, &has, slug, write);
    match task {
        Task::Rename { slug, title } => look_then(
            slug,
            ("update_page", json!({ "slug": slug, "title": title })),
        ),
        Task::Rewrite { slug, body } => {
            look_then(slug, ("update_page", json!({ "slug": slug, "body": body })))
        }
        Task::Delete { slug } => look_then(slug, ("delete_page", json!({ "slug": slug }))),
        Task::Export { slug } => look_then(slug, ("export_page", json!({ "slug": slug }))),
        Task::Create { slug, title } => create_next(last, &has, slug, title),
        Task::Publish { slug, notify } => publish_next(done, slug, notify.as_deref()),
        Task::Message { to, text } => match last {
            None => Next::Call(vec![(
                "send_message",
                json!({ "to": to, "subject": "A note from the playground", "body": text }),
            )]),
            Some(step) => Next::Answer(outcome_sentence(step)),
        },
        Task::Search { query } => simple(last, "search_pages", json!({ "query": query }), |r| {
            format!("Search results: {r}")
        }),
        Task::List => simple(last, "list_pages", json!({}), |r| {
            format!("These are the pages: {r}")
        }),
        Task::History { slug } => simple(last, "page_history", json!({ "slug": slug }), |r| {
            format!("History: {r}")
        }),
        Task::Time => simple(last, "current_time", json!({}), |r| format!("It is {r}.")),
        Task::Calculate { expression } => simple(
            last,
            "calculate",
            json!({ "expression": expression }),
            |r| r.to_owned(),
        ),
        // It never has enough: another reading each round, until no tool is offered.
        Task::Watch if has("current_time") => Next::Call(vec![("current_time", json!({}))]),
        Task::Watch => Next::Answer(format!(
            "I read the clock {} times; the last reading: {}.",
            done.len(),
            last.map_or("none", |step| step.result.as_str())
        )),
        Task::Runs => simple(last, "list_runs", json!({ "limit": 5 }), |r| {
            format!("Recent runs: {r}")
        }),
        Task::WriteNote { name, text } => through_mcp(
            done,
            offered,
            "write_note",
            match name {
                Some(name) => json!({ "name": name, "text": text }),
                None => json!({ "text": text }),
            },
        ),
        Task::ReadNote { name } => through_mcp(
            done,
            offered,
            "read_note",
            match name {
                Some(name) => json!({ "name": name }),
                None => json!({}),
            },
        ),
        Task::CountWords => through_mcp(done, offered, "count_words", json!({})),
        Task::PublishAsked => publish_asked(done, &has),
        Task::CreateAsked => create_asked(done, &has),
        Task::RenameAsking { slug, title } => rename_asking(done, slug, title, &has),
        Task::Unknown => Next::Answer(capabilities()),
    }
}

/// The schema of a new page's details, as the demo model asks for them.
pub(super) fn page_details_schema() -> Value {
    json!({
        "type": "object",
        "required": ["slug", "title"],
        "properties": {
            "slug": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,63}$",
                     "description": "The page's address: lowercase letters, digits and dashes"},
            "title": {"type": "string", "minLength": 1, "maxLength": 200,
                      "description": "Its title"}
        }
    })
}

/// The answer `step` holds, if it is the operator's answer to a question.
pub(super) fn answer_of(step: &Step) -> Option<&str> {
    (step.tool == "ask_operator" && step.outcome == ToolOutcome::Ok).then_some(step.result.as_str())
}

/// Lists the drafts, asks which one to publish, publishes it.
pub(super) fn publish_asked(done: &[Step], has: &dyn Fn(&str) -> bool) -> Next {
    let Some(last) = done.last() else {
        return Next::Call(vec![("list_pages", json!({ "status": "draft" }))]);
    };
    match last.tool.as_str() {
        "list_pages" => {
            let slugs: Vec<String> = serde_json::from_str::<Value>(&last.result)
                .ok()
                .and_then(|list| list["pages"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|page| page["slug"].as_str().map(str::to_owned))
                .collect();
            if slugs.is_empty() {
                return Next::Answer("There is no draft page to publish.".into());
            }
            if !has("ask_operator") {
                return Next::Answer(
                    "I cannot ask you here: the `ask_operator` tool is not available to this run."
                        .into(),
                );
            }
            Next::Call(vec![(
                "ask_operator",
                json!({ "question": "Which page should I publish?", "choices": slugs }),
            )])
        }
        "ask_operator" => match answer_of(last) {
            Some(slug) if !slug.starts_with('(') => {
                Next::Call(vec![("publish_page", json!({ "slug": slug }))])
            }
            _ => Next::Answer(format!(
                "I did not get an answer, so I published nothing: {}",
                last.result
            )),
        },
        _ => Next::Answer(outcome_sentence(last)),
    }
}

/// Renames a page and asks how to announce it, both in one turn; then says what came of each.
pub(super) fn rename_asking(
    done: &[Step],
    slug: &str,
    title: &str,
    has: &dyn Fn(&str) -> bool,
) -> Next {
    if done.is_empty() {
        if !has("ask_operator") || !has("update_page") {
            return Next::Answer(
                "I cannot do that here: `ask_operator` and `update_page` are not both available \
                 to this run."
                    .into(),
            );
        }
        return Next::Call(vec![
            (
                "ask_operator",
                json!({ "question": format!("How should I announce the new title of {slug}?"),
                        "choices": ["quietly", "loudly"] }),
            ),
            ("update_page", json!({ "slug": slug, "title": title })),
        ]);
    }
    let answer = done
        .iter()
        .find_map(answer_of)
        .filter(|a| !a.starts_with('('))
        .map(|a| format!(" You asked me to announce it {a}."))
        .unwrap_or_else(|| " You did not say how to announce it.".to_owned());
    let renamed = done
        .iter()
        .find(|step| step.tool == "update_page")
        .map(outcome_sentence)
        .unwrap_or_default();
    Next::Answer(format!("{renamed}{answer}"))
}

/// Asks for a new page's details with a form, then creates it.
pub(super) fn create_asked(done: &[Step], has: &dyn Fn(&str) -> bool) -> Next {
    let Some(last) = done.last() else {
        if !has("ask_operator") {
            return Next::Answer(
                "I cannot ask you here: the `ask_operator` tool is not available to this run."
                    .into(),
            );
        }
        return Next::Call(vec![(
            "ask_operator",
            json!({ "question": "What should the new page be?", "schema": page_details_schema() }),
        )]);
    };
    match last.tool.as_str() {
        "ask_operator" => {
            let details = answer_of(last).and_then(|text| serde_json::from_str::<Value>(text).ok());
            match details {
                Some(details) => {
                    let title = details["title"].as_str().unwrap_or_default();
                    Next::Call(vec![(
                        "create_page",
                        json!({ "slug": details["slug"], "title": title,
                                "body": format!("{title}. (Draft written by the demo model.)") }),
                    )])
                }
                None => Next::Answer(format!(
                    "I did not get the details, so I created nothing: {}",
                    last.result
                )),
            }
        }
        _ => Next::Answer(outcome_sentence(last)),
    }
}

/// One read-only call, then an answer built from its result.
pub(super) fn simple(
    last: Option<&Step>,
    tool: &'static str,
    arguments: Value,
    answer: impl Fn(&str) -> String,
) -> Next {
    match last {
        None => Next::Call(vec![(tool, arguments)]),
        Some(step) if step.outcome == ToolOutcome::Error => Next::Answer(outcome_sentence(step)),
        Some(step) => Next::Answer(answer(&step.result)),
    }
}
