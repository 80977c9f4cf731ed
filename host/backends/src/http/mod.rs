//! The real chat providers, over HTTP: [`OpenAiChat`] (Chat Completions, which OpenAI, vLLM,
//! llama.cpp's server, Ollama and LM Studio speak) and [`AnthropicChat`] (Messages).
//!
//! Each turns one [`ChatRequest`](crate::ChatRequest) into one POST and its reply into a
//! [`ChatResponse`](crate::ChatResponse); the shared client underneath retries by a
//! [`RetryPolicy`], reads no body larger than [`MAX_RESPONSE_BYTES`] and keeps secrets (API
//! keys, a base URL's credentials, authentication headers a provider echoes) out of every error.
//! The agent loop above them knows no provider. Built only with the crate's `http` feature.

mod anthropic;
mod client;
mod openai;
mod redact;
mod retry;

use reqwest::header::{HeaderName, HeaderValue};

pub use anthropic::AnthropicChat;
pub use client::{MAX_RESPONSE_BYTES, tls_config};
pub use openai::OpenAiChat;
pub use retry::RetryPolicy;

use crate::BackendError;
use client::HttpClient;

/// The header a call's idempotency key travels in, so that a provider which de-duplicates
/// requests recognises a retried or resumed call.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

fn idempotency_header(http: &HttpClient, key: &str) -> Result<HeaderValue, BackendError> {
    HeaderValue::from_str(key).map_err(|_| {
        http.invalid_request(format!(
            "the idempotency key {key:?} is not a valid HTTP header value"
        ))
    })
}

/// An environment variable that is set and not empty.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}
