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

use crate::calls::{CallSettings, Calls};
use crate::clock::{MonotonicClock, SeededRandom, VirtualTime, WallClock};
use crate::engine::Shared;
use crate::error::{self, TrapContext};
use crate::events::{ErrorInfo, EventKind, RunEvents};
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
        }
    }

    /// The JSON value the script sees as `args`.
    pub fn args(mut self, args: Value) -> Self {
        self.args = args;
        self
    }

    /// Runs under this thread id instead of a new one (it seeds the guest's random source).
    pub fn thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Limits for this run instead of the runtime's.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
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
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Refusing (rather than trapping) lets the interpreter raise `MemoryError`, which the
        // script may catch.
        let allowed = desired as u64 <= self.limit;
        self.denied |= !allowed;
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

impl RunCtx {
    fn new(shared: &Shared, thread_id: &str, limits: Limits, guard: bool) -> Self {
        let events = Arc::new(RunEvents::new(thread_id.to_owned(), shared.events.clone()));
        let time = VirtualTime::default();
        let stdout = MemoryOutputPipe::new(GUEST_STDIO_BYTES);
        let stderr = MemoryOutputPipe::new(GUEST_STDIO_BYTES);
        let start_unix_nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
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
            Arc::clone(&events),
            CallSettings {
                thread_id: thread_id.to_owned(),
                max_agents: limits.max_agents,
                max_concurrency: limits.max_concurrency,
                max_reply_bytes: limits.max_message_bytes,
                budget: limits.budget_tokens,
            },
        );
        Self {
            wasi,
            table: ResourceTable::new(),
            memory: MemoryLimiter {
                limit: limits.memory_bytes,
                denied: false,
            },
            calls,
            limits,
            guard,
            time,
            events,
            record: Record::default(),
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
            timeout: self.limits.timeout,
            guest_stderr: guest_output,
        }
    }
}

/// A fresh store for one run, with fuel, memory cap and deadline in place.
fn new_store(
    shared: &Shared,
    thread_id: &str,
    limits: &Limits,
    guard: bool,
) -> Result<Store<RunCtx>, RunError> {
    let ctx = RunCtx::new(shared, thread_id, limits.clone(), guard);
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
    let thread_id = request
        .thread_id
        .unwrap_or_else(crate::thread::new_thread_id);
    let limits = request.limits.unwrap_or_else(|| shared.limits.clone());
    let mut summary = Summary {
        thread_id: thread_id.clone(),
        ..Summary::default()
    };

    let result = match check_input(&request.script, &request.args, &limits) {
        Err(error) => Err(error),
        Ok(args_text) => match new_store(shared, &thread_id, &limits, request.guard) {
            Err(error) => Err(error),
            Ok(mut store) => {
                let result =
                    call_run(shared, &mut store, &request.script, &args_text, &limits).await;
                fill_summary(&mut summary, &mut store, &limits);
                // Dropping the store drops the run's calls, cancelling leaves still running.
                let events = Arc::clone(&store.data().events);
                drop(store);
                finish(&events, &mut summary, started, &result);
                return RunOutcome { result, summary };
            }
        },
    };
    // Rejected before a store existed: publish the end of the run all the same.
    let events = RunEvents::new(thread_id, shared.events.clone());
    finish(&events, &mut summary, started, &result);
    RunOutcome { result, summary }
}

/// Parses and checks a script without running it; returns its `meta`.
pub(crate) async fn check(shared: &Shared, script: &str) -> Result<Option<Value>, RunError> {
    let limits = shared.limits.clone();
    check_input(script, &Value::Null, &limits)?;
    let thread_id = crate::thread::new_thread_id();
    let mut store = new_store(shared, &thread_id, &limits, true)?;
    let outcome = tokio::time::timeout(limits.timeout, async {
        let instance = shared.pre.instantiate_async(&mut store).await?;
        instance.call_check(&mut store, script).await
    })
    .await;
    let meta = match outcome {
        Err(_) => {
            return Err(RunError::Timeout {
                after: limits.timeout,
            });
        }
        Ok(Err(trap)) => return Err(error::classify(trap, &store.data().trap_context())),
        Ok(Ok(Err(script_error))) => {
            return Err(error::from_guest(script_error, limits.memory_bytes));
        }
        Ok(Ok(Ok(meta))) => meta,
    };
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
    let text = match outcome {
        Err(_) => {
            return Err(RunError::Timeout {
                after: limits.timeout,
            });
        }
        Ok(Err(trap)) => return Err(error::classify(trap, &store.data().trap_context())),
        Ok(Ok(Err(script_error))) => {
            return Err(error::from_guest(script_error, limits.memory_bytes));
        }
        Ok(Ok(Ok(text))) => text,
    };
    if text.len() > limits.max_result_bytes {
        return Err(RunError::ResultTooLarge {
            size: text.len(),
            limit: limits.max_result_bytes,
        });
    }
    serde_json::from_str(&text).map_err(|e| RunError::Guest(format!("the result is not JSON: {e}")))
}

fn fill_summary(summary: &mut Summary, store: &mut Store<RunCtx>, limits: &Limits) {
    let remaining = store.get_fuel().unwrap_or(0);
    let ctx = store.data_mut();
    let spent = ctx.calls.spent();
    summary.name = ctx.record.name.take();
    summary.phases = std::mem::take(&mut ctx.record.phases);
    summary.logs = std::mem::take(&mut ctx.record.logs);
    summary.agents_spawned = ctx.calls.agents_started();
    summary.input_tokens = spent.input_tokens;
    summary.output_tokens = spent.output_tokens;
    summary.tokens_spent = spent.total();
    summary.fuel_used = limits.fuel.saturating_sub(remaining);
}

fn finish(
    events: &RunEvents,
    summary: &mut Summary,
    started: Instant,
    result: &Result<Value, RunError>,
) {
    summary.ok = result.is_ok();
    summary.duration_ms = duration_ms(started.elapsed());
    events.emit(|| EventKind::RunFinished {
        ok: result.is_ok(),
        summary: Box::new(summary.clone()),
        error: result.as_ref().err().map(ErrorInfo::from),
    });
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
