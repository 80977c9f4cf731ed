//! What crosses Restate between the CLI, the workflow service and the leaf service, as JSON.
//! Script args, replies and results are `serde_json` values, which keep every number's text
//! and every object's key order, so nothing is altered on the way.

use flowbox::{BackendError, LeafReply, LeafRequest, Limits, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The name of the workflow service, keyed by thread id.
pub const WORKFLOW_SERVICE: &str = "FlowboxWorkflow";
/// The name of the leaf service.
pub const LEAF_SERVICE: &str = "FlowboxLeaf";

/// A run submitted to the workflow service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowInput {
    /// The script's source.
    pub script: String,
    /// The script's `args`.
    pub args: Value,
    /// Limits for the run instead of the worker's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Whether the in-guest script guard is on.
    #[serde(default = "guard_on")]
    pub guard: bool,
}

fn guard_on() -> bool {
    true
}

/// The thread's start as Restate's journal recorded it on the first attempt: every later
/// attempt starts its clocks and counts its deadline from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartRecord {
    /// The start, in nanoseconds since the Unix epoch.
    pub start_unix_nanos: u64,
    /// SHA-256 (hex) of the script the thread started with.
    pub script_sha256: String,
    /// SHA-256 (hex) of its args' JSON text.
    pub args_sha256: String,
}

/// One call for the leaf service: a leaf agent or a code-callable host tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LeafCall {
    /// A leaf agent call.
    Agent {
        /// The request, as the backend receives it.
        request: Box<LeafRequest>,
    },
    /// A host tool.
    Tool {
        /// The tool's name.
        name: String,
        /// Its arguments, checked against its schema by the workflow.
        arguments: Value,
    },
}

/// What the leaf service answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum LeafResult {
    /// The reply.
    Ok {
        /// The reply's value (a JSON string for text).
        value: Value,
        /// Tokens spent.
        usage: Usage,
        /// How long the call took, in milliseconds.
        duration_ms: u64,
    },
    /// The call failed for good (after the leaf's own bounded retries).
    Failed {
        /// What went wrong, with its causes.
        message: String,
        /// Whether the backend called the failure retryable.
        retryable: bool,
        /// Tokens spent before it failed.
        usage: Usage,
        /// How long the call took, in milliseconds.
        duration_ms: u64,
    },
}

impl LeafResult {
    /// The result as the runtime's calls take it, and the duration.
    pub fn into_reply(self) -> (Result<LeafReply, BackendError>, u64) {
        match self {
            Self::Ok {
                value,
                usage,
                duration_ms,
            } => (Ok(LeafReply { value, usage }), duration_ms),
            Self::Failed {
                message,
                retryable,
                usage,
                duration_ms,
            } => (
                Err(BackendError::failed(message, retryable).with_usage(usage)),
                duration_ms,
            ),
        }
    }
}
