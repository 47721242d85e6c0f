//! What an operator sees before deciding: each pending call's preview, and the digest that binds a
//! decision to exactly that view. The digest covers the pending turn (run, version, every call's
//! id, tool and arguments) and, separately, the basis of every preview (for a page: the version of
//! its content). A decision made on a page whose turn is gone is stale; one made on a page whose
//! target changed since is refused as well, and the operator sees the new diff.

use std::time::Duration;

use futures::future::Either;

use crate::clock::Clock;
use crate::registry::Gate;
use crate::state::SuspendedState;
use crate::tool::{Preview, ToolContext};

/// The longest a preview may take; a slower one is shown as unavailable.
pub const PREVIEW_TIME_LIMIT: Duration = Duration::from_secs(3);

/// What the panel shows for one pending call.
#[derive(Debug, Clone, PartialEq)]
pub enum PreviewOutcome {
    /// The call needs no preview (it is held with the turn, or its tool does not preview).
    None,
    Ready(Preview),
    /// Why there is no preview (the tool refused, timed out, or is no longer there).
    Unavailable(String),
    /// The tool offers no preview of its own (an MCP server's tool, say): the call's arguments
    /// against the tool's input schema, field by field.
    Arguments(Vec<ArgumentField>),
}

pub use nrllm_types::ArgumentField;

/// The most of one shown value or description.
const SHOWN_TEXT: usize = 2_000;
/// The most fields shown.
const SHOWN_FIELDS: usize = 50;

/// `text` cut to at most `max` characters, with `…` when cut.
pub fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// The arguments `args` against the object schema `schema`: the schema's properties, then the
/// fields it does not have. Values and descriptions are bounded; all of it is text.
pub fn arguments_against_schema(
    schema: &serde_json::Value,
    args: &serde_json::Value,
) -> Vec<ArgumentField> {
    let shown = |text: &str| cut(text, SHOWN_TEXT);
    let empty = serde_json::Map::new();
    let properties = schema
        .get("properties")
        .and_then(|p| p.as_object())
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().filter_map(|n| n.as_str()).collect())
        .unwrap_or_default();
    let values = args.as_object().unwrap_or(&empty);
    let value_of = |name: &str| values.get(name).map(|v| shown(&v.to_string()));
    let mut fields: Vec<ArgumentField> = properties
        .iter()
        .map(|(name, property)| ArgumentField {
            name: shown(name),
            description: property
                .get("description")
                .and_then(|d| d.as_str())
                .map(shown),
            kind: property.get("type").and_then(|t| t.as_str()).map(shown),
            required: required.contains(&name.as_str()),
            value: value_of(name),
            unexpected: false,
        })
        .collect();
    fields.extend(
        values
            .keys()
            .filter(|name| !properties.contains_key(*name))
            .map(|name| ArgumentField {
                name: shown(name),
                description: None,
                kind: None,
                required: false,
                value: value_of(name),
                unexpected: true,
            }),
    );
    fields.truncate(SHOWN_FIELDS);
    fields
}

/// One pending call with its preview.
#[derive(Debug, Clone, PartialEq)]
pub struct CallPreview {
    pub call_id: String,
    pub tool: String,
    /// The call's tool requires approval (the rest of the turn is held with it).
    pub gated: bool,
    pub outcome: PreviewOutcome,
}

impl CallPreview {
    /// The basis the preview was computed from, if it has one.
    pub fn basis(&self) -> Option<&str> {
        match &self.outcome {
            PreviewOutcome::Ready(preview) => preview.basis.as_deref(),
            _ => None,
        }
    }
}

/// Previews every gated call of the pending turn, each within [`PREVIEW_TIME_LIMIT`] by `clock`.
pub async fn preview_pending(
    gate: &Gate,
    state: &SuspendedState,
    run_id: &str,
    clock: &dyn Clock,
) -> Vec<CallPreview> {
    let mut previews = Vec::with_capacity(state.pending.len());
    for call in &state.pending {
        let gated = state.gated.contains(&call.id);
        let outcome = if !gated {
            PreviewOutcome::None
        } else {
            match (gate.tool(&call.name), call.parsed_arguments()) {
                (None, _) => PreviewOutcome::Unavailable(format!(
                    "the tool `{}` is no longer offered to this run",
                    call.name
                )),
                (_, Err(_)) => {
                    PreviewOutcome::Unavailable("the model's arguments are not valid JSON".into())
                }
                (Some(tool), Ok(arguments)) => {
                    let ctx = ToolContext {
                        run_id: run_id.to_owned(),
                        call_id: call.id.clone(),
                        ..ToolContext::default()
                    };
                    let preview = tool.preview(&arguments, &ctx);
                    let deadline = clock.sleep(PREVIEW_TIME_LIMIT);
                    let first = futures::future::select(preview, deadline).await;
                    match first {
                        Either::Left((Ok(Some(preview)), _)) => PreviewOutcome::Ready(preview),
                        Either::Left((Ok(None), _)) => PreviewOutcome::Arguments(
                            arguments_against_schema(&tool.spec().parameters, &arguments),
                        ),
                        Either::Left((Err(err), _)) => PreviewOutcome::Unavailable(
                            err.model_text().trim_start_matches("Error: ").to_owned(),
                        ),
                        Either::Right(_) => PreviewOutcome::Unavailable(format!(
                            "the preview took longer than {} s",
                            PREVIEW_TIME_LIMIT.as_secs()
                        )),
                    }
                }
            }
        };
        previews.push(CallPreview {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            gated,
            outcome,
        });
    }
    previews
}

/// The digest of a pending turn as previewed: `<turn>-<basis>`, sent back with a decision.
pub fn pending_digest(
    run_id: uuid::Uuid,
    version: i64,
    state: &SuspendedState,
    previews: &[CallPreview],
) -> String {
    let run_id = run_id.to_string();
    let version = version.to_be_bytes();
    let mut turn: Vec<&[u8]> = vec![run_id.as_bytes(), &version];
    for call in &state.pending {
        turn.extend([
            call.id.as_bytes(),
            call.name.as_bytes(),
            call.arguments.as_bytes(),
        ]);
    }
    let bases: Vec<&[u8]> = previews
        .iter()
        .map(|p| p.basis().unwrap_or_default().as_bytes())
        .collect();
    format!(
        "{}-{}",
        crate::hash::short_hash(turn, 12),
        crate::hash::short_hash(bases, 6)
    )
}

/// How a decision's digest compares with the turn as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DigestCheck {
    Same,
    /// The pending turn is not the one the operator saw (another decision came first).
    TurnChanged,
    /// Same turn, but the target of these calls changed since the preview.
    TargetChanged(Vec<String>),
}

/// Compares the digest a decision carries with the current one.
pub fn check_digest(given: &str, current: &str, previews: &[CallPreview]) -> DigestCheck {
    if given == current {
        return DigestCheck::Same;
    }
    let turn = |digest: &str| digest.split('-').next().map(str::to_owned);
    if turn(given) != turn(current) {
        return DigestCheck::TurnChanged;
    }
    DigestCheck::TargetChanged(
        previews
            .iter()
            .filter(|p| p.basis().is_some())
            .map(|p| p.tool.clone())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_are_shown_against_the_schema_with_descriptions() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The note's name."},
                "text": {"type": "string", "description": "<b>Replaces</b> the text."},
                "tags": {"type": "array"}
            },
            "required": ["name", "text"]
        });
        let args = json!({"name": "todo", "text": "x".repeat(5_000), "extra": 7});
        let fields = arguments_against_schema(&schema, &args);
        let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["name", "tags", "text", "extra"]);
        assert_eq!(fields[0].description.as_deref(), Some("The note's name."));
        assert_eq!(fields[0].value.as_deref(), Some("\"todo\""));
        assert!(fields[0].required && !fields[0].unexpected);
        // Not sent: no value; not required.
        assert_eq!(
            (fields[1].value.as_ref(), fields[1].required),
            (None, false)
        );
        // Text from outside stays text, and is bounded.
        assert_eq!(
            fields[2].description.as_deref(),
            Some("<b>Replaces</b> the text.")
        );
        assert!(fields[2].value.as_ref().unwrap().chars().count() <= SHOWN_TEXT + 1);
        assert!(fields[3].unexpected && fields[3].value.as_deref() == Some("7"));
        // Arguments that are not an object show the schema's fields, none of them sent.
        let fields = arguments_against_schema(&schema, &json!("oops"));
        assert!(fields.iter().all(|f| f.value.is_none()));
    }
}
