//! Leaf backends for flowbox: what answers a script's `agent(...)` call.
//!
//! A backend turns one [`LeafRequest`] into one [`LeafReply`]. The workflow runtime (the
//! `flowbox` crate) owns caps, budgets and concurrency and calls [`LeafBackend::call`] once per
//! leaf; backends know nothing of wasmtime or of the guest. This crate ships two offline
//! backends: [`FakeBackend`] (deterministic, schema-valid replies) and [`ScriptedBackend`]
//! (replies, latency and failures from a JSON file, for demos, tests and benchmarks).

#![warn(missing_docs)]

mod agent;
mod chat;
mod delay;
mod error;
mod estimate;
mod fake;
mod fs_tools;
#[cfg(feature = "http")]
pub mod http;
pub mod schema;
mod scripted;
pub mod serde_secs;
mod tool;

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use agent::{
    AgentBackend, AgentConfig, AgentTemplate, CheckedBackend, Conversation, DEFAULT_BASE_PROMPT,
    LEAF_ADDENDUM, LeafCatalog, ModelProfile, render_prompt,
};
pub use chat::{ChatModel, ChatRequest, ChatResponse, Message, StructuredOutput, ToolCall};
pub use error::{BackendError, BackendErrorKind, TransportCause};
pub use estimate::{APPROXIMATE_BYTES_PER_TOKEN, DEFAULT_OUTPUT_LIMIT, LeafEstimate, Tokenizer};
pub use fake::{FakeBackend, FakeChat};
pub use fs_tools::{DEFAULT_MAX_FILE_BYTES, MAX_DIR_ENTRIES, ReadRoots};
pub use scripted::{ScriptedBackend, ScriptedChat, ScriptedConfigError};
pub use tool::{Tool, ToolError, ToolSet, ToolSpec};

/// One leaf agent call, as the runtime hands it to a backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeafRequest {
    /// The run's thread id.
    pub thread_id: String,
    /// The call's number within its run (the guest's handle).
    pub call_id: u64,
    /// A key that is the same every time this call is made again (on resume, say): backends
    /// that talk to a provider pass it along so a retried call can be recognised.
    pub idempotency_key: String,
    /// The prompt: a JSON string for a text prompt, any JSON value otherwise.
    pub prompt: Value,
    /// A JSON Schema the reply must satisfy; `None` asks for a plain-text reply.
    pub schema: Option<Value>,
    /// A leaf template registered by the host.
    pub agent_type: Option<String>,
    /// A short human label.
    pub label: Option<String>,
    /// An extra system instruction for this call.
    pub instruction: Option<String>,
    /// A model profile name.
    pub model: Option<String>,
    /// The host tools the leaf may use: `None` = all, empty = none.
    pub tools: Option<Vec<String>>,
    /// Calls with the same instance id share one conversation history within a run.
    pub instance_id: Option<String>,
}

impl LeafRequest {
    /// A request for `prompt` with every option unset.
    pub fn new(call_id: u64, prompt: Value) -> Self {
        Self {
            thread_id: String::new(),
            call_id,
            idempotency_key: format!("call-{call_id}"),
            prompt,
            schema: None,
            agent_type: None,
            label: None,
            instruction: None,
            model: None,
            tools: None,
            instance_id: None,
        }
    }

    /// The prompt as text: a string prompt as is, any other value as compact JSON.
    pub fn prompt_text(&self) -> String {
        match &self.prompt {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        }
    }
}

/// Tokens one call used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens read (prompt, history, tool results).
    #[serde(alias = "input")]
    pub input_tokens: u64,
    /// Tokens written.
    #[serde(alias = "output")]
    pub output_tokens: u64,
    /// Of input and output together, how many are estimates (one token per
    /// [`APPROXIMATE_BYTES_PER_TOKEN`] bytes) rather than counts the model reported: 0 when
    /// everything was reported. Left out of the JSON when 0, so records from before it read
    /// and write back as they were.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub estimated_tokens: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl Usage {
    /// Counts the model reported.
    pub fn reported(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            estimated_tokens: 0,
        }
    }

    /// Counts estimated from the text's length, as no count was reported.
    pub fn estimated(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            estimated_tokens: input_tokens.saturating_add(output_tokens),
        }
    }

    /// Input and output tokens together, which is what budgets count.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Both counts added, saturating: a provider reporting absurd numbers must not wrap them.
    pub(crate) fn saturating_add(self, other: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            estimated_tokens: self.estimated_tokens.saturating_add(other.estimated_tokens),
        }
    }
}

/// A leaf's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeafReply {
    /// A JSON string for a text reply; the structured value when the request had a schema.
    pub value: Value,
    /// Tokens the call used.
    pub usage: Usage,
}

/// What a leaf reports while it works, besides its reply: its model turns and the host tools
/// it calls. Every method has an empty default.
pub trait LeafObserver: Send + Sync + fmt::Debug {
    /// The leaf called host tool `name`.
    fn tool_called(&self, name: &str) {
        let _ = name;
    }

    /// Host tool `name` returned after `duration`; `error` says why when it failed.
    fn tool_finished(&self, name: &str, duration: std::time::Duration, error: Option<&str>) {
        let _ = (name, duration, error);
    }

    /// One model turn of the leaf's loop ended after `duration`, having used `usage` and sent
    /// its request `retries` more times after failures worth retrying; `error` says why when it
    /// failed.
    fn model_turn(
        &self,
        model: &str,
        usage: Usage,
        duration: std::time::Duration,
        retries: u32,
        error: Option<&str>,
    ) {
        let _ = (model, usage, duration, retries, error);
    }
}

/// Something that answers leaf agent calls.
///
/// Implementations must be cheap to call concurrently: the runtime calls `call` from many
/// tasks at once, bounded only by its concurrency limit.
#[async_trait::async_trait]
pub trait LeafBackend: Send + Sync + fmt::Debug {
    /// Answers one leaf call.
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError>;

    /// Answers one leaf call, telling `observer` about its tool calls as they happen. The
    /// default has nothing to tell and is [`Self::call`].
    async fn call_observed(
        &self,
        request: &LeafRequest,
        observer: &dyn LeafObserver,
    ) -> Result<LeafReply, BackendError> {
        let _ = observer;
        self.call(request).await
    }

    /// Refuses a request before the leaf starts (an unknown model profile, tool or agent
    /// type: [`BackendErrorKind::UnknownProfile`] and its neighbours); the script sees the
    /// message as a `ValueError`. Accepts everything by default.
    fn check(&self, request: &LeafRequest) -> Result<(), BackendError> {
        let _ = request;
        Ok(())
    }

    /// What `request` will run on and may cost, before it starts: its profile and provider
    /// model, its input tokens and its output ceiling. The runtime's plans and dollar budgets
    /// price it. The default knows nothing of models: [`LeafEstimate::generic`].
    fn estimate(&self, request: &LeafRequest) -> LeafEstimate {
        LeafEstimate::generic(request)
    }

    /// The profiles, templates and tools an `agent(...)` call may choose among, which the
    /// root model's guidance lists. The default offers none — right for a backend that
    /// ignores those options; one that honours them should list them here, or the guidance
    /// tells the root model there are none.
    fn catalog(&self) -> LeafCatalog {
        LeafCatalog::default()
    }

    /// Tells the backend that a resumed run received `reply` for `request` from its journal,
    /// without a call (so a backend keeping conversations can rebuild them).
    fn replayed(&self, request: &LeafRequest, reply: &LeafReply) {
        let _ = (request, reply);
    }

    /// Tells the backend that the run `thread_id` ended, so it can drop what it kept for it.
    fn run_finished(&self, thread_id: &str) {
        let _ = thread_id;
    }

    /// Tells the backend that the guest of run `thread_id` is blocked: it waits for a call to
    /// finish, none has, and every call it could start has started. `waiting` says what is
    /// in flight. It stays blocked until one of those calls returns, so a backend whose leaves
    /// wait on something only its caller can give (an MCP client's answers, one round trip
    /// per batch) learns here that the run can go no further without it, at the same point
    /// of the script every time. Ignored by default.
    fn run_waiting(&self, thread_id: &str, waiting: &Waiting) {
        let _ = (thread_id, waiting);
    }
}

/// What a blocked run has in flight, for [`LeafBackend::run_waiting`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiting {
    /// The leaf calls started and not delivered, by [`LeafRequest::call_id`]: each waits for
    /// one of the run's concurrency slots, is in the backend's `call`, or has just returned
    /// (its completion not received yet).
    pub leaves: Vec<u64>,
    /// Host tool calls started and not delivered.
    pub tools: usize,
    /// The run's concurrency slots: at most this many calls are in `call` at once.
    pub slots: usize,
}

impl Waiting {
    /// A blocked run with these calls in flight.
    pub fn new(leaves: Vec<u64>, tools: usize, slots: usize) -> Self {
        Self {
            leaves,
            tools,
            slots,
        }
    }
}

/// The first `max_chars` characters of `text`, followed by `…` when it was cut: a bounded
/// quote of a prompt or reply for error messages, logs and events.
pub fn preview(text: &str, max_chars: usize) -> String {
    let mut chars = text.chars();
    let mut out: String = chars.by_ref().take(max_chars).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// A rough token count for offline backends: about four bytes of text per token.
pub(crate) fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4).max(1)
}

/// FNV-1a, a small stable hash for deterministic offline replies (the same on every platform
/// and Rust version, unlike `DefaultHasher`).
pub(crate) fn stable_hash(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain(std::iter::once(0xff)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_cuts_at_characters_and_marks_the_cut() {
        assert_eq!(preview("héllo", 5), "héllo");
        assert_eq!(preview("héllo wörld", 5), "héllo…");
        assert_eq!(preview("", 0), "");
        assert_eq!(preview("x", 0), "…");
    }
}
