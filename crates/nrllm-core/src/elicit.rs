//! A tool's server asks the operator (MCP elicitation, issue #44). A call's tool may answer "I
//! need input first" instead of a result ([`crate::tool::ToolError::Asks`]): the server's message
//! and a flat form. The turn stops there and the run waits for input like an `ask_operator`
//! question — durably: what the server needs to go on (its request state) is kept with the run,
//! and the call is sent again with the operator's reply, after a restart or on another instance.
//!
//! Only the flat form the protocol allows is shown: an object whose properties are text (with an
//! optional list of values), numbers, whole numbers or yes/no, with bounded texts. Anything else
//! is not shown to anyone: the tool declines it and says why. Everything here is pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::choice::Choice;

/// The longest message a server may ask with, in characters.
pub const MAX_MESSAGE_CHARS: usize = 2_000;
/// The most fields a server's form may have.
pub const MAX_FIELDS: usize = 20;
/// The largest form schema kept, serialized.
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;
/// The largest request state kept (the server's own, echoed back when the call is sent again).
pub const MAX_REQUEST_STATE_BYTES: usize = 64 * 1024;
/// The longest label, description or value of a field, in characters.
pub const MAX_FIELD_TEXT: usize = 300;
/// The most values a field's list may offer.
pub const MAX_FIELD_VALUES: usize = 50;

/// What a tool's server asked while a call ran: a message and a form, and what it needs back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asked {
    /// The server's name, as the operator configured it (who asks).
    pub server: String,
    pub message: String,
    /// The form, as [`checked_schema`] passed it (no fields when the server asks the operator
    /// to open a link instead).
    pub schema: Value,
    /// URL mode: the page the operator opens and finishes there (the server never learns what
    /// was typed there through us); `accept` then says the operator is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<Link>,
    /// The server's key for this request (the reply is sent under it).
    pub key: String,
    /// The server's opaque state, echoed back with the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    /// A server of a version before 2026-07-28 asked inside its open call: the instance that
    /// holds the call keeps it open until then (ms since the epoch), when the server is answered
    /// `cancel`. The reply reaches the server through that held call, not by sending the call
    /// again ([`Replied::held`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until_ms: Option<i64>,
}

/// A link a server asks the operator to open: `https` only, without credentials; its host as
/// the page shows it plainly, in ASCII (punycode for a name that is not), so that a look-alike
/// name cannot pass for another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub url: String,
    pub host: String,
}

/// The longest link kept, in bytes.
pub const MAX_URL_BYTES: usize = 2_000;

/// `text` as a link the operator may be shown, or why not.
pub fn checked_link(text: &str) -> Result<Link, Unshowable> {
    if text.len() > MAX_URL_BYTES {
        return Err(Unshowable::Link("it is longer than 2,000 bytes"));
    }
    let url = url::Url::parse(text.trim()).map_err(|_| Unshowable::Link("it is not a URL"))?;
    if url.scheme() != "https" {
        return Err(Unshowable::Link("only https links are opened"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Unshowable::Link("it carries a user name or password"));
    }
    let host = url
        .host_str()
        .filter(|host| !host.is_empty())
        .ok_or(Unshowable::Link("it has no host"))?
        .to_owned();
    Ok(Link {
        url: url.to_string(),
        host,
    })
}

/// What the operator does with a server's question.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyAction {
    /// Send the form's content.
    #[default]
    Accept,
    /// Refuse to give it.
    Decline,
    /// Dismiss the question without a choice.
    Cancel,
}

impl ReplyAction {
    /// `accept`, `decline` or `cancel`, as a form or a JSON client says it.
    pub fn parse(text: &str) -> Option<ReplyAction> {
        match text.trim() {
            "" | "accept" => Some(ReplyAction::Accept),
            "decline" => Some(ReplyAction::Decline),
            "cancel" => Some(ReplyAction::Cancel),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReplyAction::Accept => "accept",
            ReplyAction::Decline => "decline",
            ReplyAction::Cancel => "cancel",
        }
    }
}

/// The operator's reply to a server's question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub action: ReplyAction,
    /// With `accept`: the form's content, checked against the server's schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

impl Reply {
    /// A reply without content (`decline` or `cancel`).
    pub fn without_content(action: ReplyAction) -> Reply {
        Reply {
            action,
            content: None,
        }
    }

    /// The reply as the server reads it (an `ElicitResult`).
    pub fn to_wire(&self) -> Value {
        let mut object = Map::new();
        object.insert("action".into(), Value::from(self.action.as_str()));
        if let (ReplyAction::Accept, Some(content)) = (self.action, &self.content) {
            object.insert("content".into(), content.clone());
        }
        Value::Object(object)
    }

    /// One line for a step: "accepted: {\"title\":\"Ideas\"}", "declined", "cancelled".
    pub fn describe(&self) -> String {
        match (self.action, &self.content) {
            (ReplyAction::Accept, Some(content)) => format!("accepted: {content}"),
            (ReplyAction::Accept, None) => "accepted".to_owned(),
            (ReplyAction::Decline, _) => "declined".to_owned(),
            (ReplyAction::Cancel, _) => "cancelled".to_owned(),
        }
    }
}

/// A reply on its way to the tool that asked: the call is sent again with it (or, for a call
/// held open, the reply goes to it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replied {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
    pub reply: Reply,
    /// The question came inside a call still held open ([`Asked::held_until_ms`]): the reply
    /// goes to that call, and the call is never sent again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
}

/// A turn stopped at a call whose server asked: kept in the waiting run's state, everything
/// needed to go on with the turn exactly as it was decided once the operator replies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Elicited {
    /// The call whose server asked (a call of the pending turn).
    pub call_id: String,
    pub asked: Asked,
    /// The turn's choices, one per pending call, as they were decided (the asking call's is
    /// the one it ran with; calls answered already are answered with their results).
    pub choices: Vec<Choice>,
    /// The effect keys, approved bases and step notes the turn's calls ran with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub effect_keys: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub approved_bases: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub notes: BTreeMap<String, String>,
}

/// Why a server's question is not shown (the tool declines it and its step says this).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unshowable {
    #[error("its message is empty or longer than {MAX_MESSAGE_CHARS} characters")]
    Message,
    #[error("its form is larger than {MAX_SCHEMA_BYTES} bytes")]
    TooLarge,
    #[error("its form is not a flat object of at most {MAX_FIELDS} fields")]
    NotFlat,
    #[error("its field `{0}` is not text, a number, a whole number or yes/no")]
    Field(String),
    #[error("its field `{0}` has a text longer than {MAX_FIELD_TEXT} characters or more than {MAX_FIELD_VALUES} values")]
    FieldText(String),
    #[error("its field name `{0}` is not 1 to 64 letters, digits, `_` or `-`")]
    FieldName(String),
    #[error("its form does not compile as a JSON Schema")]
    Invalid,
    #[error("its request state is larger than {MAX_REQUEST_STATE_BYTES} bytes")]
    State,
    #[error("its link cannot be shown: {0}")]
    Link(&'static str),
}

/// The message a server asked with, if it can be shown: control characters (but line breaks)
/// removed, at most [`MAX_MESSAGE_CHARS`].
pub fn checked_message(message: &str) -> Result<String, Unshowable> {
    let message: String = message
        .chars()
        .filter(|c| *c == '\n' || !c.is_control())
        .collect();
    let message = message.trim();
    if message.is_empty() || message.chars().count() > MAX_MESSAGE_CHARS {
        return Err(Unshowable::Message);
    }
    Ok(message.to_owned())
}

/// The keywords a field may carry, by its type.
fn allowed(kind: &str) -> &'static [&'static str] {
    match kind {
        "string" => &[
            "type",
            "title",
            "description",
            "minLength",
            "maxLength",
            "format",
            "default",
            "enum",
            "enumNames",
        ],
        "number" | "integer" => &[
            "type",
            "title",
            "description",
            "minimum",
            "maximum",
            "default",
        ],
        "boolean" => &["type", "title", "description", "default"],
        _ => &[],
    }
}

/// A field's texts are bounded: its title, description and each listed value.
fn texts_fit(property: &Map<String, Value>) -> bool {
    let short = |v: &Value| {
        v.as_str()
            .is_none_or(|t| t.chars().count() <= MAX_FIELD_TEXT)
    };
    let list_fits = |key: &str| {
        property.get(key).is_none_or(|list| {
            list.as_array().is_some_and(|values| {
                values.len() <= MAX_FIELD_VALUES && values.iter().all(|v| v.is_string() && short(v))
            })
        })
    };
    ["title", "description", "default", "format"]
        .iter()
        .filter_map(|key| property.get(*key))
        .all(short)
        && list_fits("enum")
        && list_fits("enumNames")
}

/// The server's form, if it is the flat kind the protocol allows and fits the bounds: an
/// object of at most [`MAX_FIELDS`] text, number, whole-number or yes/no fields; `required`
/// names among them. Refused, saying why, otherwise.
pub fn checked_schema(schema: &Value) -> Result<Value, Unshowable> {
    let bytes = serde_json::to_string(schema).map_or(usize::MAX, |s| s.len());
    if bytes > MAX_SCHEMA_BYTES {
        return Err(Unshowable::TooLarge);
    }
    let object = schema.as_object().ok_or(Unshowable::NotFlat)?;
    if object.get("type").and_then(Value::as_str) != Some("object") {
        return Err(Unshowable::NotFlat);
    }
    let properties = match object.get("properties") {
        None => Map::new(),
        Some(Value::Object(properties)) => properties.clone(),
        Some(_) => return Err(Unshowable::NotFlat),
    };
    if properties.len() > MAX_FIELDS {
        return Err(Unshowable::NotFlat);
    }
    for (name, property) in &properties {
        let fits = (1..=64).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !fits {
            return Err(Unshowable::FieldName(name.chars().take(64).collect()));
        }
        let property = property
            .as_object()
            .ok_or_else(|| Unshowable::Field(name.clone()))?;
        let kind = property.get("type").and_then(Value::as_str).unwrap_or("");
        let keys = allowed(kind);
        if keys.is_empty() || property.keys().any(|key| !keys.contains(&key.as_str())) {
            return Err(Unshowable::Field(name.clone()));
        }
        if !texts_fit(property) {
            return Err(Unshowable::FieldText(name.clone()));
        }
    }
    let required: Vec<Value> = match object.get("required") {
        None => Vec::new(),
        Some(Value::Array(names)) => {
            if !names
                .iter()
                .all(|n| n.as_str().is_some_and(|n| properties.contains_key(n)))
            {
                return Err(Unshowable::NotFlat);
            }
            names.clone()
        }
        Some(_) => return Err(Unshowable::NotFlat),
    };
    let mut checked = Map::new();
    checked.insert("type".into(), Value::from("object"));
    checked.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        checked.insert("required".into(), Value::Array(required));
    }
    // Nothing but the form's fields goes back to the server.
    checked.insert("additionalProperties".into(), Value::Bool(false));
    let checked = Value::Object(checked);
    if jsonschema::validator_for(&checked).is_err() {
        return Err(Unshowable::Invalid);
    }
    Ok(checked)
}

/// A server's question as it is kept, if it can be shown: its message and form checked, its
/// request state bounded.
pub fn asked(
    server: &str,
    key: &str,
    message: &str,
    schema: &Value,
    request_state: Option<String>,
) -> Result<Asked, Unshowable> {
    if request_state
        .as_ref()
        .is_some_and(|s| s.len() > MAX_REQUEST_STATE_BYTES)
    {
        return Err(Unshowable::State);
    }
    Ok(Asked {
        server: server.to_owned(),
        message: checked_message(message)?,
        schema: checked_schema(schema)?,
        link: None,
        key: key.to_owned(),
        request_state,
        held_until_ms: None,
    })
}

/// A server's request that the operator open `url` (URL mode), as it is kept, if it can be
/// shown: its message checked, its link `https` ([`checked_link`]), its state bounded.
pub fn asked_link(
    server: &str,
    key: &str,
    message: &str,
    url: &str,
    request_state: Option<String>,
) -> Result<Asked, Unshowable> {
    let empty = serde_json::json!({"type": "object", "properties": {}});
    let mut asked = asked(server, key, message, &empty, request_state)?;
    asked.link = Some(checked_link(url)?);
    Ok(asked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::question::FormAnswer;
    use serde_json::json;

    fn title_form() -> Value {
        json!({"type": "object", "required": ["title"], "properties": {
            "title": {"type": "string", "title": "Title", "maxLength": 80},
            "pinned": {"type": "boolean", "default": false},
            "stars": {"type": "integer", "minimum": 1, "maximum": 5},
            "colour": {"type": "string", "enum": ["red", "green"]}
        }})
    }

    #[test]
    fn a_flat_form_is_kept_and_closed_to_other_fields() {
        let checked = checked_schema(&title_form()).unwrap();
        assert_eq!(checked["additionalProperties"], json!(false));
        assert_eq!(checked["required"], json!(["title"]));
        assert_eq!(checked["properties"]["stars"]["maximum"], json!(5));
    }

    #[test]
    fn anything_but_a_flat_bounded_form_is_refused_saying_why() {
        let nested = json!({"type": "object", "properties": {"a": {"type": "object"}}});
        assert_eq!(checked_schema(&nested), Err(Unshowable::Field("a".into())));
        let array = json!({"type": "array"});
        assert_eq!(checked_schema(&array), Err(Unshowable::NotFlat));
        let pattern =
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}});
        assert_eq!(checked_schema(&pattern), Err(Unshowable::Field("a".into())));
        let many: Map<String, Value> = (0..=MAX_FIELDS)
            .map(|i| (format!("f{i}"), json!({"type": "string"})))
            .collect();
        let many = json!({"type": "object", "properties": many});
        assert_eq!(checked_schema(&many), Err(Unshowable::NotFlat));
        let long = json!({"type": "object", "properties": {"a": {"type": "string", "description": "x".repeat(MAX_FIELD_TEXT + 1)}}});
        assert_eq!(
            checked_schema(&long),
            Err(Unshowable::FieldText("a".into()))
        );
        let name = json!({"type": "object", "properties": {"a b": {"type": "string"}}});
        assert!(matches!(
            checked_schema(&name),
            Err(Unshowable::FieldName(_))
        ));
        let required = json!({"type": "object", "properties": {}, "required": ["ghost"]});
        assert_eq!(checked_schema(&required), Err(Unshowable::NotFlat));
        let huge = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert_eq!(checked_schema(&huge), Err(Unshowable::TooLarge));
        assert_eq!(
            asked("s", "k", "  ", &title_form(), None),
            Err(Unshowable::Message)
        );
        assert_eq!(
            asked(
                "s",
                "k",
                "Title?",
                &title_form(),
                Some("x".repeat(MAX_REQUEST_STATE_BYTES + 1))
            ),
            Err(Unshowable::State)
        );
    }

    #[test]
    fn a_link_is_https_without_credentials_and_its_host_is_shown_in_ascii() {
        let link = checked_link("https://bücher.example/sign-in?next=%2F").unwrap();
        assert_eq!(link.host, "xn--bcher-kva.example");
        assert_eq!(link.url, "https://xn--bcher-kva.example/sign-in?next=%2F");
        let cases = [
            ("http://example.com/", "only https"),
            ("javascript:alert(1)", "only https"),
            ("https://user:pw@example.com/", "user name or password"),
            ("not a url", "not a URL"),
        ];
        for (text, why) in cases {
            let err = checked_link(text).unwrap_err();
            assert!(err.to_string().contains(why), "{text}: {err}");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(checked_link(&long).is_err());
        let asked = asked_link("auth", "k", "Sign in", "https://example.com/", None).unwrap();
        assert_eq!(asked.link.map(|l| l.host), Some("example.com".to_owned()));
    }

    #[test]
    fn a_message_loses_its_control_characters() {
        assert_eq!(
            checked_message("Title\u{1b}[31m?\nplease").unwrap(),
            "Title[31m?\nplease"
        );
    }

    fn elicited() -> Elicited {
        Elicited {
            call_id: "c1".into(),
            asked: asked(
                "notes",
                "title",
                "Which title?",
                &title_form(),
                Some("s".into()),
            )
            .unwrap(),
            choices: vec![Choice::Approve],
            effect_keys: BTreeMap::new(),
            approved_bases: BTreeMap::new(),
            notes: BTreeMap::new(),
        }
    }

    fn fields(pairs: &[(&str, &str)]) -> FormAnswer {
        FormAnswer {
            fields: Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..FormAnswer::default()
        }
    }

    #[test]
    fn an_accepted_reply_must_fit_the_form_and_the_others_carry_nothing() {
        let wait = elicited();
        let reply = wait
            .reply(
                ReplyAction::Accept,
                &fields(&[("title", "Ideas"), ("stars", "4")]),
            )
            .unwrap();
        assert_eq!(
            reply.to_wire(),
            json!({"action": "accept", "content": {"title": "Ideas", "stars": 4, "pinned": false}})
        );
        let missing = wait.reply(ReplyAction::Accept, &fields(&[])).unwrap_err();
        assert_eq!(missing.field, "title");
        let out_of_range = wait
            .reply(
                ReplyAction::Accept,
                &fields(&[("title", "x"), ("stars", "9")]),
            )
            .unwrap_err();
        assert_eq!(out_of_range.field, "stars");
        let not_listed = wait
            .reply(
                ReplyAction::Accept,
                &fields(&[("title", "x"), ("colour", "blue")]),
            )
            .unwrap_err();
        assert_eq!(not_listed.field, "colour");
        let declined = wait
            .reply(ReplyAction::Decline, &fields(&[("title", "ignored")]))
            .unwrap();
        assert_eq!(declined.to_wire(), json!({"action": "decline"}));
        assert_eq!(declined.describe(), "declined");
        assert_eq!(ReplyAction::parse("cancel"), Some(ReplyAction::Cancel));
        assert_eq!(ReplyAction::parse(""), Some(ReplyAction::Accept));
        assert_eq!(ReplyAction::parse("maybe"), None);
    }
}
