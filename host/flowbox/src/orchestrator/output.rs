//! [`WorkflowOutput`]: what `run_workflow` hands back to the root model, as one type — the
//! MCP server's `outputSchema` is derived from it ([`WorkflowOutput::schema`]), so the schema
//! a client validates against and the JSON the tool writes cannot drift apart.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::plan::Plan;
use crate::store::BranchFailure;
use crate::{ErrorInfo, RunErrorKind};

/// What a `run_workflow` (or `resume_workflow`) call returns: `ok`, the run's compact
/// `summary`, and its `result` or its `error`; or, for a preview, the `plan`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkflowOutput {
    /// Whether the run produced a result (for a preview: whether the plan was made).
    pub ok: bool,
    /// Present, and true, when this is a preview: the script's plan, and nothing ran.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub preview: bool,
    /// A preview's plan: leaves, widest fan-out, waves, estimated tokens and dollars per phase
    /// and model profile, and warnings.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    pub plan: Option<Box<Plan>>,
    /// What the run did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<WorkflowSummary>,
    /// The script's JSON result, when ok (larger than the tool's limit, a marker saying so
    /// with the first part of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why the run failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<WorkflowError>,
    /// Said when the thread had already finished: the answer is its recorded outcome, and
    /// nothing ran again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The host's journal could not record the run; the answer stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_error: Option<String>,
}

/// A run's compact summary, as the root model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkflowSummary {
    /// The run's thread id: `resume_workflow` continues it, and naming it in `run_workflow`
    /// returns its recorded outcome.
    pub thread_id: String,
    /// `meta.name`, when the script has a meta.
    pub name: Option<String>,
    /// Leaf agents the run started.
    pub leaves: u32,
    /// Tokens the leaves whose results the script received used.
    pub tokens: u64,
    /// The phases the script entered, in order.
    pub phases: Vec<String>,
    /// How long the run took, in milliseconds.
    pub duration_ms: u64,
    /// The `parallel` branches and `pipeline` items that raised and so became `None`: the first
    /// ten.
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    pub failed_branches: Vec<BranchFailure>,
    /// What the run did that is allowed but probably a mistake.
    pub warnings: Vec<String>,
    /// Of `tokens`, how many are estimates (one per three bytes of text) rather than counts the
    /// model reported; absent when none are.
    #[serde(skip_serializing_if = "is_zero")]
    pub estimated_tokens: u64,
    /// How many branches failed in all, when more than `failed_branches` shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_branch_count: Option<u32>,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// Why a run failed, as the root model sees it: what to fix and a hint on how.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[non_exhaustive]
pub struct WorkflowError {
    /// The error's kind: a run error's, such as `uncaught`, `syntax` or `out_of_fuel`, or the
    /// call's own (`invalid_arguments`, `cancelled`).
    #[schemars(with = "String")]
    pub kind: WorkflowErrorKind,
    /// The message.
    pub message: String,
    /// The script line it points at, when it points at one.
    pub line: Option<u32>,
    /// The Python exception type of an uncaught exception.
    pub exception: Option<String>,
    /// What to do about it.
    pub hint: String,
    /// For a run the pre-launch gate refused: the plan it measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Map<String, Value>>")]
    pub plan: Option<Box<Plan>>,
}

/// What kind of failure a [`WorkflowError`] is: a run error's kind, or the tool call's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkflowErrorKind {
    /// The run ended with an error of this kind.
    Run(RunErrorKind),
    /// The call's arguments do not fit the tool's input schema (`invalid_arguments`).
    InvalidArguments,
    /// The client cancelled the call (`cancelled`).
    Cancelled,
}

impl WorkflowErrorKind {
    /// The snake_case name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Run(kind) => kind.as_str(),
            Self::InvalidArguments => "invalid_arguments",
            Self::Cancelled => "cancelled",
        }
    }
}

impl Serialize for WorkflowErrorKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl WorkflowError {
    /// A failure of `kind` that is not a run's (no line, no exception), with its `message` and
    /// `hint`.
    pub fn new(kind: WorkflowErrorKind, message: impl Into<String>, hint: &str) -> Self {
        Self {
            kind,
            message: message.into(),
            line: None,
            exception: None,
            hint: hint.to_owned(),
            plan: None,
        }
    }

    /// The error of a run error's `info`, with `hint`.
    pub(crate) fn of_run(info: ErrorInfo, hint: &str) -> Self {
        Self {
            kind: WorkflowErrorKind::Run(info.kind),
            message: info.message,
            line: info.line,
            exception: info.exception,
            hint: hint.to_owned(),
            plan: None,
        }
    }
}

impl WorkflowOutput {
    /// The JSON Schema of the output as it is written (a field left out when empty is not
    /// required), as MCP's `outputSchema` declares it.
    pub fn schema() -> Value {
        let schema = schemars::generate::SchemaSettings::draft2020_12()
            .for_serialize()
            .into_generator()
            .into_root_schema_for::<WorkflowOutput>();
        serde_json::to_value(schema).expect("schemas serialise")
    }

    /// The output as JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("workflow outputs serialise")
    }

    /// An output that only says whether it is `ok`; the rest is filled in by its maker.
    pub(crate) fn new(ok: bool) -> Self {
        Self {
            ok,
            preview: false,
            plan: None,
            summary: None,
            result: None,
            error: None,
            note: None,
            journal_error: None,
        }
    }

    /// An output that failed with `error`.
    pub fn failed(error: WorkflowError) -> Self {
        Self {
            error: Some(error),
            ..Self::new(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_requires_only_what_every_output_has() {
        let schema = WorkflowOutput::schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], serde_json::json!(["ok"]));
        let summary = &schema["$defs"]["WorkflowSummary"];
        let required: Vec<&str> = summary["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|field| field.as_str().unwrap())
            .collect();
        assert!(required.contains(&"thread_id") && required.contains(&"leaves"));
        assert!(!required.contains(&"estimated_tokens"));
        assert!(!required.contains(&"failed_branch_count"));
    }

    #[test]
    fn an_error_output_is_written_as_the_model_reads_it() {
        let output = WorkflowOutput::failed(WorkflowError::new(
            WorkflowErrorKind::InvalidArguments,
            "no script",
            "pass a script",
        ));
        assert_eq!(
            output.to_value(),
            serde_json::json!({"ok": false, "error": {"kind": "invalid_arguments",
                "message": "no script", "line": null, "exception": null, "hint": "pass a script"}})
        );
    }
}
