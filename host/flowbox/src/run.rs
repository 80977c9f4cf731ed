//! One run: a fresh `Store` holding a [`RunCtx`], the guest's `run` export, and the outcome.
//!
//! Everything a run may touch is built here per run and dropped with the store: the WASI
//! context (no files, no environment, no arguments, no network, virtual clocks, seeded
//! random, capped stdout/stderr), the memory limiter, and the calls in flight (dropping them
//! cancels any leaf still running).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use flowbox_store::{CheckpointStore, Claim, RunEnd, RunHeader, RunStatus, StoredRun};

use crate::calls::{CallSettings, Calls, Checkpoints};
use crate::clock::{MonotonicClock, SeededRandom, VirtualTime, WallClock};
use crate::engine::Shared;
use crate::error::{self, TrapContext};
use crate::events::{ErrorInfo, EventKind, RunEvents};
use crate::journal::{JournalWriter, LeafCache, Replay, journal_error, sha256_hex};
use crate::{Limits, RunError, RunOutcome, Summary};

/// How much of the guest's own stdout/stderr is kept for diagnostics. Scripts' `print` goes
/// to the log instead; these only carry interpreter-level messages.
const GUEST_STDIO_BYTES: usize = 64 << 10;

/// The most table elements the guest may grow to (the interpreter needs a few thousand).
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// A script to run, with its arguments and options.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub(crate) script: String,
    pub(crate) args: Value,
    pub(crate) thread_id: Option<String>,
    pub(crate) limits: Option<Limits>,
    pub(crate) guard: bool,
    pub(crate) reuse_leaves_from: Option<String>,
}

impl RunRequest {
    /// A request to run `script` with empty args (`{}`), a new thread id and the runtime's
    /// limits.
    pub fn new(script: impl Into<String>) -> Self {
        Self {
            script: script.into(),
            args: Value::Object(serde_json::Map::new()),
            thread_id: None,
            limits: None,
            guard: true,
            reuse_leaves_from: None,
        }
    }

    /// A new thread id such as `20261130-034521-9f2c1a0b3e7d4c58`, as a request without one
    /// gets: the UTC start time, so ids sort by age, and 64 random bits.
    pub fn new_thread_id() -> String {
        crate::thread::new_thread_id()
    }

    /// The JSON value the script sees as `args`.
    pub fn args(mut self, args: Value) -> Self {
        self.args = args;
        self
    }

    /// Runs under this thread id instead of a new one (it seeds the guest's random source).
    ///
    /// With a journal ([`crate::RuntimeBuilder::store`]), an id the journal already holds
    /// resumes that thread: the script and args must be the ones it started with (else the run
    /// ends with [`RunError::Divergence`]), a finished thread returns its recorded outcome, and
    /// an interrupted one replays its journal and continues live.
    pub fn thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Limits for this run instead of the runtime's.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Lends this run the results of byte-identical requests journaled by an earlier thread,
    /// wherever they occur in the new run (needs a journal). Unlike resuming, the script may
    /// differ from the earlier one: requests that changed go to the backend, unchanged ones are
    /// answered from the earlier thread's results, each at most once and in their order.
    pub fn reuse_leaves_from(mut self, thread_id: impl Into<String>) -> Self {
        self.reuse_leaves_from = Some(thread_id.into());
        self
    }

    /// Turns the in-guest script guard off (it is on by default).
    ///
    /// The guard is not the security boundary — the WebAssembly sandbox is — so a script run
    /// without it still has no files, environment, network or host functions beyond the WIT
    /// interface; it merely gets the interpreter's full standard library. Meant for tests
    /// that prove exactly that, and for trusted scripts.
    pub fn guard(mut self, enabled: bool) -> Self {
        self.guard = enabled;
        self
    }
}

/// The state of one run, owned by its `Store`.
pub(crate) struct RunCtx {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryLimiter,
    pub(crate) calls: Calls,
    pub(crate) limits: Limits,
    pub(crate) guard: bool,
    pub(crate) time: VirtualTime,
    pub(crate) events: Arc<RunEvents>,
    pub(crate) record: Record,
    pub(crate) thread_id: String,
    /// The journal, when the runtime keeps one.
    pub(crate) store: Option<Arc<dyn CheckpointStore>>,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

/// What the run reported about itself, for the summary.
#[derive(Debug, Default)]
pub(crate) struct Record {
    pub name: Option<String>,
    pub phases: Vec<String>,
    pub logs: Vec<String>,
    pub output_bytes: usize,
}

impl WasiView for RunCtx {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Caps linear memory and remembers whether a growth was refused, so a trap that follows
/// (an interpreter abort) is reported as running out of memory.
pub(crate) struct MemoryLimiter {
    limit: u64,
    pub(crate) denied: bool,
    /// The initial size the guest's memory was refused, when the cap is below it.
    refused_at_start: Option<usize>,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Refusing (rather than trapping) lets the interpreter raise `MemoryError`, which the
        // script may catch.
        let allowed = desired as u64 <= self.limit;
        self.denied |= !allowed;
        if !allowed && current == 0 {
            // The memory is being created: the cap is below the guest's initial size.
            self.refused_at_start = Some(desired);
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// How a run starts: its identity, virtual start time, and journal.
struct Plan {
    thread_id: String,
    events: Arc<RunEvents>,
    limits: Limits,
    guard: bool,
    start_unix_nanos: u64,
    checkpoints: Checkpoints,
}

impl RunCtx {
    fn new(shared: &Shared, plan: Plan) -> Self {
        let Plan {
            thread_id,
            events,
            limits,
            guard,
            start_unix_nanos,
            checkpoints,
        } = plan;
        let thread_id = thread_id.as_str();
        let time = VirtualTime::default();
        let stdout = MemoryOutputPipe::new(GUEST_STDIO_BYTES);
        let stderr = MemoryOutputPipe::new(GUEST_STDIO_BYTES);
        let seed = SeededRandom::new(thread_id, "seed");
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .wall_clock(WallClock {
                start_unix_nanos,
                time: time.clone(),
            })
            .monotonic_clock(MonotonicClock { time: time.clone() })
            .secure_random(SeededRandom::new(thread_id, "secure"))
            .insecure_random(SeededRandom::new(thread_id, "insecure"))
            .insecure_random_seed(seed.seed_u128())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let calls = Calls::new(
            Arc::clone(&shared.backend),
            shared.tools.clone(),
            Arc::clone(&events),
            CallSettings {
                thread_id: thread_id.to_owned(),
                max_agents: limits.max_agents,
                max_tool_calls: limits.max_tool_calls,
                max_concurrency: limits.max_concurrency,
                max_reply_bytes: limits.max_message_bytes,
                budget: limits.budget_tokens,
            },
            checkpoints,
        );
        Self {
            wasi,
            table: ResourceTable::new(),
            memory: MemoryLimiter {
                limit: limits.memory_bytes,
                denied: false,
                refused_at_start: None,
            },
            calls,
            limits,
            guard,
            time,
            events,
            record: Record::default(),
            thread_id: thread_id.to_owned(),
            store: shared.store.clone(),
            stdout,
            stderr,
        }
    }

    fn trap_context(&self) -> TrapContext {
        let mut guest_output = String::from_utf8_lossy(&self.stderr.contents()).into_owned();
        guest_output.push_str(&String::from_utf8_lossy(&self.stdout.contents()));
        TrapContext {
            fuel_limit: self.limits.fuel,
            memory_limit: self.limits.memory_bytes,
            memory_denied: self.memory.denied,
            memory_refused_at_start: self.memory.refused_at_start,
            timeout: self.limits.timeout,
            guest_stderr: guest_output,
        }
    }
}

/// A fresh store for one run, with fuel, memory cap and deadline in place.
fn new_store(shared: &Shared, plan: Plan) -> Result<Store<RunCtx>, RunError> {
    let limits = plan.limits.clone();
    let ctx = RunCtx::new(shared, plan);
    let mut store = Store::new(&shared.engine, ctx);
    store.limiter(|ctx| &mut ctx.memory);
    store
        .set_fuel(limits.fuel)
        .map_err(|e| RunError::Host(format!("cannot set fuel: {e}")))?;
    // Each epoch tick (see `engine::EpochTicker`) lets other runs on this thread progress and
    // checks the deadline, so a CPU-bound script is stopped on time.
    let deadline = Instant::now() + limits.timeout;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        Ok(if Instant::now() >= deadline {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
        })
    });
    Ok(store)
}

/// Runs one request to its outcome. Never panics on guest behaviour.
pub(crate) async fn execute(shared: &Shared, request: RunRequest) -> RunOutcome {
    let started = Instant::now();
    let (thread_id, generated) = match &request.thread_id {
        Some(id) => (id.clone(), false),
        None => (crate::thread::new_thread_id(), true),
    };
    let mut summary = Summary {
        thread_id: thread_id.clone(),
        ..Summary::default()
    };
    let events = Arc::new(RunEvents::new(thread_id.clone(), shared.events.clone()));

    let prepared = match crate::thread::check_thread_id(&thread_id) {
        Ok(()) => prepare(shared, &request, thread_id, generated, Arc::clone(&events)).await,
        Err(error) => Err(error),
    };
    // The claim on the thread lasts until its end is journaled.
    let (plan, args_text, _claim) = match prepared {
        Ok(Prepared::Run(plan, args_text, claim)) => (plan, args_text, claim),
        Ok(Prepared::Finished(outcome)) => {
            publish_end(&events, &outcome.summary, &outcome.result);
            return outcome;
        }
        Err(error) => {
            // Rejected before a store existed: publish the end of the run all the same.
            let result = Err(error);
            summary.duration_ms = duration_ms(started.elapsed());
            publish_end(&events, &summary, &result);
            return RunOutcome {
                result,
                summary,
                recorded: false,
            };
        }
    };
    let journaled = plan.checkpoints.journal.is_some();
    let limits = plan.limits.clone();
    // Whatever happens below — even if the caller drops this future — the backend hears
    // that the run ended, so it can let go of what it kept for it.
    let _ended = RunEnded {
        backend: shared.backend.as_ref(),
        thread_id: &summary.thread_id.clone(),
    };
    let mut result = match new_store(shared, plan) {
        Err(error) => Err(error),
        Ok(mut store) => {
            let mut result =
                call_run(shared, &mut store, &request.script, &args_text, &limits).await;
            let unreplayed = store.data().calls.unreplayed();
            if result.is_ok() && unreplayed > 0 {
                result = Err(RunError::Divergence(format!(
                    "the script finished with {unreplayed} journaled completions it never asked for"
                )));
            }
            fill_summary(&mut summary, &mut store, &limits);
            // Dropping the store drops the run's calls, cancelling leaves still running.
            drop(store);
            result
        }
    };
    summary.ok = result.is_ok();
    summary.duration_ms = duration_ms(started.elapsed());
    if journaled
        && ends_thread(&result)
        && let Some(store) = &shared.store
    {
        let outcome = RunOutcome {
            result: result.clone(),
            summary: summary.clone(),
            recorded: false,
        };
        let end = RunEnd {
            status: if outcome.result.is_ok() {
                RunStatus::Succeeded
            } else {
                RunStatus::Failed
            },
            outcome: outcome.to_json(),
            finished_unix_ms: unix_millis(),
        };
        if let Err(error) = store.finish(&summary.thread_id, &end).await {
            result = Err(journal_error(error));
        }
    }
    summary.ok = result.is_ok();
    publish_end(&events, &summary, &result);
    RunOutcome {
        result,
        summary,
        recorded: false,
    }
}

/// Tells the backend a run ended when dropped.
struct RunEnded<'a> {
    backend: &'a dyn flowbox_backends::LeafBackend,
    thread_id: &'a str,
}

impl Drop for RunEnded<'_> {
    fn drop(&mut self) {
        self.backend.run_finished(self.thread_id);
    }
}

/// Whether a run's result is its thread's outcome. A result or an error of the script (a
/// breached limit included) is final; a failure of the machinery — the journal, a
/// divergence, a crash of the guest or the host — is not: the thread stays open to resume.
fn ends_thread(result: &Result<Value, RunError>) -> bool {
    !matches!(
        result,
        Err(RunError::Divergence(_)
            | RunError::MemoryCapTooSmall { .. }
            | RunError::Journal(_)
            | RunError::Guest(_)
            | RunError::Host(_)
            | RunError::UnknownThread(_))
    )
}

/// What `prepare` decided.
enum Prepared {
    /// Run the guest with this plan and these args, holding the thread's claim when journaled.
    Run(Plan, String, Option<Claim>),
    /// The thread already finished; this is its recorded outcome.
    Finished(RunOutcome),
}

/// Checks the input and, with a journal, starts the thread or picks up where it stopped. A
/// resumed thread runs with the limits and guard it started with, unless the request sets
/// limits of its own.
async fn prepare(
    shared: &Shared,
    request: &RunRequest,
    thread_id: String,
    generated: bool,
    events: Arc<RunEvents>,
) -> Result<Prepared, RunError> {
    let now = unix_nanos();
    let mut plan = Plan {
        thread_id,
        events,
        limits: request
            .limits
            .clone()
            .unwrap_or_else(|| shared.limits.clone()),
        guard: request.guard,
        start_unix_nanos: now,
        checkpoints: Checkpoints::default(),
    };
    let Some(store) = &shared.store else {
        if request.reuse_leaves_from.is_some() {
            return Err(RunError::Journal(
                "reusing leaves needs a journal; configure a store".into(),
            ));
        }
        let args_text = check_input(&request.script, &request.args, &plan.limits)?;
        return Ok(Prepared::Run(plan, args_text, None));
    };
    if let Some(from) = &request.reuse_leaves_from {
        let earlier = store
            .load(from)
            .await
            .map_err(journal_error)?
            .ok_or_else(|| RunError::UnknownThread(from.clone()))?;
        plan.checkpoints.cache = Some(LeafCache::new(earlier.entries));
    }
    let mut existing = store.load(&plan.thread_id).await.map_err(journal_error)?;
    if existing.is_some() && generated {
        // A generated id names a new thread; on the (astronomically rare) collision, draw again.
        plan.thread_id = crate::thread::new_thread_id();
        existing = store.load(&plan.thread_id).await.map_err(journal_error)?;
    }
    // A refused or finished thread is answered before it is claimed, so it leaves no lease.
    if let Admission::Finished(outcome) = admit(&mut plan, request, existing.as_ref())? {
        return Ok(Prepared::Finished(*outcome));
    }
    let claim = store.claim(&plan.thread_id).await.map_err(journal_error)?;
    // Read again under the claim: another run may have moved the thread on meanwhile.
    let existing = store.load(&plan.thread_id).await.map_err(journal_error)?;
    let args_text = match admit(&mut plan, request, existing.as_ref())? {
        Admission::Finished(outcome) => return Ok(Prepared::Finished(*outcome)),
        Admission::Run(args_text) => args_text,
    };
    match existing {
        None => {
            let header = RunHeader {
                thread_id: plan.thread_id.clone(),
                script: request.script.clone(),
                script_sha256: sha256_hex(request.script.as_bytes()),
                args: request.args.clone(),
                args_sha256: sha256_hex(args_text.as_bytes()),
                start_unix_nanos: now,
                seed: plan.thread_id.clone(),
                limits: serde_json::to_value(&plan.limits).unwrap_or(Value::Null),
                guard: plan.guard,
                created_unix_ms: unix_millis(),
            };
            store.begin(&header).await.map_err(journal_error)?;
            plan.checkpoints.journal = Some(JournalWriter::new(
                Arc::clone(store),
                plan.thread_id.clone(),
                &[],
            ));
        }
        Some(run) => {
            plan.start_unix_nanos = run.header.start_unix_nanos;
            plan.checkpoints.journal = Some(JournalWriter::new(
                Arc::clone(store),
                plan.thread_id.clone(),
                &run.entries,
            ));
            plan.checkpoints.replay = Some(Replay::new(run.entries));
        }
    }
    Ok(Prepared::Run(plan, args_text, Some(claim)))
}

/// Whether a journaled request may run.
enum Admission {
    /// Yes, with these args (as JSON text).
    Run(String),
    /// The thread already finished: this is its recorded outcome.
    Finished(Box<RunOutcome>),
}

/// Checks a request against its thread as journaled (`None`: a new thread): a resumed thread
/// takes the limits (unless the request sets its own) and guard it started with, and must be
/// given the same script and args.
fn admit(
    plan: &mut Plan,
    request: &RunRequest,
    existing: Option<&StoredRun>,
) -> Result<Admission, RunError> {
    let Some(run) = existing else {
        return check_input(&request.script, &request.args, &plan.limits).map(Admission::Run);
    };
    let header = &run.header;
    if request.limits.is_none() {
        plan.limits = serde_json::from_value(header.limits.clone()).map_err(|e| {
            RunError::Journal(format!(
                "the limits thread {} started with are unreadable: {e}",
                plan.thread_id
            ))
        })?;
    }
    plan.guard = header.guard;
    let args_text = check_input(&request.script, &request.args, &plan.limits)?;
    if header.script_sha256 != sha256_hex(request.script.as_bytes()) {
        return Err(RunError::Divergence(format!(
            "the script is not the one thread {} started with",
            plan.thread_id
        )));
    }
    if header.args_sha256 != sha256_hex(args_text.as_bytes()) {
        return Err(RunError::Divergence(format!(
            "the args are not the ones thread {} started with",
            plan.thread_id
        )));
    }
    Ok(match &run.end {
        Some(end) => Admission::Finished(Box::new(recorded_outcome(
            &plan.thread_id,
            end.outcome.clone(),
        ))),
        None => Admission::Run(args_text),
    })
}

/// The outcome of a run refused before it started.
pub(crate) fn rejected(thread_id: &str, error: RunError) -> RunOutcome {
    RunOutcome {
        result: Err(error),
        summary: Summary {
            thread_id: thread_id.to_owned(),
            ..Summary::default()
        },
        recorded: false,
    }
}

/// The outcome a finished thread recorded, as a [`RunOutcome`].
fn recorded_outcome(thread_id: &str, outcome: Value) -> RunOutcome {
    let mut summary: Summary =
        serde_json::from_value(outcome["summary"].clone()).unwrap_or_default();
    summary.thread_id = thread_id.to_owned();
    let result = if outcome["ok"] == Value::Bool(true) {
        Ok(outcome["result"].clone())
    } else {
        Err(
            serde_json::from_value::<ErrorInfo>(outcome["error"].clone())
                .map(RunError::Recorded)
                .unwrap_or_else(|e| {
                    RunError::Journal(format!("the recorded outcome is unreadable: {e}"))
                }),
        )
    };
    RunOutcome {
        result,
        summary,
        recorded: true,
    }
}

/// Parses and checks a script without running it; returns its `meta`.
pub(crate) async fn check(shared: &Shared, script: &str) -> Result<Option<Value>, RunError> {
    let limits = shared.limits.clone();
    check_input(script, &Value::Null, &limits)?;
    let thread_id = crate::thread::new_thread_id();
    let plan = Plan {
        events: Arc::new(RunEvents::new(thread_id.clone(), shared.events.clone())),
        thread_id,
        limits: limits.clone(),
        guard: true,
        start_unix_nanos: unix_nanos(),
        checkpoints: Checkpoints::default(),
    };
    let mut store = new_store(shared, plan)?;
    let outcome = tokio::time::timeout(limits.timeout, async {
        let instance = shared.pre.instantiate_async(&mut store).await?;
        instance.call_check(&mut store, script).await
    })
    .await;
    let meta = guest_result(outcome, &store, &limits)?;
    let meta: Value = serde_json::from_str(&meta)
        .map_err(|e| RunError::Guest(format!("check returned invalid JSON: {e}")))?;
    Ok((!meta.is_null()).then_some(meta))
}

fn check_input(script: &str, args: &Value, limits: &Limits) -> Result<String, RunError> {
    if script.len() > limits.max_script_bytes {
        return Err(RunError::ScriptTooLarge {
            size: script.len(),
            limit: limits.max_script_bytes,
        });
    }
    let args_text = args.to_string();
    if args_text.len() > limits.max_message_bytes {
        return Err(RunError::InvalidArgs(format!(
            "the args are {} bytes of JSON; the limit is {} bytes",
            args_text.len(),
            limits.max_message_bytes
        )));
    }
    Ok(args_text)
}

async fn call_run(
    shared: &Shared,
    store: &mut Store<RunCtx>,
    script: &str,
    args: &str,
    limits: &Limits,
) -> Result<Value, RunError> {
    // The epoch callback stops a busy guest; this timeout stops a guest waiting on leaves.
    let outcome = tokio::time::timeout(limits.timeout, async {
        let instance = shared.pre.instantiate_async(&mut *store).await?;
        instance.call_run(&mut *store, script, args).await
    })
    .await;
    let text = guest_result(outcome, store, limits)?;
    if text.len() > limits.max_result_bytes {
        return Err(RunError::ResultTooLarge {
            size: text.len(),
            limit: limits.max_result_bytes,
        });
    }
    serde_json::from_str(&text).map_err(|e| RunError::Guest(format!("the result is not JSON: {e}")))
}

/// What a call of one of the guest's exports ended with, as a run error when it did not
/// return: the deadline, a trap (classified), or the script's own error.
fn guest_result<T>(
    outcome: Result<
        wasmtime::Result<Result<T, crate::bindings::ScriptError>>,
        tokio::time::error::Elapsed,
    >,
    store: &Store<RunCtx>,
    limits: &Limits,
) -> Result<T, RunError> {
    match outcome {
        Err(_) => Err(RunError::Timeout {
            after: limits.timeout,
        }),
        Ok(Err(trap)) => Err(error::classify(trap, &store.data().trap_context())),
        Ok(Ok(Err(script_error))) => Err(error::from_guest(script_error, limits.memory_bytes)),
        Ok(Ok(Ok(value))) => Ok(value),
    }
}

fn fill_summary(summary: &mut Summary, store: &mut Store<RunCtx>, limits: &Limits) {
    let remaining = store.get_fuel().unwrap_or(0);
    let ctx = store.data_mut();
    let spent = ctx.calls.spent();
    summary.name = ctx.record.name.take();
    summary.phases = std::mem::take(&mut ctx.record.phases);
    summary.logs = std::mem::take(&mut ctx.record.logs);
    summary.agents_spawned = ctx.calls.agents_started();
    summary.tools_called = ctx.calls.tools_called();
    summary.input_tokens = spent.input_tokens;
    summary.output_tokens = spent.output_tokens;
    summary.tokens_spent = spent.total();
    summary.fuel_used = limits.fuel.saturating_sub(remaining);
}

/// Publishes the end of a run.
fn publish_end(events: &RunEvents, summary: &Summary, result: &Result<Value, RunError>) {
    events.emit(|| EventKind::RunFinished {
        ok: result.is_ok(),
        summary: Box::new(summary.clone()),
        error: result.as_ref().err().map(ErrorInfo::from),
    });
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn unix_millis() -> u64 {
    unix_nanos() / 1_000_000
}
