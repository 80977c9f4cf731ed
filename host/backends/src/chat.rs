//! One turn with a chat model, independent of the provider.
//!
//! The leaf agent loop (`agent`) and the orchestrator's root agent speak these types; each
//! provider (OpenAI-compatible Chat Completions, Anthropic Messages, a scripted file) turns a
//! [`ChatRequest`] into one HTTP call or lookup and its answer into a [`ChatResponse`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::ToolSpec;
use crate::{BackendError, Usage};

/// A message of the conversation, after the system prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case", try_from = "WireMessage")]
pub enum Message {
    /// What the user (or the script, for a leaf) says.
    User {
        /// The text.
        text: String,
    },
    /// What the model said: text, tool calls, or both.
    Assistant {
        /// The text part (may be empty when the model only called tools).
        text: String,
        /// The tools it asked to call.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answering the assistant message before it.
    Tool {
        /// The id of the call this answers.
        call_id: String,
        /// The tool's output (JSON text, or an error message).
        content: String,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
    },
}

/// A [`Message`] as read: one plain struct rather than serde's buffering of a tagged enum, which
/// cannot hold integers past 64 bits, so tool arguments keep their exact numbers. The JSON shape
/// is the tagged enum's.
#[derive(Deserialize)]
struct WireMessage {
    role: Role,
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
    call_id: Option<String>,
    content: Option<String>,
    #[serde(default)]
    is_error: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Role {
    User,
    Assistant,
    Tool,
}

impl TryFrom<WireMessage> for Message {
    type Error = String;

    fn try_from(wire: WireMessage) -> Result<Self, String> {
        let missing = |field: &str| format!("missing field `{field}`");
        Ok(match wire.role {
            Role::User => Self::User {
                text: wire.text.ok_or_else(|| missing("text"))?,
            },
            Role::Assistant => Self::Assistant {
                text: wire.text.ok_or_else(|| missing("text"))?,
                tool_calls: wire.tool_calls,
            },
            Role::Tool => Self::Tool {
                call_id: wire.call_id.ok_or_else(|| missing("call_id"))?,
                content: wire.content.ok_or_else(|| missing("content"))?,
                is_error: wire.is_error,
            },
        })
    }
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call, echoed in the [`Message::Tool`] that answers it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments the model chose.
    pub arguments: Value,
}

/// Ask for a reply that is one JSON value matching `schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructuredOutput {
    /// A name for the schema (providers require one).
    pub name: String,
    /// The JSON Schema.
    pub schema: Value,
}

/// One request to a chat model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The provider's model id.
    pub model: String,
    /// The system prompt.
    pub system: String,
    /// The conversation so far; the last message is the one to answer.
    pub messages: Vec<Message>,
    /// Tools the model may call this turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// When set, the reply must be JSON matching this schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<StructuredOutput>,
    /// The most tokens the reply may use.
    pub max_tokens: u32,
    /// A key that stays the same when this call is made again (on retry or resume), sent to
    /// providers that de-duplicate requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// A model's answer to one [`ChatRequest`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The text of the reply (empty when the model only called tools).
    pub text: String,
    /// Tools the model asked to call; empty for a final answer.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// The structured value, when the request asked for one and the provider returned it as a
    /// value (Anthropic's forced tool); providers that return JSON text leave this `None` and the
    /// caller parses `text`.
    #[serde(default)]
    pub structured: Option<Value>,
    /// Tokens this turn used.
    #[serde(default)]
    pub usage: Usage,
    /// The model stopped because it reached the request's `max_tokens`: the reply is cut
    /// off (OpenAI's `finish_reason: "length"`, Anthropic's `stop_reason: "max_tokens"`).
    #[serde(default)]
    pub truncated: bool,
    /// How many times the request was sent again before this answer came, after failures the
    /// provider or the network could recover from (a 429, a 503, a dropped connection).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

/// A chat model behind some provider.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync + std::fmt::Debug {
    /// Sends one turn and returns the model's answer.
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError>;

    /// Whether one turn can offer tools and demand a structured reply at the same time. When
    /// it cannot, the agent loop runs the tool phase first and then a tool-free structured turn.
    fn combines_tools_and_structure(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbers past `u64` and `f64` precision, a subnormal, a negative zero, keys out of order.
    const ARGUMENTS: &str = r#"{"z":1180591620717411303424,"r":0.21599615170364495,"neg":-36893488147419103232,"tiny":5e-324,"zero":-0.0}"#;

    #[test]
    fn messages_keep_tool_arguments_exactly() {
        // `Message` is tagged by its role, so serde buffers it before it picks the variant.
        let text = format!(
            r#"{{"role":"assistant","text":"","tool_calls":[{{"id":"c1","name":"t","arguments":{ARGUMENTS}}}]}}"#
        );
        let message: Message = serde_json::from_str(&text).unwrap();
        let Message::Assistant { tool_calls, .. } = &message else {
            panic!("{message:?}");
        };
        assert_eq!(tool_calls[0].arguments.to_string(), ARGUMENTS);
        assert_eq!(serde_json::to_string(&message).unwrap(), text);
        let value = serde_json::to_value(&message).unwrap();
        assert_eq!(serde_json::from_value::<Message>(value).unwrap(), message);
    }

    #[test]
    fn every_role_reads_as_it_is_written() {
        for message in [
            Message::User { text: "u".into() },
            Message::Assistant {
                text: "a".into(),
                tool_calls: Vec::new(),
            },
            Message::Tool {
                call_id: "c".into(),
                content: "{}".into(),
                is_error: true,
            },
        ] {
            let text = serde_json::to_string(&message).unwrap();
            assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), message);
        }
        let tool: Message =
            serde_json::from_str(r#"{"role":"tool","call_id":"c","content":"x"}"#).unwrap();
        assert!(matches!(
            tool,
            Message::Tool {
                is_error: false,
                ..
            }
        ));
        for (bad, expected) in [
            (
                r#"{"role":"tool","call_id":"c"}"#,
                "missing field `content`",
            ),
            (r#"{"role":"user"}"#, "missing field `text`"),
            (
                r#"{"role":"system","text":"s"}"#,
                "unknown variant `system`",
            ),
            (r#"{"text":"t"}"#, "missing field `role`"),
        ] {
            let err = serde_json::from_str::<Message>(bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{bad}: {err}");
        }
    }
}
