//! The typed event stream of every run.
//!
//! Runs publish [`Event`]s to the `EventHub` their [`crate::Runtime`] owns; subscribers get
//! an [`EventStream`] of one of two kinds:
//!
//! - **live** ([`crate::Runtime::subscribe`]), a broadcast channel: publishing never waits, and
//!   a subscriber that falls behind loses the oldest events and receives one
//!   [`EventKind::Gap`] saying how many. The CLI's progress display is one.
//! - **lossless** ([`crate::Runtime::subscribe_lossless`]), a queue of its own
//!   (`event_queue`): every event arrives. When it holds the runtime's event capacity, the
//!   script's own writers — its `log` and `phase` calls, and `await`ing its calls — wait for the
//!   reader; leaves and the end of a run never wait, so they may go past the capacity by the
//!   few events each of them publishes. The CLI's `--events` output is one.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use flowbox_store::{CheckpointStore, GroupKind, StoreError, StoredEvent};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::event_queue::EventQueue;
use crate::{ErrorInfo, Summary};

/// One thing that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The run's thread id.
    pub thread_id: String,
    /// Position in the run's stream, from 1, without holes (a [`EventKind::Gap`] reports the
    /// events a slow subscriber missed). A resumed run of a journaled thread goes on from the
    /// last number of the thread's history (see [`crate::history`]).
    pub seq: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Where a call sits in one enclosing `parallel`/`pipeline` group of the script's tree (a
/// call's path holds one per group, outermost first).
///
/// In JSON, `kind` and `stage` are left out when `None`, so events written before they
/// existed read back as they were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The group, numbered per run from 1 in the order the script opened groups.
    pub group: u32,
    /// Whether the group is a `parallel` or a `pipeline`: always set by this build; `None`
    /// only in events recorded by earlier ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<GroupKind>,
    /// The index within the group, from 0: a `parallel` branch or a `pipeline` item.
    pub index: u32,
    /// The group's number of items.
    pub size: u32,
    /// For a `pipeline` item, the stage it was in when it made the call, from 1; `None` for
    /// a `parallel` branch (and in events recorded before stages were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<u32>,
}

/// A phase from the script's `meta`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaPhase {
    /// The phase's title.
    pub title: String,
    /// An optional longer description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The kinds of events, tagged by `"type"` in JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// The script parsed and passed its checks and is about to start.
    RunStarted {
        /// `meta.name`, when the script has a meta.
        name: Option<String>,
        /// `meta.phases`.
        phases: Vec<MetaPhase>,
    },
    /// The script entered a phase.
    Phase {
        /// The phase title.
        title: String,
    },
    /// A `log` or `print` line.
    Log {
        /// The line.
        message: String,
    },
    /// A leaf agent started running (it got a concurrency slot).
    LeafStarted {
        /// The call's handle within the run.
        call_id: u64,
        /// The `label` option.
        label: Option<String>,
        /// The `agent_type` option.
        agent_type: Option<String>,
        /// The first characters of the prompt.
        prompt_preview: String,
        /// The enclosing groups, outermost first.
        path: Vec<Position>,
    },
    /// A leaf agent finished.
    LeafFinished {
        /// The call's handle within the run.
        call_id: u64,
        /// Whether it succeeded.
        ok: bool,
        /// Tokens it used.
        tokens: u64,
        /// How long the backend took, in milliseconds.
        duration_ms: u64,
        /// Whether the completion came from the journal instead of the backend.
        replayed: bool,
        /// The error message, when it failed.
        error: Option<String>,
    },
    /// A leaf agent called one of its host tools (in its own loop, not the script's
    /// `call_tool`).
    LeafToolCalled {
        /// The leaf's handle within the run.
        call_id: u64,
        /// The tool's name.
        name: String,
    },
    /// A host tool a leaf agent called returned.
    LeafToolFinished {
        /// The leaf's handle within the run.
        call_id: u64,
        /// The tool's name.
        name: String,
        /// Whether it succeeded.
        ok: bool,
        /// How long it took, in milliseconds.
        duration_ms: u64,
        /// The error message, when it failed.
        error: Option<String>,
    },
    /// A host tool was called by the script.
    ToolCalled {
        /// The call's handle within the run.
        call_id: u64,
        /// The tool's name.
        name: String,
        /// The enclosing groups, outermost first.
        path: Vec<Position>,
    },
    /// A host tool finished.
    ToolFinished {
        /// The call's handle within the run.
        call_id: u64,
        /// Whether it succeeded.
        ok: bool,
        /// How long it took, in milliseconds.
        duration_ms: u64,
        /// Whether the completion came from the journal.
        replayed: bool,
        /// The error message, when it failed.
        error: Option<String>,
    },
    /// The run's token use crossed 80 % of its budget, or reached it.
    BudgetWarning {
        /// Tokens spent so far.
        spent: u64,
        /// The budget.
        total: u64,
    },
    /// The run ended.
    RunFinished {
        /// Whether it produced a result.
        ok: bool,
        /// The run's summary.
        summary: Box<Summary>,
        /// The error, when it failed.
        error: Option<ErrorInfo>,
    },
    /// This subscriber fell behind and missed `missed` events.
    Gap {
        /// How many events were lost.
        missed: u64,
    },
}

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
        kind: EventKind::Gap { missed },
    }
}

/// Where every run of a runtime publishes: the live broadcast and the lossless queues.
#[derive(Debug)]
pub(crate) struct EventHub {
    live: broadcast::Sender<Event>,
    lossless: Mutex<Vec<Arc<EventQueue>>>,
    /// How far a live subscriber may fall behind before a gap, and how many events a lossless
    /// queue holds before the scripts' writers wait.
    capacity: usize,
}

impl EventHub {
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            live: broadcast::channel(capacity).0,
            lossless: Mutex::new(Vec::new()),
            capacity,
        }
    }

    fn lossless(&self) -> MutexGuard<'_, Vec<Arc<EventQueue>>> {
        self.lossless.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A live stream of the events published from now on.
    pub(crate) fn subscribe(&self) -> EventStream {
        EventStream {
            source: Source::Live(self.live.subscribe()),
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
    fn publish(&self, make: impl FnOnce() -> Event) {
        let mut queues = self.lossless();
        queues.retain(|queue| !queue.is_abandoned());
        let live = self.live.receiver_count() > 0;
        if queues.is_empty() && !live {
            return;
        }
        let event = make();
        // Every subscriber but the last gets a copy.
        match queues.split_last() {
            Some((last, others)) => {
                for queue in others {
                    queue.push(event.clone());
                }
                if live {
                    let _ = self.live.send(event.clone());
                }
                last.push(event);
            }
            None => {
                let _ = self.live.send(event);
            }
        }
    }

    /// Waits until every lossless queue has room (at once when none is full).
    async fn room(&self) {
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

impl Drop for EventHub {
    fn drop(&mut self) {
        // The runtime and its last run are gone: lossless readers drain what is left and end.
        for queue in self.lossless().iter() {
            queue.close();
        }
    }
}

/// Publishes one run's events with its thread id and a gap-free sequence, and, once
/// [`RunEvents::record`] attached its journal, writes each one into the thread's history.
#[derive(Debug)]
pub(crate) struct RunEvents {
    thread_id: String,
    hub: Arc<EventHub>,
    seq: Mutex<u64>,
    history: OnceLock<Arc<History>>,
    sink: Option<Arc<dyn crate::external::EventSink>>,
}

impl RunEvents {
    pub(crate) fn new(thread_id: String, hub: Arc<EventHub>) -> Self {
        Self {
            thread_id,
            hub,
            seq: Mutex::new(0),
            history: OnceLock::new(),
            sink: None,
        }
    }

    /// Also hands every event to `sink` (a run on another engine publishing its events).
    pub(crate) fn with_sink(mut self, sink: Option<Arc<dyn crate::external::EventSink>>) -> Self {
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
            store,
            thread_id: self.thread_id.clone(),
            pending: Mutex::new(Vec::new()),
            writing: tokio::sync::Mutex::new(()),
        });
        if self.history.set(Arc::clone(&history)).is_err() {
            return;
        }
        *self.seq.lock().unwrap_or_else(|p| p.into_inner()) = last_seq;
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

    /// Writes the events published so far into the thread's history (nothing without one).
    pub(crate) async fn flush(&self) -> Result<(), StoreError> {
        match self.history.get() {
            Some(history) => history.flush().await,
            None => Ok(()),
        }
    }

    /// Publishes the event `make` builds, without waiting, unless nobody listens and no
    /// history records it (then it is not even built). For leaves and the host's own
    /// bookkeeping: they never wait on a reader.
    pub(crate) fn emit(&self, make: impl FnOnce() -> EventKind) {
        // Holding the lock while publishing keeps sequence order equal to delivery order when
        // leaf tasks publish concurrently.
        let mut seq = self.seq.lock().unwrap_or_else(|p| p.into_inner());
        match (self.history.get(), &self.sink) {
            (None, None) => self.hub.publish(|| {
                *seq += 1;
                Event {
                    thread_id: self.thread_id.clone(),
                    seq: *seq,
                    kind: make(),
                }
            }),
            (history, sink) => {
                *seq += 1;
                let event = Event {
                    thread_id: self.thread_id.clone(),
                    seq: *seq,
                    kind: make(),
                };
                if let Some(history) = history {
                    history.push(&event);
                }
                if let Some(sink) = sink {
                    sink.event(&event);
                }
                self.hub.publish(|| event);
            }
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

/// How often a run's new events are written to its history: often enough that a view of a
/// slow leaf sees it start at once, seldom enough that a fan-out's events share transactions.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_millis(20);

/// A run's events on their way into its thread's history.
#[derive(Debug)]
struct History {
    store: Arc<dyn CheckpointStore>,
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
        let stored = StoredEvent {
            seq: event.seq,
            kind: event.kind.name().to_owned(),
            event: serde_json::to_string(event).expect("events serialise"),
        };
        self.pending().push(stored);
    }

    async fn flush(&self) -> Result<(), StoreError> {
        let _writing = self.writing.lock().await;
        let batch = std::mem::take(&mut *self.pending());
        if batch.is_empty() {
            return Ok(());
        }
        match self.store.append_events(&self.thread_id, &batch).await {
            Ok(()) => Ok(()),
            Err(error) => {
                // Kept, ahead of what came since, for the next write.
                let mut pending = self.pending();
                let later = std::mem::replace(&mut *pending, batch);
                pending.extend(later);
                Err(error)
            }
        }
    }
}

impl EventKind {
    /// The event's `"type"` in JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "run_started",
            Self::Phase { .. } => "phase",
            Self::Log { .. } => "log",
            Self::LeafStarted { .. } => "leaf_started",
            Self::LeafFinished { .. } => "leaf_finished",
            Self::LeafToolCalled { .. } => "leaf_tool_called",
            Self::LeafToolFinished { .. } => "leaf_tool_finished",
            Self::ToolCalled { .. } => "tool_called",
            Self::ToolFinished { .. } => "tool_finished",
            Self::BudgetWarning { .. } => "budget_warning",
            Self::RunFinished { .. } => "run_finished",
            Self::Gap { .. } => "gap",
        }
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

    #[test]
    fn events_serialise_with_a_type_tag_and_stable_names() {
        let event = Event {
            thread_id: "t".into(),
            seq: 3,
            kind: EventKind::LeafStarted {
                call_id: 9,
                label: Some("a".into()),
                agent_type: None,
                prompt_preview: "p".into(),
                path: vec![
                    Position {
                        group: 1,
                        kind: Some(GroupKind::Pipeline),
                        index: 2,
                        size: 3,
                        stage: Some(2),
                    },
                    Position {
                        group: 4,
                        kind: Some(GroupKind::Parallel),
                        index: 0,
                        size: 5,
                        stage: None,
                    },
                ],
            },
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"thread_id": "t", "seq": 3, "type": "leaf_started", "call_id": 9,
                "label": "a", "agent_type": null, "prompt_preview": "p",
                "path": [{"group": 1, "kind": "pipeline", "index": 2, "size": 3, "stage": 2},
                    {"group": 4, "kind": "parallel", "index": 0, "size": 5}]})
        );
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
    }

    #[test]
    fn positions_recorded_before_kinds_and_stages_still_read() {
        let old = r#"{"group": 1, "index": 2, "size": 3}"#;
        let position: Position = serde_json::from_str(old).unwrap();
        let expected = Position {
            group: 1,
            kind: None,
            index: 2,
            size: 3,
            stage: None,
        };
        assert_eq!(position, expected);
        assert_eq!(
            serde_json::to_string(&position).unwrap(),
            old.replace(' ', "")
        );
    }

    #[test]
    fn events_deserialise_from_text_with_their_numbers() {
        // Events are parsed from JSON text (an `--events` file, a journal) as well as from values.
        let text = r#"{"thread_id":"t","seq":18446744073709551615,"type":"leaf_finished","call_id":7,"ok":false,"tokens":12,"duration_ms":3,"replayed":true,"error":"boom"}"#;
        let event: Event = serde_json::from_str(text).unwrap();
        assert_eq!(event.seq, u64::MAX);
        assert_eq!(
            event.kind,
            EventKind::LeafFinished {
                call_id: 7,
                ok: false,
                tokens: 12,
                duration_ms: 3,
                replayed: true,
                error: Some("boom".into()),
            }
        );
        assert_eq!(serde_json::to_string(&event).unwrap(), text);
        let mut summary = Summary::default();
        summary.tokens_spent = 5;
        summary.fuel_used = 123_456_789_012;
        let finished = Event {
            thread_id: "t".into(),
            seq: 2,
            kind: EventKind::RunFinished {
                ok: false,
                summary: Box::new(summary),
                error: Some(ErrorInfo {
                    kind: crate::RunErrorKind::Uncaught,
                    message: "m".into(),
                    line: Some(4),
                    exception: None,
                }),
            },
        };
        let text = serde_json::to_string(&finished).unwrap();
        assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), finished);
    }

    #[test]
    fn an_events_name_is_its_json_type() {
        let kinds = [
            EventKind::RunStarted {
                name: None,
                phases: vec![],
            },
            EventKind::Phase { title: "p".into() },
            EventKind::Log {
                message: "m".into(),
            },
            EventKind::LeafStarted {
                call_id: 1,
                label: None,
                agent_type: None,
                prompt_preview: String::new(),
                path: vec![],
            },
            EventKind::LeafFinished {
                call_id: 1,
                ok: true,
                tokens: 0,
                duration_ms: 0,
                replayed: false,
                error: None,
            },
            EventKind::LeafToolCalled {
                call_id: 1,
                name: "t".into(),
            },
            EventKind::LeafToolFinished {
                call_id: 1,
                name: "t".into(),
                ok: true,
                duration_ms: 0,
                error: None,
            },
            EventKind::ToolCalled {
                call_id: 1,
                name: "t".into(),
                path: vec![],
            },
            EventKind::ToolFinished {
                call_id: 1,
                ok: true,
                duration_ms: 0,
                replayed: false,
                error: None,
            },
            EventKind::BudgetWarning { spent: 1, total: 2 },
            EventKind::RunFinished {
                ok: true,
                summary: Box::default(),
                error: None,
            },
            EventKind::Gap { missed: 1 },
        ];
        for kind in kinds {
            let json = serde_json::to_value(&kind).unwrap();
            assert_eq!(json["type"], kind.name());
        }
    }
}
