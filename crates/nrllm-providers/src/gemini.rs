//! Gemini `generateContent`. The system prompt goes to `systemInstruction`; tools go out as one
//! `functionDeclarations` list with their schemas reduced to the OpenAPI subset Gemini accepts;
//! an assistant turn's calls become `functionCall` parts of a `model` turn, and results become
//! `functionResponse` parts of a `user` turn, named after the call they answer and in call order.
//!
//! Gemini usually sends calls without ids. Those get a synthesised id (with a prefix that marks it
//! as ours, so it is never sent back); the result is matched to its call by name and order. Ids
//! the model did send are echoed. A call's `thoughtSignature` is kept on the call and sent back
//! with it: thinking models reject a replayed call without it.

use std::collections::HashMap;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::{arguments_object, reads_as_error};
use crate::http::{ApiKey, HttpSettings, JsonClient};
use nrllm_core::provider::{
    ChatRequest, ChatResponse, FinishReason, Provider, ProviderError, RetryObserver, ToolChoice,
    Usage,
};
use nrllm_core::transcript::{Message, ToolCall};

/// Ids this adapter made up start with this; they are never sent to Gemini.
pub const SYNTHESISED_ID_PREFIX: &str = "gemini-call-";

/// How to reach the Gemini API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeminiConfig {
    pub name: String,
    /// Up to the API version (e.g. `https://generativelanguage.googleapis.com/v1beta`).
    pub base_url: String,
    /// The model, with or without the `models/` prefix.
    pub model: String,
    pub api_key: ApiKey,
    pub http: HttpSettings,
}

/// A Gemini `generateContent` provider.
#[derive(Debug, Clone)]
pub struct GeminiProvider {
    config: GeminiConfig,
    client: JsonClient,
}

/// The id to send for `id`: `None` for ids this adapter synthesised.
fn provider_id(id: &str) -> Option<&str> {
    (!id.starts_with(SYNTHESISED_ID_PREFIX)).then_some(id)
}

/// Appends `parts` as a turn of `role`, joining the previous turn when it has the same role
/// (Gemini expects turns to alternate).
fn push_turn(contents: &mut Vec<Value>, role: &str, parts: Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    if let Some(last) = contents.last_mut().filter(|last| last["role"] == role) {
        if let Some(existing) = last["parts"].as_array_mut() {
            existing.extend(parts);
            return;
        }
    }
    contents.push(json!({"role": role, "parts": parts}));
}

impl GeminiProvider {
    /// A provider for `config`.
    pub fn new(config: GeminiConfig) -> Result<GeminiProvider, ProviderError> {
        let client = JsonClient::new(&config.name, config.http, Some(config.api_key.clone()))?;
        Ok(GeminiProvider { config, client })
    }

    /// The endpoint for this configuration's model.
    pub fn url(&self) -> String {
        let model = self.config.model.trim_start_matches("models/");
        format!(
            "{}/models/{model}:generateContent",
            self.config.base_url.trim_end_matches('/')
        )
    }

    /// The request body for `request`, exactly as sent.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        let mut system = Vec::new();
        let mut contents: Vec<Value> = Vec::new();
        // Results carry the name of the function they answer; ids map back to it.
        let mut names: HashMap<&str, &str> = HashMap::new();
        for message in &request.messages {
            match message {
                Message::System { content } => system.push(content.as_str()),
                Message::User { content } => {
                    push_turn(&mut contents, "user", vec![json!({"text": content})])
                }
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut parts = Vec::new();
                    if let Some(text) = content.as_deref().filter(|t| !t.is_empty()) {
                        parts.push(json!({"text": text}));
                    }
                    for call in tool_calls {
                        names.insert(&call.id, &call.name);
                        let mut function_call =
                            json!({"name": call.name, "args": arguments_object(call)});
                        if let Some(id) = provider_id(&call.id) {
                            function_call["id"] = json!(id);
                        }
                        let mut part = json!({"functionCall": function_call});
                        if let Some(signature) = &call.signature {
                            part["thoughtSignature"] = json!(signature);
                        }
                        parts.push(part);
                    }
                    push_turn(&mut contents, "model", parts);
                }
                Message::Tool {
                    tool_call_id,
                    content,
                } => {
                    let name = names.get(tool_call_id.as_str()).copied().unwrap_or("");
                    let response = if reads_as_error(content) {
                        json!({"error": content})
                    } else {
                        json!({"output": content})
                    };
                    let mut function_response = json!({"name": name, "response": response});
                    if let Some(id) = provider_id(tool_call_id) {
                        function_response["id"] = json!(id);
                    }
                    push_turn(
                        &mut contents,
                        "user",
                        vec![json!({"functionResponse": function_response})],
                    );
                }
            }
        }
        let mut body = json!({"contents": contents});
        if !system.is_empty() {
            body["systemInstruction"] = json!({"parts": [{"text": system.join("\n\n")}]});
        }
        if !request.tools.is_empty() {
            let declarations: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    let mut declaration =
                        json!({"name": tool.name, "description": tool.description});
                    let parameters = reduce_schema(&tool.parameters);
                    // A function without arguments is declared without parameters.
                    if parameters
                        .get("properties")
                        .and_then(Value::as_object)
                        .is_some_and(|p| !p.is_empty())
                    {
                        declaration["parameters"] = parameters;
                    }
                    declaration
                })
                .collect();
            body["tools"] = json!([{"functionDeclarations": declarations}]);
            let mode = match request.tool_choice {
                ToolChoice::Auto => "AUTO",
                ToolChoice::Disabled => "NONE",
            };
            body["toolConfig"] = json!({"functionCallingConfig": {"mode": mode}});
        }
        let mut generation = Map::new();
        if let Some(temperature) = request.options.temperature {
            generation.insert("temperature".into(), json!(temperature));
        }
        if let Some(max_tokens) = request.options.max_tokens {
            generation.insert("maxOutputTokens".into(), json!(max_tokens));
        }
        if !generation.is_empty() {
            body["generationConfig"] = Value::Object(generation);
        }
        body
    }
}

/// The keys of Gemini's `Schema` object this adapter passes on; everything else in a JSON Schema
/// (`additionalProperties`, `$schema`, `title`, `pattern`, …) is dropped, because Gemini answers
/// 400 to fields it does not know.
const KEPT_KEYS: &[&str] = &[
    "type",
    "format",
    "description",
    "nullable",
    "enum",
    "properties",
    "required",
    "items",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "anyOf",
];

/// Formats Gemini accepts, per type; other formats (`uint32`, `email`, …) are dropped.
fn format_allowed(kind: &str, format: &str) -> bool {
    matches!(
        (kind, format),
        ("integer", "int32" | "int64")
            | ("number", "float" | "double")
            | ("string", "enum" | "date-time")
    )
}

/// Reduces a JSON Schema (as schemars derives it) to the OpenAPI subset Gemini's function
/// declarations accept: local `$ref`s are inlined, `type: [T, "null"]` and
/// `anyOf: [S, {type: null}]` become `nullable`, `const` and `oneOf` become `enum` and `anyOf`,
/// and unknown keys and formats are dropped.
pub fn reduce_schema(schema: &Value) -> Value {
    let definitions = schema
        .get("$defs")
        .or_else(|| schema.get("definitions"))
        .cloned()
        .unwrap_or(Value::Null);
    reduce(schema, &definitions, 0)
}

fn reduce(schema: &Value, definitions: &Value, depth: usize) -> Value {
    let Some(object) = schema.as_object() else {
        return json!({});
    };
    // Recursive types cannot be inlined for ever; past this depth a node is left open.
    if depth > 16 {
        return json!({});
    }
    if let Some(target) = object.get("$ref").and_then(Value::as_str) {
        let name = target.rsplit('/').next().unwrap_or_default();
        let mut resolved = reduce(&definitions[name], definitions, depth + 1);
        // Siblings of `$ref` (a field's description) win over the definition's.
        if let (Some(resolved), Some(description)) =
            (resolved.as_object_mut(), object.get("description"))
        {
            resolved.insert("description".into(), description.clone());
        }
        return resolved;
    }
    let mut out = Map::new();
    let mut nullable = false;
    for (key, value) in object {
        match key.as_str() {
            "type" => match value {
                Value::Array(kinds) => {
                    nullable |= kinds.iter().any(|k| k == "null");
                    if let Some(kind) = kinds.iter().find(|k| *k != "null") {
                        out.insert("type".into(), kind.clone());
                    }
                }
                kind => {
                    out.insert("type".into(), kind.clone());
                }
            },
            "const" => {
                out.insert("enum".into(), json!([value]));
            }
            "anyOf" | "oneOf" => {
                let variants: Vec<&Value> = value
                    .as_array()
                    .map(|v| v.iter().collect())
                    .unwrap_or_default();
                let (nulls, others): (Vec<&Value>, Vec<&Value>) =
                    variants.into_iter().partition(|v| v["type"] == "null");
                nullable |= !nulls.is_empty();
                match others.as_slice() {
                    [only] => {
                        if let Value::Object(inner) = reduce(only, definitions, depth + 1) {
                            for (k, v) in inner {
                                out.entry(k).or_insert(v);
                            }
                        }
                    }
                    many => {
                        out.insert(
                            "anyOf".into(),
                            Value::Array(
                                many.iter()
                                    .map(|v| reduce(v, definitions, depth + 1))
                                    .collect(),
                            ),
                        );
                    }
                }
            }
            "properties" => {
                let properties: Map<String, Value> = value
                    .as_object()
                    .map(|props| {
                        props
                            .iter()
                            .map(|(name, s)| (name.clone(), reduce(s, definitions, depth + 1)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert("properties".into(), Value::Object(properties));
            }
            "items" => {
                out.insert("items".into(), reduce(value, definitions, depth + 1));
            }
            "nullable" => nullable |= value.as_bool().unwrap_or(false),
            key if KEPT_KEYS.contains(&key) => {
                out.insert(key.into(), value.clone());
            }
            _ => {}
        }
    }
    // Only string enums exist in Gemini's subset.
    if out
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|values| !values.iter().all(Value::is_string))
    {
        out.remove("enum");
    }
    if let (Some(kind), Some(format)) = (
        out.get("type").and_then(Value::as_str),
        out.get("format").and_then(Value::as_str),
    ) {
        if !format_allowed(kind, format) {
            out.remove("format");
        }
    } else {
        out.remove("format");
    }
    // `required` may only name declared properties.
    if let Some(required) = out.get("required").and_then(Value::as_array) {
        let declared = out.get("properties").and_then(Value::as_object);
        let kept: Vec<Value> = required
            .iter()
            .filter(|name| {
                name.as_str()
                    .is_some_and(|n| declared.is_some_and(|d| d.contains_key(n)))
            })
            .cloned()
            .collect();
        if kept.is_empty() {
            out.remove("required");
        } else {
            out.insert("required".into(), Value::Array(kept));
        }
    }
    if nullable {
        out.insert("nullable".into(), Value::Bool(true));
    }
    Value::Object(out)
}

/// Reads a `generateContent` response.
pub fn parse_response(body: &Value, provider: &str) -> Result<ChatResponse, ProviderError> {
    let Some(candidate) = body
        .get("candidates")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
    else {
        return Err(
            match body
                .pointer("/promptFeedback/blockReason")
                .and_then(Value::as_str)
            {
                Some(reason) => ProviderError::permanent(format!(
                    "{provider}: the provider blocked the prompt ({reason})"
                )),
                None => {
                    ProviderError::permanent(format!("{provider}: the response has no candidates"))
                }
            },
        );
    };
    let parts = candidate
        .pointer("/content/parts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (index, part) in parts.iter().enumerate() {
        // Thought summaries are the model's reasoning, not its answer.
        if part.get("thought").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        if let Some(chunk) = part.get("text").and_then(Value::as_str) {
            text.push_str(chunk);
        }
        if let Some(call) = part.get("functionCall") {
            let name = call.get("name").and_then(Value::as_str).ok_or_else(|| {
                ProviderError::permanent(format!(
                    "{provider}: the response has a function call without a name"
                ))
            })?;
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map(str::to_owned)
                .unwrap_or_else(|| {
                    format!(
                        "{SYNTHESISED_ID_PREFIX}{}-{index}",
                        &uuid::Uuid::new_v4().simple().to_string()[..12]
                    )
                });
            let mut tool_call = ToolCall::new(id, name, call.get("args").unwrap_or(&json!({})));
            tool_call.signature = part
                .get("thoughtSignature")
                .and_then(Value::as_str)
                .map(str::to_owned);
            tool_calls.push(tool_call);
        }
    }
    let finish_reason = match candidate.get("finishReason").and_then(Value::as_str) {
        _ if !tool_calls.is_empty() => FinishReason::ToolCalls,
        Some("STOP") | None => FinishReason::Stop,
        Some("MAX_TOKENS") => FinishReason::Length,
        Some("SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII") => {
            FinishReason::ContentFilter
        }
        Some(other) => FinishReason::Other(other.to_owned()),
    };
    let count = |pointer: &str| body.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    Ok(ChatResponse {
        content: (!text.is_empty()).then_some(text),
        tool_calls,
        usage: Usage {
            prompt_tokens: count("/usageMetadata/promptTokenCount"),
            // Thinking tokens are billed as output.
            completion_tokens: count("/usageMetadata/candidatesTokenCount")
                + count("/usageMetadata/thoughtsTokenCount"),
        },
        finish_reason,
        raw: Some(body.clone()),
    })
}

#[async_trait]
impl Provider for GeminiProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.complete_observed(request, &|_| {}).await
    }

    async fn complete_observed(
        &self,
        request: &ChatRequest,
        on_retry: RetryObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let headers = [("x-goog-api-key", self.config.api_key.expose().to_owned())];
        let body = self
            .client
            .post(&self.url(), &headers, &self.request_body(request), on_retry)
            .await?;
        parse_response(&body, &self.config.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let response = parse_response(&body, "gemini").unwrap();
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
            parse_response(&blocked, "gemini").unwrap_err().message,
            "gemini: the provider blocked the prompt (SAFETY)"
        );
        let filtered = json!({"candidates": [{"finishReason": "SAFETY"}]});
        let response = parse_response(&filtered, "gemini").unwrap();
        assert_eq!(response.finish_reason, FinishReason::ContentFilter);
        assert_eq!(response.content, None);
    }
}
