//! A journaled call: what the script asked for (an agent or a tool request) and how it ended,
//! as the guest received it. The runtime writes these, replay and `flowbox show` read them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which kind of call a journal entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// A leaf agent.
    Agent,
    /// A host tool called by the script.
    Tool,
}

impl CallKind {
    /// The name journals store it by.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Tool => "tool",
        }
    }

    /// The kind of that name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "agent" => Some(Self::Agent),
            "tool" => Some(Self::Tool),
            _ => None,
        }
    }
}

/// What a script asked for, as the journal keeps it: everything the script chose, nothing the
/// runtime assigned (the handle, the idempotency key, the tree position). Written as one JSON
/// object tagged by its `kind` (`"agent"` or `"tool"`), which is also the text a request's
/// fingerprint is taken over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallRequest {
    /// A leaf agent, `agent(...)`.
    Agent(AgentRequest),
    /// A host tool, `call_tool(...)`.
    Tool(ToolRequest),
}

impl CallRequest {
    /// Agent or tool.
    pub fn kind(&self) -> CallKind {
        match self {
            Self::Agent(_) => CallKind::Agent,
            Self::Tool(_) => CallKind::Tool,
        }
    }
}

/// The options of one `agent(...)` call. Every field is written, unset ones as `null`: the
/// fingerprints of journals already written cover exactly these keys.
///
/// Only `Value`s hold numbers here, which keep their exact text even through the buffering a
/// tagged enum does (`serde_json`'s `arbitrary_precision`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRequest {
    /// The prompt: a JSON string for a text prompt, any JSON value otherwise.
    pub prompt: Value,
    /// The JSON Schema the reply must satisfy, if any.
    pub schema: Option<Value>,
    /// The leaf template asked for.
    pub agent_type: Option<String>,
    /// The call's label.
    pub label: Option<String>,
    /// An extra system instruction.
    pub instruction: Option<String>,
    /// A model profile name.
    pub model: Option<String>,
    /// The host tools the leaf may use: `None` = all, empty = none.
    pub tools: Option<Vec<String>>,
    /// The conversation history the call shares.
    pub instance_id: Option<String>,
}

/// One `call_tool(name, **arguments)` call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRequest {
    /// The tool's name.
    pub name: String,
    /// Its arguments, as the script gave them.
    pub arguments: Value,
}

/// Why a call failed, as the script saw it. Journals store it by its kebab-case name (the
/// WIT `error-kind`'s); a name this build does not know is a damaged journal. Exhaustive on
/// purpose: a new kind must be converted wherever kinds are, or nothing compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallErrorKind {
    /// The leaf agent failed (`AgentError`).
    AgentFailed,
    /// The token budget was spent before the leaf could start (`BudgetExceeded`).
    BudgetExceeded,
    /// The run already started as many leaves as it may (`AgentCapExceeded`).
    AgentCapExceeded,
    /// A host tool failed or its arguments were rejected (`ToolError`).
    ToolFailed,
    /// The request itself is malformed (`ValueError`).
    InvalidRequest,
    /// The run already made as many tool calls as it may (`ToolCapExceeded`).
    ToolCapExceeded,
}

impl std::fmt::Display for CallErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::AgentFailed => "agent-failed",
            Self::BudgetExceeded => "budget-exceeded",
            Self::AgentCapExceeded => "agent-cap-exceeded",
            Self::ToolFailed => "tool-failed",
            Self::InvalidRequest => "invalid-request",
            Self::ToolCapExceeded => "tool-cap-exceeded",
        })
    }
}

/// How a journaled call ended, exactly as the guest received it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum EntryOutcome {
    /// The reply, as JSON text.
    Ok {
        /// The reply's JSON text.
        value: String,
    },
    /// The failure the script saw.
    Err {
        /// Why it failed.
        kind: CallErrorKind,
        /// The message.
        message: String,
        /// Whether the script was told the call may succeed if made again (journals written
        /// before this was recorded read as `false`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        retryable: bool,
        /// The backend's word for the failure, as the script saw it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<String>,
    },
}

impl EntryOutcome {
    /// Why this outcome cannot be handed to the guest as the call's reply: its text does not
    /// parse as JSON, or it holds a number no JSON reader can keep ([`unrepresentable_number`]).
    /// `None` for a failure, and for a reply that can.
    pub fn reply_problem(&self) -> Option<String> {
        let Self::Ok { value } = self else {
            return None;
        };
        match serde_json::from_str::<Value>(value) {
            Err(error) => Some(format!("its reply is not JSON: {error}")),
            Ok(value) => unrepresentable_number(&value)
                .map(|number| format!("its reply holds the number {number}, beyond any float")),
        }
    }
}

/// The first number in `value` that a JSON reader cannot hold: one with a fraction or an
/// exponent beyond the range of a 64-bit float (`1e999`), which Python would read as infinity
/// — a value JSON does not have. Integers of any size are fine (Python keeps them exactly).
pub fn unrepresentable_number(value: &Value) -> Option<&serde_json::Number> {
    match value {
        Value::Number(number) => {
            // The number as its text (serde_json keeps it with `arbitrary_precision`): a check
            // on every leaf reply allocates nothing.
            let text = number.as_str();
            let fractional = text.contains(['.', 'e', 'E']);
            (fractional && !text.parse::<f64>().is_ok_and(f64::is_finite)).then_some(number)
        }
        Value::Array(items) => items.iter().find_map(unrepresentable_number),
        Value::Object(fields) => fields.values().find_map(unrepresentable_number),
        Value::Null | Value::Bool(_) | Value::String(_) => None,
    }
}

/// One completed call, in the order the guest received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Position among the thread's completions, from 0, without gaps.
    pub seq: u64,
    /// Which `await-next` delivered it, from 0: completions delivered together share a batch.
    pub batch: u64,
    /// The call's handle in the run.
    pub handle: u64,
    /// SHA-256 of the request's canonical JSON, hex: what replay compares.
    pub fingerprint: String,
    /// The request, for `flowbox show` and leaf reuse.
    pub request: CallRequest,
    /// How it ended.
    pub outcome: EntryOutcome,
    /// Input tokens it used.
    pub input_tokens: u64,
    /// Output tokens it used.
    pub output_tokens: u64,
    /// Of those, how many are estimates rather than counts the model reported (journals from
    /// before format 5 record none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub estimated_tokens: u64,
    /// How long the backend took, in milliseconds.
    pub duration_ms: u64,
}

impl Entry {
    /// Agent or tool: the kind of its request.
    pub fn kind(&self) -> CallKind {
        self.request.kind()
    }
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}
