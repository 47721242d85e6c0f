//! What a tool's server asked the operator (MCP elicitation, [`nrllm_core::elicit`]) as the
//! pages show it: its steps' titles and tabs. The server's message is hostile text like any
//! other: it is shown as text, never as markup.

use nrllm_core::elicit::ReplyAction;
use nrllm_core::events::Event;

use super::json::{pretty, tab};
use crate::page_data::StepTab;

/// The title of an `input_asked` or `input_replied` step, and whether it went as it should
/// (a declined or cancelled question did not).
pub(super) fn input_title(event: &Event) -> (String, bool) {
    match event {
        Event::InputAsked {
            server,
            tool,
            message,
            link,
            held,
            ..
        } => {
            let link = link
                .as_ref()
                .map(|link| format!(" (a link to {})", link.host))
                .unwrap_or_default();
            let held = match held {
                true => ", the call held open",
                false => "",
            };
            (
                format!("{server} asks, during {tool}: {message}{link} — waiting for input{held}"),
                true,
            )
        }
        Event::InputReplied {
            server,
            decided_by,
            through_token,
            reply,
            held,
            ..
        } => {
            let through = through_token
                .as_deref()
                .map(|token| format!(" (token {token})"))
                .unwrap_or_default();
            let then = match held {
                true => "the reply goes to the call held open",
                false => "the call is sent again",
            };
            (
                format!(
                    "{server}'s question {} by {decided_by}{through}; {then}",
                    reply.describe()
                ),
                reply.action == ReplyAction::Accept,
            )
        }
        _ => (event.kind().to_owned(), true),
    }
}

/// The detail tabs of an `input_asked` or `input_replied` step.
pub(super) fn input_tabs(event: &Event) -> Vec<StepTab> {
    match event {
        Event::InputAsked {
            message, schema, ..
        } => vec![
            tab("question", "Question", message.clone()),
            tab("form", "Form", pretty(schema)),
        ],
        Event::InputReplied { reply, .. } => vec![tab("result", "Reply", pretty(reply))],
        _ => Vec::new(),
    }
}
