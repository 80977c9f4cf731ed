//! Starting a call: a leaf (past the cap, the budgets and the backend's check; answered from
//! the journal, a leaf cache, another engine, or live) or a code-callable host tool, each
//! polled once where it starts.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowbox_backends::{BackendError, BackendErrorKind, LeafReply, LeafRequest, Usage};
use flowbox_store::{CallErrorKind, CallKind, CallRequest, ToolRequest};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::Value;

use super::budget::LeafCost;
use super::decode::{CallFailure, DecodedAgent, message_with_causes};
use super::events::{LeafTools, leaf_finished, leaf_started};
use super::projection::Refusal;
use super::source::ExternalCall;
use super::{Calls, Finished, PendingCall};
use crate::RunError;
use crate::clock::millis;
use crate::events::{EventKind, Position};
use crate::journal::CallRecord;
use crate::journal::codec::{agent_request, entry_reply, entry_usage};
use crate::plan::{Price, worst_case};

impl Calls {
    /// Starts a leaf, or refuses it at once when the cap or the budget says no. A start that
    /// contradicts the journal of a resumed run ends the run.
    pub(crate) fn start_agent(
        &mut self,
        request: DecodedAgent,
    ) -> Result<Result<u64, CallFailure>, RunError> {
        if self.agents_started >= self.max_agents {
            self.project_refusal(Refusal::Capped);
            return Ok(Err(CallFailure::new(
                CallErrorKind::AgentCapExceeded,
                format!(
                    "this run may start at most {} leaf agents and has started them all",
                    self.max_agents
                ),
            )));
        }
        if let Some((spent, total)) = self.budget.exhausted() {
            self.project_refusal(Refusal::OverBudget);
            return Ok(Err(CallFailure::new(
                CallErrorKind::BudgetExceeded,
                format!(
                    "the token budget is spent ({spent} of {total} tokens); no new leaf can start"
                ),
            )));
        }
        let handle = self.next_handle;
        let DecodedAgent { mut leaf, path } = request;
        leaf.thread_id.clone_from(&self.thread_id);
        leaf.call_id = handle;
        leaf.idempotency_key = format!("{}/{handle}", self.thread_id);
        if let Some(fanout) = &self.fanout
            && leaf.model.is_none()
            && path.iter().any(|group| group.size > fanout.wider_than)
            && self.backend.estimate(&leaf).profile.is_none()
        {
            // A wide fan-out's leaf on the default model moves to the fan-out profile.
            leaf.model = Some(fanout.profile.clone());
        }
        if let Err(error) = self.backend.check(&leaf) {
            return Ok(Err(CallFailure::backend(
                CallErrorKind::InvalidRequest,
                &error,
            )));
        }
        let estimate = (self.projection.is_some() || self.prices.is_some())
            .then(|| self.backend.estimate(&leaf));
        let cost = match (&estimate, &self.prices) {
            (Some(estimate), Some(prices)) => match prices.price(&estimate.model) {
                Ok(price) => Some(LeafCost {
                    price,
                    reserved: price.cost(worst_case(estimate)),
                }),
                // Without a price the dollar budget cannot bound the leaf.
                Err(error) if self.dollars.limited() => {
                    return Ok(Err(CallFailure::invalid(format!(
                        "{error}; a run with a dollar budget prices every leaf"
                    ))));
                }
                Err(_) => None,
            },
            _ => None,
        };
        if let Some(refusal) = cost.and_then(|cost| self.dollars.refusal(cost.reserved)) {
            self.project_refusal(Refusal::OverBudget);
            return Ok(Err(CallFailure::new(
                CallErrorKind::BudgetExceeded,
                refusal,
            )));
        }
        let record = self
            .keeps_records()
            .then(|| CallRecord::new(agent_request(&leaf)));
        let replayed = match (&self.checkpoints.replay, &record) {
            (Some(replay), Some(record)) => replay.check_start(handle, record)?,
            _ => false,
        };
        self.next_handle += 1;
        self.agents_started += 1;
        if let Some(cost) = &cost {
            self.dollars.reserve(cost);
        }
        let price = cost.as_ref().map(|cost| cost.price);

        let cached = match (&mut self.checkpoints.cache, &record) {
            (Some(cache), Some(record)) if !replayed => cache.take(record),
            _ => None,
        };
        self.in_flight.insert(
            handle,
            PendingCall {
                kind: CallKind::Agent,
                record,
                replayed: replayed.then(|| Box::new(leaf.clone())),
                from_journal: replayed,
                cost,
            },
        );
        if self.projection.is_some()
            && let Some(estimate) = estimate
        {
            self.project_leaf(&leaf, path, estimate);
            return Ok(Ok(handle));
        }
        let fed_by = self.feeds.fed_by(&leaf.prompt, leaf.instruction.as_deref());
        if !replayed && cached.is_none() {
            match &mut self.checkpoints.external {
                Some(source) => {
                    self.events
                        .emit(|| leaf_started(&leaf, path, Duration::ZERO, fed_by));
                    source.start(handle, ExternalCall::Agent(Box::new(leaf)));
                }
                None => self.add_leaf(leaf, path, fed_by, price),
            }
            return Ok(Ok(handle));
        }
        // Answered from a journal: no backend, but the same events as a live leaf.
        self.events
            .emit(|| leaf_started(&leaf, path, Duration::ZERO, fed_by));
        if let Some(entry) = cached {
            let usage = Ok(entry_usage(&entry));
            self.events
                .emit(|| leaf_finished(handle, usage, Duration::ZERO, true, price));
            let result = entry_reply(&entry);
            if let Ok(reply) = &result {
                // As on resume: a backend keeping conversations learns of the reply.
                self.backend.replayed(&leaf, reply);
            }
            self.finished.push_back(Finished {
                handle,
                result,
                duration: Duration::ZERO,
            });
        }
        Ok(Ok(handle))
    }

    /// Starts a code-callable host tool, or refuses it at once when the tool is unknown or the
    /// arguments do not match its schema.
    pub(crate) fn start_tool(
        &mut self,
        name: String,
        arguments: Value,
        path: Vec<Position>,
    ) -> Result<Result<u64, CallFailure>, RunError> {
        if let Err(error) = self.tools.validate(&name, &arguments) {
            return Ok(Err(CallFailure::backend(
                CallErrorKind::ToolFailed,
                &error.into(),
            )));
        }
        if self.tools_called >= self.max_tool_calls {
            let cap = BackendErrorKind::ToolCallCap {
                limit: self.max_tool_calls,
            };
            return Ok(Err(CallFailure::new(
                CallErrorKind::ToolCapExceeded,
                cap.to_string(),
            )));
        }
        let handle = self.next_handle;
        let record = self.keeps_records().then(|| {
            CallRecord::new(CallRequest::Tool(ToolRequest {
                name: name.clone(),
                arguments: arguments.clone(),
            }))
        });
        let replayed = match (&self.checkpoints.replay, &record) {
            (Some(replay), Some(record)) => replay.check_start(handle, record)?,
            _ => false,
        };
        self.next_handle += 1;
        self.tools_called += 1;
        self.in_flight.insert(
            handle,
            PendingCall {
                kind: CallKind::Tool,
                record,
                replayed: None,
                from_journal: replayed,
                cost: None,
            },
        );
        self.events.emit(|| EventKind::ToolCalled {
            call_id: handle,
            name: name.clone(),
            path,
        });
        if replayed {
            return Ok(Ok(handle));
        }
        if self.project_tool(handle, &name, &arguments) {
            return Ok(Ok(handle));
        }
        if let Some(source) = &mut self.checkpoints.external {
            source.start(handle, ExternalCall::Tool { name, arguments });
            return Ok(Ok(handle));
        }
        let tools = self.tools.clone();
        let events = Arc::clone(&self.events);
        let slots = Arc::clone(&self.slots);
        self.start(Box::pin(async move {
            // Tools share the run's concurrency slots with leaves.
            let _slot = slots.acquire_owned().await;
            let started = Instant::now();
            let result = AssertUnwindSafe(tools.call(&name, arguments))
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| {
                    Err(flowbox_backends::ToolError::Failed(format!(
                        "the tool panicked: {}",
                        panic_message(&*panic)
                    )))
                });
            let duration = started.elapsed();
            events.emit(|| EventKind::ToolFinished {
                call_id: handle,
                ok: result.is_ok(),
                duration_ms: millis(duration),
                replayed: false,
                error: result.as_ref().err().map(ToString::to_string),
            });
            Finished {
                handle,
                result: result
                    .map(|value| LeafReply {
                        value,
                        usage: Usage::default(),
                    })
                    .map_err(BackendError::from),
                duration,
            }
        }));
        Ok(Ok(handle))
    }

    /// Adds a live leaf, fed by the replies of `fed_by`: it waits for a slot, then calls the
    /// backend; `price` prices it.
    fn add_leaf(
        &mut self,
        leaf: LeafRequest,
        path: Vec<Position>,
        fed_by: Vec<u64>,
        price: Option<Price>,
    ) {
        let backend = Arc::clone(&self.backend);
        let events = Arc::clone(&self.events);
        let slots = Arc::clone(&self.slots);
        self.start(Box::pin(async move {
            // The semaphore lives as long as the run; it is never closed.
            let called = Instant::now();
            let _slot = slots.acquire_owned().await;
            let started = Instant::now();
            events.emit(|| leaf_started(&leaf, path, started - called, fed_by));
            let tools = LeafTools {
                events: Arc::clone(&events),
                call_id: leaf.call_id,
            };
            let result = AssertUnwindSafe(backend.call_observed(&leaf, &tools))
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| Err(BackendError::panicked(panic_message(&*panic))));
            let duration = started.elapsed();
            events.contents(&leaf, &result);
            events.emit(|| {
                let usage = result
                    .as_ref()
                    .map(|r| r.usage)
                    .map_err(|error| message_with_causes(error));
                leaf_finished(leaf.call_id, usage, duration, false, price)
            });
            Finished {
                handle: leaf.call_id,
                result,
                duration,
            }
        }));
    }

    /// Polls a new call once, here: done at once, it waits in `finished`; otherwise it
    /// becomes a task that reports when it is.
    fn start(&mut self, mut call: BoxFuture<'static, Finished>) {
        // Unconstrained by tokio's cooperative budget: a script starting a thousand leaves in
        // one go would otherwise see every one after the 128th refused a slot "to yield".
        if let Some(done) = tokio::task::unconstrained(&mut call).now_or_never() {
            self.finished.push_back(done);
            return;
        }
        let sender = self.sender.clone();
        self.tasks.spawn(async move {
            let done = call.await;
            // The receiver lives in the run; if the run is gone nobody needs the result.
            let _ = sender.send(done);
        });
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
