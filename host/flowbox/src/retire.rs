//! Finished runs' stores, dropped off the caller's path, at a moment when no run is in flight.
//!
//! A finished run's calls are cancelled and its hold on the journal let go of at once; the
//! store itself, whose guest memory takes ~0.15 ms or more to unmap (and whose pages the warm
//! pool and the tally first read), goes to one background thread. That thread waits, for up
//! to [`MAX_DEFER`], until no run of the process is in flight. Dropping a store next to a run
//! costs the run more than the drop: woken by the finishing run on a machine with few cores,
//! the thread would take the core whose caller waits for the result (a pooled trivial run
//! took ~0.53 ms instead of ~0.37 ms here), and unmapping slows the runs beside it (the
//! memory-map lock their page faults need, and TLB shoot-downs). Once half of [`RETIRING`]
//! stores wait it drops at once, so a process that is never without a run in flight keeps
//! the queue short; past [`RETIRING`], a finishing run drops its own.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{LazyLock, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::Store;

use crate::run_ctx::RunCtx;

/// How many finished runs' stores may wait for the background thread; past that a finishing
/// run drops its own.
const RETIRING: usize = 16;

/// The longest a store waits for a moment without runs in flight.
const MAX_DEFER: Duration = Duration::from_millis(50);

/// How often the waiting thread looks again: the longest a quiet moment goes unused.
const POLL: Duration = Duration::from_micros(500);

/// The process's runs in flight and stores waiting, for the retiring thread.
static QUIET: LazyLock<Quiet> = LazyLock::new(Quiet::default);

/// Counts one run (or plan) in flight from [`InFlight::enter`] until dropped.
#[must_use = "the run counts as in flight until this is dropped"]
pub(crate) struct InFlight(());

impl InFlight {
    pub(crate) fn enter() -> Self {
        QUIET.running.fetch_add(1, Ordering::Relaxed);
        Self(())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        QUIET.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Ends a finished run's store: its calls are cancelled and its journal let go of here and
/// now (a leaf still running stops as it would if the store were dropped, and a process that
/// exits next closes its journal cleanly); the rest is dropped by the retiring thread, after
/// the warm pool or the tally has learnt which pages of its memory the run wrote and read.
pub(crate) fn retire(mut store: Store<RunCtx>) {
    let ctx = store.data_mut();
    ctx.calls.end();
    ctx.store = None;
    static RETIRED: OnceLock<Option<SyncSender<Store<RunCtx>>>> = OnceLock::new();
    let sender = RETIRED.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Store<RunCtx>>(RETIRING);
        std::thread::Builder::new()
            .name("flowbox-retire".into())
            .spawn(move || {
                for mut store in receiver {
                    QUIET.hold_off(Instant::now() + MAX_DEFER, POLL);
                    QUIET.waiting.fetch_sub(1, Ordering::Relaxed);
                    // The memory is still mapped: the pool reads which pages the run wrote.
                    if let Some(touched) = store.data_mut().touched.take() {
                        touched.learn();
                    }
                    // Not while the warm pool compares the memory map around an
                    // instantiation (see `prefault`).
                    let _unmapping = crate::prefault::hold_unmapping();
                    drop(store);
                }
            })
            .ok()
            .map(|_| sender)
    });
    let Some(sender) = sender else {
        return;
    };
    QUIET.waiting.fetch_add(1, Ordering::Relaxed);
    if let Err(TrySendError::Full(store) | TrySendError::Disconnected(store)) =
        sender.try_send(store)
    {
        QUIET.waiting.fetch_sub(1, Ordering::Relaxed);
        drop(store);
    }
}

/// Runs in flight and stores waiting to be dropped.
#[derive(Debug, Default)]
struct Quiet {
    running: AtomicUsize,
    waiting: AtomicUsize,
}

impl Quiet {
    /// Returns once no run is in flight, or half of [`RETIRING`] stores wait, or at
    /// `deadline`, looking every `poll`.
    fn hold_off(&self, deadline: Instant, poll: Duration) {
        while self.running.load(Ordering::Relaxed) > 0
            && self.waiting.load(Ordering::Relaxed) < RETIRING / 2
        {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            std::thread::sleep(poll.min(deadline - now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLL: Duration = Duration::from_millis(1);

    fn quiet(running: usize, waiting: usize) -> Quiet {
        Quiet {
            running: running.into(),
            waiting: waiting.into(),
        }
    }

    #[test]
    fn without_runs_in_flight_nothing_waits() {
        let start = Instant::now();
        quiet(0, 1).hold_off(start + Duration::from_secs(60), POLL);
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn a_store_waits_until_the_last_run_in_flight_ends() {
        let quiet = quiet(2, 1);
        let start = Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                quiet.running.fetch_sub(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
                quiet.running.fetch_sub(1, Ordering::Relaxed);
            });
            quiet.hold_off(start + Duration::from_secs(60), POLL);
            assert_eq!(quiet.running.load(Ordering::Relaxed), 0);
        });
        assert!(start.elapsed() >= Duration::from_millis(40));
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn a_store_waits_no_longer_than_its_deadline() {
        let start = Instant::now();
        quiet(1, 1).hold_off(start + Duration::from_millis(30), POLL);
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn a_long_queue_is_dropped_at_once_whatever_is_in_flight() {
        let start = Instant::now();
        quiet(1, RETIRING / 2).hold_off(start + Duration::from_secs(60), POLL);
        assert!(start.elapsed() < Duration::from_secs(30));
    }
}
