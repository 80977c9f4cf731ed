//! A thread's history read back: its events from a sequence number on, from the journal
//! ([`read`]) or from any [`HistorySource`] — the journal, or another engine's record of the
//! run such as `flowbox-restate`'s client — and a [`Follower`] that waits for the events still
//! being written, by this process or another, and marks any it never gets with a gap.
//!
//! A run journals its events as they happen (batched, see [`Event`]'s numbering: the thread's
//! own, which a resumed run continues). Reading never writes: open the journal with
//! [`SqliteStore::open_read_only`](crate::store::SqliteStore::open_read_only) and a reader
//! never holds up a run writing it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowbox_store::{CheckpointStore, JournalRecord, StoreError, StoredEvent};

use crate::{Event, EventKind};

/// How many events one read returns at most.
pub const PAGE: usize = 1000;

/// At most `limit` events of `thread_id` after sequence number `after` (0: from the start), in
/// order. An event that does not decode is [`StoreError::CorruptRecord`].
pub async fn read(
    store: &dyn CheckpointStore,
    thread_id: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<Event>, StoreError> {
    let stored = store.events(thread_id, after, limit).await?;
    stored
        .iter()
        .map(|event| decode(thread_id, event))
        .collect()
}

/// At most `limit` of the events of `thread_id`'s call `call_id` (its start, the tools it
/// called, its end) after sequence number `after`, in order, without reading the others where
/// the store can (see [`CheckpointStore::call_events`]). An event that does not decode is
/// [`StoreError::CorruptRecord`].
pub async fn read_call(
    store: &dyn CheckpointStore,
    thread_id: &str,
    call_id: u64,
    after: u64,
    limit: usize,
) -> Result<Vec<Event>, StoreError> {
    let stored = store.call_events(thread_id, call_id, after, limit).await?;
    stored
        .iter()
        .map(|event| decode(thread_id, event))
        .collect()
}

fn decode(thread_id: &str, event: &StoredEvent) -> Result<Event, StoreError> {
    serde_json::from_str(&event.event).map_err(|error| StoreError::CorruptRecord {
        path: "the journal".into(),
        thread_id: thread_id.to_owned(),
        record: JournalRecord::Event { seq: event.seq },
        detail: error.to_string(),
    })
}

/// Whether a thread's run may still publish events, as its [`HistorySource`] knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// It may: it runs, was interrupted (and may be resumed), or the source cannot tell.
    Open,
    /// It has ended: its events are all written, or about to be.
    Ended,
}

/// Where a thread's history is read from.
#[async_trait::async_trait]
pub trait HistorySource: Send + Sync + std::fmt::Debug {
    /// Why a read failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// At most `limit` of the thread's events after sequence number `after`, in order (none
    /// yet is an empty page).
    async fn events_after(
        &self,
        thread_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, Self::Error>;

    /// Whether the thread's run may still publish events. A source that cannot tell says
    /// [`RunState::Open`] (its follower then ends with the run's `run_finished` event, or
    /// when its caller stops it); one that knows there is no such thread says so as an error.
    async fn state(&self, thread_id: &str) -> Result<RunState, Self::Error>;
}

/// The journal as a history source: a thread that does not exist is
/// [`StoreError::UnknownThread`], one that finished has ended.
#[async_trait::async_trait]
impl<'a> HistorySource for dyn CheckpointStore + 'a {
    type Error = StoreError;

    async fn events_after(
        &self,
        thread_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        read(self, thread_id, after, limit).await
    }

    async fn state(&self, thread_id: &str) -> Result<RunState, StoreError> {
        match self.status(thread_id).await? {
            None => Err(StoreError::UnknownThread(thread_id.to_owned())),
            Some(status) if status.is_finished() => Ok(RunState::Ended),
            Some(_) => Ok(RunState::Open),
        }
    }
}

/// How long a [`Follower`] waits between looks at its source.
pub const POLL: Duration = Duration::from_millis(50);

/// How long a [`Follower`] waits, once the thread's end is known, for its last events (a run
/// journals its `run_finished` event with its end, but a run of an earlier flowbox wrote it
/// just after, as a store that cannot write both at once does).
const LAST_EVENTS: Duration = Duration::from_secs(1);

/// Follows one thread's history as it is written, from a sequence number on. Events it never
/// gets — a hole in the numbering, which a source that keeps only some of them (a buffer that
/// filled, a record that expired) leaves — arrive as one [`EventKind::Gap`] each, in their
/// place.
#[derive(Debug)]
pub struct Follower<S: HistorySource + ?Sized> {
    source: Arc<S>,
    thread_id: String,
    after: u64,
    poll: Duration,
    ended: bool,
    /// When the thread was first seen ended without its `run_finished` event.
    ended_at: Option<Instant>,
}

impl<S: HistorySource + ?Sized> Follower<S> {
    /// Follows `thread_id` from the event after `after` (0: from the start).
    pub fn new(source: Arc<S>, thread_id: impl Into<String>, after: u64) -> Self {
        Self {
            source,
            thread_id: thread_id.into(),
            after,
            poll: POLL,
            ended: false,
            ended_at: None,
        }
    }

    /// Looks at the source every `poll` instead of every [`POLL`].
    pub fn with_poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// The sequence number of the last event returned.
    pub fn position(&self) -> u64 {
        self.after
    }

    /// The next events, waiting until there are some; `None` once the run ended (its
    /// `run_finished` event was returned, or its end is known and no event follows it). A
    /// thread whose run stopped without an end (a killed process) is waited on until it is
    /// resumed.
    pub async fn next(&mut self) -> Result<Option<Vec<Event>>, S::Error> {
        loop {
            if self.ended {
                return Ok(None);
            }
            let events = self.read_now().await?;
            if !events.is_empty() {
                self.ended_at = None;
                return Ok(Some(events));
            }
            match self.source.state(&self.thread_id).await? {
                RunState::Open => self.ended_at = None,
                RunState::Ended => {
                    let since = *self.ended_at.get_or_insert_with(Instant::now);
                    if since.elapsed() >= LAST_EVENTS {
                        self.ended = true;
                        continue;
                    }
                }
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// The events written since the last ones returned, without waiting (none is an empty
    /// list): what a caller that knows the run is over reads last.
    pub async fn read_now(&mut self) -> Result<Vec<Event>, S::Error> {
        let page = self
            .source
            .events_after(&self.thread_id, self.after, PAGE)
            .await?;
        let mut events = Vec::with_capacity(page.len());
        for event in page {
            // A source may repeat what it gave before; only what is new counts.
            if event.seq <= self.after {
                continue;
            }
            if event.seq > self.after + 1 {
                events.push(Event {
                    thread_id: self.thread_id.clone(),
                    seq: 0,
                    unix_us: None,
                    kind: EventKind::Gap {
                        missed: event.seq - self.after - 1,
                    },
                });
            }
            self.after = event.seq;
            self.ended |= matches!(event.kind, EventKind::RunFinished { .. });
            events.push(event);
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A source that keeps only some events, as a buffer that filled would.
    #[derive(Debug, Default)]
    struct Patchy {
        events: Mutex<Vec<Event>>,
        ended: Mutex<bool>,
    }

    impl Patchy {
        fn publish(&self, seq: u64, kind: EventKind) {
            self.events.lock().unwrap().push(Event {
                thread_id: "t".into(),
                seq,
                unix_us: None,
                kind,
            });
        }
    }

    #[async_trait::async_trait]
    impl HistorySource for Patchy {
        type Error = std::convert::Infallible;

        async fn events_after(
            &self,
            _: &str,
            after: u64,
            limit: usize,
        ) -> Result<Vec<Event>, Self::Error> {
            let events = self.events.lock().unwrap();
            Ok(events
                .iter()
                .filter(|event| event.seq > after)
                .take(limit)
                .cloned()
                .collect())
        }

        async fn state(&self, _: &str) -> Result<RunState, Self::Error> {
            Ok(match *self.ended.lock().unwrap() {
                true => RunState::Ended,
                false => RunState::Open,
            })
        }
    }

    fn log(n: u64) -> EventKind {
        EventKind::Log {
            message: n.to_string(),
        }
    }

    #[tokio::test]
    async fn a_hole_in_the_numbering_arrives_as_a_gap_in_its_place() {
        let source = Arc::new(Patchy::default());
        source.publish(1, log(1));
        source.publish(4, log(4));
        let mut follower = Follower::new(Arc::clone(&source), "t", 0);
        let events = follower.next().await.unwrap().unwrap();
        let kinds: Vec<&EventKind> = events.iter().map(|event| &event.kind).collect();
        assert_eq!(kinds, [&log(1), &EventKind::Gap { missed: 2 }, &log(4)]);
        assert_eq!(follower.position(), 4);
        // Nothing new yet: a read that does not wait finds nothing.
        assert!(follower.read_now().await.unwrap().is_empty());
        source.publish(5, EventKind::Phase { title: "p".into() });
        assert_eq!(follower.read_now().await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_follower_ends_with_the_run_finished_event_or_an_end_without_one() {
        let source = Arc::new(Patchy::default());
        source.publish(1, log(1));
        source.publish(
            2,
            EventKind::RunFinished {
                ok: true,
                summary: Box::default(),
                error: None,
            },
        );
        let mut follower = Follower::new(Arc::clone(&source), "t", 0);
        assert_eq!(follower.next().await.unwrap().unwrap().len(), 2);
        assert!(follower.next().await.unwrap().is_none());

        // A run that ended without its last event (it went to a buffer that filled).
        let source = Arc::new(Patchy::default());
        source.publish(1, log(1));
        *source.ended.lock().unwrap() = true;
        let mut follower =
            Follower::new(Arc::clone(&source), "t", 0).with_poll(Duration::from_millis(10));
        assert_eq!(follower.next().await.unwrap().unwrap().len(), 1);
        assert!(follower.next().await.unwrap().is_none());
    }
}
