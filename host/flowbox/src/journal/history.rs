//! A thread's history read back from its journal: its events from a sequence number on, and a
//! [`Follower`] that waits for the ones another process (or this one) is still writing.
//!
//! A run journals its events as they happen (batched, see [`Event`]'s numbering: the thread's
//! own, which a resumed run continues). Reading never writes: open the journal with
//! [`SqliteStore::open_read_only`](crate::store::SqliteStore::open_read_only) and a reader
//! never holds up a run writing it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowbox_store::{CheckpointStore, JournalRecord, RunStatus, StoreError, StoredEvent};

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

fn decode(thread_id: &str, event: &StoredEvent) -> Result<Event, StoreError> {
    serde_json::from_str(&event.event).map_err(|error| StoreError::CorruptRecord {
        path: "the journal".into(),
        thread_id: thread_id.to_owned(),
        record: JournalRecord::Event { seq: event.seq },
        detail: error.to_string(),
    })
}

/// How long a [`Follower`] waits between looks at the journal.
pub const POLL: Duration = Duration::from_millis(50);

/// How long a [`Follower`] waits, once the thread's end is journaled, for its last events
/// (a run writes its `run_finished` event just after its end).
const LAST_EVENTS: Duration = Duration::from_secs(1);

/// Follows one thread's history as it is written, from a sequence number on.
#[derive(Debug)]
pub struct Follower {
    store: Arc<dyn CheckpointStore>,
    thread_id: String,
    after: u64,
    poll: Duration,
    ended: bool,
    /// When the thread was first seen finished without its `run_finished` event.
    finished_at: Option<Instant>,
}

impl Follower {
    /// Follows `thread_id` from the event after `after` (0: from the start).
    pub fn new(store: Arc<dyn CheckpointStore>, thread_id: impl Into<String>, after: u64) -> Self {
        Self {
            store,
            thread_id: thread_id.into(),
            after,
            poll: POLL,
            ended: false,
            finished_at: None,
        }
    }

    /// Looks at the journal every `poll` instead of every [`POLL`].
    pub fn with_poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// The sequence number of the last event returned.
    pub fn position(&self) -> u64 {
        self.after
    }

    /// The next events, waiting until there are some; `None` once the run ended (its
    /// `run_finished` event was returned, or its end is journaled and no event follows it).
    /// A thread that does not exist is [`StoreError::UnknownThread`]; one whose run stopped
    /// without an end (a killed process) is waited on until it is resumed.
    pub async fn next(&mut self) -> Result<Option<Vec<Event>>, StoreError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            let events = read(self.store.as_ref(), &self.thread_id, self.after, PAGE).await?;
            if let Some(last) = events.last() {
                self.after = last.seq;
                self.ended = events
                    .iter()
                    .any(|event| matches!(event.kind, EventKind::RunFinished { .. }));
                self.finished_at = None;
                return Ok(Some(events));
            }
            match self.store.status(&self.thread_id).await? {
                None => return Err(StoreError::UnknownThread(self.thread_id.clone())),
                Some(RunStatus::Running) => self.finished_at = None,
                Some(_) => {
                    let since = *self.finished_at.get_or_insert_with(Instant::now);
                    if since.elapsed() >= LAST_EVENTS {
                        self.ended = true;
                        continue;
                    }
                }
            }
            tokio::time::sleep(self.poll).await;
        }
    }
}
