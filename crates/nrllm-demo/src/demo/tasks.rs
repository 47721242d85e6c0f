//! Reading the task from the prompt: what the operator asked the demo model to do.

use nrllm_core::transcript::Message;

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Task {
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
    /// Keep reading the clock, round after round, and never be done: a run that loops until a
    /// limit stops it (its budget, or `max_rounds` with the closing answer).
    Watch,
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
    /// Write a note through a connected MCP notes server (`<server>__write_note`); without a
    /// name, the server asks the operator for one.
    WriteNote {
        name: Option<String>,
        text: String,
    },
    /// Read a note (or list them: `None`) through `<server>__read_note`.
    ReadNote {
        name: Option<String>,
    },
    /// Count the notes' words through `<server>__count_words` (which reports its progress).
    CountWords,
    Unknown,
}

/// A note's name as the demo notes server takes it, from the user's words.
pub(super) fn note_name(text: &str) -> Option<String> {
    let name = unquote(text.split_whitespace().last()?).to_ascii_lowercase();
    let fits = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    fits.then_some(name)
}

/// The text after `marker` in `lower`, taken from the same place in `original`.
pub(super) fn after<'a>(original: &'a str, lower: &str, marker: &str) -> Option<&'a str> {
    lower
        .find(marker)
        .map(|i| original[i + marker.len()..].trim())
}

pub(super) fn unquote(text: &str) -> String {
    text.trim()
        .trim_end_matches(['.', '!', '?'])
        .trim_matches(|c| matches!(c, '"' | '\'' | '“' | '”' | '„'))
        .trim()
        .to_owned()
}

/// The slug in phrases like "the home page", "page home", "home".
pub(super) fn slug_in(text: &str) -> Option<String> {
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
pub(super) fn parse_task(prompt: &str) -> Task {
    let text = prompt.trim();
    // ASCII lower-casing keeps byte offsets, so positions found in `lower` slice `text` safely.
    let lower = text.to_ascii_lowercase();
    [
        notes_task,
        asking_task,
        page_edit_task,
        page_action_task,
        lookup_task,
        question_task,
    ]
    .iter()
    .find_map(|parse| parse(text, &lower))
    .unwrap_or(Task::Unknown)
}

/// Whether `lower` starts with one of `prefixes`.
fn starts(lower: &str, prefixes: &[&str]) -> bool {
    prefixes.iter().any(|p| lower.starts_with(p))
}

/// A note written, read or listed.
fn notes_task(text: &str, lower: &str) -> Option<Task> {
    if starts(lower, &["write the note", "write note", "write a note"]) {
        if let Some((head, body)) = split_first(text, lower, &[" saying ", ": "]) {
            // "Write a note saying …": no name; the notes server asks the operator for one.
            let unnamed = matches!(
                head.trim().to_ascii_lowercase().as_str(),
                "write a note" | "write note"
            );
            if let Some(name) = note_name(head) {
                return Some(Task::WriteNote {
                    name: (!unnamed).then_some(name),
                    text: unquote(body),
                });
            }
        }
    }
    if starts(lower, &["read the note", "read note", "show the note"]) {
        if let Some(name) = note_name(text) {
            return Some(Task::ReadNote { name: Some(name) });
        }
    }
    if lower.contains("notes") && lower.contains("count") && lower.contains("words") {
        return Some(Task::CountWords);
    }
    if lower.contains("notes") && (lower.contains("list") || lower.contains("show")) {
        return Some(Task::ReadNote { name: None });
    }
    None
}

/// A task that asks the operator something on the way.
fn asking_task(text: &str, lower: &str) -> Option<Task> {
    if lower.contains("ask me") {
        if starts(lower, &["publish"]) {
            return Some(Task::PublishAsked);
        }
        if starts(lower, &["create", "add"]) {
            return Some(Task::CreateAsked);
        }
        if starts(lower, &["rename"]) {
            // "Rename the home page to "X" and ask me …": the rename is what comes before.
            let cut = lower.find("ask me").unwrap_or(lower.len());
            let head = text[..cut]
                .trim_end()
                .trim_end_matches([',', '—', '-', ' ']);
            let head = head.strip_suffix(" and").unwrap_or(head);
            if let Task::Rename { slug, title } = parse_task(head) {
                return Some(Task::RenameAsking { slug, title });
            }
        }
    }
    None
}

/// A page renamed, rewritten or created.
fn page_edit_task(text: &str, lower: &str) -> Option<Task> {
    if starts(lower, &["rename", "retitle"]) || lower.starts_with("change the title") {
        if let Some((head, title)) = split_first(text, lower, &[" to ", " as "]) {
            if let Some(slug) = slug_in(&without_verb(head)) {
                return Some(Task::Rename {
                    slug,
                    title: unquote(title),
                });
            }
        }
    }
    if lower.starts_with("change the body") || lower.starts_with("rewrite") {
        if let Some((head, body)) = split_first(text, lower, &[" to ", " as "]) {
            if let Some(slug) = slug_in(&without_verb(head)) {
                return Some(Task::Rewrite {
                    slug,
                    body: unquote(body),
                });
            }
        }
    }
    if starts(lower, &["create", "add"]) {
        if let Some(rest) = after(text, lower, "page") {
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
                return Some(Task::Create { slug, title });
            }
        }
    }
    None
}

/// A page published (and someone told), exported or deleted.
fn page_action_task(text: &str, lower: &str) -> Option<Task> {
    if lower.starts_with("publish") {
        let (page_part, notify) =
            match split_last(text, lower, &[" and tell ", " and notify ", " and email "]) {
                Some((page_part, who)) => (page_part.to_ascii_lowercase(), Some(unquote(who))),
                None => (lower.to_owned(), None),
            };
        if let Some(slug) = slug_in(&page_part.replacen("publish", "", 1)) {
            return Some(Task::Publish { slug, notify });
        }
    }
    if lower.starts_with("export") {
        if let Some(slug) = slug_in(&lower.replacen("export", "", 1)) {
            return Some(Task::Export { slug });
        }
    }
    if starts(lower, &["delete", "remove"]) {
        if let Some(slug) = slug_in(&lower.replacen("delete", "", 1).replacen("remove", "", 1)) {
            return Some(Task::Delete { slug });
        }
    }
    None
}

/// A message sent, pages searched, a page's history.
fn lookup_task(text: &str, lower: &str) -> Option<Task> {
    if starts(lower, &["send", "message", "email", "tell"]) {
        if let Some(rest) = after(text, lower, " to ") {
            let rest_lower = rest.to_ascii_lowercase();
            if let Some((to, message)) =
                split_first(rest, &rest_lower, &[" saying ", ": ", " that "])
            {
                return Some(Task::Message {
                    to: unquote(to),
                    text: unquote(message),
                });
            }
        }
    }
    if starts(lower, &["search", "find"]) {
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
            return Some(Task::Search { query });
        }
    }
    if lower.contains("history") {
        if let Some(slug) = slug_in(&lower.replace("history", "").replace("show", "")) {
            return Some(Task::History { slug });
        }
    }
    None
}

/// A question: the pages, the runs, the time, a sum.
fn question_task(_text: &str, lower: &str) -> Option<Task> {
    if (lower.contains("list")
        || lower.contains("show")
        || lower.contains("which")
        || lower.contains("what"))
        && lower.contains("pages")
    {
        return Some(Task::List);
    }
    if lower.contains("runs")
        && (lower.contains("list") || lower.contains("show") || lower.contains("recent"))
    {
        return Some(Task::Runs);
    }
    if lower.starts_with("keep ") && lower.contains("time") {
        return Some(Task::Watch);
    }
    if lower.contains("time") || lower.contains("date") || lower.contains("what day") {
        return Some(Task::Time);
    }
    for prefix in ["calculate", "compute", "what is", "what's"] {
        if let Some(expression) = lower.strip_prefix(prefix) {
            let expression = unquote(expression);
            if !expression.is_empty() && expression.chars().any(|c| c.is_ascii_digit()) {
                return Some(Task::Calculate { expression });
            }
        }
    }
    None
}

/// The words after the first (the verb), lower-cased, with "the title/body of" dropped.
pub(super) fn without_verb(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let rest = lower
        .split_once(' ')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    rest.replace("the title of", "").replace("the body of", "")
}

/// Splits at the last of `markers` found (case-insensitive), returning the original text's parts.
pub(super) fn split_last<'a>(
    original: &'a str,
    lower: &str,
    markers: &[&str],
) -> Option<(&'a str, &'a str)> {
    markers
        .iter()
        .filter_map(|m| lower.rfind(m).map(|i| (i, m.len())))
        .max_by_key(|(i, _)| *i)
        .map(|(i, len)| (&original[..i], &original[i + len..]))
}

/// Splits at the first of `markers` found.
pub(super) fn split_first<'a>(
    original: &'a str,
    lower: &str,
    markers: &[&str],
) -> Option<(&'a str, &'a str)> {
    markers
        .iter()
        .filter_map(|m| lower.find(m).map(|i| (i, m.len())))
        .min_by_key(|(i, _)| *i)
        .map(|(i, len)| (&original[..i], &original[i + len..]))
}

/// The user's task text: the last user message (a fork may add one), without a skills block in
/// front of it.
pub(super) fn task_text(messages: &[Message]) -> String {
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
    "Keep checking the time",
    "Calculate (12 * 7) / 3",
    "List the recent runs",
    "Write the note todo saying \"Buy milk\"",
    "Read the note todo",
];
