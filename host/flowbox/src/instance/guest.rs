//! The [`Guest`] every instance is made from: the engine, the compiled guest linked against
//! the host, and the profile of the pages fresh instances pre-fault. Loading one is the
//! runtime's business (`runtime::guest`).

use std::sync::Arc;

use wasmtime::Engine;

use super::context::RunCtx;
use super::fresh::FreshPrefault;
use crate::bindings::WorkflowPre;

/// The compiled guest, linked and ready to instantiate, on its own engine: what every run
/// starts from. Loading it takes milliseconds from the disk cache (seconds the first time,
/// when it is compiled and cached); [`RuntimeBuilder::build`](crate::RuntimeBuilder::build)
/// loads one unless it is [given one](crate::RuntimeBuilder::guest). Load it apart
/// ([`Guest::load`]) to overlap that with other start-up work (`flowbox run` loads it on its
/// main thread while the command parses its flags and opens its journal on another), or to
/// share one among several runtimes, which then also share its memory image and what fresh
/// instances learn to pre-fault. Runtimes a process builds on one cache directory without a guest of their
/// own share one already, for as long as one of them (or a run) holds it. Cheap to clone.
#[derive(Clone)]
pub struct Guest {
    parts: Arc<Parts>,
}

struct Parts {
    engine: Engine,
    pre: WorkflowPre<RunCtx>,
    /// What recent fresh instances did to their memory's pages, to pre-fault the next with.
    fresh: Arc<FreshPrefault>,
}

impl Guest {
    /// The guest `pre` links on `engine`.
    pub(crate) fn new(engine: Engine, pre: WorkflowPre<RunCtx>, fresh: FreshPrefault) -> Guest {
        Guest {
            parts: Arc::new(Parts {
                engine,
                pre,
                fresh: Arc::new(fresh),
            }),
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.parts.engine
    }

    pub(crate) fn pre(&self) -> &WorkflowPre<RunCtx> {
        &self.parts.pre
    }

    pub(crate) fn fresh(&self) -> &Arc<FreshPrefault> {
        &self.parts.fresh
    }

    /// A handle on this guest that does not keep it loaded.
    pub(crate) fn downgrade(&self) -> WeakGuest {
        WeakGuest(Arc::downgrade(&self.parts))
    }

    /// Gives this guest a profile of fresh instances' pages that has counted nothing,
    /// whatever its cache directory keeps (for tests of the profile), before it is shared.
    #[cfg(test)]
    pub(crate) fn forget_pages(&mut self) {
        Arc::get_mut(&mut self.parts)
            .expect("a guest not shared yet")
            .fresh = Arc::default();
    }
}

/// A [`Guest`] for as long as something else holds it.
#[derive(Clone)]
pub(crate) struct WeakGuest(std::sync::Weak<Parts>);

impl WeakGuest {
    pub(crate) fn upgrade(&self) -> Option<Guest> {
        self.0.upgrade().map(|parts| Guest { parts })
    }
}

impl std::fmt::Debug for Guest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guest").finish_non_exhaustive()
    }
}
