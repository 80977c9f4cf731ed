//! The runs in flight in this process, for the background threads that work between runs
//! rather than next to them: the warm pool's refill and the retiring of finished runs' stores.
//!
//! On a machine with few cores, a background thread woken from a run's path takes the core
//! the run's caller waits on (waking the retiring thread cost a pooled trivial run ~25 µs
//! here, waking the refill thread ~30 µs), and its work beside a run slows the run (the
//! memory-map lock its page faults need, TLB shoot-downs). So a run only counts itself in
//! flight ([`Busy`]) and wakes nobody: while work comes, the threads look every [`POLL`],
//! and only after [`STAY_AWAKE`] without any do they sleep until woken.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How often a background thread looks for work and for a moment without runs in flight.
pub(crate) const POLL: Duration = Duration::from_millis(1);

/// How long a background thread goes on looking after its last piece of work, before it
/// sleeps until woken.
pub(crate) const STAY_AWAKE: Duration = Duration::from_secs(1);

/// The longest background work holds off while runs are in flight before it takes its next
/// step anyway: the warm pool's refill (an instantiation, or a chunk of pre-faulting) and the
/// retiring thread (dropping a store). Instantiating maps and protects memory, and dropping a
/// store unmaps it, which takes the process's memory-map lock that a run's page faults need
/// too: either next to a run slowed the run by more than the pool saved it. Under steady load
/// each still takes a step at least this often.
pub(crate) const MAX_DEFER: Duration = Duration::from_millis(50);

/// Runs and plans in flight in this process.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Counts one run (or plan) in flight from [`Busy::enter`] until dropped.
#[must_use = "the run counts as in flight until this is dropped"]
pub(crate) struct Busy(());

impl Busy {
    pub(crate) fn enter() -> Self {
        RUNNING.fetch_add(1, Ordering::Relaxed);
        Self(())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Returns once no run is in flight, or `enough()` says to go on regardless, or at
/// `deadline`, looking every [`POLL`].
pub(crate) fn hold_off(deadline: Instant, enough: impl FnMut() -> bool) {
    wait_while_running(&RUNNING, deadline, POLL, enough);
}

fn wait_while_running(
    running: &AtomicUsize,
    deadline: Instant,
    poll: Duration,
    mut enough: impl FnMut() -> bool,
) {
    while running.load(Ordering::Relaxed) > 0 && !enough() {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        std::thread::sleep(poll.min(deadline - now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLL: Duration = Duration::from_millis(1);
    const LONG: Duration = Duration::from_secs(60);

    #[test]
    fn without_runs_in_flight_nothing_waits() {
        let start = Instant::now();
        wait_while_running(&AtomicUsize::new(0), start + LONG, POLL, || false);
        assert!(start.elapsed() < LONG / 2);
    }

    #[test]
    fn a_thread_waits_until_the_last_run_in_flight_ends() {
        let running = AtomicUsize::new(2);
        let start = Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                running.fetch_sub(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
                running.fetch_sub(1, Ordering::Relaxed);
            });
            wait_while_running(&running, start + LONG, POLL, || false);
            assert_eq!(running.load(Ordering::Relaxed), 0);
        });
        assert!(start.elapsed() >= Duration::from_millis(40));
        assert!(start.elapsed() < LONG / 2);
    }

    #[test]
    fn a_thread_waits_no_longer_than_its_deadline() {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(30);
        wait_while_running(&AtomicUsize::new(1), deadline, POLL, || false);
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert!(start.elapsed() < LONG / 2);
    }

    #[test]
    fn a_thread_told_it_has_enough_goes_on_whatever_is_in_flight() {
        let start = Instant::now();
        let mut asked = 0;
        wait_while_running(&AtomicUsize::new(1), start + LONG, POLL, || {
            asked += 1;
            asked == 3
        });
        assert_eq!(asked, 3);
        assert!(start.elapsed() < LONG / 2);
    }
}
