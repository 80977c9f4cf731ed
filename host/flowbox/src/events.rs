//! The typed, live event stream of every run.
//!
//! Runs publish [`Event`]s to a broadcast channel owned by the [`crate::Runtime`]; subscribers
//! get an [`EventStream`]. Publishing never waits: a subscriber that falls behind loses the
//! oldest events and receives one [`EventKind::Gap`] saying how many, so a slow consumer never
//! stalls a leaf. The CLI's progress display and `--events` output are such subscribers.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::{ErrorInfo, Summary};

/// One thing that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The run's thread id.
    pub thread_id: String,
    /// Position in the run's stream, from 1, without holes (a [`EventKind::Gap`] reports the
    /// events a slow subscriber missed).
    pub seq: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Where a call sits in the script's tree of `parallel`/`pipeline` groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The group, numbered per run from 1 in the order the script opened groups.
    pub group: u32,
    /// The index within the group, from 0.
    pub index: u32,
    /// The group's number of items.
    pub size: u32,
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

/// A subscription to the events of every run of a [`crate::Runtime`].
#[derive(Debug)]
pub struct EventStream {
    receiver: broadcast::Receiver<Event>,
}

impl EventStream {
    pub(crate) fn new(receiver: broadcast::Receiver<Event>) -> Self {
        Self { receiver }
    }

    /// The next event; `None` once the runtime is gone. Missed events arrive as one
    /// [`EventKind::Gap`] (with the thread id and sequence number left empty).
    pub async fn recv(&mut self) -> Option<Event> {
        match self.receiver.recv().await {
            Ok(event) => Some(event),
            Err(broadcast::error::RecvError::Lagged(missed)) => Some(gap(missed)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// The next event if one is waiting, without waiting (for draining a stream).
    pub fn try_recv(&mut self) -> Option<Event> {
        match self.receiver.try_recv() {
            Ok(event) => Some(event),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => Some(gap(missed)),
            Err(_) => None,
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

/// Publishes one run's events with its thread id and a gap-free sequence.
#[derive(Debug)]
pub(crate) struct RunEvents {
    thread_id: String,
    sender: broadcast::Sender<Event>,
    seq: Mutex<u64>,
}

impl RunEvents {
    pub(crate) fn new(thread_id: String, sender: broadcast::Sender<Event>) -> Self {
        Self {
            thread_id,
            sender,
            seq: Mutex::new(0),
        }
    }

    /// Publishes the event `make` builds, unless nobody listens (then it is not even built).
    pub(crate) fn emit(&self, make: impl FnOnce() -> EventKind) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        // Holding the lock while sending keeps sequence order equal to delivery order when
        // leaf tasks publish concurrently.
        let mut seq = self.seq.lock().unwrap_or_else(|p| p.into_inner());
        *seq += 1;
        let _ = self.sender.send(Event {
            thread_id: self.thread_id.clone(),
            seq: *seq,
            kind: make(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slow_subscriber_gets_a_counted_gap() {
        let (sender, _) = broadcast::channel(4);
        let mut stream = EventStream::new(sender.subscribe());
        let events = RunEvents::new("t1".into(), sender);
        for n in 0..10 {
            events.emit(|| EventKind::Log {
                message: n.to_string(),
            });
        }
        let first = stream.recv().await.unwrap();
        assert_eq!(first.kind, EventKind::Gap { missed: 6 });
        let next = stream.recv().await.unwrap();
        assert_eq!((next.seq, next.thread_id.as_str()), (7, "t1"));
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
                path: vec![Position {
                    group: 1,
                    index: 2,
                    size: 3,
                }],
            },
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"thread_id": "t", "seq": 3, "type": "leaf_started", "call_id": 9,
                "label": "a", "agent_type": null, "prompt_preview": "p",
                "path": [{"group": 1, "index": 2, "size": 3}]})
        );
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
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
}
