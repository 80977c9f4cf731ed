//! OpenAI-compatible Chat Completions: OpenAI itself, and vLLM, llama.cpp's server, Ollama and
//! LM Studio, which speak the same `POST {base}/chat/completions`.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::client::{HttpClient, ProviderError};
use super::{IDEMPOTENCY_KEY, RetryPolicy, env_var, idempotency_header};
use crate::{
    BackendError, BackendErrorKind, ChatModel, ChatRequest, ChatResponse, Message, ToolCall,
    ToolSpec, Usage,
};

/// A chat model behind an OpenAI-compatible Chat Completions endpoint.
///
/// Structured output is asked for with `response_format: json_schema` (`strict: false`, so
/// any schema is accepted); the JSON comes back as [`ChatResponse::text`] and the caller
/// parses it. Tools and a structured reply can be combined in one turn.
///
/// The output limit goes out as `max_tokens`, which every compatible server reads. OpenAI's
/// newer models refuse it and ask for `max_completion_tokens`; on that refusal the request is
/// sent again with the newer field, which this client then keeps using.
pub struct OpenAiChat {
    http: HttpClient,
    url: String,
    authorization: Option<HeaderValue>,
    /// Whether the server asked for `max_completion_tokens` instead of `max_tokens`.
    completion_tokens_field: AtomicBool,
}

impl fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry credentials; the client's label shows it without them.
        f.debug_struct("OpenAiChat")
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

impl OpenAiChat {
    /// OpenAI's own endpoint, used when `OPENAI_BASE_URL` is not set.
    pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

    /// A client for the API at `base_url` (e.g. `http://127.0.0.1:8000/v1` for a local vLLM),
    /// sending `api_key` as a bearer token when there is one (local servers usually need none).
    pub fn new(
        base_url: impl Into<String>,
        api_key: Option<String>,
        retry: RetryPolicy,
    ) -> Result<Self, BackendError> {
        let base_url = base_url.into();
        let base_url = base_url.trim_end_matches('/');
        let http = HttpClient::new(
            "OpenAI-compatible API",
            base_url,
            api_key.clone(),
            retry,
            error_message,
        )?;
        let authorization = api_key
            .filter(|key| !key.is_empty())
            .map(|key| http.secret_header(format!("Bearer {key}")))
            .transpose()?;
        Ok(Self {
            url: format!("{base_url}/chat/completions"),
            http,
            authorization,
            completion_tokens_field: AtomicBool::new(false),
        })
    }

    /// A client configured from the environment: `OPENAI_BASE_URL` (default
    /// [`Self::DEFAULT_BASE_URL`]) and `OPENAI_API_KEY` (optional).
    pub fn from_env(retry: RetryPolicy) -> Result<Self, BackendError> {
        Self::from_env_at(None, retry)
    }

    /// Like [`Self::from_env`], at `base_url` when given (the key still comes from
    /// `OPENAI_API_KEY`).
    pub fn from_env_at(base_url: Option<&str>, retry: RetryPolicy) -> Result<Self, BackendError> {
        let base_url = base_url
            .map(str::to_owned)
            .or_else(|| env_var("OPENAI_BASE_URL"))
            .unwrap_or_else(|| Self::DEFAULT_BASE_URL.to_owned());
        Self::new(base_url, env_var("OPENAI_API_KEY"), retry)
    }

    fn parse(&self, reply: CompletionReply) -> Result<ChatResponse, BackendError> {
        let Some(choice) = reply.choices.into_iter().next() else {
            return Err(self.http.bad_reply("the reply has no choices"));
        };
        let usage = reply.usage.unwrap_or_default();
        let usage = Usage {
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
            estimated_tokens: 0,
        };
        if choice.finish_reason.as_deref() == Some("length") {
            // Cut off: a tool call's arguments may be half written, so only the text is kept.
            return Ok(ChatResponse {
                text: choice.message.content.unwrap_or_default(),
                usage,
                truncated: true,
                ..ChatResponse::default()
            });
        }
        let tool_calls = choice
            .message
            .tool_calls
            .into_iter()
            .flatten()
            .map(|call| {
                // The model wrote broken JSON; sampling again may well produce valid JSON.
                let arguments = parse_arguments(call.function.arguments)
                    .map_err(|e| self.http.malformed_arguments(&call.function.name, e))?;
                Ok(ToolCall {
                    id: call.id,
                    name: call.function.name,
                    arguments,
                })
            })
            .collect::<Result<_, BackendError>>()?;
        Ok(ChatResponse {
            text: choice.message.content.unwrap_or_default(),
            tool_calls,
            usage,
            ..ChatResponse::default()
        })
    }
}

#[async_trait::async_trait]
impl ChatModel for OpenAiChat {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        let mut headers = HeaderMap::new();
        if let Some(authorization) = &self.authorization {
            headers.insert(AUTHORIZATION, authorization.clone());
        }
        if let Some(key) = &request.idempotency_key {
            headers.insert(IDEMPOTENCY_KEY, idempotency_header(&self.http, key)?);
        }
        let newer = self.completion_tokens_field.load(Ordering::Relaxed);
        let posted = match self
            .http
            .post(&self.url, headers.clone(), &request_body(request, newer))
            .await
        {
            Err(error) if !newer && asks_for_completion_tokens(&error) => {
                self.completion_tokens_field.store(true, Ordering::Relaxed);
                // A different body under the same key could get the refusal back from a
                // de-duplicating gateway.
                if let Some(key) = &request.idempotency_key {
                    let key = format!("{key}/max_completion_tokens");
                    headers.insert(IDEMPOTENCY_KEY, idempotency_header(&self.http, &key)?);
                }
                let mut posted = self
                    .http
                    .post(&self.url, headers, &request_body(request, true))
                    .await?;
                // The refused request's own retries count (a 503 before the refusal); the
                // refusal is no failure worth retrying, and sending the other field is no retry.
                posted.retries = posted.retries.saturating_add(error.retries());
                posted
            }
            other => other?,
        };
        let response = self.parse(posted.reply)?;
        Ok(ChatResponse {
            retries: posted.retries,
            ..response
        })
    }

    fn combines_tools_and_structure(&self) -> bool {
        true
    }
}

/// Whether the server refused the `max_tokens` parameter as unsupported, as OpenAI's newer
/// models do (a 400 with `code: unsupported_parameter`, `param: max_tokens`; the message names
/// `max_completion_tokens`, but only the structured error is read).
fn asks_for_completion_tokens(error: &BackendError) -> bool {
    matches!(
        error.kind(),
        BackendErrorKind::Http {
            status: 400,
            provider_code: Some(code),
            param: Some(param),
            ..
        } if code == "unsupported_parameter" && param == "max_tokens"
    )
}

/// The Chat Completions request for `request`, its output limit as `max_completion_tokens`
/// when `newer`, else as `max_tokens`.
fn request_body(request: &ChatRequest, newer: bool) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    messages.extend(request.messages.iter().map(message));
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages));
    let limit = if newer {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    body.insert(limit.into(), json!(request.max_tokens));
    if !request.tools.is_empty() {
        body.insert(
            "tools".into(),
            request.tools.iter().map(tool).collect::<Vec<_>>().into(),
        );
    }
    if let Some(structured) = &request.structured {
        body.insert(
            "response_format".into(),
            json!({
                "type": "json_schema",
                // Not strict: strict mode rejects common schemas (optional properties,
                // open objects), and the agent loop validates and repairs the reply anyway.
                "json_schema": {"name": structured.name, "schema": structured.schema, "strict": false},
            }),
        );
    }
    Value::Object(body)
}

fn message(message: &Message) -> Value {
    match message {
        Message::User { text } => json!({"role": "user", "content": text}),
        Message::Assistant { text, tool_calls } if tool_calls.is_empty() => {
            json!({"role": "assistant", "content": text})
        }
        Message::Assistant { text, tool_calls } => json!({
            "role": "assistant",
            // OpenAI wants null, not "", for a turn that only called tools.
            "content": if text.is_empty() { Value::Null } else { json!(text) },
            "tool_calls": tool_calls.iter().map(|call| json!({
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments.to_string()},
            })).collect::<Vec<_>>(),
        }),
        Message::Tool {
            call_id,
            content,
            is_error,
        } => json!({
            "role": "tool",
            "tool_call_id": call_id,
            // The protocol has no error flag, so the model learns of a failure from the text.
            "content": if *is_error { format!("Error: {content}") } else { content.clone() },
        }),
    }
}

fn tool(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    })
}

/// Tool arguments as the model wrote them: JSON text (empty for no arguments); a few
/// compatible servers send the object itself, which is taken as is.
fn parse_arguments(arguments: Value) -> Result<Value, serde_json::Error> {
    match arguments {
        Value::Null => Ok(json!({})),
        Value::String(text) if text.trim().is_empty() => Ok(json!({})),
        Value::String(text) => serde_json::from_str(&text),
        other => Ok(other),
    }
}

/// The provider's error in an error body: `{"error": {"message", "type", "param", "code"}}`
/// (OpenAI, llama.cpp), `{"error": "…"}` (Ollama) or `{"message": "…"}` (vLLM). The code is
/// OpenAI's `code`, else its `type`.
fn error_message(body: &Value) -> Option<ProviderError> {
    let error = body.get("error");
    let message = error
        .and_then(|error| error.get("message"))
        .or(error)
        .or_else(|| body.get("message"))
        .and_then(Value::as_str)?
        .to_owned();
    let field = |name: &str| {
        error
            .and_then(|error| error.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Some(ProviderError {
        message,
        code: field("code").or_else(|| field("type")),
        param: field("param"),
    })
}

#[derive(Deserialize)]
struct CompletionReply {
    choices: Vec<Choice>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ReplyMessage,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ReplyMessage {
    content: Option<String>,
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    id: String,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}
