//! nrllm-providers: real LLM providers over HTTP. One engine ([`http::Engine`]: timeouts,
//! retries that honour the provider's hints, error classification, keys kept out of messages)
//! and, per wire format, a small [`WireFormat`] that turns the canonical (OpenAI-shaped)
//! transcript into that format's typed request and reads its typed response back:
//! [`openai::OpenAi`] (OpenAI, Ollama, vLLM, llama.cpp, OpenRouter…), [`anthropic::Anthropic`],
//! [`gemini::Gemini`]. [`HttpProvider`] puts a format on the engine.

pub mod anthropic;
pub mod gemini;
pub mod http;
pub mod openai;
pub mod stream;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use http::{ApiKey, Engine, HttpSettings, WaitHint};
use nrllm_core::provider::{
    ChatRequest, ChatResponse, DeltaObserver, Provider, ProviderError, RetryObserver,
};
use nrllm_core::transcript::ToolCall;
use stream::StreamFold;

/// What sets one wire format apart: where it is posted, how the key travels, the request body
/// it takes and the response it gives, as typed serde structs.
pub trait WireFormat: Send + Sync + 'static {
    type Request: Serialize;
    type Response: DeserializeOwned;

    /// The endpoint's path under the base URL (which ends before it, e.g. `…/v1`).
    const PATH: &'static str = "";

    /// The endpoint for `model` under `base_url`: the base URL and [`WireFormat::PATH`], unless
    /// the format puts the model in the path.
    fn url(&self, base_url: &str, _model: &str) -> String {
        format!("{base_url}{}", Self::PATH)
    }
    /// The headers of every request (the key, the format's version).
    fn headers(&self, key: Option<&ApiKey>) -> Vec<(&'static str, String)>;
    /// The request body for `request`.
    fn request(&self, model: &str, request: &ChatRequest) -> Self::Request;
    /// The model turn in `response` (`provider` names it in messages).
    fn response(
        &self,
        response: Self::Response,
        provider: &str,
    ) -> Result<ChatResponse, ProviderError>;
    /// A wait the provider asks for in an error body, if the format has such a convention.
    fn wait_hint(&self, _error_body: &Value) -> Option<WaitHint> {
        None
    }

    /// A fold for one streamed response from `provider`, or `None` for a format that does not
    /// stream (its requests are then sent whole).
    fn fold(&self, _provider: &str) -> Option<Box<dyn StreamFold>> {
        None
    }
    /// `body` (as [`WireFormat::request`] made it) asking for a stream.
    fn stream_body(&self, _body: &mut Value) {}
    /// A response body as it is kept (the step's raw view): the model's thinking text set
    /// aside ([`thinking_set_aside`]) — it is shown live, never kept. Signatures stay.
    fn without_thinking(&self, _body: &mut Value) {}
    /// The endpoint of a streaming request for `model`.
    fn stream_url(&self, base_url: &str, model: &str) -> String {
        self.url(base_url, model)
    }
}

/// Where and how to reach one configured model.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// The configuration's name, for messages and the step list.
    pub name: String,
    /// Up to the API version (e.g. `https://api.openai.com/v1`, `http://127.0.0.1:11434/v1`).
    pub base_url: String,
    pub model: String,
    /// `None` for local servers without keys.
    pub api_key: Option<ApiKey>,
    pub http: HttpSettings,
}

/// A provider: a configuration, the HTTP engine and a wire format.
#[derive(Debug, Clone)]
pub struct HttpProvider<F> {
    config: ProviderConfig,
    engine: Engine,
    format: F,
    /// Ask for the response as a stream (for a format that can).
    stream: bool,
}

impl<F: WireFormat> HttpProvider<F> {
    /// A provider for `config` speaking `format`.
    pub fn new(config: ProviderConfig, format: F) -> Result<HttpProvider<F>, ProviderError> {
        let engine = Engine::new(&config.name, config.http, config.api_key.clone())?;
        Ok(HttpProvider {
            config,
            engine,
            format,
            stream: true,
        })
    }

    /// The provider asking for streamed responses (`true`, the default) or whole ones (for a
    /// gateway that does not stream).
    pub fn streaming(mut self, stream: bool) -> HttpProvider<F> {
        self.stream = stream;
        self
    }

    /// The endpoint requests go to.
    pub fn url(&self) -> String {
        self.format.url(
            self.config.base_url.trim_end_matches('/'),
            &self.config.model,
        )
    }

    /// The request body for `request`, exactly as sent.
    pub fn request_body(&self, request: &ChatRequest) -> Value {
        // Typed structs of strings, numbers and JSON values always serialise.
        serde_json::to_value(self.format.request(&self.config.model, request)).unwrap_or_default()
    }

    /// Reads a response body as this format's provider would.
    pub fn parse_response(&self, body: &Value) -> Result<ChatResponse, ProviderError> {
        let typed: F::Response = serde_json::from_value(body.clone()).map_err(|err| {
            ProviderError::permanent(format!(
                "{}: the response is not in the expected shape ({err})",
                self.config.name
            ))
        })?;
        let mut response = self.format.response(typed, &self.config.name)?;
        let mut raw = body.clone();
        self.format.without_thinking(&mut raw);
        response.raw = Some(raw);
        Ok(response)
    }
}

/// Sets aside the thinking text at `text` (a string in a response body): it becomes how long it
/// was. The model's thinking is shown live and never kept.
pub(crate) fn thinking_set_aside(text: Option<&mut Value>) {
    if let Some(text) = text {
        if let Some(length) = text.as_str().map(|t| t.chars().count()) {
            *text = Value::String(format!(
                "[{length} characters of thinking: shown live, not kept]"
            ));
        }
    }
}

#[async_trait]
impl<F: WireFormat> Provider for HttpProvider<F> {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    async fn complete(
        &self,
        request: &ChatRequest,
        on_retry: RetryObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let headers = self.format.headers(self.config.api_key.as_ref());
        let body = self
            .engine
            .post(
                &self.url(),
                &headers,
                &self.request_body(request),
                on_retry,
                &|error| self.format.wait_hint(error),
            )
            .await?;
        self.parse_response(&body)
    }

    async fn stream(
        &self,
        request: &ChatRequest,
        on_retry: RetryObserver<'_>,
        on_delta: DeltaObserver<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        let name = &self.config.name;
        if !self.stream || self.format.fold(name).is_none() {
            return self.complete(request, on_retry).await;
        }
        let fold = || self.format.fold(name);
        let mut body = self.request_body(request);
        self.format.stream_body(&mut body);
        let url = self.format.stream_url(
            self.config.base_url.trim_end_matches('/'),
            &self.config.model,
        );
        let body = self
            .engine
            .post_stream(
                &url,
                &self.format.headers(self.config.api_key.as_ref()),
                &body,
                (on_retry, &|error| self.format.wait_hint(error)),
                (&fold, on_delta),
            )
            .await?;
        self.parse_response(&body)
    }
}

/// A call's arguments as a JSON object, for wire formats that carry them as one. A call whose
/// arguments were not a JSON object was answered with an error; the format still needs an object.
pub(crate) fn arguments_object(call: &ToolCall) -> Value {
    call.parsed_arguments()
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()))
}

/// An assistant turn's text, if it has any (formats that carry text as a block or part leave an
/// empty one out).
pub(crate) fn turn_text(content: &Option<String>) -> Option<String> {
    content.clone().filter(|text| !text.is_empty())
}

/// A fresh id for a tool call the provider sent without one.
pub(crate) fn synthesised_id(prefix: &str, index: usize) -> String {
    format!(
        "{prefix}{}_{index}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}
