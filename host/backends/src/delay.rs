//! Delays to within a fraction of a millisecond, for the scripted backend's latencies.
//!
//! tokio's timer fires on whole milliseconds and up to one late, which at a 10 ms leaf is a
//! tenth of the latency asked for: a benchmark of flowbox's scheduling would measure the timer
//! instead. A delay here sleeps on tokio's timer until shortly before its deadline and waits
//! out the rest on one shared thread that sleeps to the deadline itself (a futex timeout,
//! microseconds late), so any number of leaves share it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// How long before its deadline a delay leaves tokio's timer for the precise thread: more than
/// tokio's lateness, so the precise thread, not tokio, decides when it ends.
const TAIL: Duration = Duration::from_millis(2);

/// Waits `delay`. On a paused tokio clock (a test's) the whole delay is virtual, as with
/// `tokio::time::sleep`, but for the tail, which also passes in real time.
pub(crate) async fn wait(delay: Duration) {
    let deadline = tokio::time::Instant::now() + delay;
    if let Some(coarse) = delay.checked_sub(TAIL) {
        tokio::time::sleep(coarse).await;
    }
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    if !left.is_zero()
        && let Some(timer) = timer()
    {
        let (done, waited) = oneshot::channel();
        timer.add(Instant::now() + left, done);
        // The thread never drops a waiter before its deadline.
        let _ = waited.await;
    }
    // A paused clock has not moved while the thread waited (and without the thread, nothing
    // waited): tokio's timer takes it to the deadline.
    if tokio::time::Instant::now() < deadline {
        tokio::time::sleep_until(deadline).await;
    }
}

/// The shared thread's queue of deadlines, earliest first.
struct Timer {
    queue: Mutex<BinaryHeap<Reverse<Waiter>>>,
    changed: Condvar,
}

struct Waiter {
    deadline: Instant,
    done: oneshot::Sender<()>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        self.deadline == other.deadline
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiter {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.deadline.cmp(&other.deadline)
    }
}

/// The shared thread, started by the first delay; `None` if no thread could be started.
fn timer() -> Option<&'static Timer> {
    static TIMER: OnceLock<Option<&'static Timer>> = OnceLock::new();
    *TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            queue: Mutex::new(BinaryHeap::new()),
            changed: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("flowbox-scripted-delay".into())
            .spawn(move || timer.serve())
            .ok()
            .map(|_| timer)
    })
}

impl Timer {
    fn add(&self, deadline: Instant, done: oneshot::Sender<()>) {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        queue.push(Reverse(Waiter { deadline, done }));
        drop(queue);
        self.changed.notify_one();
    }

    fn serve(&self) {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let now = Instant::now();
            while queue.peek().is_some_and(|next| next.0.deadline <= now) {
                if let Some(Reverse(waiter)) = queue.pop() {
                    let _ = waiter.done.send(());
                }
            }
            queue = match queue.peek().map(|next| next.0.deadline - now) {
                Some(left) => {
                    self.changed
                        .wait_timeout(queue, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.changed.wait(queue).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn delays_never_end_early() {
        let (order, mut ended) = tokio::sync::mpsc::unbounded_channel();
        let start = Instant::now();
        let delays = [7_u64, 1, 4, 3, 0, 12];
        for (index, millis) in delays.into_iter().enumerate() {
            let order = order.clone();
            tokio::spawn(async move {
                wait(Duration::from_millis(millis)).await;
                let _ = order.send((index, start.elapsed()));
            });
        }
        drop(order);
        let mut count = 0;
        while let Some((index, elapsed)) = ended.recv().await {
            assert!(
                elapsed >= Duration::from_millis(delays[index]),
                "{index} at {elapsed:?}"
            );
            count += 1;
        }
        assert_eq!(count, delays.len());
    }
}
