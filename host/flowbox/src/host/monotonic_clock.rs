//! The `wasi:clocks/monotonic-clock` interface over the run's virtual time, linked in place of
//! wasmtime-wasi's.
//!
//! wasmtime-wasi's reads the clock it is given, but its subscriptions wait on tokio's real
//! timer: a guest polling with a timeout (`select.select([], [], [], 6)`, a `nanosleep`) would
//! block for six real seconds while its clock moved one tick. Here a subscription is ready as
//! soon as it is polled, and being polled moves the virtual clock to its deadline, as
//! `time.sleep` does (several deadlines polled together all pass at once).

use wasmtime::component::{HasSelf, Linker, Resource};
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::{self, Duration, Instant};
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use crate::clock::{TICK_NANOS, VirtualTime};
use crate::instance::context::RunCtx;

/// Links this interface, shadowing the one `wasmtime_wasi::p2::add_to_linker_async` added.
pub(crate) fn add_to_linker(linker: &mut Linker<RunCtx>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let linked = monotonic_clock::add_to_linker::<RunCtx, HasSelf<RunCtx>>(linker, |ctx| ctx);
    linker.allow_shadowing(false);
    linked
}

impl monotonic_clock::Host for RunCtx {
    fn now(&mut self) -> wasmtime::Result<Instant> {
        Ok(self.time.tick())
    }

    fn resolution(&mut self) -> wasmtime::Result<Duration> {
        Ok(TICK_NANOS)
    }

    fn subscribe_instant(&mut self, when: Instant) -> wasmtime::Result<Resource<DynPollable>> {
        self.subscribe_deadline(when)
    }

    fn subscribe_duration(
        &mut self,
        duration: Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.subscribe_deadline(self.time.elapsed().saturating_add(duration))
    }
}

impl RunCtx {
    fn subscribe_deadline(&mut self, at: Instant) -> wasmtime::Result<Resource<DynPollable>> {
        let deadline = VirtualDeadline {
            time: self.time.clone(),
            at,
        };
        let deadline = self.table.push(deadline)?;
        subscribe(&mut self.table, deadline)
    }
}

/// A point in the run's virtual time, as a pollable.
struct VirtualDeadline {
    time: VirtualTime,
    at: Instant,
}

#[async_trait::async_trait]
impl Pollable for VirtualDeadline {
    async fn ready(&mut self) {
        self.time.advance_to(self.at);
    }
}
