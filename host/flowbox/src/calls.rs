//! A run's calls in flight: caps, budget, concurrency, the journal, and the completions the
//! guest awaits.
//!
//! `start_agent` checks the lifetime cap and the budgets (tokens; dollars, against the leaf's
//! worst case), then starts a call that waits for a concurrency slot and calls the backend —
//! unless a resumed run's journal or a leaf cache already holds the answer, or the run is a
//! projection for a plan, where every leaf gets a placeholder at once and is recorded. A call is polled once where it starts: one that answers at once (an
//! offline backend, a tool reading a file) is done there, with no task, channel or wake-up of
//! another worker thread. One still waiting (on a slot, a timer, the network) becomes a task of
//! its own, so it makes progress — and frees its slot for the next — even while the guest is
//! busy, and reports through a channel. `await_next` hands the guest every finished call at
//! once, in the order they finished, journals them first, and only then counts their tokens, so
//! the budget a script sees depends on nothing but the completions it received (which is what
//! makes replay exact).

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowbox_backends::{
    BackendError, BackendErrorKind, FakeBackend, LeafBackend, LeafObserver, LeafReply, LeafRequest,
    ToolSet, Usage, Waiting,
};
use flowbox_store::{
    CallErrorKind, CallKind, CallRequest, Entry, EntryOutcome, ToolRequest, unrepresentable_number,
};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::RunError;
use crate::budget::{Budget, Dollars, LeafCost};
use crate::call_request::{CallFailure, DecodedAgent, message_with_causes};
use crate::clock::millis;
use crate::entry::{agent_request, entry_reply, entry_usage, journal_entry};
use crate::events::{EventKind, Position, RunEvents};
use crate::external::{CompletionSource, ExternalCall, ExternalCompletion};
use crate::journal::{CallRecord, JournalWriter, LeafCache, Replay};
use crate::plan::{FanoutProfile, PriceTable, ProjectedLeaf, Projection, worst_case};

/// Characters of a prompt shown in `leaf_started` events.
const PROMPT_PREVIEW_CHARS: usize = 120;

/// How many times the message limit one `await-next` may hand the guest at once; the rest
/// waits for the next call, so a burst of large replies never lands in the guest (or the
/// journal) as one giant batch.
const BATCH_MESSAGES: usize = 4;

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
struct InFlight {
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
    in_flight: HashMap<u64, InFlight>,
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
    /// For a plan: what the projection saw. Leaves are then answered with placeholders.
    projection: Option<Projection>,
    checkpoints: Checkpoints,
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
    /// Answer every call with a placeholder and record it, for a plan.
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
            in_flight: HashMap::new(),
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

    /// What a projection saw (a plan's run), once it is over.
    pub(crate) fn take_projection(&mut self) -> Option<Projection> {
        self.projection.take()
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

    /// Starts a leaf, or refuses it at once when the cap or the budget says no. A start that
    /// contradicts the journal of a resumed run ends the run.
    pub(crate) fn start_agent(
        &mut self,
        request: DecodedAgent,
    ) -> Result<Result<u64, CallFailure>, RunError> {
        if self.agents_started >= self.max_agents {
            if let Some(projection) = &mut self.projection {
                projection.capped += 1;
            }
            return Ok(Err(CallFailure::new(
                CallErrorKind::AgentCapExceeded,
                format!(
                    "this run may start at most {} leaf agents and has started them all",
                    self.max_agents
                ),
            )));
        }
        if let Some((spent, total)) = self.budget.exhausted() {
            if let Some(projection) = &mut self.projection {
                projection.over_budget += 1;
            }
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
            if let Some(projection) = &mut self.projection {
                projection.over_budget += 1;
            }
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

        let cached = match (&mut self.checkpoints.cache, &record) {
            (Some(cache), Some(record)) if !replayed => cache.take(record),
            _ => None,
        };
        self.in_flight.insert(
            handle,
            InFlight {
                kind: CallKind::Agent,
                record,
                replayed: replayed.then(|| Box::new(leaf.clone())),
                from_journal: replayed,
                cost,
            },
        );
        if let (Some(projection), Some(estimate)) = (&mut self.projection, estimate) {
            self.events.emit(|| leaf_started(&leaf, path));
            // A placeholder valid against the schema, spending the leaf's worst case.
            let result = FakeBackend::reply(&leaf).map(|reply| LeafReply {
                value: reply.value,
                usage: worst_case(&estimate),
            });
            projection.leaves.push(ProjectedLeaf {
                phase: self.phase.clone(),
                estimate,
                round: projection.round,
            });
            self.finished.push_back(Finished {
                handle,
                result,
                duration: Duration::ZERO,
            });
            return Ok(Ok(handle));
        }
        if !replayed && cached.is_none() {
            match &mut self.checkpoints.external {
                Some(source) => {
                    self.events.emit(|| leaf_started(&leaf, path));
                    source.start(handle, ExternalCall::Agent(Box::new(leaf)));
                }
                None => self.add_leaf(leaf, path),
            }
            return Ok(Ok(handle));
        }
        // Answered from a journal: no backend, but the same events as a live leaf.
        self.events.emit(|| leaf_started(&leaf, path));
        if let Some(entry) = cached {
            self.events
                .emit(|| leaf_finished(handle, Ok(entry_usage(&entry)), Duration::ZERO, true));
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
            InFlight {
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
        if let Some(projection) = &mut self.projection {
            // A plan calls no tool: the script gets `null`.
            projection.tools.insert(name);
            projection.tool_calls += 1;
            self.finished.push_back(Finished {
                handle,
                result: Ok(LeafReply {
                    value: Value::Null,
                    usage: Usage::default(),
                }),
                duration: Duration::ZERO,
            });
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

    /// Adds a live leaf: it waits for a slot, then calls the backend.
    fn add_leaf(&mut self, leaf: LeafRequest, path: Vec<Position>) {
        let backend = Arc::clone(&self.backend);
        let events = Arc::clone(&self.events);
        let slots = Arc::clone(&self.slots);
        self.start(Box::pin(async move {
            // The semaphore lives as long as the run; it is never closed.
            let _slot = slots.acquire_owned().await;
            events.emit(|| leaf_started(&leaf, path));
            let started = Instant::now();
            let tools = LeafTools {
                events: Arc::clone(&events),
                call_id: leaf.call_id,
            };
            let result = AssertUnwindSafe(backend.call_observed(&leaf, &tools))
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| Err(BackendError::panicked(panic_message(&*panic))));
            let duration = started.elapsed();
            events.emit(|| {
                let usage = result
                    .as_ref()
                    .map(|r| r.usage)
                    .map_err(|error| message_with_causes(error));
                leaf_finished(leaf.call_id, usage, duration, false)
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

    /// A call that has finished, if any: one done where it started, else a task's report.
    fn try_finished(&mut self) -> Option<Finished> {
        self.finished
            .pop_front()
            .or_else(|| self.receiver.try_recv().ok())
    }

    /// The next call to finish, waiting for a task to report if none has.
    async fn next_finished(&mut self) -> Finished {
        match self.try_finished() {
            Some(done) => done,
            // Every call in flight that the journal does not answer is in one of the two.
            None => self
                .receiver
                .recv()
                .await
                .expect("the run holds a sender, so the channel stays open"),
        }
    }

    /// Waits for at least one pending call and returns every finished one: the next journaled
    /// batch while a resumed run replays, then live completions in finishing order, journaled
    /// before they are returned.
    pub(crate) async fn await_next(
        &mut self,
    ) -> Result<Result<Vec<Completion>, CallFailure>, RunError> {
        if self.in_flight.is_empty() {
            return Ok(Err(CallFailure::invalid(
                "await-next was called with no call pending",
            )));
        }
        if let Some(projection) = &mut self.projection {
            projection.round += 1;
        }
        if let Some(batch) = self
            .checkpoints
            .replay
            .as_mut()
            .and_then(Replay::next_batch)
        {
            return self.replay_batch(batch).map(Ok);
        }
        if self.in_flight.values().any(|call| call.from_journal) {
            return Err(RunError::Divergence(
                "the journal ran out while the script waits for a call it recorded".into(),
            ));
        }
        // Another engine's batch is delivered whole: its boundaries are part of its journal.
        let (first, mut external) = match &mut self.checkpoints.external {
            Some(source) => {
                let mut batch: VecDeque<Finished> = source
                    .next_batch()
                    .await?
                    .into_iter()
                    .map(Finished::from)
                    .collect();
                let first = batch.pop_front().ok_or_else(|| {
                    RunError::Host("the completion source returned an empty batch".into())
                })?;
                (first, Some(batch))
            }
            None => {
                let done = match self.try_finished() {
                    Some(done) => done,
                    None => {
                        self.backend.run_waiting(&self.thread_id, &self.waiting());
                        self.next_finished().await
                    }
                };
                (done, None)
            }
        };
        let mut completions = Vec::new();
        let mut entries = Vec::new();
        let mut batch_bytes = 0;
        let position = self
            .checkpoints
            .journal
            .as_ref()
            .map(JournalWriter::position);
        let mut next = Some(first);
        while let Some(done) = next.take() {
            let offset = completions.len();
            let call = match self.in_flight.remove(&done.handle) {
                Some(call) => call,
                // Only a source can name a call that was never started (or twice).
                None => {
                    return Err(RunError::Host(format!(
                        "the completion source delivered call {}, which is not pending",
                        done.handle
                    )));
                }
            };
            if external.is_some() {
                self.events.emit(|| external_finished(call.kind, &done));
            }
            let (completion, usage) = self.deliverable(done.handle, call.kind, done.result);
            batch_bytes += completion.outcome.as_ref().map_or(0, String::len);
            if let (Some((seq, batch)), Some(record)) = (position, call.record) {
                entries.push(journal_entry(
                    seq + offset as u64,
                    batch,
                    completion.handle,
                    &completion.outcome,
                    record,
                    usage,
                    done.duration,
                ));
            }
            self.budget.count(usage);
            if call.kind == CallKind::Agent {
                self.dollars.settle(call.cost.as_ref(), usage);
            }
            completions.push(completion);
            if let Some(batch) = &mut external {
                next = batch.pop_front();
            } else if batch_bytes < BATCH_MESSAGES.saturating_mul(self.max_reply_bytes) {
                next = self.try_finished();
            }
        }
        if let Some(journal) = &mut self.checkpoints.journal {
            journal.append(entries).await?;
        }
        self.warn_about_budget();
        Ok(Ok(completions))
    }

    /// What the blocked guest has in flight (every call of it live: the journal's were
    /// delivered first).
    fn waiting(&self) -> Waiting {
        let leaves: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(_, call)| call.kind == CallKind::Agent)
            .map(|(handle, _)| *handle)
            .collect();
        let tools = self.in_flight.len() - leaves.len();
        Waiting::new(leaves, tools, self.max_concurrency)
    }

    fn replay_batch(&mut self, batch: Vec<Entry>) -> Result<Vec<Completion>, RunError> {
        let mut completions = Vec::with_capacity(batch.len());
        for entry in batch {
            let call = match self.in_flight.remove(&entry.handle) {
                Some(call) if call.from_journal => call,
                _ => {
                    return Err(RunError::Divergence(format!(
                        "the journal delivers call {} next, which the script has not started",
                        entry.handle
                    )));
                }
            };
            let usage = entry_usage(&entry);
            let duration = Duration::from_millis(entry.duration_ms);
            let result = match &entry.outcome {
                EntryOutcome::Ok { .. } => Ok(usage),
                EntryOutcome::Err { message, .. } => Err(message.clone()),
            };
            match call.kind {
                CallKind::Agent => {
                    if let (Some(leaf), Ok(reply)) = (&call.replayed, entry_reply(&entry)) {
                        self.backend.replayed(leaf, &reply);
                    }
                    self.events
                        .emit(|| leaf_finished(entry.handle, result, duration, true));
                }
                CallKind::Tool => self.events.emit(|| EventKind::ToolFinished {
                    call_id: entry.handle,
                    ok: result.is_ok(),
                    duration_ms: millis(duration),
                    replayed: true,
                    error: result.err(),
                }),
            }
            self.budget.count(usage);
            if call.kind == CallKind::Agent {
                self.dollars.settle(call.cost.as_ref(), usage);
            }
            completions.push(Completion {
                handle: entry.handle,
                outcome: match entry.outcome {
                    EntryOutcome::Ok { value } => Ok(value),
                    EntryOutcome::Err {
                        kind,
                        message,
                        retryable,
                        cause,
                    } => Err(CallFailure {
                        kind,
                        message,
                        retryable,
                        cause,
                    }),
                },
            });
        }
        self.warn_about_budget();
        Ok(completions)
    }

    /// The completion the guest gets for a backend or tool result, and the tokens it counts.
    fn deliverable(
        &self,
        handle: u64,
        kind: CallKind,
        result: Result<LeafReply, BackendError>,
    ) -> (Completion, Usage) {
        let failed = match kind {
            CallKind::Agent => CallErrorKind::AgentFailed,
            CallKind::Tool => CallErrorKind::ToolFailed,
        };
        let (outcome, usage) = match result {
            Ok(reply) => {
                let text = reply.value.to_string();
                // What the guest cannot read back as JSON it must not be handed: it would
                // take `1e999` for infinity, and a replay would refuse the journal.
                let outcome = if let Some(number) = unrepresentable_number(&reply.value) {
                    let message = format!("the reply holds the number {number}, beyond any float");
                    Err(CallFailure::backend(
                        failed,
                        &BackendError::terminal(message),
                    ))
                } else if text.len() > self.max_reply_bytes {
                    let too_large = BackendErrorKind::TooLarge {
                        what: "the reply",
                        size: text.len() as u64,
                        limit: self.max_reply_bytes as u64,
                    };
                    Err(CallFailure::backend(failed, &too_large.into()))
                } else {
                    Ok(text)
                };
                (outcome, reply.usage)
            }
            // A failed leaf may still have used tokens (turns before it failed): they count.
            Err(error) => (Err(CallFailure::backend(failed, &error)), error.usage()),
        };
        (Completion { handle, outcome }, usage)
    }

    fn warn_about_budget(&mut self) {
        if let Some((spent, total)) = self.budget.warning_due() {
            self.events
                .emit(|| EventKind::BudgetWarning { spent, total });
        }
    }
}

/// Publishes the host tool calls a leaf agent makes in its own loop.
#[derive(Debug)]
struct LeafTools {
    events: Arc<RunEvents>,
    call_id: u64,
}

impl LeafObserver for LeafTools {
    fn tool_called(&self, name: &str) {
        self.events.emit(|| EventKind::LeafToolCalled {
            call_id: self.call_id,
            name: name.to_owned(),
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

fn leaf_started(leaf: &LeafRequest, path: Vec<Position>) -> EventKind {
    EventKind::LeafStarted {
        call_id: leaf.call_id,
        label: leaf.label.clone(),
        agent_type: leaf.agent_type.clone(),
        prompt_preview: flowbox_backends::preview(&leaf.prompt_text(), PROMPT_PREVIEW_CHARS),
        path,
    }
}

fn leaf_finished(
    call_id: u64,
    result: Result<Usage, String>,
    duration: Duration,
    replayed: bool,
) -> EventKind {
    EventKind::LeafFinished {
        call_id,
        ok: result.is_ok(),
        tokens: result.as_ref().map_or(0, Usage::total),
        duration_ms: millis(duration),
        replayed,
        error: result.err(),
    }
}

impl From<ExternalCompletion> for Finished {
    fn from(completion: ExternalCompletion) -> Self {
        Self {
            handle: completion.handle,
            result: completion.result,
            duration: completion.duration,
        }
    }
}

/// The event of a call another engine carried out, published when the guest receives it.
fn external_finished(kind: CallKind, done: &Finished) -> EventKind {
    match kind {
        CallKind::Agent => {
            let usage = done
                .result
                .as_ref()
                .map(|reply| reply.usage)
                .map_err(|error| message_with_causes(error));
            leaf_finished(done.handle, usage, done.duration, false)
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
    use flowbox_store::{CheckpointStore, MemoryStore};
    use serde_json::json;

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

    fn flowbox_store_header(thread_id: &str) -> flowbox_store::RunHeader {
        flowbox_store::RunHeader {
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
