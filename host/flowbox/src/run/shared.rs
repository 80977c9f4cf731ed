//! What every run of a [`Runtime`](crate::Runtime) shares: the [`Guest`], the backend, the
//! code-callable tools, the default limits, the event channel, the journal, the warm pool, the
//! price table and the fan-out profile. Runs borrow it; nothing in it changes after the
//! runtime is built.

use std::sync::Arc;

use flowbox_backends::{LeafBackend, ToolSet};
use flowbox_store::CheckpointStore;

use crate::events::EventHub;
use crate::instance::pool::WarmPool;
use crate::plan::{FanoutProfile, PriceTable};
use crate::{Guest, Limits};

/// What every run of a runtime shares.
pub(crate) struct Shared {
    pub(crate) guest: Guest,
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
    /// Another engine that runs requests instead, when the runtime sends them there.
    pub(crate) remote: Option<Arc<dyn crate::external::Remote>>,
    /// Turns runs into traces, when the runtime exports them (it also observes `events`).
    #[cfg(feature = "otlp")]
    pub(crate) tracer: Option<Arc<crate::trace::Tracer>>,
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
