//! Real LLM providers over HTTP. Each adapter converts the canonical (OpenAI-shaped) transcript to
//! its wire format and back; what they share — timeouts, retries with backoff, error
//! classification and keeping keys out of messages — lives in [`http`].

pub mod anthropic;
pub mod http;
pub mod openai;
