//! The journal's recent leaf replies, as plans learn from them how long a reply of a kind of
//! leaf tends to be: a bounded sample, newest thread first, never whole threads.

use serde_json::Value;

use crate::{CallRequest, Entry, EntryOutcome};

/// One leaf reply a thread received (a successful agent call), with what the script asked for
/// that says what kind of leaf it was.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplySample {
    /// The model profile the request named (`model=`, or the fan-out profile); `None` for the
    /// backend's default model or the template's.
    pub model: Option<String>,
    /// The leaf template it asked for.
    pub agent_type: Option<String>,
    /// Its label.
    pub label: Option<String>,
    /// The JSON Schema of its reply; `None` for a text reply.
    pub schema: Option<Value>,
    /// The output tokens the leaf used, as journaled (every turn of it).
    pub output_tokens: u64,
}

impl ReplySample {
    /// The sample of a journaled call: `None` for a tool call or a failed leaf.
    pub fn of(entry: &Entry) -> Option<Self> {
        let (CallRequest::Agent(request), EntryOutcome::Ok { .. }) =
            (&entry.request, &entry.outcome)
        else {
            return None;
        };
        Some(Self {
            model: request.model.clone(),
            agent_type: request.agent_type.clone(),
            label: request.label.clone(),
            schema: request.schema.clone(),
            output_tokens: entry.output_tokens,
        })
    }
}
