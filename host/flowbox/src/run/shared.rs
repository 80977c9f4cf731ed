//! What every run of a [`Runtime`](crate::Runtime) shares: the engine and its epoch ticker,
//! the pre-linked guest, the backend, the code-callable tools, the default limits, the event
//! channel, the journal, the warm pool, the price table and the fan-out profile. Runs borrow it; nothing in it changes after the runtime is built.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flowbox_backends::{LeafBackend, ToolSet};
use flowbox_store::CheckpointStore;
use wasmtime::Engine;

use crate::Limits;
use crate::bindings::WorkflowPre;
use crate::events::EventHub;
use crate::instance::context::RunCtx;
use crate::instance::fresh::FreshPrefault;
use crate::instance::pool::WarmPool;
use crate::plan::{FanoutProfile, PriceTable};

/// How often the engine's epoch advances: the granularity of deadlines and of yielding
/// between concurrent busy runs.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// What every run of a runtime shares.
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) pre: WorkflowPre<RunCtx>,
    pub(crate) backend: Arc<dyn LeafBackend>,
    pub(crate) tools: ToolSet,
    pub(crate) limits: Limits,
    pub(crate) events: Arc<EventHub>,
    pub(crate) store: Option<Arc<dyn CheckpointStore>>,
    /// The prices of leaves, for plans and dollar budgets.
    pub(crate) prices: Option<Arc<PriceTable>>,
    /// The default profile of leaves in wide fan-outs.
    pub(crate) fanout: Option<FanoutProfile>,
    /// Guests instantiated ahead of demand, when the runtime keeps a warm pool.
    pub(crate) pool: Option<WarmPool>,
    /// What recent fresh instances did to their memory's pages, to pre-fault the next with.
    pub(crate) fresh: Arc<FreshPrefault>,
    /// Another engine that runs requests instead, when the runtime sends them there.
    pub(crate) remote: Option<Arc<dyn crate::external::Remote>>,
    /// Turns runs into traces, when the runtime exports them (it also observes `events`).
    #[cfg(feature = "otlp")]
    pub(crate) tracer: Option<Arc<crate::trace::Tracer>>,
    /// Stops advancing the engine's epoch when the last run and runtime let go.
    pub(crate) _ticker: EpochTicker,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("backend", &self.backend)
            .field("tools", &self.tools)
            .field("limits", &self.limits)
            .field("store", &self.store)
            .field("pool", &self.pool.as_ref().map(WarmPool::stats))
            .finish_non_exhaustive()
    }
}

/// Advances the engine's epoch on a background thread until dropped.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    pub(crate) fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("flowbox-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawning the epoch thread");
        Self { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
