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
