//! The typed event stream of every run.
//!
//! Runs publish [`Event`]s to the `EventHub` their [`crate::Runtime`] owns; subscribers get
//! an [`EventStream`] of one of two kinds:
//!
//! - **live** ([`crate::Runtime::subscribe`]), a broadcast channel: publishing never waits, and
//!   a subscriber that falls behind loses the oldest events and receives one
//!   [`EventKind::Gap`] saying how many. The CLI's progress display is one.
//! - **lossless** ([`crate::Runtime::subscribe_lossless`]), a queue of its own
//!   (`queue`): every event arrives. When it holds the runtime's event capacity, the
//!   script's own writers — its `log` and `phase` calls, and `await`ing its calls — wait for the
//!   reader; leaves and the end of a run never wait, so they may go past the capacity by the
//!   few events each of them publishes. The CLI's `--events` output is one.

pub mod history;
mod hub;
mod line;
mod progress;
mod publisher;
pub(crate) mod queue;

use flowbox_store::{ErrorInfo, GroupKind, Summary};
use serde::{Deserialize, Serialize};

pub(crate) use hub::EventHub;
#[cfg(feature = "otlp")]
pub(crate) use hub::Observer;
pub use hub::{EventRelay, EventStream};
pub use progress::Progress;
pub use publisher::EventSink;
pub(crate) use publisher::RunEvents;

/// One thing that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The run's thread id.
    pub thread_id: String,
    /// Position in the run's stream, from 1, without holes (a [`EventKind::Gap`] reports the
    /// events a slow subscriber missed). A resumed run of a journaled thread goes on from the
    /// last number of the thread's history (see [`history`]).
    pub seq: u64,
    /// When it was published, in microseconds since the Unix epoch; `None` in events recorded
    /// before events had times (and left out of the JSON then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_us: Option<u64>,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
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
        /// The `model` option, when the script gave one (left out of the JSON otherwise).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// How long it waited for its concurrency slot after the script called it, in
        /// milliseconds (left out of the JSON when 0).
        #[serde(default, skip_serializing_if = "is_zero")]
        waited_ms: u64,
        /// The leaves whose replies the script put word for word into this leaf's prompt or
        /// instruction (a text reply, or a string of a structured one, of at least 16 bytes), in
        /// call order: the edges of the run's graph (left out of the JSON when none).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        fed_by: Vec<u64>,
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
        /// What it cost at the runtime's prices, when it succeeded and its model is priced
        /// (left out of the JSON otherwise).
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "flowbox_store::optional_f64"
        )]
        cost_usd: Option<f64>,
    },
    /// One model turn of a leaf agent's loop ended (leaves of the provider backends).
    LeafTurn {
        /// The leaf's handle within the run.
        call_id: u64,
        /// The provider's model id.
        model: String,
        /// Tokens the turn read.
        input_tokens: u64,
        /// Tokens the turn wrote.
        output_tokens: u64,
        /// How long the turn took, in milliseconds.
        duration_ms: u64,
        /// How many times its request was sent again after failures worth retrying (a 429, a
        /// 503, a dropped connection), its time included in `duration_ms` (left out of the JSON
        /// when 0).
        #[serde(default, skip_serializing_if = "is_zero")]
        retries: u32,
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

impl EventKind {
    /// The event's `"type"` in JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "run_started",
            Self::Phase { .. } => "phase",
            Self::Log { .. } => "log",
            Self::LeafStarted { .. } => "leaf_started",
            Self::LeafFinished { .. } => "leaf_finished",
            Self::LeafTurn { .. } => "leaf_turn",
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

    #[test]
    fn events_serialise_with_a_type_tag_and_stable_names() {
        let event = Event {
            thread_id: "t".into(),
            seq: 3,
            unix_us: None,
            kind: EventKind::LeafStarted {
                call_id: 9,
                label: Some("a".into()),
                agent_type: None,
                prompt_preview: "p".into(),
                model: None,
                waited_ms: 0,
                fed_by: vec![],
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
                cost_usd: None,
            }
        );
        assert_eq!(serde_json::to_string(&event).unwrap(), text);
        let mut summary = Summary::default();
        summary.tokens_spent = 5;
        summary.fuel_used = 123_456_789_012;
        let finished = Event {
            thread_id: "t".into(),
            seq: 2,
            unix_us: None,
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
        // Dollars, a float inside the flattened kind, read back from text too: a leaf's cost
        // and a priced run's summary.
        let mut priced = Summary::default();
        priced.cost_usd = Some(0.000045);
        for kind in [
            EventKind::LeafFinished {
                call_id: 1,
                ok: true,
                tokens: 6,
                duration_ms: 0,
                replayed: false,
                error: None,
                cost_usd: Some(0.000045),
            },
            EventKind::RunFinished {
                ok: true,
                summary: Box::new(priced),
                error: None,
            },
        ] {
            let event = Event {
                thread_id: "t".into(),
                seq: 3,
                unix_us: Some(1),
                kind,
            };
            let text = serde_json::to_string(&event).unwrap();
            assert!(text.contains("0.000045"), "{text}");
            assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), event);
        }
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
                model: None,
                waited_ms: 0,
                fed_by: vec![3, 5],
            },
            EventKind::LeafTurn {
                call_id: 1,
                model: "m".into(),
                input_tokens: 1,
                output_tokens: 2,
                duration_ms: 0,
                retries: 2,
                error: None,
            },
            EventKind::LeafFinished {
                call_id: 1,
                ok: true,
                tokens: 0,
                duration_ms: 0,
                replayed: false,
                error: None,
                cost_usd: Some(0.25),
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
