//! The state of one run: a fresh `Store` holding a [`RunCtx`].
//!
//! Everything a run may touch is built here per run and dropped with the store: the WASI
//! context (no files, no environment, no arguments, no network, virtual clocks, seeded
//! random, capped stdout/stderr), the memory limiter, and the calls in flight (dropping them
//! cancels any leaf still running; `retire` cancels them and drops the rest off the caller's
//! path).

use std::future::poll_fn;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{Engine, ResourceLimiter, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use flowbox_backends::{LeafBackend, ToolSet};
use flowbox_store::{BranchFailure, CheckpointStore};

use crate::calls::{CallSettings, Calls, Checkpoints};
use crate::clock::{MonotonicClock, Randomness, SeededRandom, VirtualTime, WallClock};
use crate::error::TrapContext;
use crate::events::RunEvents;
use crate::plan::{FanoutProfile, PriceTable};
use crate::{Limits, RunError};

/// How much of the guest's own stdout/stderr is kept for diagnostics. Scripts' `print` goes
/// to the log instead; these only carry interpreter-level messages.
const GUEST_STDIO_BYTES: usize = 64 << 10;

/// The most table elements the guest may grow to (the interpreter needs a few thousand).
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// The state of one run, owned by its `Store`.
pub(crate) struct RunCtx {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
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
    /// Where its linear memory is, when it was found, for the warm pool (a pooled run) or the
    /// runtime's profile of fresh instances (a fresh one) to learn which pages a run writes and reads once the run
    /// is over.
    pub(crate) touched: Option<crate::instance::prefault::TouchedPages>,
    /// The streams its WASI context draws random numbers from.
    pub(crate) random: Randomness,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

/// What the run reported about itself, for the summary.
#[derive(Debug, Default)]
pub(crate) struct Record {
    pub name: Option<String>,
    /// The phase titles `meta` declares, when it declares any.
    pub declared_phases: Option<Vec<String>>,
    pub phases: Vec<String>,
    pub logs: Vec<String>,
    pub failed_branches: Vec<BranchFailure>,
    pub failed_branch_count: u32,
    pub warnings: Vec<String>,
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

/// Caps linear memory and remembers whether a growth was refused, so an uncaught error or a
/// trap that follows (an interpreter abort) is reported as running out of memory.
pub(crate) struct MemoryLimiter {
    limit: u64,
    pub(crate) denied: bool,
    /// The initial size the guest's memory was refused, when the cap is below it.
    refused_at_start: Option<usize>,
    /// The largest any linear memory has grown to, in bytes.
    pub(crate) largest: u64,
    /// All the linear memory the guest holds, in bytes.
    pub(crate) total: u64,
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
        if allowed {
            self.largest = self.largest.max(desired as u64);
            self.total += (desired - current) as u64;
        }
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
pub(crate) struct RunSetup {
    pub(crate) thread_id: String,
    pub(crate) events: Arc<RunEvents>,
    pub(crate) limits: Limits,
    pub(crate) guard: bool,
    pub(crate) start_unix_nanos: u64,
    pub(crate) checkpoints: Checkpoints,
}

/// How a run's leaves are priced and placed: the price table, the fan-out profile, and whether
/// the run is a projection for a plan (placeholder leaves, nothing called).
#[derive(Debug, Default)]
pub(crate) struct Pricing {
    pub(crate) prices: Option<Arc<PriceTable>>,
    pub(crate) fanout: Option<FanoutProfile>,
    pub(crate) projection: bool,
}

impl RunCtx {
    /// The state of a run of `setup`, whose leaves go to `backend` and whose `call_tool`
    /// calls reach `tools`, journaled in `store`, priced and placed by `pricing`.
    pub(crate) fn new(
        backend: Arc<dyn LeafBackend>,
        tools: ToolSet,
        store: Option<Arc<dyn CheckpointStore>>,
        setup: RunSetup,
        pricing: Pricing,
    ) -> Self {
        let RunSetup {
            thread_id,
            events,
            limits,
            guard,
            start_unix_nanos,
            checkpoints,
        } = setup;
        let thread_id = thread_id.as_str();
        let time = VirtualTime::new(start_unix_nanos);
        let stdout = MemoryOutputPipe::new(GUEST_STDIO_BYTES);
        let stderr = MemoryOutputPipe::new(GUEST_STDIO_BYTES);
        let seed = SeededRandom::new(thread_id, "seed");
        let random = Randomness::new(thread_id);
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .wall_clock(WallClock {
                start_unix_nanos,
                time: time.clone(),
            })
            .monotonic_clock(MonotonicClock { time: time.clone() })
            .secure_random(random.secure.clone())
            .insecure_random(random.insecure.clone())
            .insecure_random_seed(seed.seed_u128())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let calls = Calls::new(
            backend,
            tools,
            Arc::clone(&events),
            CallSettings {
                thread_id: thread_id.to_owned(),
                max_agents: limits.max_agents,
                max_tool_calls: limits.max_tool_calls,
                max_concurrency: limits.max_concurrency,
                max_reply_bytes: limits.max_message_bytes,
                budget: limits.budget_tokens,
                budget_usd: limits.budget_usd,
                prices: pricing.prices,
                fanout: pricing.fanout,
                projection: pricing.projection,
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
                largest: 0,
                total: 0,
            },
            calls,
            limits,
            guard,
            time,
            events,
            record: Record::default(),
            thread_id: thread_id.to_owned(),
            store,
            touched: None,
            random,
            stdout,
            stderr,
        }
    }

    pub(crate) fn trap_context(&self) -> TrapContext {
        let mut guest_output = String::from_utf8_lossy(&self.stderr.contents()).into_owned();
        guest_output.push_str(&String::from_utf8_lossy(&self.stdout.contents()));
        TrapContext {
            fuel_limit: self.limits.fuel,
            memory_limit: self.limits.memory_bytes,
            memory_denied: self.memory.denied,
            memory_refused_at_start: self.memory.refused_at_start,
            guest_stderr: guest_output,
        }
    }
}

/// How much fuel a busy guest burns between yields to its thread: a few milliseconds of its
/// work. Each yield lets other runs on the thread progress and checks the run's deadline (see
/// [`within`]). A yield is no check the compiled guest makes: fuel is counted anyway, and
/// wasmtime yields when a share of it runs out, so the guest's code carries no interruption
/// checks of its own (epoch interruption's, a load and a compare at every loop head and
/// function entry, made a CPU-bound script and a fan-out ~9 % slower).
const YIELD_FUEL: u64 = 10_000_000;

/// A fresh store for one run, with fuel (yielding every [`YIELD_FUEL`]) and memory cap in
/// place.
pub(crate) fn new_store(engine: &Engine, ctx: RunCtx) -> Result<Store<RunCtx>, RunError> {
    let fuel = ctx.limits.fuel;
    let mut store = Store::new(engine, ctx);
    store.limiter(|ctx| &mut ctx.memory);
    store
        .fuel_async_yield_interval(Some(YIELD_FUEL))
        .and_then(|()| store.set_fuel(fuel))
        .map_err(|e| RunError::Host(format!("cannot set fuel: {e}")))?;
    Ok(store)
}

/// Drives `work`, a call into the guest, for at most `timeout`: `None` when the time ran out
/// first, and `work` was dropped, which cancels the leaves it waits on. A guest waiting on
/// leaves is stopped by the timer, a busy one at its first yield past the deadline.
pub(crate) async fn within<T>(timeout: Duration, work: impl Future<Output = T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    let mut work = pin!(work);
    let mut timer = pin!(tokio::time::sleep_until(deadline.into()));
    poll_fn(|cx| {
        if let Poll::Ready(value) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(value));
        }
        if Instant::now() >= deadline {
            return Poll::Ready(None);
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}
