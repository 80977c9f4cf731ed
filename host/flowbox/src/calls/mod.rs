//! A run's calls in flight: caps, budget, concurrency, the journal, and the completions the
//! guest awaits.
//!
//! `start_agent` checks the lifetime cap and the budgets (tokens; dollars, against the leaf's
//! worst case), then starts a call that waits for a concurrency slot and calls the backend —
//! unless a resumed run's journal or a leaf cache already holds the answer, or the run is a
//! projection for a plan, where every leaf and every tool call but a read-only tool's gets a
//! placeholder at once and is recorded. A call is polled once where it starts: one that
//! answers at once (an offline backend, a tool reading a file) is done there, with no task,
//! channel or wake-up of another worker thread. One still waiting (on a slot, a timer, the network) becomes a task of
//! its own, so it makes progress — and frees its slot for the next — even while the guest is
//! busy, and reports through a channel. `await_next` hands the guest every finished call at
//! once, in the order they finished, journals them first, and only then counts their tokens, so
//! the budget a script sees depends on nothing but the completions it received (which is what
//! makes replay exact).

pub(crate) mod budget;
pub(crate) mod decode;
mod deliver;
mod events;
mod feeds;
mod projection;
pub(crate) mod source;
mod start;

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::Duration;

use flowbox_backends::{BackendError, LeafBackend, LeafReply, LeafRequest, ToolSet, Usage};
use flowbox_store::CallKind;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::events::RunEvents;
use crate::journal::{CallRecord, JournalWriter, LeafCache, Replay};
use crate::plan::{FanoutProfile, PriceTable, Projection};
use budget::{Budget, Dollars, LeafCost};
pub(crate) use decode::CallFailure;
use source::CompletionSource;

/// One finished call, as the guest will receive it.
#[derive(Debug)]
pub(crate) struct Completion {
    pub handle: u64,
    /// The reply's JSON text, or why the call failed.
    pub outcome: Result<String, CallFailure>,
}

/// What a call reports when its backend or tool returns. A tool's output travels as a
/// reply without tokens.
#[derive(Debug)]
struct Finished {
    handle: u64,
    result: Result<LeafReply, BackendError>,
    duration: Duration,
}

/// A call the guest started and has not received yet.
#[derive(Debug)]
struct PendingCall {
    kind: CallKind,
    /// Its journal identity, when the run keeps a journal, replays one, or reuses leaves.
    record: Option<CallRecord>,
    /// For a leaf the journal will deliver (a resumed run) rather than the backend: its
    /// request, so the backend can learn of the reply.
    replayed: Option<Box<LeafRequest>>,
    /// Whether the journal will deliver it.
    from_journal: bool,
    /// A leaf's price and reserved worst case, when leaves are priced.
    cost: Option<LeafCost>,
}

/// Where a run's completions come from and go to, besides the backend.
#[derive(Debug, Default)]
pub(crate) struct Checkpoints {
    /// The thread's journal, appended before the guest sees each batch.
    pub journal: Option<JournalWriter>,
    /// The completions to replay first (a resumed run).
    pub replay: Option<Replay>,
    /// Results lent by an earlier thread.
    pub cache: Option<LeafCache>,
    /// Another engine carrying out the calls and ordering their completions (its journal is
    /// the checkpoint log, so there is no `journal` or `replay` beside it).
    pub external: Option<Box<dyn CompletionSource>>,
}

/// Per-run call state.
#[derive(Debug)]
pub(crate) struct Calls {
    backend: Arc<dyn LeafBackend>,
    /// Host tools scripts may call with `call_tool`.
    tools: ToolSet,
    events: Arc<RunEvents>,
    slots: Arc<Semaphore>,
    max_concurrency: usize,
    /// Calls that finished where they started, in finishing order.
    finished: VecDeque<Finished>,
    /// Calls that did not, as tasks; dropping the set aborts them: a run that ends (or times
    /// out) cancels its leaves.
    tasks: JoinSet<()>,
    /// Where those tasks report.
    sender: mpsc::UnboundedSender<Finished>,
    receiver: mpsc::UnboundedReceiver<Finished>,
    thread_id: String,
    next_handle: u64,
    in_flight: HashMap<u64, PendingCall, BuildHasherDefault<NumberHasher>>,
    agents_started: u32,
    tools_called: u32,
    max_agents: u32,
    max_tool_calls: u32,
    max_reply_bytes: usize,
    /// Tokens of the completions delivered to the guest, against the ceiling.
    budget: Budget,
    /// Their dollars, against the dollar ceiling.
    dollars: Dollars,
    prices: Option<Arc<PriceTable>>,
    fanout: Option<FanoutProfile>,
    /// The phase the script is in.
    phase: Option<String>,
    /// For a plan: what the projection saw. Leaves, and tools that are not read-only, are then
    /// answered with placeholders.
    projection: Option<Projection>,
    checkpoints: Checkpoints,
    /// The leaf replies delivered so far, to tell which of them feed a new leaf.
    feeds: feeds::Feeds,
}

impl Calls {
    /// Cancels every call still running, as dropping the calls does, and lets go of the
    /// journal and the results lent by another thread.
    pub(crate) fn end(&mut self) {
        self.tasks.abort_all();
        self.checkpoints = Checkpoints::default();
    }
}

/// The settings a run's calls follow.
#[derive(Debug, Clone)]
pub(crate) struct CallSettings {
    pub thread_id: String,
    pub max_agents: u32,
    pub max_tool_calls: u32,
    pub max_concurrency: usize,
    pub max_reply_bytes: usize,
    pub budget: Option<u64>,
    pub budget_usd: Option<f64>,
    /// Prices leaves (for the dollar budget and the script's `budget.spent_usd()`).
    pub prices: Option<Arc<PriceTable>>,
    pub fanout: Option<FanoutProfile>,
    /// Answer every call but a read-only tool's with a placeholder and record it, for a plan.
    pub projection: bool,
}

impl Calls {
    pub(crate) fn new(
        backend: Arc<dyn LeafBackend>,
        tools: ToolSet,
        events: Arc<RunEvents>,
        settings: CallSettings,
        checkpoints: Checkpoints,
    ) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        Self {
            backend,
            tools,
            events,
            slots: Arc::new(Semaphore::new(settings.max_concurrency.max(1))),
            max_concurrency: settings.max_concurrency.max(1),
            finished: VecDeque::new(),
            tasks: JoinSet::new(),
            sender,
            receiver,
            thread_id: settings.thread_id,
            next_handle: 1,
            in_flight: HashMap::default(),
            agents_started: 0,
            tools_called: 0,
            max_agents: settings.max_agents,
            max_tool_calls: settings.max_tool_calls,
            max_reply_bytes: settings.max_reply_bytes,
            budget: Budget::new(settings.budget),
            dollars: Dollars::new(settings.budget_usd, settings.prices.is_some()),
            prices: settings.prices,
            fanout: settings.fanout,
            phase: None,
            projection: settings.projection.then(Projection::default),
            checkpoints,
            feeds: feeds::Feeds::default(),
        }
    }

    /// Leaves started so far.
    pub(crate) fn agents_started(&self) -> u32 {
        self.agents_started
    }

    /// Tool calls started so far.
    pub(crate) fn tools_called(&self) -> u32 {
        self.tools_called
    }

    /// Tokens of the completions the guest received.
    pub(crate) fn spent(&self) -> Usage {
        self.budget.spent()
    }

    /// The token ceiling.
    pub(crate) fn budget(&self) -> Option<u64> {
        self.budget.total()
    }

    /// The dollars: the ceiling and what the delivered leaves spent (when known).
    pub(crate) fn dollars(&self) -> (Option<f64>, Option<f64>) {
        (self.dollars.total_usd(), self.dollars.spent_usd())
    }

    /// Enters a phase: the leaves started from now on belong to it.
    pub(crate) fn set_phase(&mut self, title: &str) {
        self.phase = Some(title.to_owned());
    }

    /// Journaled completions a resumed run never asked for (0 when the replay matched).
    pub(crate) fn unreplayed(&self) -> usize {
        self.checkpoints
            .replay
            .as_ref()
            .map_or(0, Replay::remaining)
    }

    fn keeps_records(&self) -> bool {
        let d = &self.checkpoints;
        d.journal.is_some() || d.replay.is_some() || d.cache.is_some()
    }
}

/// Hashes numbers with one multiplication each, where SipHash would cost more than the lookup
/// it serves: calls by their handle (a counter the host sets, never the script), and a reply
/// text's first bytes as one `u128`, which `feeds` looks up once per byte of a prompt.
#[derive(Debug, Default)]
pub(super) struct NumberHasher(u64);

impl Hasher for NumberHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, number: u64) {
        self.0 = (self.0.rotate_left(5) ^ number).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, number: usize) {
        self.write_u64(number as u64);
    }

    fn write_u128(&mut self, window: u128) {
        let folded = (window as u64) ^ ((window >> 64) as u64).rotate_left(29);
        self.0 = (self.0 ^ folded).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

#[cfg(test)]
mod tests {
    use flowbox_backends::{FakeBackend, ScriptedBackend, Waiting};
    use flowbox_store::{CallErrorKind, CheckpointStore, Entry, MemoryStore};
    use serde_json::{Value, json};

    use super::decode::DecodedAgent;
    use crate::RunError;

    use super::*;
    use crate::journal::JournalWriter;

    fn reply_value(completion: &Completion) -> Option<Value> {
        let text = completion.outcome.as_ref().ok()?;
        serde_json::from_str(text).ok()
    }

    fn calls_with(
        backend: Arc<dyn LeafBackend>,
        settings: impl FnOnce(&mut CallSettings),
        checkpoints: Checkpoints,
    ) -> Calls {
        let mut s = CallSettings {
            thread_id: "t".into(),
            max_agents: 1000,
            max_tool_calls: 1000,
            max_concurrency: 16,
            max_reply_bytes: 1 << 20,
            budget: None,
            budget_usd: None,
            prices: None,
            fanout: None,
            projection: false,
        };
        settings(&mut s);
        Calls::new(
            backend,
            ToolSet::new(),
            Arc::new(RunEvents::new(
                "t".into(),
                Arc::new(crate::events::EventHub::new(16)),
            )),
            s,
            checkpoints,
        )
    }

    fn calls(backend: Arc<dyn LeafBackend>, settings: impl FnOnce(&mut CallSettings)) -> Calls {
        calls_with(backend, settings, Checkpoints::default())
    }

    fn agent(prompt: &str) -> DecodedAgent {
        DecodedAgent {
            leaf: LeafRequest::new(0, json!(prompt)),
            path: vec![],
        }
    }

    fn start(calls: &mut Calls, prompt: &str) -> Result<u64, CallFailure> {
        calls.start_agent(agent(prompt)).expect("no divergence")
    }

    async fn next(calls: &mut Calls) -> Result<Vec<Completion>, CallFailure> {
        calls.await_next().await.expect("no run error")
    }

    #[tokio::test]
    async fn completions_are_batched_and_tokens_counted_on_delivery() {
        let mut calls = calls(Arc::new(FakeBackend::new()), |_| {});
        let a = start(&mut calls, "a").unwrap();
        let b = start(&mut calls, "b").unwrap();
        assert_eq!((a, b), (1, 2));
        assert_eq!(calls.spent().total(), 0);
        let mut got = vec![];
        while got.len() < 2 {
            got.extend(next(&mut calls).await.unwrap());
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
        let err = next(&mut calls).await.unwrap_err();
        assert!(err.message.contains("no call pending"));
    }

    #[tokio::test]
    async fn the_lifetime_cap_refuses_the_next_leaf() {
        let mut calls = calls(Arc::new(FakeBackend::new()), |s| s.max_agents = 2);
        start(&mut calls, "a").unwrap();
        start(&mut calls, "b").unwrap();
        let err = start(&mut calls, "c").unwrap_err();
        assert_eq!(err.kind, CallErrorKind::AgentCapExceeded);
        assert_eq!(calls.agents_started(), 2);
    }

    #[tokio::test]
    async fn the_budget_refuses_new_leaves_once_spent() {
        let backend = ScriptedBackend::from_json(
            r#"{"rules": [{"text": "ok", "tokens": {"input": 6, "output": 4}}]}"#,
        )
        .unwrap();
        let mut calls = calls(Arc::new(backend), |s| s.budget = Some(15));
        start(&mut calls, "a").unwrap();
        start(&mut calls, "b").unwrap();
        // Both were allowed to start; both keep their results although together they pass 15.
        let mut delivered = 0;
        while delivered < 2 {
            delivered += next(&mut calls).await.unwrap().len();
        }
        assert_eq!(calls.spent().total(), 20);
        let err = start(&mut calls, "c").unwrap_err();
        assert_eq!(err.kind, CallErrorKind::BudgetExceeded);
        assert!(err.message.contains("20 of 15"), "{}", err.message);
    }

    /// Answers `fast` at once; `slow` waits until the run is blocked, and says so.
    #[derive(Debug, Default)]
    struct Gated {
        gate: tokio::sync::Notify,
        waited: std::sync::Mutex<Vec<(String, Waiting)>>,
    }

    #[async_trait::async_trait]
    impl LeafBackend for Gated {
        async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
            if request.prompt == "slow" {
                self.gate.notified().await;
            }
            FakeBackend::reply(request)
        }

        fn run_waiting(&self, thread_id: &str, waiting: &Waiting) {
            let mut waited = self.waited.lock().unwrap();
            waited.push((thread_id.to_owned(), waiting.clone()));
            self.gate.notify_one();
        }
    }

    #[tokio::test]
    async fn a_blocked_run_tells_the_backend_what_it_waits_for() {
        let backend = Arc::new(Gated::default());
        let mut calls = calls(backend.clone(), |s| s.max_concurrency = 3);
        start(&mut calls, "fast").unwrap();
        let slow = start(&mut calls, "slow").unwrap();
        // The fast leaf is done: the guest gets it without waiting.
        let first = next(&mut calls).await.unwrap();
        assert_eq!(first.len(), 1);
        assert!(backend.waited.lock().unwrap().is_empty());
        // Nothing has finished now: the backend hears which leaf the run waits for.
        let second = next(&mut calls).await.unwrap();
        assert_eq!(second[0].handle, slow);
        assert_eq!(
            *backend.waited.lock().unwrap(),
            [("t".to_owned(), Waiting::new(vec![slow], 0, 3))]
        );
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
        start(&mut calls, "a").unwrap();
        let done = next(&mut calls).await.unwrap();
        let err = done[0].outcome.as_ref().unwrap_err();
        assert_eq!(err.kind, CallErrorKind::AgentFailed);
        assert!(err.message.contains("backend bug"), "{}", err.message);
    }

    #[derive(Debug)]
    struct FailsAfterWork;

    #[async_trait::async_trait]
    impl LeafBackend for FailsAfterWork {
        async fn call(&self, _: &LeafRequest) -> Result<LeafReply, BackendError> {
            Err(BackendError::terminal("gave up").with_usage(Usage {
                input_tokens: 30,
                output_tokens: 5,
                estimated_tokens: 0,
            }))
        }
    }

    #[tokio::test]
    async fn the_tokens_of_a_failed_leaf_count_against_the_budget() {
        let mut calls = calls(Arc::new(FailsAfterWork), |s| s.budget = Some(50));
        start(&mut calls, "a").unwrap();
        let done = next(&mut calls).await.unwrap();
        assert!(done[0].outcome.is_err());
        assert_eq!(calls.spent().total(), 35);
        start(&mut calls, "b").unwrap();
        next(&mut calls).await.unwrap();
        let err = start(&mut calls, "c").unwrap_err();
        assert_eq!(err.kind, CallErrorKind::BudgetExceeded);
    }

    #[tokio::test]
    async fn oversized_replies_become_agent_errors() {
        let mut calls = calls(Arc::new(FakeBackend::new()), |s| s.max_reply_bytes = 8);
        start(&mut calls, "a long prompt").unwrap();
        let done = next(&mut calls).await.unwrap();
        let err = done[0].outcome.as_ref().unwrap_err();
        assert!(
            err.message.contains("the limit is 8 bytes"),
            "{}",
            err.message
        );
    }

    /// Runs three leaves to completion with a journal and returns what was journaled.
    async fn journaled_run(store: Arc<MemoryStore>) -> Vec<Entry> {
        store.begin(&flowbox_store_header("t")).await.unwrap();
        let checkpoints = Checkpoints {
            journal: Some(JournalWriter::new(store.clone(), "t".into(), &[])),
            ..Checkpoints::default()
        };
        let mut calls = calls_with(Arc::new(FakeBackend::new()), |_| {}, checkpoints);
        for prompt in ["a", "b", "c"] {
            start(&mut calls, prompt).unwrap();
        }
        let mut delivered = 0;
        while delivered < 3 {
            delivered += next(&mut calls).await.unwrap().len();
        }
        store.load("t").await.unwrap().unwrap().entries
    }

    fn flowbox_store_header(thread_id: &str) -> flowbox_store::ThreadHeader {
        flowbox_store::ThreadHeader {
            thread_id: thread_id.into(),
            script: String::new(),
            script_sha256: String::new(),
            args: Value::Null,
            args_sha256: String::new(),
            start_unix_nanos: 0,
            limits: Value::Null,
            guard: true,
            created_unix_ms: 0,
        }
    }

    #[tokio::test]
    async fn live_completions_are_journaled_in_delivery_order() {
        let entries = journaled_run(Arc::new(MemoryStore::new())).await;
        assert_eq!(entries.len(), 3);
        let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![0, 1, 2]);
        let mut handles: Vec<u64> = entries.iter().map(|e| e.handle).collect();
        handles.sort();
        assert_eq!(handles, vec![1, 2, 3]);
        assert!(entries.iter().all(|e| e.kind() == CallKind::Agent));
    }

    #[derive(Debug)]
    struct Unreachable;

    #[async_trait::async_trait]
    impl LeafBackend for Unreachable {
        async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
            panic!("replay called the backend for {:?}", request.prompt);
        }
    }

    #[tokio::test]
    async fn replay_delivers_the_journal_without_the_backend() {
        let entries = journaled_run(Arc::new(MemoryStore::new())).await;
        let checkpoints = Checkpoints {
            replay: Some(Replay::new(entries.clone())),
            ..Checkpoints::default()
        };
        let mut calls = calls_with(Arc::new(Unreachable), |_| {}, checkpoints);
        for prompt in ["a", "b", "c"] {
            start(&mut calls, prompt).unwrap();
        }
        let mut delivered = vec![];
        while delivered.len() < 3 {
            delivered.extend(next(&mut calls).await.unwrap());
        }
        let order: Vec<u64> = delivered.iter().map(|c| c.handle).collect();
        let journaled: Vec<u64> = entries.iter().map(|e| e.handle).collect();
        assert_eq!(order, journaled);
        assert_eq!(calls.unreplayed(), 0);
    }

    #[tokio::test]
    async fn a_different_request_on_replay_is_a_divergence() {
        let entries = journaled_run(Arc::new(MemoryStore::new())).await;
        let checkpoints = Checkpoints {
            replay: Some(Replay::new(entries)),
            ..Checkpoints::default()
        };
        let mut calls = calls_with(Arc::new(Unreachable), |_| {}, checkpoints);
        start(&mut calls, "a").unwrap();
        let error = calls.start_agent(agent("edited")).unwrap_err();
        assert!(matches!(error, RunError::Divergence(_)), "{error}");
    }

    /// Answers "live" and remembers the prompts it learnt of without being called.
    #[derive(Debug, Default)]
    struct Learning {
        learnt: std::sync::Mutex<Vec<Value>>,
    }

    #[async_trait::async_trait]
    impl LeafBackend for Learning {
        async fn call(&self, _: &LeafRequest) -> Result<LeafReply, BackendError> {
            Ok(LeafReply {
                value: json!("live"),
                usage: Usage::default(),
            })
        }

        fn replayed(&self, request: &LeafRequest, _: &LeafReply) {
            self.learnt.lock().unwrap().push(request.prompt.clone());
        }
    }

    #[tokio::test]
    async fn the_leaf_cache_answers_identical_requests_only() {
        let entries = journaled_run(Arc::new(MemoryStore::new())).await;
        let backend = Arc::new(Learning::default());
        let checkpoints = Checkpoints {
            cache: Some(LeafCache::new(entries)),
            ..Checkpoints::default()
        };
        let mut calls = calls_with(backend.clone(), |_| {}, checkpoints);
        start(&mut calls, "b").unwrap();
        start(&mut calls, "new").unwrap();
        let mut delivered = vec![];
        while delivered.len() < 2 {
            delivered.extend(next(&mut calls).await.unwrap());
        }
        delivered.sort_by_key(|c| c.handle);
        assert_eq!(reply_value(&delivered[0]).unwrap(), json!("[fake leaf] b"));
        assert_eq!(reply_value(&delivered[1]).unwrap(), json!("live"));
        // The reused reply reaches the backend too, so instance histories stay whole.
        assert_eq!(*backend.learnt.lock().unwrap(), vec![json!("b")]);
    }
}
