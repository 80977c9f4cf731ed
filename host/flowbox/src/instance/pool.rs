//! The warm pool: guests instantiated ahead of demand, each handed to exactly one run.
//!
//! Instantiating the guest (a `Store` and componentize-py's linked core modules) and its
//! warm-up (the runtime's own set-up on the first call of an export, see the WIT's `warm-up`)
//! are the part of a run's start that does not depend on the request, so one background
//! thread does them before a request arrives. At hand-over the run's own state replaces the
//! placeholder in the store (WASI context, clocks, random streams, calls, limits), the run's
//! random streams skip what the warm-up drew from the placeholder's, fuel is set to what a
//! fresh instance would have left after its warm-up, and the run's deadline starts with its
//! call: the guest sees exactly what it would have seen in a fresh instance. Every instance is
//! dropped after its run.
//!
//! Before an instance joins the pool its linear memory is pre-faulted (see `prefault`): the
//! copy-on-write of its memory image is broken page by page without writing anything, so the
//! run does not pay a page fault for each page it first writes, which is most of what a
//! trivial run from a pool without it costs. Which pages: those that runs from the pool have
//! written (and, for reading, those they only read), learnt after each run on the thread that
//! drops its store (a fraction of the memory); none until the first run from the pool has
//! ended, then the instances already waiting are pre-faulted too.
//!
//! A run takes the instance that joined the pool last: its pages were copied most recently, so
//! more of them are still in the processor's caches than an older one's (~0.67 ms for a
//! trivial run from an idle pool, against ~0.95 ms taking the oldest).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use flowbox_backends::{LeafBackend, ToolSet};
use wasmtime::{Engine, Store};

use crate::bindings::{Workflow, WorkflowPre};
use crate::calls::Checkpoints;
use crate::events::{EventHub, RunEvents};
use crate::instance::busy::{self, MAX_DEFER, POLL, STAY_AWAKE};
use crate::instance::context::{Pricing, RunCtx, RunSetup, new_store};
use crate::instance::fault_around;
use crate::instance::prefault::{self, Access, Mappings, TouchedPages};
use crate::instance::profile::{PageProfile, Targets, Threshold};
use crate::instance::retire::unmap;
use crate::{Limits, RunError};

/// The fuel a pooled instance instantiates with: far more than instantiation takes, so what
/// it took can be subtracted from a run's own fuel at hand-over.
const INSTANTIATION_FUEL: u64 = u64::MAX / 2;

/// What a warm pool holds now, from [`Runtime::warm_pool`](crate::Runtime::warm_pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WarmPoolStats {
    /// The most instances the pool holds ready.
    pub capacity: usize,
    /// Instances ready now.
    pub ready: usize,
    /// The linear memory the ready instances hold between them, in bytes.
    pub memory_bytes: u64,
    /// Of that, what is pre-faulted, in bytes: private and resident already, so that a run
    /// takes no page fault when it first writes there: on Linux 5.14 or later, the pages that
    /// runs from the pool have written (~1 MiB an instance for trivial scripts), once one
    /// has ended; until then, and on other systems, nothing (the memory stays copy-on-write
    /// until a run writes to it). The pages runs only read are mapped ahead too, which costs
    /// no memory of their own (they are the compiled guest file's, shared).
    pub prefaulted_bytes: u64,
    /// Runs that started from a pooled instance.
    pub hits: u64,
    /// Runs that found the pool empty (or needed limits a pooled instance cannot give them)
    /// and instantiated a fresh guest on the request path.
    pub misses: u64,
}

/// A pooled instance: instantiated, never run.
pub(crate) struct Warm {
    store: Store<RunCtx>,
    instance: Workflow,
    /// The fuel instantiation and the guest's warm-up took, the same for every instance.
    fuel_spent: u64,
    /// The words instantiation and the warm-up drew from the placeholder's random streams,
    /// which its run's streams skip: a fresh instance draws them from the run's own.
    random_drawn: [u64; 2],
    /// The largest linear memory instantiation created, in bytes.
    largest_memory: u64,
    /// All the linear memory instantiation created, in bytes.
    memory_bytes: u64,
    /// How much of it is pre-faulted, in bytes.
    prefaulted_bytes: u64,
    /// It joined the pool before a run had shown which pages to pre-fault.
    awaits_profile: bool,
    /// Its run can show the profile which pages runs write: it was pre-faulted by the
    /// profile, or not yet.
    teaches: bool,
    /// Where its linear memory is (empty when it could not be found).
    memories: Vec<Range<usize>>,
    profile: Arc<PageProfile>,
}

/// The parts of an instance's `memories` to pre-fault, and whether they are the profile's (a
/// run from an instance pre-faulted by the profile can teach it; one pre-faulted whole would
/// show it every page as written): the pages runs have written and those they have read, once
/// a run has ended (`None` before). All of it for writing when the profile cannot speak for
/// it: more than one memory was found (another thread's too), or its pages are not the
/// profile's.
fn targets(profile: &PageProfile, memories: &[Range<usize>]) -> Option<(Targets, bool)> {
    let whole = || Targets {
        write: memories.to_vec(),
        read: Vec::new(),
    };
    let [memory] = memories else {
        return Some((whole(), false));
    };
    if !profile.has_learnt() {
        return None;
    }
    Some(match profile.targets(memory) {
        Some(targets) => (targets, true),
        None => (whole(), false),
    })
}

/// Pre-faults `targets`, holding off for runs in flight between chunks; returns the bytes
/// pre-faulted for writing (reading maps the file's pages, which costs no memory of its own).
fn prefault_targets(pool: &Inner, targets: &Targets) -> u64 {
    let written = prefault::populate(&targets.write, Access::Write, || hold_off(pool));
    prefault::populate(&targets.read, Access::Read, || hold_off(pool));
    written
}

/// The pool, shared between the runtime and its refill thread.
struct Inner {
    capacity: usize,
    profile: Arc<PageProfile>,
    ready: Mutex<Ready>,
    /// Wakes the refill thread, when it sleeps, as an instance is taken; and when the runtime
    /// is dropped.
    wanted: Condvar,
    hits: AtomicU64,
    misses: AtomicU64,
}

struct Ready {
    instances: VecDeque<Warm>,
    /// The refill thread waits to be woken: the pool has been full for [`STAY_AWAKE`].
    sleeping: bool,
    stopped: bool,
}

impl Inner {
    fn ready(&self) -> MutexGuard<'_, Ready> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Pre-instantiated guests for a runtime, refilled by one background thread; dropping it
/// stops the thread and drops the instances.
pub(crate) struct WarmPool {
    inner: Arc<Inner>,
}

impl WarmPool {
    /// Starts a refill thread that keeps `capacity` instances of `pre` ready. The thread
    /// instantiates and pre-faults one instance at a time, waits while the pool is full and
    /// holds off while runs of the process are in flight (up to [`MAX_DEFER`] before each
    /// step; see `quiet`), so refilling never takes more than one core, and rarely any time,
    /// from the runs in flight.
    pub(crate) fn start(
        capacity: usize,
        engine: Engine,
        pre: WorkflowPre<RunCtx>,
        backend: Arc<dyn LeafBackend>,
    ) -> std::io::Result<Self> {
        let inner = Arc::new(Inner {
            capacity,
            profile: Arc::new(PageProfile::new(Threshold::Any)),
            ready: Mutex::new(Ready {
                instances: VecDeque::with_capacity(capacity),
                sleeping: false,
                stopped: false,
            }),
            wanted: Condvar::new(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        });
        let waiting = Arc::downgrade(&inner);
        let wake = move || {
            if let Some(pool) = waiting.upgrade() {
                // Under the lock the refill thread checks the profile with, so that it cannot
                // miss this between its check and its wait.
                let _ready = pool.ready();
                pool.wanted.notify_one();
            }
        };
        inner.profile.on_first_learnt(Box::new(wake));
        let pool = Arc::clone(&inner);
        // Instantiation never waits on a host call, so a current-thread runtime polls it.
        let executor = tokio::runtime::Builder::new_current_thread().build()?;
        std::thread::Builder::new()
            .name("flowbox-warm-pool".into())
            .spawn(move || {
                refill(&pool, &executor, &engine, &pre, &backend);
                // As the retiring thread drops finished runs' stores (see `retire::unmap`).
                unmap(std::mem::take(&mut pool.ready().instances));
            })?;
        Ok(Self { inner })
    }

    /// A pooled instance for a run under `limits`, or `None` (a miss: the run instantiates a
    /// fresh guest) when the pool is empty or the limits are below what instantiating already
    /// took, so that a fresh instance reports that limit exactly as it does without a pool.
    pub(crate) fn take(&self, limits: &Limits) -> Option<Warm> {
        let warm = {
            let mut ready = self.inner.ready();
            let fits = ready.instances.back().is_some_and(|warm| {
                warm.fuel_spent <= limits.fuel && warm.largest_memory <= limits.memory_bytes
            });
            let warm = if fits {
                ready.instances.pop_back()
            } else {
                None
            };
            // An awake refill thread sees the room itself (see `quiet`).
            if warm.is_some() && ready.sleeping {
                self.inner.wanted.notify_one();
            }
            warm
        };
        let counter = if warm.is_some() {
            &self.inner.hits
        } else {
            &self.inner.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        warm
    }

    pub(crate) fn stats(&self) -> WarmPoolStats {
        let ready = self.inner.ready();
        WarmPoolStats {
            capacity: self.inner.capacity,
            ready: ready.instances.len(),
            memory_bytes: ready.instances.iter().map(|w| w.memory_bytes).sum(),
            prefaulted_bytes: ready.instances.iter().map(|w| w.prefaulted_bytes).sum(),
            hits: self.inner.hits.load(Ordering::Relaxed),
            misses: self.inner.misses.load(Ordering::Relaxed),
        }
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        self.inner.ready().stopped = true;
        self.inner.wanted.notify_one();
    }
}

impl Warm {
    /// Hands the instance to the run whose state is `ctx`: the placeholder state goes, the
    /// run's own (with its memory cap, its random streams moved on past the warm-up's draws)
    /// takes its place, and fuel is what a fresh instance would have left after its warm-up
    /// under the run's limit.
    pub(crate) fn start(self, ctx: RunCtx) -> Result<(Store<RunCtx>, Workflow), RunError> {
        let Self {
            mut store,
            instance,
            fuel_spent,
            random_drawn,
            largest_memory,
            memory_bytes,
            prefaulted_bytes: _,
            awaits_profile: _,
            teaches,
            memories,
            profile,
        } = self;
        let mut ctx = ctx;
        if teaches {
            ctx.touched = Some(TouchedPages {
                memories,
                learner: profile,
            });
        }
        ctx.random.skip(random_drawn);
        let fuel = ctx.limits.fuel - fuel_spent;
        ctx.memory.largest = largest_memory;
        ctx.memory.total = memory_bytes;
        *store.data_mut() = ctx;
        store
            .set_fuel(fuel)
            .map_err(|e| RunError::Host(format!("cannot set fuel: {e}")))?;
        Ok((store, instance))
    }
}

/// Keeps the pool full until it is stopped (or the guest does not instantiate).
fn refill(
    pool: &Inner,
    executor: &tokio::runtime::Runtime,
    engine: &Engine,
    pre: &WorkflowPre<RunCtx>,
    backend: &Arc<dyn LeafBackend>,
) {
    loop {
        if !catch_up(pool) || !wait_for_room(pool) {
            return;
        }
        let Some(mut warm) = executor.block_on(instantiate(engine, pre, backend, &pool.profile))
        else {
            // The guest does not instantiate outside a run either: runs go on without a pool
            // and report why themselves.
            return;
        };
        // The ranges may include another thread's instance, instantiated at the same moment
        // (see `prefault`): what this one holds pre-faulted is at most its own memory.
        match targets(&pool.profile, &warm.memories) {
            Some((targets, by_profile)) => {
                warm.prefaulted_bytes = prefault_targets(pool, &targets).min(warm.memory_bytes);
                warm.teaches = by_profile;
            }
            None => {
                warm.awaits_profile = true;
                warm.teaches = true;
            }
        }
        // Once stopped, the thread drops it with the rest as it ends.
        let mut ready = pool.ready();
        ready.instances.push_back(warm);
        if ready.stopped {
            return;
        }
        drop(ready);
        // Let a run that is waiting for a core have it before the next instantiation.
        std::thread::yield_now();
    }
}

/// Pre-faults the ready instances that joined the pool before a run had shown which pages to,
/// once one has; false once the pool is stopped. A run may take an instance meanwhile:
/// pre-faulting the memory of a run in flight changes nothing in it either.
fn catch_up(pool: &Inner) -> bool {
    loop {
        let waiting = pool
            .ready()
            .instances
            .iter()
            .find(|warm| warm.awaits_profile)
            .map(|warm| warm.memories.clone());
        let Some(memories) = waiting else {
            return true;
        };
        let Some((targets, by_profile)) = targets(&pool.profile, &memories) else {
            return true;
        };
        let done = prefault_targets(pool, &targets);
        let mut ready = pool.ready();
        if ready.stopped {
            return false;
        }
        if let Some(warm) = ready.instances.iter_mut().find(|w| w.memories == memories) {
            warm.awaits_profile = false;
            warm.teaches = by_profile;
            warm.prefaulted_bytes = done.min(warm.memory_bytes);
        }
    }
}

/// Waits until the pool has room for another instance, then holds off while runs are in
/// flight (up to [`MAX_DEFER`]); false once the pool is stopped. Meanwhile pre-faults the
/// ready instances that wait for the profile once it has come. It looks for room every
/// [`POLL`], and after [`STAY_AWAKE`] sleeps until an instance is taken (see `quiet`).
fn wait_for_room(pool: &Inner) -> bool {
    let full_since = Instant::now();
    let mut ready = pool.ready();
    while !ready.stopped && ready.instances.len() >= pool.capacity {
        if ready.instances.iter().any(|warm| warm.awaits_profile) && pool.profile.has_learnt() {
            drop(ready);
            if !catch_up(pool) {
                return false;
            }
            ready = pool.ready();
            continue;
        }
        if full_since.elapsed() < STAY_AWAKE {
            ready = pool
                .wanted
                .wait_timeout(ready, POLL)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        } else {
            ready.sleeping = true;
            ready = pool.wanted.wait(ready).unwrap_or_else(|p| p.into_inner());
            ready.sleeping = false;
        }
    }
    drop(ready);
    hold_off(pool)
}

/// Holds off while runs of the process are in flight (see `quiet`), up to [`MAX_DEFER`];
/// false once the pool is stopped.
fn hold_off(pool: &Inner) -> bool {
    let stopped = || pool.ready().stopped;
    busy::hold_off(Instant::now() + MAX_DEFER, stopped);
    !stopped()
}

/// One instance of `pre` in a store holding placeholder state, which no guest code sees: the
/// guest runs nothing but its instantiation until a run's state replaces it; with where the
/// linear memory instantiation created is, to pre-fault.
#[expect(
    clippy::await_holding_lock,
    reason = "the refill thread blocks on this future alone, and the lock is there to make the \
              retiring thread wait the instantiation out"
)]
async fn instantiate(
    engine: &Engine,
    pre: &WorkflowPre<RunCtx>,
    backend: &Arc<dyn LeafBackend>,
    profile: &Arc<PageProfile>,
) -> Option<Warm> {
    let mut store = placeholder_store(engine, backend)?;
    let unmapping = prefault::hold_unmapping();
    let before = Mappings::now();
    let instance = pre.instantiate_async(&mut store).await.ok()?;
    let memories = Mappings::now().linear_memories_since(&before, store.data().memory.total);
    drop(unmapping);
    fault_around::turn_off(&memories);
    instance.call_warm_up(&mut store).await.ok()?;
    let memory = &store.data().memory;
    let (largest_memory, memory_bytes) = (memory.largest, memory.total);
    let random_drawn = store.data().random.drawn();
    let fuel_spent = INSTANTIATION_FUEL - store.get_fuel().ok()?;
    let warm = Warm {
        store,
        instance,
        fuel_spent,
        random_drawn,
        largest_memory,
        memory_bytes,
        prefaulted_bytes: 0,
        awaits_profile: false,
        teaches: false,
        memories,
        profile: Arc::clone(profile),
    };
    Some(warm)
}

/// A store for an instance no run owns yet: ample fuel, no memory cap, no journal, and events
/// nobody listens to. The run's own state replaces it at hand-over.
pub(crate) fn placeholder_store(
    engine: &Engine,
    backend: &Arc<dyn LeafBackend>,
) -> Option<Store<RunCtx>> {
    let limits = Limits {
        fuel: INSTANTIATION_FUEL,
        memory_bytes: u64::MAX,
        ..Limits::default()
    };
    let thread_id = "warm-pool".to_owned();
    let setup = RunSetup {
        // Nothing listens to the placeholder's events.
        events: Arc::new(RunEvents::new(
            thread_id.clone(),
            Arc::new(EventHub::new(1)),
        )),
        thread_id,
        limits: limits.clone(),
        guard: true,
        start_unix_nanos: 0,
        checkpoints: Checkpoints::default(),
    };
    // The run's own state, pricing included, replaces this placeholder at hand-over.
    let pricing = Pricing {
        prices: None,
        fanout: None,
        projection: false,
    };
    let ctx = RunCtx::new(Arc::clone(backend), ToolSet::new(), None, setup, pricing);
    new_store(engine, ctx).ok()
}
