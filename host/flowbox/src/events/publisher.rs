//! One run's events on their way out: numbered without holes and published to the runtime's
//! hub ([`RunEvents`]), handed to an [`EventSink`] when another engine drives the run, and
//! written in batches into the thread's history when the run keeps a journal.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use flowbox_backends::{BackendError, LeafReply, LeafRequest};
use flowbox_store::{CheckpointStore, StoreError, StoredEvent, ThreadEnd};

use super::hub::EventHub;
use super::{Event, EventKind};

/// Publishes one run's events with its thread id and a gap-free sequence, and, once
/// [`RunEvents::record`] attached its journal, writes each one into the thread's history.
#[derive(Debug)]
pub(crate) struct RunEvents {
    thread_id: String,
    hub: Arc<EventHub>,
    numbering: Mutex<Numbering>,
    history: OnceLock<Arc<History>>,
    sink: Option<Arc<dyn EventSink>>,
    /// Tells this publisher from every other, for the runtime's observer.
    id: u64,
}

/// Where a run's numbering stands: the last sequence number given, and whether the run's last
/// event (its `run_finished`) has had its number, after which nothing more is published.
#[derive(Debug, Default)]
struct Numbering {
    last: u64,
    ended: bool,
}

impl Numbering {
    /// The next number, for the run's last event when `last` is set.
    fn next(&mut self, last: bool) -> u64 {
        self.last += 1;
        self.ended = last;
        self.last
    }
}

/// The next publisher's id.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl RunEvents {
    pub(crate) fn new(thread_id: String, hub: Arc<EventHub>) -> Self {
        Self {
            thread_id,
            hub,
            numbering: Mutex::new(Numbering::default()),
            history: OnceLock::new(),
            sink: None,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Also hands every event to `sink` (a run on another engine publishing its events).
    pub(crate) fn with_sink(mut self, sink: Option<Arc<dyn EventSink>>) -> Self {
        self.sink = sink;
        self
    }

    /// From now on every event is also journaled in the thread's history, numbered on from
    /// `last_seq` (the last event its earlier runs journaled): batched in memory, written by a
    /// background task every [`FLUSH_INTERVAL`], and by [`Self::flush`].
    pub(crate) fn record(&self, store: Arc<dyn CheckpointStore>, last_seq: u64) {
        if !store.keeps_events() {
            return;
        }
        let history = Arc::new(History {
            store: Mutex::new(Some(store)),
            thread_id: self.thread_id.clone(),
            pending: Mutex::new(Vec::new()),
            writing: tokio::sync::Mutex::new(()),
        });
        if self.history.set(Arc::clone(&history)).is_err() {
            return;
        }
        self.numbering().last = last_seq;
        // The task ends with the run: it holds the history only while writing.
        let weak = Arc::downgrade(&history);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(FLUSH_INTERVAL).await;
                let Some(history) = weak.upgrade() else {
                    return;
                };
                // A failed write keeps its events for the next one; the run's end reports it.
                let _ = history.flush().await;
            }
        });
    }

    /// Lets go of the journal once the run's end and its last events are written: a retired
    /// run's memory, which holds this publisher, is dropped by a thread of its own at a quiet
    /// moment, and must not keep the journal open meanwhile (a process that ends first would
    /// never close it, which is when a long log is checkpointed). Nothing is written after.
    pub(crate) fn release_journal(&self) {
        if let Some(history) = self.history.get() {
            history.lock_store().take();
        }
    }

    /// Writes the events published so far into the thread's history (nothing without one).
    pub(crate) async fn flush(&self) -> Result<(), StoreError> {
        match self.history.get() {
            Some(history) => history.flush().await,
            None => Ok(()),
        }
    }

    /// Journals the thread's `end` in `store` with the events published so far and the run's
    /// last event, `finished` (its `run_finished`), in one write where the store can, so that
    /// its history is complete up to the end it leads to. `finished` is published once that
    /// write is done: whoever sees it finds the end journaled. Should the write fail, the event
    /// published in its place, under the same number, is what `failed` makes of the error.
    pub(crate) async fn finish(
        &self,
        store: &dyn CheckpointStore,
        end: &ThreadEnd,
        finished: EventKind,
        failed: impl FnOnce(&StoreError) -> EventKind,
    ) -> Result<(), StoreError> {
        let Some(history) = self.history.get() else {
            let written = store.finish(&self.thread_id, end).await;
            self.end(match &written {
                Ok(()) => finished,
                Err(error) => failed(error),
            });
            return written;
        };
        let _writing = history.writing.lock().await;
        // Numbered first: every event numbered before it is pending by now (`emit` pushes
        // under the same lock), and none is after it.
        let mut event = {
            let mut numbering = self.numbering();
            (!numbering.ended).then(|| self.event(numbering.next(true), finished))
        };
        let mut batch = std::mem::take(&mut *history.pending());
        batch.extend(event.as_ref().map(stored));
        let written = store.finish_with_events(&self.thread_id, &batch, end).await;
        if let Err(error) = &written {
            if let Some(event) = &mut event {
                batch.pop();
                event.kind = failed(error);
                batch.push(stored(event));
            }
            history.keep(batch);
        }
        if let Some(event) = event {
            self.publish_live(event);
        }
        written
    }

    /// Publishes the event `make` builds, without waiting, unless nobody listens and no
    /// history records it (then it is not even built). For leaves and the host's own
    /// bookkeeping: they never wait on a reader.
    pub(crate) fn emit(&self, make: impl FnOnce() -> EventKind) {
        self.number_and_publish(make, false);
    }

    /// Publishes the run's last event, its `run_finished`, as [`Self::emit`] does; nothing is
    /// published after it (a leaf the run's end cancelled may still try).
    pub(crate) fn end(&self, kind: EventKind) {
        self.number_and_publish(|| kind, true);
    }

    /// Numbers the event `make` builds (the run's last when `last`) and publishes it, unless
    /// the run's last event was.
    fn number_and_publish(&self, make: impl FnOnce() -> EventKind, last: bool) {
        // Holding the lock while publishing keeps sequence order equal to delivery order when
        // leaf tasks publish concurrently.
        let mut numbering = self.numbering();
        if numbering.ended {
            return;
        }
        let history = self.history.get();
        if history.is_none() && self.sink.is_none() && self.hub.observer().is_none() {
            numbering.ended = last;
            self.hub
                .publish(|| self.event(numbering.next(last), make()));
            return;
        }
        let event = self.event(numbering.next(last), make());
        if let Some(history) = history {
            history.push(&event);
        }
        self.publish_live(event);
    }

    /// Hands a numbered event to the runtime's observer, the run's sink and the hub.
    fn publish_live(&self, event: Event) {
        if let Some(observer) = self.hub.observer() {
            observer.event(self.id, &event);
        }
        if let Some(sink) = &self.sink {
            sink.event(&event);
        }
        self.hub.publish(|| event);
    }

    fn numbering(&self) -> MutexGuard<'_, Numbering> {
        self.numbering.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn event(&self, seq: u64, kind: EventKind) -> Event {
        Event {
            thread_id: self.thread_id.clone(),
            seq,
            unix_us: Some(flowbox_store::now_unix_nanos() / 1_000),
            kind,
        }
    }

    /// Hands a live leaf's prompt and reply to the runtime's observer, when it wants them.
    pub(crate) fn contents(&self, leaf: &LeafRequest, result: &Result<LeafReply, BackendError>) {
        if let Some(observer) = self.hub.observer()
            && observer.wants_contents()
        {
            let error = result.as_ref().err().map(ToString::to_string);
            let reply = match (result, &error) {
                (Ok(reply), _) => Ok(&reply.value),
                (Err(_), error) => Err(error.as_deref().unwrap_or_default()),
            };
            observer.contents(self.id, leaf.call_id, &leaf.prompt, reply);
        }
    }

    /// Publishes like [`Self::emit`] once every lossless subscriber has room: for the script's
    /// own writes (`log`, `phase`), so a slow reader slows the script down instead of losing
    /// events. The wait counts against the run's deadline like any other.
    pub(crate) async fn emit_paced(&self, make: impl FnOnce() -> EventKind) {
        self.room().await;
        self.emit(make);
    }

    /// Waits until every lossless subscriber has room.
    pub(crate) async fn room(&self) {
        self.hub.room().await;
    }
}

impl Drop for RunEvents {
    fn drop(&mut self) {
        if let Some(observer) = self.hub.observer() {
            observer.ended(self.id);
        }
    }
}

/// Receives every event of one external run as it is published, in sequence order: how an
/// engine publishes a run's events where another process can follow them.
pub trait EventSink: Send + Sync + std::fmt::Debug {
    /// One event. Called while the run's events are being numbered: it must return at once
    /// (buffer, never wait).
    fn event(&self, event: &Event);
}

/// How often a run's new events are written to its history: often enough that a view of a
/// slow leaf sees it start at once, seldom enough that a fan-out's events share transactions.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_millis(20);

/// A run's events on their way into its thread's history.
#[derive(Debug)]
struct History {
    /// The journal, until the run lets go of it (see [`RunEvents::release_journal`]).
    store: Mutex<Option<Arc<dyn CheckpointStore>>>,
    thread_id: String,
    /// Published, not yet written, in order.
    pending: Mutex<Vec<StoredEvent>>,
    /// Held while writing, so batches reach the journal in order.
    writing: tokio::sync::Mutex<()>,
}

impl History {
    fn pending(&self) -> MutexGuard<'_, Vec<StoredEvent>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, event: &Event) {
        self.pending().push(stored(event));
    }

    fn lock_store(&self) -> MutexGuard<'_, Option<Arc<dyn CheckpointStore>>> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn flush(&self) -> Result<(), StoreError> {
        let _writing = self.writing.lock().await;
        let Some(store) = self.lock_store().clone() else {
            return Ok(());
        };
        let batch = std::mem::take(&mut *self.pending());
        if batch.is_empty() {
            return Ok(());
        }
        let written = store.append_events(&self.thread_id, &batch).await;
        if written.is_err() {
            self.keep(batch);
        }
        written
    }

    /// Keeps a batch whose write failed, ahead of what came since, for the next write; the
    /// run's end reports the failure.
    fn keep(&self, batch: Vec<StoredEvent>) {
        let mut pending = self.pending();
        let later = std::mem::replace(&mut *pending, batch);
        pending.extend(later);
    }
}

/// An event as the thread's history keeps it.
fn stored(event: &Event) -> StoredEvent {
    StoredEvent {
        seq: event.seq,
        kind: event.kind.name().to_owned(),
        event: serde_json::to_string(event).expect("events serialise"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(events: &RunEvents, n: usize) {
        events.emit(|| EventKind::Log {
            message: n.to_string(),
        });
    }

    #[tokio::test]
    async fn nothing_is_published_after_the_runs_last_event() {
        let hub = Arc::new(EventHub::new(16));
        let mut stream = hub.subscribe_lossless();
        let events = RunEvents::new("t1".into(), Arc::clone(&hub));
        log(&events, 1);
        events.end(EventKind::Log {
            message: "the end".into(),
        });
        // A leaf the end cancelled, still publishing.
        log(&events, 2);
        events.end(EventKind::Log {
            message: "another end".into(),
        });
        let published: Vec<(u64, EventKind)> = std::iter::from_fn(|| stream.try_recv())
            .map(|e| (e.seq, e.kind))
            .collect();
        let message = |text: &str| EventKind::Log {
            message: text.into(),
        };
        assert_eq!(published, [(1, message("1")), (2, message("the end"))]);
    }

    #[tokio::test]
    async fn a_slow_subscriber_gets_a_counted_gap() {
        let hub = Arc::new(EventHub::new(4));
        let mut stream = hub.subscribe();
        let events = RunEvents::new("t1".into(), hub);
        for n in 0..10 {
            log(&events, n);
        }
        let first = stream.recv().await.unwrap();
        assert_eq!(first.kind, EventKind::Gap { missed: 6 });
        let next = stream.recv().await.unwrap();
        assert_eq!((next.seq, next.thread_id.as_str()), (7, "t1"));
    }

    #[tokio::test]
    async fn a_lossless_subscriber_gets_every_event_past_its_capacity() {
        let hub = Arc::new(EventHub::new(4));
        let mut live = hub.subscribe();
        let mut lossless = hub.subscribe_lossless();
        let events = RunEvents::new("t1".into(), Arc::clone(&hub));
        // Writers that never wait (leaves) go past the capacity; nothing is dropped.
        for n in 0..10 {
            log(&events, n);
        }
        let seqs: Vec<u64> = std::iter::from_fn(|| lossless.try_recv())
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
        assert_eq!(
            live.try_recv().unwrap().kind,
            EventKind::Gap { missed: 6 },
            "a live subscriber of the same hub still gets a gap"
        );
        drop((events, hub));
        assert!(
            lossless.recv().await.is_none(),
            "the end once the hub is gone"
        );
    }

    #[tokio::test]
    async fn a_full_lossless_queue_paces_the_writer_until_the_reader_drains_half() {
        let hub = Arc::new(EventHub::new(4));
        let mut stream = hub.subscribe_lossless();
        let events = Arc::new(RunEvents::new("t1".into(), Arc::clone(&hub)));
        for n in 0..4 {
            log(&events, n);
        }
        let writer = tokio::spawn({
            let events = Arc::clone(&events);
            async move {
                events
                    .emit_paced(|| EventKind::Log {
                        message: "paced".into(),
                    })
                    .await;
            }
        });
        tokio::task::yield_now().await;
        assert!(!writer.is_finished(), "a full queue makes the writer wait");
        // Down to three, then two (half the capacity): the writer goes on.
        assert_eq!(stream.recv().await.unwrap().seq, 1);
        assert_eq!(stream.recv().await.unwrap().seq, 2);
        writer.await.unwrap();
        let seqs: Vec<u64> = std::iter::from_fn(|| stream.try_recv())
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [3, 4, 5]);
    }

    #[tokio::test]
    async fn dropping_a_lossless_stream_releases_its_writers() {
        let hub = Arc::new(EventHub::new(1));
        let stream = hub.subscribe_lossless();
        let events = RunEvents::new("t1".into(), Arc::clone(&hub));
        log(&events, 0);
        let paced = events.emit_paced(|| EventKind::Log {
            message: "paced".into(),
        });
        drop(stream);
        paced.await;
        assert!(hub.lossless().is_empty(), "an abandoned queue is forgotten");
    }
}
