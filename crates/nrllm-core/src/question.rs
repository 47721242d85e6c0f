//! Asking the operator: the built-in tool `ask_operator(question, choices?, schema?)`. A turn that
//! holds a call to it waits — `waiting_for_input` when nothing else of the turn needs approval —
//! until an operator answers; the answer is the call's result, and it goes through the same claim
//! as any decision (exactly one answer wins). The answer must be one of `choices` when they are
//! given, and fit `schema` (a JSON Schema of an object) when it is given; otherwise any text.
//!
//! Everything here is pure: the tool never runs (its calls are answered by an operator), and the
//! checks read only the call's arguments and the answer.

use std::collections::BTreeMap;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::elicit::{Elicited, Reply, ReplyAction};
use crate::tool::{Tool, ToolContext, ToolError};
use crate::transcript::ToolCall;

/// The longest answer, in characters.
pub use nrllm_types::MAX_ANSWER_CHARS;

/// Arguments of `ask_operator`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// What to ask the operator.
    #[schemars(length(min = 1, max = 2000))]
    pub question: String,
    /// The answers to choose from, if the answer must be one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 20))]
    pub choices: Option<Vec<String>>,
    /// A JSON Schema of an object the answer must fit (its properties become the form's fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
}

/// The built-in tool that asks the operator.
pub struct AskOperator;

#[async_trait]
impl Tool for AskOperator {
    type Args = Question;
    const NAME: &'static str = "ask_operator";
    const DESCRIPTION: &'static str =
        "Ask the operator a question and wait for the answer (one of \
        `choices` if given; an object fitting the JSON Schema `schema` if given; else free text). \
        The answer is this call's result.";
    const GROUP: &'static str = "system";
    const ASKS_OPERATOR: bool = true;

    async fn call(&self, _args: Question, _ctx: &ToolContext) -> Result<String, ToolError> {
        // Never reached through the loop: an operator answers these calls.
        Err(ToolError::Refused(
            "ask_operator is answered by an operator, not run".into(),
        ))
    }
}

/// Why an answer does not fit its question.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct AnswerError {
    /// `answer`, or the schema field that does not fit.
    pub field: String,
    pub message: String,
}

fn refused(field: impl Into<String>, message: impl Into<String>) -> AnswerError {
    AnswerError {
        field: field.into(),
        message: message.into(),
    }
}

impl Question {
    /// The question a call of `ask_operator` asks, if its arguments say one.
    pub fn of(call: &ToolCall) -> Option<Question> {
        serde_json::from_value(call.parsed_arguments().ok()?).ok()
    }

    /// The result the model reads for `answer`: text (one of the choices, when given), or —
    /// with a schema — a JSON object that fits it. Refused, naming the field, otherwise.
    pub fn check(&self, answer: &Value) -> Result<String, AnswerError> {
        if let Some(schema) = &self.schema {
            let validator = jsonschema::validator_for(schema)
                .map_err(|_| refused("answer", "the question's schema is not valid"))?;
            if let Some(error) = validator.iter_errors(answer).next() {
                let field = crate::tool::field_of(&error, "answer");
                return Err(refused(field, error.to_string()));
            }
            return Ok(answer.to_string());
        }
        let text = match answer {
            Value::String(text) => text.trim().to_owned(),
            _ => return Err(refused("answer", "answer with text")),
        };
        if text.is_empty() {
            return Err(refused("answer", "write an answer"));
        }
        if text.chars().count() > MAX_ANSWER_CHARS {
            return Err(refused(
                "answer",
                format!("at most {MAX_ANSWER_CHARS} characters"),
            ));
        }
        match &self.choices {
            Some(choices) if !choices.iter().any(|c| c == &text) => Err(refused(
                "answer",
                format!("choose one of: {}", choices.join(", ")),
            )),
            _ => Ok(text),
        }
    }
}

/// An answer as a form (or a JSON client) sends it: the text, or — for a question with a form —
/// each field's text by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FormAnswer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<BTreeMap<String, String>>,
    /// For a question a tool's server asked ([`crate::elicit`]): accept (the default), decline
    /// or cancel. An `ask_operator` question is only ever answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ReplyAction>,
}

impl FormAnswer {
    /// A text answer.
    pub fn text(answer: impl Into<String>) -> FormAnswer {
        FormAnswer {
            answer: Some(answer.into()),
            ..FormAnswer::default()
        }
    }

    /// Whether anything was typed.
    pub fn is_given(&self) -> bool {
        self.answer.as_deref().is_some_and(|a| !a.trim().is_empty())
            || self
                .fields
                .as_ref()
                .is_some_and(|f| f.values().any(|v| !v.trim().is_empty()))
    }

    /// The answer as `question` takes it: with a schema, an object of the fields (a number or
    /// yes/no field read as the schema says; an empty optional field left out); else the text.
    /// A field longer than [`MAX_ANSWER_CHARS`] is refused, naming it.
    pub fn value_for(&self, question: &Question) -> Result<Value, AnswerError> {
        let too_long = |field: &str, text: &str| {
            (text.chars().count() > MAX_ANSWER_CHARS)
                .then(|| refused(field, format!("at most {MAX_ANSWER_CHARS} characters")))
        };
        if let Some(err) = self.answer.as_deref().and_then(|a| too_long("answer", a)) {
            return Err(err);
        }
        let Some(schema) = &question.schema else {
            return Ok(Value::String(self.answer.clone().unwrap_or_default()));
        };
        let empty = BTreeMap::new();
        let fields = self.fields.as_ref().unwrap_or(&empty);
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|list| list.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        let mut object = serde_json::Map::new();
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            let text = fields.get(name).map(|t| t.trim().to_owned());
            if let Some(err) = text.as_deref().and_then(|t| too_long(name, t)) {
                return Err(err);
            }
            let value = match (property["type"].as_str(), text) {
                (Some("boolean"), text) => Value::Bool(
                    text.is_some_and(|t| matches!(t.as_str(), "true" | "on" | "1" | "yes")),
                ),
                (_, None) => continue,
                (_, Some(text)) if text.is_empty() && !required.contains(&name.as_str()) => {
                    continue
                }
                (Some("integer"), Some(text)) => text
                    .parse::<i64>()
                    .map(Value::from)
                    .unwrap_or(Value::String(text)),
                (Some("number"), Some(text)) => text
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map(Value::Number)
                    .unwrap_or(Value::String(text)),
                (_, Some(text)) => Value::String(text),
            };
            object.insert(name.clone(), value);
        }
        Ok(Value::Object(object))
    }

    /// The result the model reads for this answer to `call`'s question, or why it does not fit.
    pub fn result_for(&self, call: &ToolCall) -> Result<String, AnswerError> {
        let question =
            Question::of(call).ok_or_else(|| refused("answer", "the question cannot be read"))?;
        question.check(&self.value_for(&question)?)
    }
}

/// A server's question ([`crate::elicit`]) is shown and read like `ask_operator`'s form.
impl Elicited {
    /// The question as an `ask_operator` form shows it (the server's message and fields).
    pub fn question(&self) -> Question {
        Question {
            question: self.asked.message.clone(),
            choices: None,
            schema: Some(self.asked.schema.clone()),
        }
    }

    /// The reply a form (or a JSON client) gave: with `accept`, the fields read and checked
    /// against the server's schema (refused naming the field); else nothing is read.
    pub fn reply(&self, action: ReplyAction, answer: &FormAnswer) -> Result<Reply, AnswerError> {
        // Declined, cancelled, or done at the server's link: nothing of a form goes back.
        if action != ReplyAction::Accept || self.asked.link.is_some() {
            return Ok(Reply::without_content(action));
        }
        let question = self.question();
        let content = answer.value_for(&question)?;
        question.check(&content)?;
        Ok(Reply {
            action,
            content: Some(content),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn question(arguments: Value) -> Question {
        Question::of(&ToolCall::new("q", "ask_operator", &arguments)).unwrap()
    }

    #[test]
    fn an_answer_is_one_of_the_choices_or_fits_the_schema() {
        let pick = question(json!({"question": "Which?", "choices": ["careers", "pricing"]}));
        assert_eq!(pick.check(&json!("pricing")).unwrap(), "pricing");
        let err = pick.check(&json!("home")).unwrap_err();
        assert!(err.message.contains("careers, pricing"), "{err}");
        let form = question(json!({"question": "Details?", "schema": {
            "type": "object", "required": ["slug"],
            "properties": {"slug": {"type": "string", "pattern": "^[a-z-]+$"}, "count": {"type": "integer"}}
        }}));
        assert_eq!(
            form.check(&json!({"slug": "faq", "count": 2})).unwrap(),
            r#"{"count":2,"slug":"faq"}"#
        );
        assert_eq!(
            form.check(&json!({"slug": "Bad Slug"})).unwrap_err().field,
            "slug"
        );
        assert_eq!(form.check(&json!({})).unwrap_err().field, "slug");
        assert_eq!(
            form.check(&json!({"slug": "a", "count": "x"}))
                .unwrap_err()
                .field,
            "count"
        );
        let free = question(json!({"question": "Anything?"}));
        assert_eq!(free.check(&json!("  yes ")).unwrap(), "yes");
        assert!(free.check(&json!(" ")).is_err());
        assert!(free
            .check(&json!("x".repeat(MAX_ANSWER_CHARS + 1)))
            .is_err());
    }

    #[test]
    fn a_form_answer_is_read_as_the_questions_schema_says() {
        let form = ToolCall::new(
            "q",
            "ask_operator",
            &json!({"question": "Details?", "schema": {
                "type": "object", "required": ["slug"],
                "properties": {"slug": {"type": "string"}, "count": {"type": "integer"},
                    "ok": {"type": "boolean"}, "note": {"type": "string"}}
            }}),
        );
        let fields = |pairs: &[(&str, &str)]| FormAnswer {
            answer: None,
            action: None,
            fields: Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
        };
        let result = fields(&[
            ("slug", " faq "),
            ("count", "2"),
            ("ok", "on"),
            ("note", ""),
        ])
        .result_for(&form)
        .unwrap();
        assert_eq!(result, r#"{"count":2,"ok":true,"slug":"faq"}"#);
        let err = fields(&[("slug", "a"), ("count", "two")])
            .result_for(&form)
            .unwrap_err();
        assert_eq!(err.field, "count");
        let err = fields(&[("slug", &"x".repeat(MAX_ANSWER_CHARS + 1))])
            .result_for(&form)
            .unwrap_err();
        assert_eq!(err.field, "slug");
        let free = ToolCall::new("f", "ask_operator", &json!({"question": "Why?"}));
        assert_eq!(
            FormAnswer::text(" because ").result_for(&free).unwrap(),
            "because"
        );
        assert!(!FormAnswer::text("  ").is_given() && FormAnswer::text("x").is_given());
    }
}
