//! The `demo` provider: an offline, deterministic stand-in for a model, selected by default, so the
//! whole approve/deny flow runs with no network and no key. It reads the task from the last user
//! message and the tool results so far, and acts like a careful agent: it looks before it writes,
//! puts two calls in one turn when a task has two independent effects, explains a denial it
//! received, and answers a prompt it does not understand with the list of things it can do.
//! Token usage is estimated from text length (about four characters a token).

use async_trait::async_trait;
use serde_json::{json, Value};

use nrllm_core::provider::{
    ChatRequest, ChatResponse, FinishReason, Provider, ProviderError, RetryObserver, ToolChoice,
    Usage,
};
use nrllm_core::transcript::{Message, ToolCall, ToolOutcome};

/// The prompts the demo model understands (shown when it understands none).
pub const DEMO_PROMPTS: &[&str] = &[
    "Rename the home page to \"Hello\"",
    "Change the body of the about page to \"We are three people.\"",
    "Create a page faq titled \"Questions\"",
    "Publish the careers page and tell team@example.com",
    "Delete the changelog page",
    "Export the pricing page",
    "Publish a page — ask me which one",
    "Create a page — ask me for its details",
    "Rename the home page to \"Hello\" and ask me how to announce it",
    "Send a message to team@example.com saying the site is live",
    "Search for pricing",
    "List the pages",
    "Show the history of the home page",
    "What time is it?",
    "Calculate (12 * 7) / 3",
    "List the recent runs",
    "Write the note todo saying \"Buy milk\"",
    "Read the note todo",
];

/// The offline demo model.
#[derive(Debug, Default, Clone)]
pub struct DemoProvider {
    think_time: std::time::Duration,
}

impl DemoProvider {
    /// A demo model that waits `think_time` before each answer, like a real model's latency
    /// (so live step lists can be watched and tested).
    pub fn with_think_time(think_time: std::time::Duration) -> DemoProvider {
        DemoProvider { think_time }
    }
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Task {
    Rename {
        slug: String,
        title: String,
    },
    Rewrite {
        slug: String,
        body: String,
    },
    Create {
        slug: String,
        title: String,
    },
    Publish {
        slug: String,
        notify: Option<String>,
    },
    Delete {
        slug: String,
    },
    Export {
        slug: String,
    },
    Message {
        to: String,
        text: String,
    },
    Search {
        query: String,
    },
    List,
    History {
        slug: String,
    },
    Time,
    Calculate {
        expression: String,
    },
    Runs,
    /// Publish a draft page the operator picks (asked with choices).
    PublishAsked,
    /// Create a page from details the operator fills in (asked with a schema form).
    CreateAsked,
    /// Rename a page and, in the same turn, ask the operator a question: one turn that waits for
    /// an approval and an answer together.
    RenameAsking {
        slug: String,
        title: String,
    },
    /// Write a note through a connected MCP notes server (`<server>__write_note`).
    WriteNote {
        name: String,
        text: String,
    },
    /// Read a note (or list them: `None`) through `<server>__read_note`.
    ReadNote {
        name: Option<String>,
    },
    Unknown,
}

/// A note's name as the demo notes server takes it, from the user's words.
fn note_name(text: &str) -> Option<String> {
    let name = unquote(text.split_whitespace().last()?).to_ascii_lowercase();
    let fits = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    fits.then_some(name)
}

/// The text after `marker` in `lower`, taken from the same place in `original`.
fn after<'a>(original: &'a str, lower: &str, marker: &str) -> Option<&'a str> {
    lower
        .find(marker)
        .map(|i| original[i + marker.len()..].trim())
}

fn unquote(text: &str) -> String {
    text.trim()
        .trim_end_matches(['.', '!', '?'])
        .trim_matches(|c| matches!(c, '"' | '\'' | '“' | '”' | '„'))
        .trim()
        .to_owned()
}

/// The slug in phrases like "the home page", "page home", "home".
fn slug_in(text: &str) -> Option<String> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace())
        .map(|w| w.trim_matches(|c: char| !(c.is_alphanumeric() || c == '-')))
        .filter(|w| !w.is_empty())
        .collect();
    let is_slug = |w: &str| {
        w.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let skip = ["the", "a", "an", "page", "of", "to", "my", "our"];
    if let Some(i) = words.iter().position(|w| *w == "page") {
        if i > 0 && is_slug(words[i - 1]) && !skip.contains(&words[i - 1]) {
            return Some(words[i - 1].to_owned());
        }
        if let Some(next) = words.get(i + 1).filter(|w| is_slug(w) && !skip.contains(w)) {
            return Some((*next).to_owned());
        }
    }
    words
        .iter()
        .find(|w| is_slug(w) && !skip.contains(w))
        .map(|w| (*w).to_owned())
}

/// Reads the task from the user's words.
fn parse_task(prompt: &str) -> Task {
    let text = prompt.trim();
    // ASCII lower-casing keeps byte offsets, so positions found in `lower` slice `text` safely.
    let lower = text.to_ascii_lowercase();
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| lower.starts_with(p));

    if starts(&["write the note", "write note", "write a note"]) {
        if let Some((head, body)) = split_first(text, &lower, &[" saying ", ": "]) {
            if let Some(name) = note_name(head) {
                return Task::WriteNote {
                    name,
                    text: unquote(body),
                };
            }
        }
    }
    if starts(&["read the note", "read note", "show the note"]) {
        if let Some(name) = note_name(text) {
            return Task::ReadNote { name: Some(name) };
        }
    }
    if lower.contains("notes") && (lower.contains("list") || lower.contains("show")) {
        return Task::ReadNote { name: None };
    }
    if lower.contains("ask me") {
        if starts(&["publish"]) {
            return Task::PublishAsked;
        }
        if starts(&["create", "add"]) {
            return Task::CreateAsked;
        }
        if starts(&["rename"]) {
            // "Rename the home page to "X" and ask me …": the rename is what comes before.
            let cut = lower.find("ask me").unwrap_or(lower.len());
            let head = text[..cut]
                .trim_end()
                .trim_end_matches([',', '—', '-', ' ']);
            let head = head.strip_suffix(" and").unwrap_or(head);
            if let Task::Rename { slug, title } = parse_task(head) {
                return Task::RenameAsking { slug, title };
            }
        }
    }
    if starts(&["rename", "retitle"]) || lower.starts_with("change the title") {
        if let Some((head, title)) = split_first(text, &lower, &[" to ", " as "]) {
            if let Some(slug) = slug_in(&without_verb(head)) {
                return Task::Rename {
                    slug,
                    title: unquote(title),
                };
            }
        }
    }
    if lower.starts_with("change the body") || lower.starts_with("rewrite") {
        if let Some((head, body)) = split_first(text, &lower, &[" to ", " as "]) {
            if let Some(slug) = slug_in(&without_verb(head)) {
                return Task::Rewrite {
                    slug,
                    body: unquote(body),
                };
            }
        }
    }
    if starts(&["create", "add"]) {
        if let Some(rest) = after(text, &lower, "page") {
            let rest_lower = rest.to_ascii_lowercase();
            let (slug_part, title) =
                match split_last(rest, &rest_lower, &[" titled ", " called ", " with title "]) {
                    Some((slug_part, title)) => (slug_part.to_owned(), unquote(title)),
                    None => (rest.to_owned(), String::new()),
                };
            if let Some(slug) = slug_in(&slug_part.to_ascii_lowercase()) {
                let title = if title.is_empty() {
                    slug.clone()
                } else {
                    title
                };
                return Task::Create { slug, title };
            }
        }
    }
    if lower.starts_with("publish") {
        let (page_part, notify) =
            match split_last(text, &lower, &[" and tell ", " and notify ", " and email "]) {
                Some((page_part, who)) => (page_part.to_ascii_lowercase(), Some(unquote(who))),
                None => (lower.clone(), None),
            };
        if let Some(slug) = slug_in(&page_part.replacen("publish", "", 1)) {
            return Task::Publish { slug, notify };
        }
    }
    if lower.starts_with("export") {
        if let Some(slug) = slug_in(&lower.replacen("export", "", 1)) {
            return Task::Export { slug };
        }
    }
    if starts(&["delete", "remove"]) {
        if let Some(slug) = slug_in(&lower.replacen("delete", "", 1).replacen("remove", "", 1)) {
            return Task::Delete { slug };
        }
    }
    if starts(&["send", "message", "email", "tell"]) {
        if let Some(rest) = after(text, &lower, " to ") {
            let rest_lower = rest.to_ascii_lowercase();
            if let Some((to, message)) =
                split_first(rest, &rest_lower, &[" saying ", ": ", " that "])
            {
                return Task::Message {
                    to: unquote(to),
                    text: unquote(message),
                };
            }
        }
    }
    if starts(&["search", "find"]) {
        let query = lower
            .trim_start_matches("search")
            .trim_start_matches("find")
            .trim_start()
            .trim_start_matches("pages")
            .trim_start()
            .trim_start_matches("for")
            .to_owned();
        let query = unquote(&text[text.len() - query.len()..]);
        if !query.is_empty() {
            return Task::Search { query };
        }
    }
    if lower.contains("history") {
        if let Some(slug) = slug_in(&lower.replace("history", "").replace("show", "")) {
            return Task::History { slug };
        }
    }
    if (lower.contains("list")
        || lower.contains("show")
        || lower.contains("which")
        || lower.contains("what"))
        && lower.contains("pages")
    {
        return Task::List;
    }
    if lower.contains("runs")
        && (lower.contains("list") || lower.contains("show") || lower.contains("recent"))
    {
        return Task::Runs;
    }
    if lower.contains("time") || lower.contains("date") || lower.contains("what day") {
        return Task::Time;
    }
    for prefix in ["calculate", "compute", "what is", "what's"] {
        if let Some(expression) = lower.strip_prefix(prefix) {
            let expression = unquote(expression);
            if !expression.is_empty() && expression.chars().any(|c| c.is_ascii_digit()) {
                return Task::Calculate { expression };
            }
        }
    }
    Task::Unknown
}

/// The words after the first (the verb), lower-cased, with "the title/body of" dropped.
fn without_verb(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let rest = lower
        .split_once(' ')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    rest.replace("the title of", "").replace("the body of", "")
}

/// Splits at the last of `markers` found (case-insensitive), returning the original text's parts.
fn split_last<'a>(original: &'a str, lower: &str, markers: &[&str]) -> Option<(&'a str, &'a str)> {
    markers
        .iter()
        .filter_map(|m| lower.rfind(m).map(|i| (i, m.len())))
        .max_by_key(|(i, _)| *i)
        .map(|(i, len)| (&original[..i], &original[i + len..]))
}

/// Splits at the first of `markers` found.
fn split_first<'a>(original: &'a str, lower: &str, markers: &[&str]) -> Option<(&'a str, &'a str)> {
    markers
        .iter()
        .filter_map(|m| lower.find(m).map(|i| (i, m.len())))
        .min_by_key(|(i, _)| *i)
        .map(|(i, len)| (&original[..i], &original[i + len..]))
}

/// The user's task text: the last user message (a fork may add one), without a skills block in
/// front of it.
fn task_text(messages: &[Message]) -> String {
    let first = messages.iter().rev().find_map(|m| match m {
        Message::User { content } => Some(content.as_str()),
        _ => None,
    });
    let text = first.unwrap_or_default();
    match text.rfind("</skills>") {
        Some(i) => text[i + "</skills>".len()..].trim().to_owned(),
        None => text.trim().to_owned(),
    }
}

/// One answered call: its tool, result and how it went.
struct Step {
    tool: String,
    result: String,
    outcome: ToolOutcome,
}

fn steps(messages: &[Message]) -> Vec<Step> {
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
fn denial(step: &Step) -> Option<&str> {
    (step.outcome == ToolOutcome::Denied).then(|| {
        step.result
            .strip_prefix("denied by the operator")
            .unwrap_or(&step.result)
            .trim_start_matches(':')
            .trim()
    })
}

/// What the demo model does next.
enum Next {
    Call(Vec<(&'static str, Value)>),
    /// One call of a tool whose name is known only from what is offered (an MCP server's).
    CallOffered(String, Value),
    Answer(String),
}

/// One call of the offered tool whose name ends with `__<suffix>` (an MCP server's tool, whatever
/// the server is called), then the answer its result makes.
fn through_mcp(done: &[Step], offered: &[String], suffix: &str, arguments: Value) -> Next {
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

fn outcome_sentence(step: &Step) -> String {
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

fn capabilities() -> String {
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

/// Decides the next turn from the task and what has happened so far.
fn next(task: &Task, done: &[Step], offered: &[String]) -> Next {
    let last = done.last();
    let has = |name: &str| offered.iter().any(|t| t == name);
    // Before writing, look at the page; the write comes after a successful look.
    let look_then = |slug: &str, write: (&'static str, Value)| -> Next {
        match done.iter().find(|s| s.tool == "get_page") {
            None if has("get_page") => Next::Call(vec![("get_page", json!({ "slug": slug }))]),
            Some(look) if look.outcome == ToolOutcome::Error => {
                Next::Answer(outcome_sentence(look))
            }
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
    };
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
        Task::Create { slug, title } => match last {
            None if has("create_page") => Next::Call(vec![(
                "create_page",
                json!({ "slug": slug, "title": title, "body": format!("{title}. (Draft written by the demo model.)") }),
            )]),
            None => Next::Answer(
                "I cannot create pages here: the `create_page` tool is not available to this run."
                    .into(),
            ),
            Some(step) => Next::Answer(outcome_sentence(step)),
        },
        Task::Publish { slug, notify } => {
            if done.is_empty() {
                let mut calls = vec![("publish_page", json!({ "slug": slug }))];
                if let Some(to) = notify {
                    calls.push((
                        "send_message",
                        json!({ "to": to, "subject": format!("Page {slug} is live"), "body": format!("The page `{slug}` has just been published.") }),
                    ));
                }
                Next::Call(calls)
            } else {
                Next::Answer(
                    done.iter()
                        .map(outcome_sentence)
                        .collect::<Vec<_>>()
                        .join("\n"),
                )
            }
        }
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
        Task::Runs => simple(last, "list_runs", json!({ "limit": 5 }), |r| {
            format!("Recent runs: {r}")
        }),
        Task::WriteNote { name, text } => through_mcp(
            done,
            offered,
            "write_note",
            json!({ "name": name, "text": text }),
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
        Task::PublishAsked => publish_asked(done, &has),
        Task::CreateAsked => create_asked(done, &has),
        Task::RenameAsking { slug, title } => rename_asking(done, slug, title, &has),
        Task::Unknown => Next::Answer(capabilities()),
    }
}

/// The schema of a new page's details, as the demo model asks for them.
fn page_details_schema() -> Value {
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
fn answer_of(step: &Step) -> Option<&str> {
    (step.tool == "ask_operator" && step.outcome == ToolOutcome::Ok).then_some(step.result.as_str())
}

/// Lists the drafts, asks which one to publish, publishes it.
fn publish_asked(done: &[Step], has: &dyn Fn(&str) -> bool) -> Next {
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
fn rename_asking(done: &[Step], slug: &str, title: &str, has: &dyn Fn(&str) -> bool) -> Next {
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
fn create_asked(done: &[Step], has: &dyn Fn(&str) -> bool) -> Next {
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
fn simple(
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

fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4).max(1)
}

#[async_trait]
impl Provider for DemoProvider {
    fn name(&self) -> &str {
        "demo"
    }

    fn model(&self) -> &str {
        "demo-1"
    }

    async fn complete(
        &self,
        request: &ChatRequest,
        _on_retry: RetryObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        if !self.think_time.is_zero() {
            tokio::time::sleep(self.think_time).await;
        }
        let prompt_text: String = request
            .messages
            .iter()
            .map(|m| match m {
                Message::System { content }
                | Message::User { content }
                | Message::Tool { content, .. } => content.clone(),
                Message::Assistant {
                    content,
                    tool_calls,
                } => format!(
                    "{}{}",
                    content.as_deref().unwrap_or_default(),
                    tool_calls
                        .iter()
                        .map(|c| c.arguments.as_str())
                        .collect::<String>()
                ),
            })
            .collect();
        let prompt_tokens = estimate_tokens(&prompt_text);
        let task = parse_task(&task_text(&request.messages));
        // What was done for that task: the calls answered since it was asked.
        let asked = request
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::User { .. }))
            .unwrap_or(0);
        let done = steps(&request.messages[asked..]);
        let offered: Vec<String> = match request.tool_choice {
            ToolChoice::Auto => request.tools.iter().map(|t| t.name.clone()).collect(),
            ToolChoice::Disabled => Vec::new(),
        };
        // In the final, tool-less round the demo model sums up what it has.
        let next = if offered.is_empty() && !done.is_empty() {
            Next::Answer(format!(
                "I stopped after the round limit. So far: {}",
                done.iter()
                    .map(outcome_sentence)
                    .collect::<Vec<_>>()
                    .join(" ")
            ))
        } else {
            next(&task, &done, &offered)
        };
        let calls: Vec<(String, Value)> = match next {
            Next::Answer(text) => {
                return Ok(ChatResponse {
                    usage: Usage {
                        prompt_tokens,
                        completion_tokens: estimate_tokens(&text),
                    },
                    content: Some(text),
                    tool_calls: Vec::new(),
                    finish_reason: FinishReason::Stop,
                    raw: None,
                })
            }
            Next::Call(calls) => calls
                .into_iter()
                .map(|(name, arguments)| (name.to_owned(), arguments))
                .collect(),
            Next::CallOffered(name, arguments) => vec![(name, arguments)],
        };
        let round = done.len();
        let tool_calls: Vec<ToolCall> = calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, arguments))| {
                ToolCall::new(format!("demo_{round}_{i}"), name, &arguments)
            })
            .collect();
        let completion: String = tool_calls
            .iter()
            .map(|c| format!("{}{}", c.name, c.arguments))
            .collect();
        Ok(ChatResponse {
            content: None,
            usage: Usage {
                prompt_tokens,
                completion_tokens: estimate_tokens(&completion),
            },
            tool_calls,
            finish_reason: FinishReason::ToolCalls,
            raw: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn note_tasks_go_through_whichever_notes_server_is_offered() {
        assert_eq!(
            parse_task("Write the note todo saying \"Buy milk\""),
            Task::WriteNote {
                name: "todo".into(),
                text: "Buy milk".into()
            }
        );
        assert_eq!(
            parse_task("Read the note todo"),
            Task::ReadNote {
                name: Some("todo".into())
            }
        );
        assert_eq!(parse_task("List the notes"), Task::ReadNote { name: None });
        let offered = ["get_page".to_owned(), "files__write_note".to_owned()];
        let write = Task::WriteNote {
            name: "todo".into(),
            text: "x".into(),
        };
        match next(&write, &[], &offered) {
            Next::CallOffered(tool, args) => {
                assert_eq!(tool, "files__write_note");
                assert_eq!(args, json!({"name": "todo", "text": "x"}));
            }
            _ => panic!("calls the offered write_note"),
        }
        match next(&write, &[], &offered[..1]) {
            Next::Answer(text) => assert!(text.contains("no MCP notes server"), "{text}"),
            _ => panic!("answers that no notes server is offered"),
        }
    }

    #[test]
    fn the_demo_prompts_are_understood() {
        assert_eq!(
            parse_task("Rename the home page to \"Hello\""),
            Task::Rename {
                slug: "home".into(),
                title: "Hello".into()
            }
        );
        assert_eq!(
            parse_task("Change the body of the about page to \"We are three people.\""),
            Task::Rewrite {
                slug: "about".into(),
                body: "We are three people.".into()
            }
        );
        assert_eq!(
            parse_task("Create a page faq titled \"Questions\""),
            Task::Create {
                slug: "faq".into(),
                title: "Questions".into()
            }
        );
        assert_eq!(
            parse_task("Publish the careers page and tell team@example.com"),
            Task::Publish {
                slug: "careers".into(),
                notify: Some("team@example.com".into())
            }
        );
        assert_eq!(
            parse_task("Delete the changelog page"),
            Task::Delete {
                slug: "changelog".into()
            }
        );
        assert_eq!(
            parse_task("Send a message to team@example.com saying the site is live"),
            Task::Message {
                to: "team@example.com".into(),
                text: "the site is live".into()
            }
        );
        assert_eq!(
            parse_task("Search for pricing"),
            Task::Search {
                query: "pricing".into()
            }
        );
        assert_eq!(parse_task("List the pages"), Task::List);
        assert_eq!(
            parse_task("Show the history of the home page"),
            Task::History {
                slug: "home".into()
            }
        );
        assert_eq!(parse_task("What time is it?"), Task::Time);
        assert_eq!(
            parse_task("Calculate (12 * 7) / 3"),
            Task::Calculate {
                expression: "(12 * 7) / 3".into()
            }
        );
        assert_eq!(parse_task("List the recent runs"), Task::Runs);
        assert_eq!(
            parse_task("rename home to Start"),
            Task::Rename {
                slug: "home".into(),
                title: "Start".into()
            }
        );
        assert_eq!(parse_task("Write me a poem"), Task::Unknown);
        // Non-ASCII text never splits a character.
        assert_eq!(
            parse_task("Rename the İstanbul page to \"Über\""),
            Task::Unknown
        );
        assert_eq!(
            parse_task("Rename the home page to \"Über uns\""),
            Task::Rename {
                slug: "home".into(),
                title: "Über uns".into()
            }
        );
        for prompt in DEMO_PROMPTS {
            assert_ne!(parse_task(prompt), Task::Unknown, "{prompt}");
        }
    }

    #[test]
    fn skills_in_front_of_the_task_are_ignored() {
        let messages = vec![Message::user("<skills note=\"x\">\n<skill name=\"a\">\nrename all\n</skill>\n</skills>\n\nList the pages")];
        assert_eq!(task_text(&messages), "List the pages");
    }
}
