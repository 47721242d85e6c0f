//! A note's name in the demo server: checked, or, when `write_note` is called without one, asked
//! of the operator (MCP 2026-07-28's "input required": the call comes again with the answer; as
//! a server of the versions before, inside the open call).

use std::collections::BTreeMap;

use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock};
use rmcp::service::{Peer, RoleServer};
use rmcp::ErrorData;
use serde_json::json;

use crate::tool::bounded;

/// What a preview of `write_note` without a name calls the note.
pub(super) const UNNAMED: &str = "(a name the operator will be asked for)";

/// What the operator's answer to "what should the note be called?" says.
pub(super) enum Named {
    Name(String),
    /// Ask (again), with this message.
    Ask(String),
    /// Why not (the operator declined or cancelled).
    Refused(&'static str),
}

const ASK_NAME: &str = "What should the new note be called?";

/// Reads the answer to the name question from a call sent again (MCP 2026-07-28's multi
/// round-trip requests); a name that does not fit is asked for again, saying why.
pub(super) fn named(responses: Option<&rmcp::model::InputResponses>) -> Named {
    named_by(responses.and_then(|r| r.get("name")))
}

/// Reads the operator's answer (an `ElicitResult`), if any.
fn named_by(response: Option<&serde_json::Value>) -> Named {
    let Some(response) = response else {
        return Named::Ask(ASK_NAME.to_owned());
    };
    match response["action"].as_str() {
        Some("accept") => {}
        Some("decline") => return Named::Refused("the operator declined to name it"),
        _ => return Named::Refused("the operator cancelled the question"),
    }
    let given = response["content"]["name"].as_str().unwrap_or_default();
    match checked_name(Some(given)) {
        Ok(name) => Named::Name(name.to_owned()),
        Err(err) => Named::Ask(format!("{} {ASK_NAME}", err.message)),
    }
}

/// The question for the note's name.
fn question(message: &str) -> serde_json::Value {
    json!({"method": "elicitation/create", "params": {
        "mode": "form", "message": message,
        "requestedSchema": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "title": "Name", "minLength": 1, "maxLength": 64,
                     "description": "1 to 64 of a-z, 0-9, - and _"}}}}})
}

/// The most times the name is asked inside one call.
const MAX_ASKED: usize = 3;

/// Asks the operator for the note's name inside the open call (`elicitation/create`, as a
/// server before MCP 2026-07-28 does), again while the answer does not fit.
pub(super) async fn ask_inside(peer: &Peer<RoleServer>) -> Named {
    let mut message = ASK_NAME.to_owned();
    for _ in 0..MAX_ASKED {
        let Ok(params) = serde_json::from_value(question(&message)["params"].clone()) else {
            return Named::Refused("the operator could not be asked for its name");
        };
        let answer = match peer.create_elicitation(params).await {
            Ok(answer) => serde_json::to_value(&answer).ok(),
            Err(err) => {
                tracing::warn!(%err, "the demo server's question failed");
                return Named::Refused("the operator could not be asked for its name");
            }
        };
        match named_by(answer.as_ref()) {
            Named::Ask(again) => message = again,
            named => return named,
        }
    }
    Named::Refused("the operator gave no name that fits")
}

/// "Input required": the operator is asked for the note's name.
pub(super) fn ask_for_name(message: &str) -> CallToolResponse {
    let question = question(message);
    let request: rmcp::model::InputRequest = match serde_json::from_value(question) {
        Ok(request) => request,
        Err(err) => {
            return CallToolResult::error(vec![ContentBlock::text(format!(
                "the name question could not be made: {err}"
            ))])
            .into()
        }
    };
    rmcp::model::InputRequiredResult::new(
        Some(BTreeMap::from([("name".to_owned(), request)])),
        Some("asked-name".to_owned()),
    )
    .into()
}

pub(super) fn checked_name(name: Option<&str>) -> Result<&str, ErrorData> {
    let name = name.ok_or_else(|| ErrorData::invalid_params("`name` is required", None))?;
    let fits = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if fits {
        Ok(name)
    } else {
        Err(ErrorData::invalid_params(
            format!(
                "`name` must be 1 to 64 of a-z, 0-9, - and _, and it was `{}`",
                bounded(name, 80)
            ),
            None,
        ))
    }
}
