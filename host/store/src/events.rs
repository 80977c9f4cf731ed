//! A thread's history: the events of its runs, kept beside its completions as they happen.
//!
//! The store keeps each event as the JSON text the runtime wrote (it knows nothing of the
//! runtime's event types), numbered by the thread's own sequence, which a resumed run
//! continues. Readers — another process following a run, the web view — read from a sequence
//! number on.

use serde::{Deserialize, Serialize};

/// One event of a thread, as journaled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Its position in the thread's history, from 1, without holes.
    pub seq: u64,
    /// Its type (`leaf_started`, `run_finished`, …), for reading without decoding.
    pub kind: String,
    /// The event, as the JSON text it was written in.
    pub event: String,
}

impl StoredEvent {
    /// Whether the event is about call `call_id` (its JSON has that `call_id`), or might be:
    /// one that is not JSON is, so that whoever reads it finds it damaged.
    pub(crate) fn is_about(&self, call_id: u64) -> bool {
        match serde_json::from_str::<serde_json::Value>(&self.event) {
            Ok(event) => event.get("call_id").and_then(serde_json::Value::as_u64) == Some(call_id),
            Err(_) => true,
        }
    }
}
