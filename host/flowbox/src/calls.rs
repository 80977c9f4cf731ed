//! A run's calls in flight: caps, budget, concurrency, and the completions the guest awaits.
//!
//! `start_agent` checks the lifetime cap and the token budget, then spawns a task that waits
//! for a concurrency slot and calls the backend. Finished calls queue up in a channel;
//! `await_next` hands the guest every finished call at once, in the order they finished, and
//! only then counts their tokens, so the budget a script sees depends on nothing but the
//! completions it received (which is what makes replay exact).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowbox_backends::{BackendError, LeafBackend, LeafReply, LeafRequest, Usage};
use futures_util::FutureExt;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::bindings::host::ErrorKind;
use crate::events::{EventKind, Position, RunEvents};
use crate::request::{CallFailure, DecodedAgent};

/// Characters of a prompt shown in `leaf_started` events.
const PROMPT_PREVIEW_CHARS: usize = 120;

/// One finished call, as the guest will receive it.
#[derive(Debug)]
pub(crate) struct Completion {
    pub handle: u64,
    /// The reply's JSON text, or why the call failed.
    pub outcome: Result<String, CallFailure>,
}

/// What a call task reports when its backend returns.
#[derive(Debug)]
struct Finished {
    handle: u64,
    result: Result<LeafReply, BackendError>,
}

/// Per-run call state.
#[derive(Debug)]
pub(crate) struct Calls {
    backend: Arc<dyn LeafBackend>,
    events: Arc<RunEvents>,
    slots: Arc<Semaphore>,
    sender: mpsc::UnboundedSender<Finished>,
    receiver: mpsc::UnboundedReceiver<Finished>,
    /// Dropping the set aborts every call still running: a run that ends (or times out)
    /// cancels its leaves.
    tasks: JoinSet<()>,
    thread_id: String,
    next_handle: u64,
    pending: usize,
    agents_started: u32,
    max_agents: u32,
    max_reply_bytes: usize,
    budget: Option<u64>,
    /// Tokens of the completions delivered to the guest.
    spent: Usage,
    warned_at_80: bool,
    warned_at_100: bool,
}

/// The settings a run's calls follow.
#[derive(Debug, Clone)]
pub(crate) struct CallSettings {
    pub thread_id: String,
    pub max_agents: u32,
    pub max_concurrency: usize,
    pub max_reply_bytes: usize,
    pub budget: Option<u64>,
}

impl Calls {
    pub(crate) fn new(
        backend: Arc<dyn LeafBackend>,
        events: Arc<RunEvents>,
        settings: CallSettings,
    ) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        Self {
            backend,
            events,
            slots: Arc::new(Semaphore::new(settings.max_concurrency.max(1))),
            sender,
            receiver,
            tasks: JoinSet::new(),
            thread_id: settings.thread_id,
            next_handle: 1,
            pending: 0,
            agents_started: 0,
            max_agents: settings.max_agents,
            max_reply_bytes: settings.max_reply_bytes,
            budget: settings.budget,
            spent: Usage::default(),
            warned_at_80: false,
            warned_at_100: false,
        }
    }

    /// Leaves started so far.
    pub(crate) fn agents_started(&self) -> u32 {
        self.agents_started
    }

    /// Tokens of the completions the guest received.
    pub(crate) fn spent(&self) -> Usage {
        self.spent
    }

    /// The token ceiling.
    pub(crate) fn budget(&self) -> Option<u64> {
        self.budget
    }

    /// Starts a leaf, or refuses it at once when the cap or the budget says no.
    pub(crate) fn start_agent(&mut self, request: DecodedAgent) -> Result<u64, CallFailure> {
        if self.agents_started >= self.max_agents {
            return Err(CallFailure::new(
                ErrorKind::AgentCapExceeded,
                format!(
                    "this run may start at most {} leaf agents and has started them all",
                    self.max_agents
                ),
            ));
        }
        if let Some(total) = self.budget
            && self.spent.total() >= total
        {
            return Err(CallFailure::new(
                ErrorKind::BudgetExceeded,
                format!(
                    "the token budget is spent ({} of {total} tokens); no new leaf can start",
                    self.spent.total()
                ),
            ));
        }
        let handle = self.next_handle;
        self.next_handle += 1;
        self.agents_started += 1;
        self.pending += 1;

        let DecodedAgent { mut leaf, path } = request;
        leaf.call_id = handle;
        leaf.idempotency_key = format!("{}/{handle}", self.thread_id);
        self.spawn(leaf, path);
        Ok(handle)
    }

    fn spawn(&mut self, leaf: LeafRequest, path: Vec<Position>) {
        let backend = Arc::clone(&self.backend);
        let events = Arc::clone(&self.events);
        let slots = Arc::clone(&self.slots);
        let sender = self.sender.clone();
        self.tasks.spawn(async move {
            // The semaphore lives as long as the run; it is never closed.
            let _slot = slots.acquire_owned().await;
            events.emit(|| EventKind::LeafStarted {
                call_id: leaf.call_id,
                label: leaf.label.clone(),
                agent_type: leaf.agent_type.clone(),
                prompt_preview: preview(&leaf.prompt_text()),
                path,
            });
            let started = Instant::now();
            let result = AssertUnwindSafe(backend.call(&leaf))
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| Err(BackendError::Panicked(panic_message(&*panic))));
            let duration = started.elapsed();
            events.emit(|| leaf_finished(leaf.call_id, &result, duration));
            // The receiver lives in the run; if the run is gone nobody needs the result.
            let _ = sender.send(Finished {
                handle: leaf.call_id,
                result,
            });
        });
    }

    /// Waits for at least one pending call and returns every finished one, in finishing order.
    pub(crate) async fn await_next(&mut self) -> Result<Vec<Completion>, CallFailure> {
        if self.pending == 0 {
            return Err(CallFailure::invalid(
                "await-next was called with no call pending",
            ));
        }
        let first = self
            .receiver
            .recv()
            .await
            .expect("the run holds a sender, so the channel stays open");
        let mut finished = vec![first];
        while finished.len() < self.pending {
            match self.receiver.try_recv() {
                Ok(next) => finished.push(next),
                Err(_) => break,
            }
        }
        self.pending -= finished.len();
        let completions = finished.into_iter().map(|f| self.deliver(f)).collect();
        self.warn_about_budget();
        Ok(completions)
    }

    fn deliver(&mut self, finished: Finished) -> Completion {
        let outcome = match finished.result {
            Ok(reply) => {
                self.spent.input_tokens += reply.usage.input_tokens;
                self.spent.output_tokens += reply.usage.output_tokens;
                let text = reply.value.to_string();
                if text.len() > self.max_reply_bytes {
                    Err(CallFailure::new(
                        ErrorKind::AgentFailed,
                        format!(
                            "the leaf's reply is {} bytes; the limit is {} bytes",
                            text.len(),
                            self.max_reply_bytes
                        ),
                    ))
                } else {
                    Ok(text)
                }
            }
            Err(error) => Err(CallFailure::new(ErrorKind::AgentFailed, error.to_string())),
        };
        Completion {
            handle: finished.handle,
            outcome,
        }
    }

    fn warn_about_budget(&mut self) {
        let Some(total) = self.budget else { return };
        let spent = self.spent.total();
        let crossed_80 = !self.warned_at_80 && spent.saturating_mul(10) >= total.saturating_mul(8);
        let crossed_100 = !self.warned_at_100 && spent >= total;
        if crossed_80 || crossed_100 {
            self.warned_at_80 = true;
            self.warned_at_100 |= crossed_100;
            self.events
                .emit(|| EventKind::BudgetWarning { spent, total });
        }
    }
}

fn leaf_finished(
    call_id: u64,
    result: &Result<LeafReply, BackendError>,
    duration: Duration,
) -> EventKind {
    EventKind::LeafFinished {
        call_id,
        ok: result.is_ok(),
        tokens: result.as_ref().map_or(0, |r| r.usage.total()),
        duration_ms: duration.as_millis() as u64,
        replayed: false,
        error: result.as_ref().err().map(ToString::to_string),
    }
}

fn preview(text: &str) -> String {
    let mut out: String = text.chars().take(PROMPT_PREVIEW_CHARS).collect();
    if text.chars().nth(PROMPT_PREVIEW_CHARS).is_some() {
        out.push('…');
    }
    out
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use flowbox_backends::{FakeBackend, ScriptedBackend};
    use serde_json::json;
    use tokio::sync::broadcast;

    use super::*;

    fn reply_value(completion: &Completion) -> Option<serde_json::Value> {
        let text = completion.outcome.as_ref().ok()?;
        serde_json::from_str(text).ok()
    }

    fn calls(backend: Arc<dyn LeafBackend>, settings: impl FnOnce(&mut CallSettings)) -> Calls {
        let (sender, _) = broadcast::channel(16);
        let mut s = CallSettings {
            thread_id: "t".into(),
            max_agents: 1000,
            max_concurrency: 16,
            max_reply_bytes: 1 << 20,
            budget: None,
        };
        settings(&mut s);
        Calls::new(backend, Arc::new(RunEvents::new("t".into(), sender)), s)
    }

    fn agent(prompt: &str) -> DecodedAgent {
        DecodedAgent {
            leaf: LeafRequest::new(0, json!(prompt)),
            path: vec![],
        }
    }

    #[tokio::test]
    async fn completions_are_batched_and_tokens_counted_on_delivery() {
        let mut calls = calls(Arc::new(FakeBackend::new()), |_| {});
        let a = calls.start_agent(agent("a")).unwrap();
        let b = calls.start_agent(agent("b")).unwrap();
        assert_eq!((a, b), (1, 2));
        assert_eq!(calls.spent().total(), 0);
        tokio::task::yield_now().await;
        let mut got = vec![];
        while got.len() < 2 {
            got.extend(calls.await_next().await.unwrap());
        }
        let mut handles: Vec<u64> = got.iter().map(|c| c.handle).collect();
        handles.sort();
        assert_eq!(handles, vec![1, 2]);
        assert!(
            reply_value(&got[0])
                .unwrap()
                .as_str()
                .unwrap()
                .contains("[fake leaf]")
        );
        assert!(calls.spent().total() > 0);
        let err = calls.await_next().await.unwrap_err();
        assert!(err.message.contains("no call pending"));
    }

    #[tokio::test]
    async fn the_lifetime_cap_refuses_the_next_leaf() {
        let mut calls = calls(Arc::new(FakeBackend::new()), |s| s.max_agents = 2);
        calls.start_agent(agent("a")).unwrap();
        calls.start_agent(agent("b")).unwrap();
        let err = calls.start_agent(agent("c")).unwrap_err();
        assert_eq!(err.kind, ErrorKind::AgentCapExceeded);
        assert_eq!(calls.agents_started(), 2);
    }

    #[tokio::test]
    async fn the_budget_refuses_new_leaves_once_spent() {
        let backend = ScriptedBackend::from_json(
            r#"{"rules": [{"text": "ok", "tokens": {"input": 6, "output": 4}}]}"#,
        )
        .unwrap();
        let mut calls = calls(Arc::new(backend), |s| s.budget = Some(15));
        calls.start_agent(agent("a")).unwrap();
        calls.start_agent(agent("b")).unwrap();
        // Both were allowed to start; both keep their results although together they pass 15.
        let mut delivered = 0;
        while delivered < 2 {
            delivered += calls.await_next().await.unwrap().len();
        }
        assert_eq!(calls.spent().total(), 20);
        let err = calls.start_agent(agent("c")).unwrap_err();
        assert_eq!(err.kind, ErrorKind::BudgetExceeded);
        assert!(err.message.contains("20 of 15"), "{}", err.message);
    }

    #[derive(Debug)]
    struct Panicking;

    #[async_trait::async_trait]
    impl LeafBackend for Panicking {
        async fn call(&self, _: &LeafRequest) -> Result<LeafReply, BackendError> {
            panic!("backend bug");
        }
    }

    #[tokio::test]
    async fn a_panicking_backend_fails_only_its_leaf() {
        let mut calls = calls(Arc::new(Panicking), |_| {});
        calls.start_agent(agent("a")).unwrap();
        let done = calls.await_next().await.unwrap();
        let err = done[0].outcome.as_ref().unwrap_err();
        assert_eq!(err.kind, ErrorKind::AgentFailed);
        assert!(err.message.contains("backend bug"), "{}", err.message);
    }

    #[tokio::test]
    async fn oversized_replies_become_agent_errors() {
        let mut calls = calls(Arc::new(FakeBackend::new()), |s| s.max_reply_bytes = 8);
        calls.start_agent(agent("a long prompt")).unwrap();
        let done = calls.await_next().await.unwrap();
        let err = done[0].outcome.as_ref().unwrap_err();
        assert!(
            err.message.contains("the limit is 8 bytes"),
            "{}",
            err.message
        );
    }
}
