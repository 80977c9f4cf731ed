//! The events a run's calls publish: a leaf's start and end, the tools a leaf calls in its own
//! loop, and the end of a call another engine carried out.

use std::sync::Arc;
use std::time::Duration;

use flowbox_backends::{LeafObserver, LeafRequest, Usage};
use flowbox_store::CallKind;

use super::Finished;
use super::decode::message_with_causes;
use crate::clock::millis;
use crate::events::{EventKind, Position, RunEvents};
use crate::plan::{Price, usd};

/// Characters of a prompt shown in `leaf_started` events.
const PROMPT_PREVIEW_CHARS: usize = 120;

/// Publishes the model turns and host tool calls a leaf agent makes in its own loop.
#[derive(Debug)]
pub(super) struct LeafTools {
    pub(super) events: Arc<RunEvents>,
    pub(super) call_id: u64,
}

impl LeafObserver for LeafTools {
    fn tool_called(&self, name: &str) {
        self.events.emit(|| EventKind::LeafToolCalled {
            call_id: self.call_id,
            name: name.to_owned(),
        });
    }

    fn model_turn(
        &self,
        model: &str,
        usage: Usage,
        duration: Duration,
        retries: u32,
        error: Option<&str>,
    ) {
        self.events.emit(|| EventKind::LeafTurn {
            call_id: self.call_id,
            model: model.to_owned(),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            duration_ms: millis(duration),
            retries,
            error: error.map(str::to_owned),
        });
    }

    fn tool_finished(&self, name: &str, duration: Duration, error: Option<&str>) {
        self.events.emit(|| EventKind::LeafToolFinished {
            call_id: self.call_id,
            name: name.to_owned(),
            ok: error.is_none(),
            duration_ms: millis(duration),
            error: error.map(str::to_owned),
        });
    }
}

/// A leaf's start, after waiting `waited` for its concurrency slot, fed by the replies of the
/// leaves `fed_by`.
pub(super) fn leaf_started(
    leaf: &LeafRequest,
    path: Vec<Position>,
    waited: Duration,
    fed_by: Vec<u64>,
) -> EventKind {
    EventKind::LeafStarted {
        call_id: leaf.call_id,
        label: leaf.label.clone(),
        agent_type: leaf.agent_type.clone(),
        prompt_preview: flowbox_backends::preview(&leaf.prompt_text(), PROMPT_PREVIEW_CHARS),
        path,
        model: leaf.model.clone(),
        waited_ms: millis(waited),
        fed_by,
    }
}

/// A leaf's end: its usage or error after `duration`, and its cost at `price`, if priced.
pub(super) fn leaf_finished(
    call_id: u64,
    result: Result<Usage, String>,
    duration: Duration,
    replayed: bool,
    price: Option<Price>,
) -> EventKind {
    EventKind::LeafFinished {
        call_id,
        ok: result.is_ok(),
        tokens: result.as_ref().map_or(0, Usage::total),
        duration_ms: millis(duration),
        replayed,
        cost_usd: match (&result, price) {
            (Ok(usage), Some(price)) => Some(usd(price.cost(*usage))),
            _ => None,
        },
        error: result.err(),
    }
}

/// The event of a call another engine carried out, published when the guest receives it.
pub(super) fn external_finished(
    kind: CallKind,
    done: &Finished,
    price: Option<Price>,
) -> EventKind {
    match kind {
        CallKind::Agent => {
            let usage = done
                .result
                .as_ref()
                .map(|reply| reply.usage)
                .map_err(|error| message_with_causes(error));
            leaf_finished(done.handle, usage, done.duration, false, price)
        }
        CallKind::Tool => EventKind::ToolFinished {
            call_id: done.handle,
            ok: done.result.is_ok(),
            duration_ms: millis(done.duration),
            replayed: false,
            error: done.result.as_ref().err().map(ToString::to_string),
        },
    }
}
