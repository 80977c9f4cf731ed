//! Anthropic's Messages API: `POST {base}/v1/messages`.
//!
//! Structured output has no native form here, so it is a forced tool: the schema becomes a
//! tool's `input_schema`, `tool_choice` names it, and the tool's `input` is the reply.

use std::fmt;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::client::{HttpClient, ProviderError};
use super::{IDEMPOTENCY_KEY, RetryPolicy, env_var, idempotency_header};
use crate::{
    BackendError, BackendErrorKind, ChatModel, ChatRequest, ChatResponse, Message,
    StructuredOutput, ToolCall, Usage,
};

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const VERSION: HeaderName = HeaderName::from_static("anthropic-version");

/// A tool's input is always an object, so a schema for anything else (an array, a string) is
/// asked for as this one property of an object and taken out of it again.
const WRAPPED: &str = "value";

/// A chat model behind Anthropic's Messages API.
///
/// A structured reply is a forced tool call whose input comes back as
/// [`ChatResponse::structured`]. Forcing that tool rules out every other tool in the same turn,
/// so [`combines_tools_and_structure`](ChatModel::combines_tools_and_structure) is false.
pub struct AnthropicChat {
    http: HttpClient,
    url: String,
    api_key: HeaderValue,
    version: HeaderValue,
}

impl fmt::Debug for AnthropicChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry credentials; the client's label shows it without them.
        f.debug_struct("AnthropicChat")
            .field("version", &self.version)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

impl AnthropicChat {
    /// Anthropic's own endpoint, used when `ANTHROPIC_BASE_URL` is not set.
    pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
    /// The `anthropic-version` sent unless [`with_version`](Self::with_version) says otherwise:
    /// the version the request and reply shapes here are written against.
    pub const DEFAULT_VERSION: &str = "2023-06-01";

    /// A client for the API at `base_url` with `api_key`.
    pub fn new(
        base_url: impl Into<String>,
        api_key: String,
        retry: RetryPolicy,
    ) -> Result<Self, BackendError> {
        let base_url = base_url.into();
        let base_url = base_url.trim_end_matches('/');
        let http = HttpClient::new(
            "Anthropic API",
            base_url,
            Some(api_key.clone()),
            retry,
            error_message,
        )?;
        if api_key.is_empty() {
            return Err(http.setup_error("the API key is empty"));
        }
        Ok(Self {
            url: format!("{base_url}/v1/messages"),
            api_key: http.secret_header(api_key)?,
            version: HeaderValue::from_static(Self::DEFAULT_VERSION),
            http,
        })
    }

    /// A client configured from the environment: `ANTHROPIC_BASE_URL` (default
    /// [`Self::DEFAULT_BASE_URL`]) and `ANTHROPIC_API_KEY` (required).
    pub fn from_env(retry: RetryPolicy) -> Result<Self, BackendError> {
        Self::from_env_at(None, retry)
    }

    /// Like [`Self::from_env`], at `base_url` when given (the key still comes from
    /// `ANTHROPIC_API_KEY`).
    pub fn from_env_at(base_url: Option<&str>, retry: RetryPolicy) -> Result<Self, BackendError> {
        let api_key = env_var("ANTHROPIC_API_KEY").ok_or_else(|| {
            BackendError::new(BackendErrorKind::Setup {
                message: "ANTHROPIC_API_KEY is not set".into(),
            })
        })?;
        let base_url = base_url
            .map(str::to_owned)
            .or_else(|| env_var("ANTHROPIC_BASE_URL"))
            .unwrap_or_else(|| Self::DEFAULT_BASE_URL.to_owned());
        Self::new(base_url, api_key, retry)
    }

    /// Sends `version` as `anthropic-version` instead of [`Self::DEFAULT_VERSION`].
    pub fn with_version(mut self, version: &str) -> Result<Self, BackendError> {
        self.version = HeaderValue::from_str(version).map_err(|_| {
            self.http.setup_error(format!(
                "the API version {version:?} is not a valid HTTP header value"
            ))
        })?;
        Ok(self)
    }

    fn parse(
        &self,
        reply: MessagesReply,
        structured: Option<&StructuredOutput>,
    ) -> Result<ChatResponse, BackendError> {
        let mut response = ChatResponse {
            usage: Usage {
                // Cached prompt tokens are counted apart from `input_tokens`; all of them were
                // read.
                input_tokens: reply
                    .usage
                    .input_tokens
                    .saturating_add(reply.usage.cache_creation_input_tokens.unwrap_or(0))
                    .saturating_add(reply.usage.cache_read_input_tokens.unwrap_or(0)),
                output_tokens: reply.usage.output_tokens,
                estimated_tokens: 0,
            },
            ..ChatResponse::default()
        };
        if reply.stop_reason.as_deref() == Some("max_tokens") {
            // Cut off: a tool call's input may be incomplete, so only the text is kept.
            for block in reply.content {
                if let Block::Text { text } = block {
                    response.text.push_str(&text);
                }
            }
            response.truncated = true;
            return Ok(response);
        }
        for block in reply.content {
            match block {
                Block::Text { text } => response.text.push_str(&text),
                Block::ToolUse { name, input, .. }
                    if structured.is_some_and(|structured| structured.name == name) =>
                {
                    response.structured = Some(input);
                }
                Block::ToolUse { id, name, input } => response.tool_calls.push(ToolCall {
                    id,
                    name,
                    arguments: input,
                }),
                // Thinking and server-side tool blocks carry nothing the agent loop reads.
                Block::Other => {}
            }
        }
        if let Some(structured) = structured {
            let value = response.structured.take().ok_or_else(|| {
                self.http.bad_reply(format!(
                    "the reply has no `{}` tool call carrying the structured output \
                     (stop_reason: {})",
                    structured.name,
                    reply.stop_reason.as_deref().unwrap_or("none")
                ))
            })?;
            response.structured = Some(if is_object_schema(&structured.schema) {
                value
            } else {
                value.get(WRAPPED).cloned().ok_or_else(|| {
                    self.http.bad_reply(format!(
                        "the structured output has no `{WRAPPED}` property: {value}"
                    ))
                })?
            });
        }
        Ok(response)
    }
}

#[async_trait::async_trait]
impl ChatModel for AnthropicChat {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        let mut headers = HeaderMap::new();
        headers.insert(API_KEY, self.api_key.clone());
        headers.insert(VERSION, self.version.clone());
        if let Some(key) = &request.idempotency_key {
            headers.insert(IDEMPOTENCY_KEY, idempotency_header(&self.http, key)?);
        }
        let posted = self
            .http
            .post(&self.url, headers, &request_body(request))
            .await?;
        let response = self.parse(posted.reply, request.structured.as_ref())?;
        Ok(ChatResponse {
            retries: posted.retries,
            ..response
        })
    }

    fn combines_tools_and_structure(&self) -> bool {
        false
    }
}

/// The Messages request for `request`.
fn request_body(request: &ChatRequest) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(request.max_tokens));
    if !request.system.is_empty() {
        body.insert("system".into(), json!(request.system));
    }
    body.insert("messages".into(), messages(&request.messages).into());
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|tool| {
            json!({"name": tool.name, "description": tool.description, "input_schema": tool.parameters})
        })
        .collect();
    if let Some(structured) = &request.structured {
        let input_schema = if is_object_schema(&structured.schema) {
            structured.schema.clone()
        } else {
            json!({"type": "object", "properties": {WRAPPED: structured.schema}, "required": [WRAPPED]})
        };
        tools.push(json!({
            "name": structured.name,
            "description": "Give your final answer by calling this tool; its input is the answer.",
            "input_schema": input_schema,
        }));
        body.insert(
            "tool_choice".into(),
            json!({"type": "tool", "name": structured.name}),
        );
    }
    if !tools.is_empty() {
        body.insert("tools".into(), tools.into());
    }
    Value::Object(body)
}

/// The conversation as Messages-API turns. Tool results are content blocks of a user turn, and
/// the API wants every result for one assistant turn in the single user turn after it, so
/// consecutive messages of one role become one turn.
fn messages(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            Message::User { text } => ("user", vec![json!({"type": "text", "text": text})]),
            Message::Assistant { text, tool_calls } => {
                // The API rejects empty text blocks, which a turn that only called tools has.
                let text = (!text.is_empty()).then(|| json!({"type": "text", "text": text}));
                let calls = tool_calls.iter().map(|call| {
                    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments})
                });
                ("assistant", text.into_iter().chain(calls).collect())
            }
            Message::Tool {
                call_id,
                content,
                is_error,
            } => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": content,
                    "is_error": is_error,
                })],
            ),
        };
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// `{"type": "error", "error": {"type": "rate_limit_error", "message": "…"}}`: the message
/// as `rate_limit_error: …`, the type as the code.
fn error_message(body: &Value) -> Option<ProviderError> {
    let error = body.get("error")?;
    let message = error.get("message")?.as_str()?;
    let code = error.get("type").and_then(Value::as_str).map(str::to_owned);
    Some(ProviderError {
        message: match &code {
            Some(kind) => format!("{kind}: {message}"),
            None => message.to_owned(),
        },
        code,
        param: None,
    })
}

#[derive(Deserialize)]
struct MessagesReply {
    content: Vec<Block>,
    stop_reason: Option<String>,
    #[serde(default)]
    usage: WireUsage,
}

/// A content block, tagged by `"type"` on the wire. It is read as a map and taken apart by hand:
/// serde's derived tagged enums buffer their content first, and that buffer cannot hold integers
/// past 64 bits, which a tool's `input` must keep exactly.
#[derive(Deserialize)]
#[serde(try_from = "Map<String, Value>")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// Thinking and server-side tool blocks.
    Other,
}

impl TryFrom<Map<String, Value>> for Block {
    type Error = String;

    fn try_from(mut block: Map<String, Value>) -> Result<Self, String> {
        let mut text = |field: &str| match block.remove(field) {
            Some(Value::String(text)) => Ok(text),
            Some(_) => Err(format!("invalid type: `{field}` is not a string")),
            None => Err(format!("missing field `{field}`")),
        };
        Ok(match text("type")?.as_str() {
            "text" => Self::Text {
                text: text("text")?,
            },
            "tool_use" => Self::ToolUse {
                id: text("id")?,
                name: text("name")?,
                input: block.remove("input").ok_or("missing field `input`")?,
            },
            _ => Self::Other,
        })
    }
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_input_keeps_its_numbers_and_key_order() {
        let input = r#"{"z":1180591620717411303424,"r":0.21599615170364495,"neg":-36893488147419103232,"tiny":5e-324,"zero":-0.0}"#;
        let text = format!(
            r#"{{"content":[{{"type":"thinking","thinking":"hm","signature":"s"}},{{"type":"text","text":"ok"}},{{"type":"tool_use","id":"t1","name":"f","input":{input}}}],"stop_reason":"tool_use","usage":{{"input_tokens":3,"output_tokens":4}}}}"#
        );
        let reply: MessagesReply = serde_json::from_str(&text).unwrap();
        assert!(matches!(reply.content[0], Block::Other));
        assert!(matches!(&reply.content[1], Block::Text { text } if text == "ok"));
        let Block::ToolUse {
            id,
            name,
            input: value,
        } = &reply.content[2]
        else {
            panic!("not a tool use");
        };
        assert_eq!((id.as_str(), name.as_str()), ("t1", "f"));
        assert_eq!(value.to_string(), input);
        for (bad, expected) in [
            (r#"{"text":"no type"}"#, "missing field `type`"),
            (r#"{"type":"text"}"#, "missing field `text`"),
            (
                r#"{"type":"tool_use","id":"t","name":"f"}"#,
                "missing field `input`",
            ),
            (r#"{"type":"text","text":1}"#, "`text` is not a string"),
        ] {
            let err = serde_json::from_str::<Block>(bad)
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains(expected), "{bad}: {err}");
        }
    }
}
