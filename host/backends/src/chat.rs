//! One turn with a chat model, independent of the provider.
//!
//! The leaf agent loop (`agent`) and the orchestrator's root agent speak these types; each
//! provider (OpenAI-compatible Chat Completions, Anthropic Messages, a scripted file) turns a
//! [`ChatRequest`] into one HTTP call or lookup and its answer into a [`ChatResponse`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{BackendError, Usage};

/// A message of the conversation, after the system prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
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

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// A JSON Schema of its arguments (an object schema).
    pub parameters: Value,
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
