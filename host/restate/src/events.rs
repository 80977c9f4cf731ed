//! A run's events, published in the workflow's own Restate state so that any process can
//! follow them through the workflow's shared `events` handler while the run goes on.
//!
//! The runtime hands every event of the run to the workflow's buffer (bounded: past
//! [`MAX_BUFFERED`] events or [`MAX_BUFFERED_BYTES`] the newest are dropped, which a follower
//! sees as a gap in the sequence numbers). Whenever the guest waits for completions — its
//! calls in flight, so the round trip overlaps them — and once at the end, the workflow
//! journals the buffered events as one `ctx.run` record named `events` and stores them as a
//! chunk of its state: `events.N`, listed in the index `events`. Only the last
//! [`KEEP_EVENTS`] or so stay in the state; older chunks are cleared.
//!
//! A replayed attempt does not duplicate anything: the record comes back from the journal
//! (the first attempt's events, whatever the replay computed), the state writes repeat it
//! byte for byte, and the replay's own events are dropped up to the last sequence number the
//! journal holds. The events a follower reads are the first attempt's up to the crash, then
//! the later attempt's, numbered without repeats.

use std::sync::{Arc, Mutex};

use flowbox::Event;
use flowbox::external::EventSink;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

/// The state key of the index of stored chunks.
pub const EVENTS_KEY: &str = "events";
/// Events buffered between two flushes at most.
pub const MAX_BUFFERED: usize = 4096;
/// Bytes of events (as JSON) buffered between two flushes at most.
pub const MAX_BUFFERED_BYTES: usize = 1 << 20;
/// Events kept in the state: older chunks are cleared once the newer ones hold this many.
pub const KEEP_EVENTS: u64 = 4096;

/// The state key of chunk `n`.
pub fn chunk_key(n: u64) -> String {
    format!("events.{n}")
}

/// What `events` is asked: the events after this sequence number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsQuery {
    /// The last sequence number the follower has (0 for all).
    #[serde(default)]
    pub after: u64,
}

/// What `events` answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventsPage {
    /// The stored events after the query's number, in order. A jump in their numbers (or
    /// from the query's) is events no longer kept, or dropped from a full buffer.
    pub events: Vec<Event>,
    /// The last sequence number published so far (0: none yet).
    pub last_seq: u64,
}

/// The index of the stored chunks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventIndex {
    /// The chunks in the state, oldest first.
    pub chunks: Vec<ChunkRef>,
    /// The last sequence number published.
    pub last_seq: u64,
    /// The number the next chunk gets.
    pub next_chunk: u64,
}

/// One stored chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    /// Its number (state key `events.N`).
    pub n: u64,
    /// The sequence number of its first event.
    pub first: u64,
    /// The sequence number of its last event.
    pub last: u64,
    /// How many events it holds.
    pub count: u64,
}

/// The events the runtime published and the workflow has not journaled yet.
#[derive(Debug, Default)]
struct Buffer {
    events: Vec<Event>,
    bytes: usize,
}

/// The runtime's side: buffers every event, never waits.
#[derive(Debug, Default)]
struct Sink(Mutex<Buffer>);

impl Sink {
    fn lock(&self) -> std::sync::MutexGuard<'_, Buffer> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl EventSink for Sink {
    fn event(&self, event: &Event) {
        let size = serde_json::to_vec(event).map_or(0, |bytes| bytes.len());
        let mut buffer = self.lock();
        if buffer.events.len() >= MAX_BUFFERED || buffer.bytes + size > MAX_BUFFERED_BYTES {
            return;
        }
        buffer.bytes += size;
        buffer.events.push(event.clone());
    }
}

/// One attempt's publisher of its run's events.
#[derive(Debug, Default)]
pub(crate) struct Publisher {
    sink: Arc<Sink>,
    index: EventIndex,
}

impl Publisher {
    /// Where the runtime puts the run's events.
    pub(crate) fn sink(&self) -> Arc<dyn EventSink> {
        Arc::clone(&self.sink) as Arc<dyn EventSink>
    }

    /// Journals the buffered events as one record and stores it as a chunk. It runs only
    /// where the script's path decides (a wait, the end), so its records land in the journal
    /// in the same places on every attempt.
    pub(crate) async fn flush(&mut self, ctx: &WorkflowContext<'_>) -> Result<(), HandlerError> {
        let published = self.index.last_seq;
        let candidate: Vec<Event> = {
            let mut buffer = self.sink.lock();
            buffer.bytes = 0;
            std::mem::take(&mut buffer.events)
        }
        .into_iter()
        .filter(|event| event.seq > published)
        .collect();
        let proposed = candidate.clone();
        let record = ctx
            .run(|| async move { Ok(Json(proposed)) })
            .name("events")
            .await?
            .into_inner();
        if let Some(last) = record.last() {
            self.index.last_seq = self.index.last_seq.max(last.seq);
        }
        // A replay may be ahead of the journaled record: what it has past it waits for the
        // next flush.
        let ahead: Vec<Event> = candidate
            .into_iter()
            .filter(|event| event.seq > self.index.last_seq)
            .collect();
        if !ahead.is_empty() {
            let mut buffer = self.sink.lock();
            let later = std::mem::replace(&mut buffer.events, ahead);
            buffer.events.extend(later);
        }
        let (Some(first), Some(last)) = (record.first(), record.last()) else {
            return Ok(());
        };
        let chunk = ChunkRef {
            n: self.index.next_chunk,
            first: first.seq,
            last: last.seq,
            count: record.len() as u64,
        };
        self.index.next_chunk += 1;
        ctx.set(&chunk_key(chunk.n), Json(record));
        self.index.chunks.push(chunk);
        let mut kept: u64 = self.index.chunks.iter().map(|chunk| chunk.count).sum();
        while self.index.chunks.len() > 1 && kept - self.index.chunks[0].count >= KEEP_EVENTS {
            let old = self.index.chunks.remove(0);
            kept -= old.count;
            ctx.clear(&chunk_key(old.n));
        }
        ctx.set(EVENTS_KEY, Json(self.index.clone()));
        Ok(())
    }
}
