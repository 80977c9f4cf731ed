//! A call as the journal keeps it: the request's identity, and its outcome as the guest
//! received it; and back, an entry as the completion or backend reply it stands for.

use std::time::Duration;

use flowbox_backends::{BackendError, LeafReply, LeafRequest, Usage};
use flowbox_store::{AgentRequest, CallRequest, Entry, EntryOutcome};

use crate::clock::millis;
use crate::journal::CallRecord;

/// What identifies an agent request in the journal: everything the script chose, nothing the
/// runtime assigned (the handle, the idempotency key, the tree position).
pub(crate) fn agent_request(leaf: &LeafRequest) -> CallRequest {
    CallRequest::Agent(AgentRequest {
        prompt: leaf.prompt.clone(),
        schema: leaf.schema.clone(),
        agent_type: leaf.agent_type.clone(),
        label: leaf.label.clone(),
        instruction: leaf.instruction.clone(),
        model: leaf.model.clone(),
        tools: leaf.tools.clone(),
        instance_id: leaf.instance_id.clone(),
    })
}

pub(crate) fn journal_entry(
    seq: u64,
    batch: u64,
    handle: u64,
    outcome: EntryOutcome,
    record: CallRecord,
    usage: Usage,
    duration: Duration,
) -> Entry {
    Entry {
        seq,
        batch,
        handle,
        fingerprint: record.fingerprint,
        request: record.request,
        outcome,
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        estimated_tokens: usage.estimated_tokens,
        duration_ms: millis(duration),
    }
}

pub(crate) fn entry_usage(entry: &Entry) -> Usage {
    Usage {
        input_tokens: entry.input_tokens,
        output_tokens: entry.output_tokens,
        estimated_tokens: entry.estimated_tokens,
    }
}

/// A cached entry as the backend result it stands in for.
pub(crate) fn entry_reply(entry: &Entry) -> Result<LeafReply, BackendError> {
    match &entry.outcome {
        EntryOutcome::Ok { value } => serde_json::from_str(value)
            .map(|value| LeafReply {
                value,
                usage: entry_usage(entry),
            })
            .map_err(|e| BackendError::terminal(format!("a cached result is not JSON: {e}"))),
        EntryOutcome::Err { message, .. } => Err(BackendError::terminal(message.clone())),
    }
}

#[cfg(test)]
mod tests {
    use flowbox_store::ToolRequest;
    use serde_json::json;

    use super::*;

    /// What a replay counts is what the live run counted, estimates included.
    #[test]
    fn an_entry_keeps_how_many_of_its_tokens_were_estimates() {
        let request = CallRequest::Tool(ToolRequest {
            name: "echo".into(),
            arguments: json!({}),
        });
        let usage = Usage {
            input_tokens: 12,
            output_tokens: 3,
            estimated_tokens: 12,
        };
        let entry = journal_entry(
            0,
            0,
            1,
            EntryOutcome::Ok { value: "1".into() },
            CallRecord::new(request),
            usage,
            Duration::ZERO,
        );
        assert_eq!(entry_usage(&entry), usage);
        assert_eq!(entry_reply(&entry).unwrap().usage, usage);
    }
}
