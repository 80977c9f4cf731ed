//! Where every run of a runtime publishes ([`EventHub`]) and what its subscribers read
//! ([`EventStream`]): a live broadcast that never waits, and lossless queues of their own; and
//! the same for events that come from elsewhere ([`EventRelay`]).

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::Value;
use tokio::sync::broadcast;

use super::queue::EventQueue;
use super::{Event, EventKind};

/// A subscription to the events of every run of a [`crate::Runtime`], live
/// ([`Runtime::subscribe`](crate::Runtime::subscribe): may miss events, never slows a run) or
/// lossless ([`Runtime::subscribe_lossless`](crate::Runtime::subscribe_lossless): gets every
/// one, makes scripts wait when it falls behind).
#[derive(Debug)]
pub struct EventStream {
    source: Source,
}

#[derive(Debug)]
enum Source {
    Live(broadcast::Receiver<Event>),
    Lossless(LosslessReader),
}

/// The reading end of a lossless queue; dropping it releases the writers waiting on it.
#[derive(Debug)]
struct LosslessReader(Arc<EventQueue>);

impl Drop for LosslessReader {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

impl EventStream {
    /// The next event; `None` once the runtime is gone. A live stream delivers the events it
    /// missed as one [`EventKind::Gap`] (with the thread id and sequence number left empty); a
    /// lossless one misses none.
    pub async fn recv(&mut self) -> Option<Event> {
        match &mut self.source {
            Source::Live(receiver) => match receiver.recv().await {
                Ok(event) => Some(event),
                Err(broadcast::error::RecvError::Lagged(missed)) => Some(gap(missed)),
                Err(broadcast::error::RecvError::Closed) => None,
            },
            Source::Lossless(reader) => reader.0.pop().await,
        }
    }

    /// The next event if one is waiting, without waiting (for draining a stream).
    pub fn try_recv(&mut self) -> Option<Event> {
        match &mut self.source {
            Source::Live(receiver) => match receiver.try_recv() {
                Ok(event) => Some(event),
                Err(broadcast::error::TryRecvError::Lagged(missed)) => Some(gap(missed)),
                Err(_) => None,
            },
            Source::Lossless(reader) => reader.0.try_pop(),
        }
    }
}

fn gap(missed: u64) -> Event {
    Event {
        thread_id: String::new(),
        seq: 0,
        unix_us: None,
        kind: EventKind::Gap { missed },
    }
}

/// Where every run of a runtime publishes: the live broadcast and the lossless queues.
#[derive(Debug)]
pub(crate) struct EventHub {
    /// Made by the first live subscriber: a channel of `capacity` slots is ~1 MiB of memory
    /// written, which a process that never subscribes (a one-shot `flowbox run`) would pay
    /// for in page faults.
    live: OnceLock<broadcast::Sender<Event>>,
    lossless: Mutex<Vec<Arc<EventQueue>>>,
    /// How far a live subscriber may fall behind before a gap, and how many events a lossless
    /// queue holds before the scripts' writers wait.
    capacity: usize,
    /// Sees every event as it is published, before the subscribers (the runtime's traces).
    observer: Option<Arc<dyn Observer>>,
}

/// Sees every event of every run of a runtime as it is published, in each run's sequence
/// order, and the full prompt and reply of each live leaf when it asks for them. Called while
/// the run's events are being numbered: it must return at once (buffer, never wait). `run`
/// tells one run's publisher from every other (two attempts at one thread included).
pub(crate) trait Observer: Send + Sync + std::fmt::Debug {
    /// One event.
    fn event(&self, run: u64, event: &Event);

    /// Whether it wants [`Self::contents`].
    fn wants_contents(&self) -> bool;

    /// A live leaf's prompt and its reply or error, just before its `leaf_finished`.
    fn contents(&self, run: u64, call_id: u64, prompt: &Value, reply: Result<&Value, &str>);

    /// The run publishes no more (after its `run_finished`, or without one when it was
    /// cancelled).
    fn ended(&self, run: u64);
}

impl EventHub {
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            live: OnceLock::new(),
            lossless: Mutex::new(Vec::new()),
            capacity,
            observer: None,
        }
    }

    /// The hub, with `observer` seeing every event.
    pub(crate) fn observed(mut self, observer: Option<Arc<dyn Observer>>) -> Self {
        self.observer = observer;
        self
    }

    pub(super) fn observer(&self) -> Option<&dyn Observer> {
        self.observer.as_deref()
    }

    pub(super) fn lossless(&self) -> MutexGuard<'_, Vec<Arc<EventQueue>>> {
        self.lossless.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A live stream of the events published from now on.
    pub(crate) fn subscribe(&self) -> EventStream {
        EventStream {
            source: Source::Live(
                self.live
                    .get_or_init(|| broadcast::channel(self.capacity).0)
                    .subscribe(),
            ),
        }
    }

    /// A lossless stream of the events published from now on.
    pub(crate) fn subscribe_lossless(&self) -> EventStream {
        let queue = Arc::new(EventQueue::new(self.capacity));
        self.lossless().push(Arc::clone(&queue));
        EventStream {
            source: Source::Lossless(LosslessReader(queue)),
        }
    }

    /// Publishes the event `make` builds to every subscriber, without waiting; unless nobody
    /// listens (then it is not even built).
    pub(super) fn publish(&self, make: impl FnOnce() -> Event) {
        let mut queues = self.lossless();
        queues.retain(|queue| !queue.is_abandoned());
        let live = self.live.get().filter(|live| live.receiver_count() > 0);
        if queues.is_empty() && live.is_none() {
            return;
        }
        let event = make();
        // Every subscriber but the last gets a copy.
        match queues.split_last() {
            Some((last, others)) => {
                for queue in others {
                    queue.push(event.clone());
                }
                if let Some(live) = live {
                    let _ = live.send(event.clone());
                }
                last.push(event);
            }
            None => {
                if let Some(live) = live {
                    let _ = live.send(event);
                }
            }
        }
    }

    /// Waits until every lossless queue has room (at once when none is full).
    pub(super) async fn room(&self) {
        loop {
            // Checked without allocating; a full queue is waited on outside the lock.
            let full = self.lossless().iter().find(|q| q.is_full()).cloned();
            match full {
                Some(queue) => queue.room().await,
                None => return,
            }
        }
    }
}

/// Publishes events that come from elsewhere — a run on another engine, followed through its
/// history — to live and lossless subscribers, as a runtime publishes its own runs' events: a
/// live subscriber that falls behind gets a gap, a lossless one every event, and the publisher
/// waits for it. Dropping the relay ends its lossless streams once they are drained.
#[derive(Debug)]
pub struct EventRelay {
    hub: EventHub,
}

impl EventRelay {
    /// A relay whose live subscribers may fall `capacity` events behind before a gap, and
    /// whose lossless ones hold that many before [`Self::publish`] waits.
    pub fn new(capacity: usize) -> Self {
        Self {
            hub: EventHub::new(capacity),
        }
    }

    /// A live stream of the events published from now on.
    pub fn subscribe(&self) -> EventStream {
        self.hub.subscribe()
    }

    /// A lossless stream of the events published from now on.
    pub fn subscribe_lossless(&self) -> EventStream {
        self.hub.subscribe_lossless()
    }

    /// Publishes `event` to every subscriber, once every lossless one has room.
    pub async fn publish(&self, event: Event) {
        self.hub.room().await;
        self.hub.publish(|| event);
    }
}

impl Drop for EventHub {
    fn drop(&mut self) {
        // The runtime and its last run are gone: lossless readers drain what is left and end.
        for queue in self.lossless().iter() {
            queue.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(seq: u64) -> Event {
        Event {
            thread_id: "t".into(),
            seq,
            unix_us: None,
            kind: EventKind::Log {
                message: seq.to_string(),
            },
        }
    }

    #[tokio::test]
    async fn a_relay_paces_its_publisher_to_its_lossless_reader_and_ends_when_dropped() {
        let relay = Arc::new(EventRelay::new(2));
        let mut lossless = relay.subscribe_lossless();
        let mut live = relay.subscribe();
        relay.publish(log(1)).await;
        relay.publish(log(2)).await;
        let third = tokio::spawn({
            let relay = Arc::clone(&relay);
            async move { relay.publish(log(3)).await }
        });
        tokio::task::yield_now().await;
        assert!(
            !third.is_finished(),
            "a full lossless queue makes the publisher wait"
        );
        assert_eq!(lossless.recv().await.unwrap().seq, 1);
        third.await.unwrap();
        assert_eq!(lossless.recv().await.unwrap().seq, 2);
        assert_eq!(lossless.recv().await.unwrap().seq, 3);
        // The live reader lost the oldest, and is told so.
        assert_eq!(
            live.recv().await.unwrap().kind,
            EventKind::Gap { missed: 1 }
        );
        assert_eq!(live.recv().await.unwrap().seq, 2);
        drop(relay);
        assert!(lossless.recv().await.is_none());
    }
}
