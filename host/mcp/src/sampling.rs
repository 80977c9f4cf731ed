//! `--leaves sampling`: every leaf answered by the client's own model, one
//! `sampling/createMessage` request per model turn (the 2025-11-25 revision). The leaves run
//! in the library's agent loop ([`flowbox::backends::AgentBackend`]) over [`SamplingChat`], so
//! a `schema=` leaf is validated and gets one repair turn exactly as on the HTTP providers,
//! and its replies are journaled and replayed like any leaf's. A sampling result has no field
//! for token usage, so a client may report it in the result's `_meta` as `usage:
//! {inputTokens, outputTokens}`; a count it does not report is estimated (one token per three
//! bytes) and counted in the run summary's `estimated_tokens`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use flowbox::backends::APPROXIMATE_BYTES_PER_TOKEN;
use flowbox::chat::{ChatModel, ChatRequest, ChatResponse, Message};
use flowbox::{BackendError, Usage};
use rmcp::model as wire;
use rmcp::{Peer, RoleServer};
use serde_json::Value;

/// The client each running thread's leaves go to, by thread id: the calls attached to the
/// thread, oldest first, the oldest being the one whose leaves they are.
#[derive(Debug, Default)]
pub(crate) struct Clients {
    attached: Mutex<HashMap<String, Vec<AttachedCall>>>,
    next: AtomicU64,
}

impl Clients {
    /// Sends the leaves of `thread_id` to `peer` until the returned guard is dropped; a thread
    /// another call already runs keeps its client while that call lasts. A call that ended
    /// may still hold its guard for a moment after its run let go of the thread; a resumed
    /// run's leaves then go to that call's client until it lets go, then to the resumer's.
    pub(crate) fn attach(self: &Arc<Self>, thread_id: &str, peer: Peer<RoleServer>) -> Attached {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut attached = self.attached.lock().unwrap_or_else(|p| p.into_inner());
        attached
            .entry(thread_id.to_owned())
            .or_default()
            .push((id, peer));
        Attached {
            clients: Arc::clone(self),
            thread_id: thread_id.to_owned(),
            id,
        }
    }

    fn get(&self, thread_id: &str) -> Option<Peer<RoleServer>> {
        let attached = self.attached.lock().unwrap_or_else(|p| p.into_inner());
        Some(attached.get(thread_id)?.first()?.1.clone())
    }
}

/// A call attached to a thread: its number and its client.
type AttachedCall = (u64, Peer<RoleServer>);

/// Detaches its call from its thread when dropped.
pub(crate) struct Attached {
    clients: Arc<Clients>,
    thread_id: String,
    id: u64,
}

impl Drop for Attached {
    fn drop(&mut self) {
        let mut attached = self
            .clients
            .attached
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(calls) = attached.get_mut(&self.thread_id) {
            calls.retain(|(id, _)| *id != self.id);
            if calls.is_empty() {
                attached.remove(&self.thread_id);
            }
        }
    }
}

/// A chat model that is the MCP client's: each turn a `sampling/createMessage` request to the
/// client running the leaf's thread.
#[derive(Debug)]
pub(crate) struct SamplingChat {
    clients: Arc<Clients>,
}

impl SamplingChat {
    pub(crate) fn new(clients: Arc<Clients>) -> Self {
        Self { clients }
    }
}

/// Why a leaf fails on a client that did not declare the sampling capability.
pub(crate) const NO_SAMPLING: &str = "the MCP client did not declare the sampling capability: \
`flowbox mcp --leaves sampling` answers every leaf with the client's model, through sampling \
requests, so it needs a client that offers sampling (or run the server with another --backend)";

/// The line a `schema=` leaf's system prompt ends with: a sampling request has no field for a
/// schema, so the model is asked in words (and its reply validated, with one repair turn).
pub(crate) const SCHEMA_REQUEST: &str =
    "Reply with only one JSON value that matches this JSON Schema (no prose, no code fences):";

#[flowbox::async_trait]
impl ChatModel for SamplingChat {
    #[expect(
        deprecated,
        reason = "sampling is how 2025-11-25 clients lend their model"
    )]
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        // A leaf's turns are keyed `{thread}/{call}/{turn}`; thread ids have no `/`.
        let thread_id = request
            .idempotency_key
            .as_deref()
            .and_then(|key| key.split('/').next())
            .unwrap_or_default();
        let peer = self.clients.get(thread_id).ok_or_else(|| {
            BackendError::terminal("no MCP client is connected to answer this run's leaves")
        })?;
        let sampling = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.sampling.is_some());
        if !sampling {
            return Err(BackendError::terminal(NO_SAMPLING));
        }
        let (params, sent_bytes) = sampling_request(request)?;
        let result = peer.create_message(params).await.map_err(|error| {
            BackendError::terminal(format!("the MCP client's sampling failed: {error}"))
        })?;
        Ok(chat_response(result, sent_bytes))
    }

    fn combines_tools_and_structure(&self) -> bool {
        false
    }
}

/// The sampling request for one model turn of a leaf, and the bytes it sends (for the
/// token estimate).
#[expect(deprecated, reason = "sampling is how MCP clients lend their model")]
pub(crate) fn sampling_request(
    request: &ChatRequest,
) -> Result<(wire::CreateMessageRequestParams, usize), BackendError> {
    if !request.tools.is_empty() {
        return Err(BackendError::terminal(
            "leaves with tools cannot run on --leaves sampling: grant tools to leaves only \
             with a provider backend",
        ));
    }
    let mut messages = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        messages.push(match message {
            Message::User { text } => wire::SamplingMessage::user_text(text.clone()),
            Message::Assistant { text, .. } => wire::SamplingMessage::assistant_text(text.clone()),
            Message::Tool { .. } => {
                return Err(BackendError::terminal(
                    "tool results cannot be sent over --leaves sampling",
                ));
            }
        });
    }
    let mut system = request.system.clone();
    if let Some(structured) = &request.structured {
        system.push_str(&format!("\n\n{SCHEMA_REQUEST}\n{}", structured.schema));
    }
    let sent_bytes = system.len()
        + request
            .messages
            .iter()
            .map(|m| match m {
                Message::User { text } | Message::Assistant { text, .. } => text.len(),
                Message::Tool { content, .. } => content.len(),
            })
            .sum::<usize>();
    let params = wire::CreateMessageRequestParams::new(messages, request.max_tokens)
        .with_system_prompt(system)
        .with_model_preferences(
            wire::ModelPreferences::new()
                .with_hints(vec![wire::ModelHint::new(request.model.clone())]),
        );
    Ok((params, sent_bytes))
}

/// A turn's reply, as the client's sampling result gives it, with its usage.
#[expect(deprecated, reason = "sampling is how MCP clients lend their model")]
pub(crate) fn chat_response(result: wire::CreateMessageResult, sent_bytes: usize) -> ChatResponse {
    let text: String = result
        .message
        .content
        .into_vec()
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("");
    let reported = result
        .message
        .meta
        .as_ref()
        .and_then(|meta| meta.get("usage"));
    ChatResponse {
        usage: usage(reported, sent_bytes, text.len()),
        truncated: result.stop_reason.as_deref() == Some("maxTokens"),
        text,
        ..ChatResponse::default()
    }
}

/// The usage of one sampling turn: the counts the client reported in `_meta.usage`
/// (`inputTokens`, `outputTokens`), each one it did not (or not as a whole number) estimated
/// from the bytes sent and received.
fn usage(reported: Option<&Value>, sent_bytes: usize, received_bytes: usize) -> Usage {
    let count = |names: [&str; 2]| {
        names
            .iter()
            .find_map(|name| reported.and_then(|usage| usage.get(*name)?.as_u64()))
    };
    let estimate = |bytes: usize| (bytes as u64).div_ceil(APPROXIMATE_BYTES_PER_TOKEN);
    let input = count(["inputTokens", "input_tokens"]).map_or_else(
        || Usage::estimated(estimate(sent_bytes), 0),
        |tokens| Usage::reported(tokens, 0),
    );
    let output = count(["outputTokens", "output_tokens"]).map_or_else(
        || Usage::estimated(0, estimate(received_bytes)),
        |tokens| Usage::reported(0, tokens),
    );
    Usage {
        input_tokens: input.input_tokens,
        output_tokens: output.output_tokens,
        estimated_tokens: input.estimated_tokens + output.estimated_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reported_counts_are_kept_and_the_others_estimated() {
        let both = json!({"inputTokens": 12, "outputTokens": 3});
        assert_eq!(usage(Some(&both), 300, 30), Usage::reported(12, 3));
        assert_eq!(usage(None, 300, 30), Usage::estimated(100, 10));
        let output_only = json!({"output_tokens": 3});
        assert_eq!(
            usage(Some(&output_only), 300, 30),
            Usage {
                input_tokens: 100,
                output_tokens: 3,
                estimated_tokens: 100,
            }
        );
        // A count that is not a whole number is not a count.
        let wrong = json!({"inputTokens": "12", "outputTokens": -1});
        assert_eq!(usage(Some(&wrong), 300, 31), Usage::estimated(100, 11));
        assert_eq!(usage(Some(&json!("usage")), 0, 0), Usage::estimated(0, 0));
    }
}
