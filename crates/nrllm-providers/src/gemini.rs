//! Gemini `generateContent`. The system prompt goes to `systemInstruction`; tools go out as one
//! `functionDeclarations` list with their schemas reduced to the OpenAPI subset Gemini accepts;
//! an assistant turn's calls become `functionCall` parts of a `model` turn, and results become
//! `functionResponse` parts of a `user` turn, named after the call they answer and in call order
//! (a failed or denied call's result goes as an `error` response, by its outcome).
//!
//! Gemini usually sends calls without ids. Those get a synthesised id (with a prefix that marks it
//! as ours, so it is never sent back); the result is matched to its call by name and order. Ids
//! the model did send are echoed. A call's `thoughtSignature` is kept on the call and sent back
//! with it: thinking models reject a replayed call without it. A 429 says how long to wait in its
//! body (`RetryInfo.retryDelay`), which the engine honours. Responses are streamed
//! (`streamGenerateContent?alt=sse`, `gemini/stream.rs`) unless the configuration says not to.

mod schema;
mod stream;

pub use schema::reduce_schema;

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::http::{ApiKey, WaitHint};
use crate::stream::{ReadUsage, StreamFold};
use crate::{arguments_object, synthesised_id, turn_text, HttpProvider, WireFormat};
use nrllm_core::provider::{
    ChatRequest, ChatResponse, FinishReason, ProviderError, ToolChoice, Usage,
};
use nrllm_core::transcript::{Message, ToolCall};

/// Ids this adapter made up start with this; they are never sent to Gemini.
pub const SYNTHESISED_ID_PREFIX: &str = "gemini-call-";

/// The Gemini `generateContent` format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gemini;

/// A Gemini provider (the model with or without the `models/` prefix).
pub type GeminiProvider = HttpProvider<Gemini>;

/// The id to send for `id`: `None` for ids this adapter synthesised.
fn provider_id(id: &str) -> Option<&str> {
    (!id.starts_with(SYNTHESISED_ID_PREFIX)).then_some(id)
}

/// A `generateContent` request.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    contents: Vec<Content>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<Content>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tools>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation_config: Option<GenerationConfig>,
}

#[derive(Debug, Serialize, Deserialize, Default)]
struct Content {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    role: Option<String>,
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Debug, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    function_call: Option<FunctionCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    function_response: Option<FunctionResponse>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    thought_signature: Option<String>,
    /// A thought summary (the model's reasoning, not its answer).
    #[serde(default, skip_serializing)]
    thought: Option<bool>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FunctionCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    name: Option<String>,
    #[serde(default)]
    args: Value,
}

#[derive(Debug, Serialize, Deserialize)]
struct FunctionResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    name: String,
    response: Value,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Tools {
    function_declarations: Vec<FunctionDeclaration>,
}

#[derive(Debug, Serialize)]
struct FunctionDeclaration {
    name: String,
    description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig {
    function_calling_config: FunctionCallingConfig,
}

#[derive(Debug, Serialize)]
struct FunctionCallingConfig {
    mode: &'static str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
}

/// A `generateContent` response.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    #[serde(default)]
    model_version: Option<String>,
    #[serde(default)]
    candidates: Vec<Candidate>,
    prompt_feedback: Option<PromptFeedback>,
    usage_metadata: Option<UsageMetadata>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default)]
    content: Option<Content>,
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    block_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: u64,
    #[serde(default)]
    thoughts_token_count: u64,
    #[serde(default)]
    cached_content_token_count: u64,
}

impl From<UsageMetadata> for Usage {
    /// Gemini's cached tokens are inside its prompt count; its thinking tokens are *not* inside
    /// its candidates count (they are billed as output): they are added to our completion count,
    /// of which they are a part.
    fn from(usage: UsageMetadata) -> Usage {
        Usage {
            cached_input_tokens: usage
                .cached_content_token_count
                .min(usage.prompt_token_count),
            reasoning_tokens: usage.thoughts_token_count,
            ..Usage::tokens(
                usage.prompt_token_count,
                usage.candidates_token_count + usage.thoughts_token_count,
            )
        }
    }
}

/// A `usageMetadata` object as a stream reports it so far.
fn reported_usage(usage: &Value) -> Option<Usage> {
    UsageMetadata::deserialize(usage).ok().map(Usage::from)
}

/// Appends `parts` as a turn of `role`, joining the previous turn when it has the same role
/// (Gemini expects turns to alternate).
fn push_turn(contents: &mut Vec<Content>, role: &str, parts: Vec<Part>) {
    if parts.is_empty() {
        return;
    }
    match contents
        .last_mut()
        .filter(|last| last.role.as_deref() == Some(role))
    {
        Some(last) => last.parts.extend(parts),
        None => contents.push(Content {
            role: Some(role.to_owned()),
            parts,
        }),
    }
}

/// `"2s"`, `"1.5s"`: a protobuf duration as Gemini writes it.
fn protobuf_duration(text: &str) -> Option<Duration> {
    let seconds: f64 = text.trim().strip_suffix('s')?.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

impl WireFormat for Gemini {
    type Request = Request;
    type Response = Response;

    fn url(&self, base_url: &str, model: &str) -> String {
        let model = model.trim_start_matches("models/");
        format!("{base_url}/models/{model}:generateContent")
    }

    fn stream_url(&self, base_url: &str, model: &str) -> String {
        let model = model.trim_start_matches("models/");
        format!("{base_url}/models/{model}:streamGenerateContent?alt=sse")
    }

    fn without_thinking(&self, body: &mut Value) {
        let candidates = body["candidates"].as_array_mut().into_iter().flatten();
        for candidate in candidates {
            let parts = candidate["content"]["parts"]
                .as_array_mut()
                .into_iter()
                .flatten();
            for part in parts.filter(|part| part["thought"] == true) {
                crate::thinking_set_aside(part.get_mut("text"));
            }
        }
    }

    fn fold(&self, provider: &str) -> Option<Box<dyn StreamFold>> {
        Some(Box::new(stream::Chunks::new(
            provider,
            ReadUsage(reported_usage),
        )))
    }

    fn headers(&self, key: Option<&ApiKey>) -> Vec<(&'static str, String)> {
        key.map(|key| ("x-goog-api-key", key.expose().to_owned()))
            .into_iter()
            .collect()
    }

    fn request(&self, _model: &str, request: &ChatRequest) -> Request {
        let mut system = Vec::new();
        let mut contents: Vec<Content> = Vec::new();
        // Results carry the name of the function they answer; ids map back to it.
        let mut names: HashMap<&str, &str> = HashMap::new();
        for message in &request.messages {
            match message {
                Message::System { content } => system.push(content.as_str()),
                Message::User { content } => push_turn(
                    &mut contents,
                    "user",
                    vec![Part {
                        text: Some(content.clone()),
                        ..Part::default()
                    }],
                ),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    for call in tool_calls {
                        names.insert(&call.id, &call.name);
                    }
                    push_turn(&mut contents, "model", model_parts(content, tool_calls));
                }
                Message::Tool {
                    tool_call_id,
                    content,
                    outcome,
                } => {
                    let name = names.get(tool_call_id.as_str()).copied().unwrap_or("");
                    let response = if outcome.is_ok() {
                        json!({"output": content})
                    } else {
                        json!({"error": content})
                    };
                    push_turn(
                        &mut contents,
                        "user",
                        vec![Part {
                            function_response: Some(FunctionResponse {
                                id: provider_id(tool_call_id).map(str::to_owned),
                                name: name.to_owned(),
                                response,
                            }),
                            ..Part::default()
                        }],
                    );
                }
            }
        }
        let tools = declarations(&request.tools);
        let tool_config = (!tools.is_empty()).then_some(ToolConfig {
            function_calling_config: FunctionCallingConfig {
                mode: match request.tool_choice {
                    ToolChoice::Auto => "AUTO",
                    ToolChoice::Disabled => "NONE",
                },
            },
        });
        let options = &request.options;
        let generation_config = (options.temperature.is_some() || options.max_tokens.is_some())
            .then_some(GenerationConfig {
                temperature: options.temperature,
                max_output_tokens: options.max_tokens,
            });
        Request {
            contents,
            system_instruction: (!system.is_empty()).then(|| Content {
                role: None,
                parts: vec![Part {
                    text: Some(system.join("\n\n")),
                    ..Part::default()
                }],
            }),
            tools,
            tool_config,
            generation_config,
        }
    }

    fn response(&self, response: Response, provider: &str) -> Result<ChatResponse, ProviderError> {
        let Some(candidate) = response.candidates.into_iter().next() else {
            return Err(
                match response.prompt_feedback.and_then(|f| f.block_reason) {
                    Some(reason) => ProviderError::permanent(format!(
                        "{provider}: the provider blocked the prompt ({reason})"
                    )),
                    None => ProviderError::permanent(format!(
                        "{provider}: the response has no candidates"
                    )),
                },
            );
        };
        let parts = candidate.content.map(|c| c.parts).unwrap_or_default();
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for (index, part) in parts.into_iter().enumerate() {
            // Thought summaries are the model's reasoning, not its answer.
            if part.thought == Some(true) {
                continue;
            }
            if let Some(chunk) = &part.text {
                text.push_str(chunk);
            }
            if let Some(call) = part.function_call {
                let name = call.name.ok_or_else(|| {
                    ProviderError::permanent(format!(
                        "{provider}: the response has a function call without a name"
                    ))
                })?;
                let id = call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| synthesised_id(SYNTHESISED_ID_PREFIX, index));
                let args = if call.args.is_null() {
                    Value::Object(Map::new())
                } else {
                    call.args
                };
                let mut tool_call = ToolCall::new(id, name, &args);
                tool_call.signature = part.thought_signature;
                tool_calls.push(tool_call);
            }
        }
        let finish_reason = match candidate.finish_reason.as_deref() {
            _ if !tool_calls.is_empty() => FinishReason::ToolCalls,
            Some("STOP") | None => FinishReason::Stop,
            Some("MAX_TOKENS") => FinishReason::Length,
            Some("SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII") => {
                FinishReason::ContentFilter
            }
            Some(other) => FinishReason::Other(other.to_owned()),
        };
        let usage = response
            .usage_metadata
            .map_or(Usage::unreported(), Usage::from);
        Ok(ChatResponse::turn(text, tool_calls, usage, finish_reason)
            .answered_by(response.model_version))
    }

    /// Gemini's 429 carries `RetryInfo` in `error.details`: `{"retryDelay": "2s"}`.
    fn wait_hint(&self, error_body: &Value) -> Option<WaitHint> {
        error_body
            .pointer("/error/details")?
            .as_array()?
            .iter()
            .filter(|d| {
                d.get("@type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.ends_with("RetryInfo"))
            })
            .find_map(|d| d.get("retryDelay").and_then(Value::as_str))
            .and_then(|delay| {
                Some(WaitHint {
                    wait: protobuf_duration(delay)?,
                    source: format!("RetryInfo.retryDelay {delay}"),
                })
            })
    }
}

/// The model's own turn: its text (if any), then its function calls with their thought
/// signatures.
fn model_parts(content: &Option<String>, tool_calls: &[ToolCall]) -> Vec<Part> {
    let mut parts: Vec<Part> = turn_text(content)
        .map(|text| Part {
            text: Some(text),
            ..Part::default()
        })
        .into_iter()
        .collect();
    parts.extend(tool_calls.iter().map(|call| Part {
        function_call: Some(FunctionCall {
            id: provider_id(&call.id).map(str::to_owned),
            name: Some(call.name.clone()),
            args: arguments_object(call),
        }),
        thought_signature: call.signature.clone(),
        ..Part::default()
    }));
    parts
}

/// The tools as function declarations (a function without arguments is declared without
/// parameters); none for a request that offers none.
fn declarations(tools: &[nrllm_core::tool::ToolSpec]) -> Vec<Tools> {
    if tools.is_empty() {
        return Vec::new();
    }
    vec![Tools {
        function_declarations: tools
            .iter()
            .map(|tool| {
                let parameters = reduce_schema(&tool.parameters);
                let has_arguments = parameters
                    .get("properties")
                    .and_then(Value::as_object)
                    .is_some_and(|p| !p.is_empty());
                FunctionDeclaration {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    parameters: has_arguments.then_some(parameters),
                }
            })
            .collect(),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &Value) -> Result<ChatResponse, ProviderError> {
        let typed: Response = serde_json::from_value(body.clone()).unwrap();
        Gemini.response(typed, "gemini")
    }

    #[test]
    fn a_retry_delay_in_the_error_body_is_a_wait_hint() {
        let body = json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2.5s"}
        ]}});
        let hint = Gemini.wait_hint(&body).unwrap();
        assert_eq!(hint.wait, Duration::from_millis(2500));
        assert_eq!(hint.source, "RetryInfo.retryDelay 2.5s");
        assert_eq!(Gemini.wait_hint(&json!({"error": {"code": 429}})), None);
        assert_eq!(protobuf_duration("soon"), None);
    }

    #[test]
    fn optional_fields_become_nullable_and_unknown_keys_go() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Args",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "slug": {"type": "string", "pattern": "^[a-z]+$", "description": "The page."},
                "limit": {"type": ["integer", "null"], "format": "uint32", "minimum": 0},
                "mode": {"$ref": "#/$defs/Mode", "description": "How."},
                "tags": {"type": "array", "items": {"type": "string", "format": "email"}},
                "kind": {"const": "page"},
                "level": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}]}
            },
            "required": ["slug", "missing"],
            "$defs": {"Mode": {"type": "string", "enum": ["fast", "slow"], "title": "Mode"}}
        });
        assert_eq!(
            reduce_schema(&schema),
            json!({
                "type": "object",
                "properties": {
                    "slug": {"type": "string", "description": "The page."},
                    "limit": {"type": "integer", "nullable": true, "minimum": 0},
                    "mode": {"type": "string", "enum": ["fast", "slow"], "description": "How."},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "kind": {"enum": ["page"]},
                    "level": {"type": "string", "enum": ["fast", "slow"], "nullable": true}
                },
                "required": ["slug"]
            })
        );
    }

    #[test]
    fn a_call_without_an_id_gets_one_that_is_never_sent_back() {
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "get_page", "args": {"slug": "home"}}, "thoughtSignature": "c2ln"},
            {"functionCall": {"name": "get_page", "args": {"slug": "about"}}}
        ]}, "finishReason": "STOP"}]});
        let response = parse(&body).unwrap();
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        let [first, second] = response.tool_calls.as_slice() else {
            panic!("two calls")
        };
        assert!(first.id.starts_with(SYNTHESISED_ID_PREFIX));
        assert_ne!(first.id, second.id);
        assert_eq!(first.signature.as_deref(), Some("c2ln"));
        assert_eq!(second.signature, None);
        assert_eq!(provider_id(&first.id), None);
        assert_eq!(provider_id("call-from-gemini"), Some("call-from-gemini"));
    }

    #[test]
    fn a_blocked_prompt_and_an_empty_answer_are_clear_errors() {
        let blocked = json!({"promptFeedback": {"blockReason": "SAFETY"}});
        assert_eq!(
            parse(&blocked).unwrap_err().message,
            "gemini: the provider blocked the prompt (SAFETY)"
        );
        let filtered = json!({"candidates": [{"finishReason": "SAFETY"}]});
        let response = parse(&filtered).unwrap();
        assert_eq!(response.finish_reason, FinishReason::ContentFilter);
        assert_eq!(response.content, None);
    }
}
