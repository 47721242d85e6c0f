//! Asking the operator: the built-in tool `ask_operator(question, choices?, schema?)`. A turn that
//! holds a call to it waits — `waiting_for_input` when nothing else of the turn needs approval —
//! until an operator answers; the answer is the call's result, and it goes through the same claim
//! as any decision (exactly one answer wins). The answer must be one of `choices` when they are
//! given, and fit `schema` (a JSON Schema of an object) when it is given; otherwise any text.
//!
//! Everything here is pure: the tool never runs (its calls are answered by an operator), and the
//! checks read only the call's arguments and the answer.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::{Tool, ToolContext, ToolError};
use crate::transcript::ToolCall;

/// The longest answer, in characters.
pub const MAX_ANSWER_CHARS: usize = 20_000;

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
}
