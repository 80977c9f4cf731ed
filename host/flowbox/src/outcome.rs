//! What a run returns: its result (or error) and a summary of what it did.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::RunError;
use crate::error::ErrorInfo;

/// A compact account of a run, successful or not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Summary {
    /// The run's thread id.
    pub thread_id: String,
    /// `meta.name`, when the script has a meta.
    pub name: Option<String>,
    /// Leaf agents the run started.
    pub agents_spawned: u32,
    /// Host tools the script called with `call_tool`.
    #[serde(default)]
    pub tools_called: u32,
    /// Tokens used by the leaves whose results the script received (input + output).
    pub tokens_spent: u64,
    /// Of which input tokens.
    pub input_tokens: u64,
    /// Of which output tokens.
    pub output_tokens: u64,
    /// The phases the script entered, in order.
    pub phases: Vec<String>,
    /// The script's `log`/`print` lines, in order.
    pub logs: Vec<String>,
    /// Fuel the run consumed; the same script with the same leaf results always uses the same.
    pub fuel_used: u64,
    /// Wall-clock duration in milliseconds.
    pub duration_ms: u64,
    /// Whether the run produced a result.
    pub ok: bool,
}

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
    /// `flowbox run --json` prints.
    pub fn to_json(&self) -> Value {
        let (result, error) = match &self.result {
            Ok(value) => (value.clone(), Value::Null),
            Err(error) => (
                Value::Null,
                serde_json::to_value(ErrorInfo::from(error)).unwrap_or(Value::Null),
            ),
        };
        serde_json::json!({
            "ok": self.result.is_ok(),
            "result": result,
            "error": error,
            "summary": self.summary,
        })
    }
}
