//! A server that needs the operator's input before a call can finish (MCP 2026-07-28's multi
//! round-trip requests): it answers `tools/call` with "input required" — its questions and an
//! opaque state — and the client sends the call again with the answers. The question the
//! operator can be shown becomes [`ToolError::Asks`] (the run waits, durably); anything else
//! is declined at once, and the call's step says why.

use std::collections::BTreeMap;

use nrllm_core::elicit::{asked, asked_link, Asked, Reply, ReplyAction};
use rmcp::model::{
    ElicitRequestParams, ElicitResult, ElicitationAction, InputRequest, InputRequiredResult,
};
use serde_json::Value;

/// The most rounds one call goes through declining questions that cannot be shown, before it
/// is given up.
pub const MAX_DECLINED_ROUNDS: usize = 5;

/// What goes back to the server when the call is sent again: a response by request key, and
/// the server's state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    pub responses: BTreeMap<String, Value>,
    pub request_state: Option<String>,
}

/// What becomes of a server's "input required".
#[derive(Debug, Clone, PartialEq)]
pub enum Needed {
    /// One form the operator is shown: the run waits for the reply.
    Ask(Box<Asked>),
    /// Nothing the operator can be shown: sent again at once with these answers (every
    /// question declined); `why` goes into the call's step.
    Declined { answers: Answers, why: String },
}

/// Reads what `server` asked. One question is shown (a form or a link); a form that is not the
/// flat kind, a link that is not `https`, several questions at once, or a request of another kind (sampling, roots, which this
/// client does not offer) is declined, saying why.
pub fn needed(server: &str, input: InputRequiredResult) -> Needed {
    let request_state = input.request_state;
    let requests = input.input_requests.unwrap_or_default();
    let why = match requests.len() {
        0 => None,
        1 => {
            let (key, request) = requests.iter().next().map(|(k, r)| (k.clone(), r)).unzip();
            match (key, request) {
                (Some(key), Some(InputRequest::Elicitation(request))) => {
                    match shown(server, &key, &request.params, request_state.clone()) {
                        Ok(asked) => return Needed::Ask(Box::new(asked)),
                        Err(why) => Some(why),
                    }
                }
                _ => Some("it asked for something other than the operator's input (sampling or roots), which this client does not offer".to_owned()),
            }
        }
        n => Some(format!(
            "it asked {n} questions at once; one at a time is shown"
        )),
    };
    let declined = Reply::without_content(ReplyAction::Decline).to_wire();
    Needed::Declined {
        answers: Answers {
            responses: requests
                .into_keys()
                .map(|key| (key, declined.clone()))
                .collect(),
            request_state,
        },
        why: why.unwrap_or_else(|| "it asked to be sent the call again".to_owned()),
    }
}

/// One question as the operator is shown it, or why it cannot be.
fn shown(
    server: &str,
    key: &str,
    params: &ElicitRequestParams,
    request_state: Option<String>,
) -> Result<Asked, String> {
    match params {
        ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } => {
            let schema = serde_json::to_value(requested_schema).unwrap_or(Value::Null);
            asked(server, key, message, &schema, request_state).map_err(|unshowable| {
                format!("it asked with a form that cannot be shown: {unshowable}")
            })
        }
        ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
            asked_link(server, key, message, url, request_state).map_err(|unshowable| {
                format!("it asked the operator to open a link that cannot be shown: {unshowable}")
            })
        }
        _ => Err("it asked in a way this client does not know".to_owned()),
    }
}

/// The key a question asked inside an open call is kept under (it is answered in that call,
/// not by key).
pub const INLINE_KEY: &str = "inline";

/// A question a server asked inside an open call ([`crate::held`]) that is held open until
/// `held_until_ms`, as the operator is shown it, or why it cannot be (then it is declined).
pub fn inline(
    server: &str,
    params: &ElicitRequestParams,
    held_until_ms: i64,
) -> Result<Asked, String> {
    let mut asked = shown(server, INLINE_KEY, params, None)?;
    asked.held_until_ms = Some(held_until_ms);
    Ok(asked)
}

/// The answer a held call's server reads for `reply` (an `ElicitResult`).
pub fn result(reply: &Reply) -> ElicitResult {
    serde_json::from_value(reply.to_wire())
        .unwrap_or_else(|_| ElicitResult::new(ElicitationAction::Cancel))
}

/// The answers a call is sent again with after the operator replied.
pub fn answers(key: &str, reply: &Reply, request_state: Option<String>) -> Answers {
    Answers {
        responses: BTreeMap::from([(key.to_owned(), reply.to_wire())]),
        request_state,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(requests: Value, state: Option<&str>) -> InputRequiredResult {
        let mut wire = json!({"resultType": "input_required", "inputRequests": requests});
        if let Some(state) = state {
            wire["requestState"] = json!(state);
        }
        serde_json::from_value(wire).expect("a wire input_required result")
    }

    fn elicit(params: Value) -> Value {
        json!({"method": "elicitation/create", "params": params})
    }

    #[test]
    fn one_flat_form_is_shown_with_its_key_and_the_servers_state() {
        let needed = needed(
            "notes",
            input(
                json!({"title": elicit(json!({"mode": "form", "message": "Which title?",
                "requestedSchema": {"type": "object", "properties": {"title": {"type": "string"}},
                "required": ["title"]}}))}),
                Some("opaque"),
            ),
        );
        let Needed::Ask(asked) = needed else {
            panic!("expected a question, got {needed:?}")
        };
        assert_eq!(asked.server, "notes");
        assert_eq!(asked.key, "title");
        assert_eq!(asked.message, "Which title?");
        assert_eq!(asked.request_state.as_deref(), Some("opaque"));
        assert_eq!(asked.schema["required"], json!(["title"]));
    }

    #[test]
    fn a_link_to_open_is_shown_with_its_host() {
        let needed = needed(
            "auth",
            input(
                json!({"signin": elicit(json!({"mode": "url", "message": "Sign in to the tracker",
                "url": "https://bücher.example/login", "elicitationId": "e1"}))}),
                None,
            ),
        );
        let Needed::Ask(asked) = needed else {
            panic!("expected a question, got {needed:?}")
        };
        assert_eq!(asked.key, "signin");
        assert_eq!(
            asked.link.as_ref().map(|l| l.host.as_str()),
            Some("xn--bcher-kva.example")
        );
        assert_eq!(asked.schema["properties"], json!({}));
    }

    #[test]
    fn what_cannot_be_shown_is_declined_at_once_saying_why() {
        let url = elicit(json!({"mode": "url", "message": "Sign in",
            "url": "http://example.com/x", "elicitationId": "e1"}));
        let form = elicit(json!({"mode": "form", "message": "Two?",
            "requestedSchema": {"type": "object", "properties": {"a": {"type": "string"}}}}));
        let cases = [
            (json!({"u": url}), "only https links"),
            (json!({"a": form.clone(), "b": form}), "2 questions at once"),
        ];
        for (requests, said) in cases {
            let keys: Vec<String> = requests
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            match needed("s", input(requests, Some("st"))) {
                Needed::Declined { answers, why } => {
                    assert!(why.contains(said), "{why}");
                    assert_eq!(answers.request_state.as_deref(), Some("st"));
                    assert_eq!(answers.responses.keys().cloned().collect::<Vec<_>>(), keys);
                    assert!(answers
                        .responses
                        .values()
                        .all(|r| *r == json!({"action": "decline"})));
                }
                other => panic!("expected a decline, got {other:?}"),
            }
        }
    }
}
