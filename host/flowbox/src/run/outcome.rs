//! What a run returns: its result (or error) and a summary of what it did; and the one place a
//! run's outcome becomes the record its journal keeps, and a record becomes an outcome again.

use serde_json::Value;

use flowbox_store::{ErrorInfo, RecordedOutcome, Summary};

use crate::RunError;

/// The end of a run.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The script's JSON result, or why there is none.
    pub result: Result<Value, RunError>,
    /// What the run did, filled in on failure too.
    pub summary: Summary,
    /// The thread had already finished: this is its journaled outcome, and nothing ran.
    pub recorded: bool,
}

impl RunOutcome {
    /// The run's thread id.
    pub fn thread_id(&self) -> &str {
        &self.summary.thread_id
    }

    /// The result, dropping the summary.
    pub fn into_result(self) -> Result<Value, RunError> {
        self.result
    }

    /// The outcome as one JSON object: `{"ok", "result", "error", "summary"}`, which is what
    /// `flowbox run --json` prints and what the journal records. A run the pre-launch gate
    /// refused has its plan as `error.plan`.
    pub fn to_json(&self) -> Value {
        let mut json = serde_json::to_value(self.to_record()).expect("outcomes serialise");
        if let Err(RunError::GateRefused(refusal)) = &self.result {
            json["error"]["plan"] = serde_json::to_value(&refusal.plan).expect("plans serialise");
        }
        json
    }

    /// The outcome as its thread's journal records it.
    pub fn to_record(&self) -> RecordedOutcome {
        RecordedOutcome {
            result: self.result.as_ref().cloned().map_err(ErrorInfo::from),
            summary: self.summary.clone(),
        }
    }

    /// The outcome a finished thread recorded: its error, if it failed, as
    /// [`RunError::Recorded`].
    pub fn from_record(thread_id: &str, record: RecordedOutcome) -> Self {
        let mut summary = record.summary;
        summary.thread_id = thread_id.to_owned();
        Self {
            result: record.result.map_err(RunError::Recorded),
            summary,
            recorded: true,
        }
    }
}
