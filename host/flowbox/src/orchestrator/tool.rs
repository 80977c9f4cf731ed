//! The `run_workflow` tool: its spec, its executor on the embedder's runtime, and the hints
//! that tell a root model what to do about an error.

use std::sync::{Arc, Mutex};

use flowbox_backends::{Tool, ToolError, ToolSpec};
use flowbox_store::WorkflowRecord;
use serde::Deserialize;
use serde_json::{Value, json};

use super::output::{WorkflowError, WorkflowOutput, WorkflowSummary};
use crate::{ErrorInfo, RunErrorKind, RunRequest, Runtime};
use flowbox_store::now_unix_ms;

/// The name root models call the workflow tool by.
pub const RUN_WORKFLOW: &str = "run_workflow";

/// The tool description: a hard gate, so models reach for workflows only when they help.
pub const RUN_WORKFLOW_DESCRIPTION: &str = "Run a Python workflow script that coordinates \
several leaf agents (fan-out, pipelines, review loops, plan-execute-check) in a sandbox and \
return its JSON result. Use it ONLY for tasks that genuinely need several coordinated leaf \
agents; answer simple questions directly. The script's contract is in your instructions.";

/// The largest result handed back to the root model by default; larger results are truncated
/// with a marker, because they go back into the model's context.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 32 << 10;

/// The most failed branches the root model is shown; `failed_branch_count` then says how many
/// there were.
const MAX_FAILED_SHOWN: usize = 10;

/// The input of `run_workflow`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowInput {
    /// The workflow script.
    pub script: String,
    /// The script's `args`.
    #[serde(default)]
    pub args: Option<Value>,
    /// A thread id to run under (resuming it if the journal has it).
    #[serde(default)]
    pub thread_id: Option<String>,
    /// Return the script's plan (leaves, fan-outs, tokens, dollars; see [`crate::plan`])
    /// instead of running it.
    #[serde(default)]
    pub preview: bool,
}

/// The `run_workflow` tool: hand it to any agent framework (name, description and argument
/// schema in [`Tool::spec`]), and its executor runs the script on the embedder's [`Runtime`].
#[derive(Debug, Clone)]
pub struct WorkflowTool {
    runtime: Runtime,
    max_result_bytes: usize,
    conversation_id: Option<String>,
    /// The runs this tool made, for the orchestrator's answer.
    runs: Arc<Mutex<Vec<WorkflowRecord>>>,
}

impl WorkflowTool {
    /// A tool running workflows on `runtime`.
    pub fn new(runtime: Runtime) -> Self {
        Self {
            runtime,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            conversation_id: None,
            runs: Arc::default(),
        }
    }

    /// Truncates results whose JSON is larger than `bytes` (default 32 KiB).
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = bytes;
        self
    }

    /// Records every run in the runtime's journal under this conversation (without one, runs
    /// are recorded under the empty conversation id), and scopes the thread ids the model
    /// chooses to it (`{conversation}.{name}`).
    pub fn conversation(mut self, conversation_id: impl Into<String>) -> Self {
        self.conversation_id = Some(conversation_id.into());
        self
    }

    /// The runs this tool made so far.
    pub fn runs(&self) -> Vec<WorkflowRecord> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Runs a workflow and returns what the root model gets back: the result and a compact
    /// summary, or an error it can act on; with `preview`, its plan instead (no leaf runs, no
    /// tool but the read-only ones, and nothing is recorded).
    pub async fn execute(&self, input: WorkflowInput) -> WorkflowOutput {
        let mut request = RunRequest::new(input.script);
        if let Some(thread_id) = input.thread_id {
            // Within a conversation, a model's thread names are its own: it can resume its
            // threads but cannot reach another conversation's.
            request = request.thread_id(match &self.conversation_id {
                Some(conversation) => format!("{conversation}.{thread_id}"),
                None => thread_id,
            });
        }
        self.run(request, input.args, input.preview).await
    }

    /// Runs a workflow that names no thread as [`execute`](Self::execute) does, as the new
    /// thread `thread_id`: one the caller drew with [`RunRequest::new_thread_id`] to follow the
    /// run by before it starts (see [`RunRequest::start_thread`]). An input that names a
    /// thread of its own runs as `execute` runs it.
    pub async fn start(&self, input: WorkflowInput, thread_id: String) -> WorkflowOutput {
        if input.thread_id.is_some() {
            return self.execute(input).await;
        }
        let request = RunRequest::new(input.script).start_thread(thread_id);
        self.run(request, input.args, input.preview).await
    }

    /// Runs `request` with `args`, or plans it if this is a `preview`.
    async fn run(
        &self,
        mut request: RunRequest,
        args: Option<Value>,
        preview: bool,
    ) -> WorkflowOutput {
        if let Some(args) = args {
            request = request.args(args);
        }
        if preview {
            return WorkflowOutput {
                preview: true,
                ..match self.runtime.plan(request).await {
                    Ok(plan) => WorkflowOutput {
                        plan: Some(Box::new(plan)),
                        ..WorkflowOutput::new(true)
                    },
                    Err(error) => WorkflowOutput::failed(workflow_error(&error)),
                }
            };
        }
        let outcome = self.runtime.run_request(request).await;
        self.answer(outcome).await
    }

    /// Resumes the journaled thread `thread_id` (see [`Runtime::resume`]) and returns what
    /// [`execute`](Self::execute) returns for a run: the thread's own script, args and limits
    /// run on, and a finished thread answers with its recorded outcome. Thread ids are taken
    /// as they are, without the [`conversation`](Self::conversation) scope.
    pub async fn resume(&self, thread_id: &str) -> WorkflowOutput {
        let outcome = self.runtime.resume(thread_id, None).await;
        self.answer(outcome).await
    }

    /// What the root model gets back for `outcome`, recorded as one of this tool's runs.
    async fn answer(&self, outcome: crate::RunOutcome) -> WorkflowOutput {
        let summary = &outcome.summary;
        let record = WorkflowRecord {
            conversation_id: self.conversation_id.clone().unwrap_or_default(),
            thread_id: summary.thread_id.clone(),
            name: summary.name.clone(),
            leaves: u64::from(summary.leaves),
            tokens: summary.tokens_spent,
            ok: outcome.result.is_ok(),
            recorded_unix_ms: now_unix_ms(),
        };
        let shown = &summary.failed_branches[..summary.failed_branches.len().min(MAX_FAILED_SHOWN)];
        let (result, error) = match &outcome.result {
            Ok(result) => (Some(self.truncated(result)), None),
            Err(error) => (None, Some(workflow_error(error))),
        };
        let mut output = WorkflowOutput {
            summary: Some(WorkflowSummary {
                thread_id: summary.thread_id.clone(),
                name: summary.name.clone(),
                leaves: summary.leaves,
                tokens: summary.tokens_spent,
                phases: summary.phases.clone(),
                duration_ms: summary.duration_ms,
                failed_branches: shown.to_vec(),
                warnings: summary.warnings.clone(),
                estimated_tokens: summary.estimated_tokens,
                failed_branch_count: (summary.failed_branch_count as usize > shown.len())
                    .then_some(summary.failed_branch_count),
            }),
            result,
            error,
            ..WorkflowOutput::new(outcome.result.is_ok())
        };
        // A finished thread asked for again, one another run holds, or one that does not
        // exist ran nothing here: it is not a run of its own, so the totals count every run
        // once.
        if outcome.recorded {
            output.note = Some(
                "this thread had already finished: this is its recorded outcome and nothing ran \
                 again; leave thread_id out to run the script anew"
                    .into(),
            );
            return output;
        }
        if matches!(
            outcome.result,
            Err(crate::RunError::ThreadInUse(_) | crate::RunError::UnknownThread(_))
        ) {
            return output;
        }
        if let Some(store) = self.runtime.store() {
            // The answer matters more than the bookkeeping: a failed record is reported in
            // the output rather than failing the tool.
            if let Err(error) = store.record_workflow(&record).await {
                output.journal_error = Some(error.to_string());
            }
        }
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record);
        output
    }

    fn truncated(&self, result: &Value) -> Value {
        let text = result.to_string();
        if text.len() <= self.max_result_bytes {
            return result.clone();
        }
        let cut = text.floor_char_boundary(self.max_result_bytes);
        json!({
            "truncated": true,
            "bytes": text.len(),
            "preview": format!("{}…", &text[..cut]),
            "note": format!(
                "the result was {} bytes of JSON; only the first {} are shown. Return less \
                 (a summary, counts, the items that matter).",
                text.len(),
                self.max_result_bytes
            ),
        })
    }
}

/// A run error as the root model sees it: kind, message, line, exception and a hint; a gate
/// refusal carries the plan it measured.
fn workflow_error(error: &crate::RunError) -> WorkflowError {
    let info = ErrorInfo::from(error);
    let hint = hint(info.kind, info.exception.as_deref());
    let mut output = WorkflowError::of_run(info, hint);
    if let crate::RunError::GateRefused(refusal) = error {
        output.plan = Some(Box::new(refusal.plan.clone()));
    }
    output
}

/// What to do about an error of `kind` (an uncaught `exception`), for a model that is about
/// to retry: every kind has one. The `run_workflow` tool's errors carry it, and so do the
/// Python package's exceptions.
pub fn hint(kind: RunErrorKind, exception: Option<&str>) -> &'static str {
    use RunErrorKind as K;
    match kind {
        K::Forbidden => {
            "rewrite the flagged line without that construct and keep scripts as glue; imports \
             are not available except the listed pure modules, and the injected primitives \
             (agent, parallel, pipeline, call_tool, phase, log, args, budget) need none"
        }
        K::Syntax => "fix the syntax error at the given line",
        K::InvalidMeta => {
            "meta must be the first assignment: a literal dict with non-empty name and \
             description strings, or leave meta out"
        }
        K::NoEntryPoint => {
            "define `async def main():` that returns the result, or end the body with `return result`"
        }
        K::InvalidResult => {
            "return only JSON values: dicts with string keys, lists, strings, numbers, booleans, None"
        }
        K::Uncaught => match exception {
            Some("AgentError") => {
                "a leaf failed; catch AgentError around that call (e.retryable says whether \
                 calling again may succeed), or use parallel(), which turns failed branches into \
                 None and lists them in summary.failed_branches"
            }
            Some("BudgetExceeded") => {
                "the token budget is spent; do less work or report what you have"
            }
            Some("AgentCapExceeded") => {
                "the run started too many leaves; batch the work into fewer agent calls"
            }
            Some("ToolCapExceeded") => {
                "the run made all the tool calls it may; call tools fewer times, or ask a leaf \
                 with tools to do the reading"
            }
            Some("ToolError") => {
                "a tool call failed; check the tool name and arguments against the host's tools \
                 in your instructions, or catch ToolError"
            }
            Some("ValueError") => {
                "if agent() or call_tool() raised it, the host refused the request: name only \
                 the model profiles, leaf templates and tools your instructions list for this \
                 host, and keep prompts and schemas within its limits; else fix the given line"
            }
            Some("TypeError") => {
                "a value of the wrong type at the given line; for a primitive's argument, check \
                 its signature in your instructions"
            }
            Some("NameError") => {
                "that name is not defined: the injected primitives, Python's builtins and the \
                 script's own names are all there is; check the spelling"
            }
            _ => "fix the error at the given line",
        },
        K::StackOverflow => {
            "the script recursed or nested a value too deeply; use a loop, or flatter data"
        }
        K::OutOfFuel | K::Timeout => {
            "the script did too much work itself; leave the thinking to leaves and keep the \
             script as orchestration glue"
        }
        K::OutOfMemory | K::OutputTooLarge | K::ResultTooLarge => {
            "the script held, printed or returned too much; keep less data and return a summary"
        }
        K::ScriptTooLarge => "write a shorter script; put instructions in the leaves' prompts",
        K::Divergence => {
            "that thread_id belongs to a run of another script or other args; leave thread_id \
             out, or choose a new one, to run this script"
        }
        K::InvalidThreadId => {
            "a thread_id is a short name of letters, digits, '-', '_', '.' or ':'; or leave it out"
        }
        K::ThreadInUse => {
            "another run is using that thread_id; wait for it, or leave thread_id out to start \
             a new thread"
        }
        K::InvalidArgs => {
            "pass args as one JSON value within the host's message limit; a number past a float or an integer of more than 4300 digits goes as a string"
        }
        K::InvalidLimits => "the host's limits are misconfigured; report this to its operator",
        K::GateRefused => {
            "the host's pre-launch gate refused this run before any leaf started; `plan` says \
             what it would do: narrow the fan-out (fewer items, or batch several per leaf), use \
             a cheaper profile with model=, or ask the user to approve the cost"
        }
        K::UnknownThread => {
            "there is no run with that thread_id; leave thread_id out to start a new one"
        }
        K::MemoryCapTooSmall => {
            "the host's memory cap is too small for any script to start; no script can fix \
             this: tell the user the host needs a larger memory cap"
        }
        K::JournalFailure => {
            "the host's journal failed, not the script; call again with the same thread_id to \
             resume once it works, or tell the user"
        }
        K::GuestFailure | K::HostFailure => {
            "flowbox itself failed, not the script; call again once, and if it fails the same \
             way, tell the user"
        }
    }
}

#[async_trait::async_trait]
impl Tool for WorkflowTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: RUN_WORKFLOW.into(),
            description: RUN_WORKFLOW_DESCRIPTION.into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "script": {"type": "string", "description": "The workflow script (Python)."},
                    "args": {"description": "JSON the script reads as `args`."},
                    "thread_id": {"type": "string", "description": "A name for this run (letters, digits, -_.:); naming an earlier run of this conversation resumes it or returns its result."},
                    "preview": {"type": "boolean", "description": "Return the script's plan instead of running it: leaves, widest fan-out, waves, estimated tokens and dollars per phase and model profile, and warnings. No leaf runs; read-only tools run for real, other tools get a placeholder."}
                },
                "required": ["script"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let input: WorkflowInput =
            serde_json::from_value(arguments).map_err(|e| ToolError::InvalidArguments {
                tool: RUN_WORKFLOW.into(),
                message: e.to_string(),
            })?;
        Ok(self.execute(input).await.to_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind, the match making a new kind a compile error here until it is listed.
    fn every_kind() -> Vec<RunErrorKind> {
        use RunErrorKind as K;
        let kinds = vec![
            K::ScriptTooLarge,
            K::InvalidArgs,
            K::InvalidLimits,
            K::InvalidThreadId,
            K::Syntax,
            K::InvalidMeta,
            K::Forbidden,
            K::NoEntryPoint,
            K::Uncaught,
            K::InvalidResult,
            K::OutOfFuel,
            K::OutOfMemory,
            K::MemoryCapTooSmall,
            K::Timeout,
            K::StackOverflow,
            K::OutputTooLarge,
            K::ResultTooLarge,
            K::Divergence,
            K::JournalFailure,
            K::UnknownThread,
            K::ThreadInUse,
            K::GuestFailure,
            K::HostFailure,
            K::GateRefused,
        ];
        for kind in &kinds {
            match kind {
                K::ScriptTooLarge
                | K::InvalidArgs
                | K::InvalidLimits
                | K::InvalidThreadId
                | K::Syntax
                | K::InvalidMeta
                | K::Forbidden
                | K::NoEntryPoint
                | K::Uncaught
                | K::InvalidResult
                | K::OutOfFuel
                | K::OutOfMemory
                | K::MemoryCapTooSmall
                | K::Timeout
                | K::StackOverflow
                | K::OutputTooLarge
                | K::ResultTooLarge
                | K::Divergence
                | K::JournalFailure
                | K::UnknownThread
                | K::ThreadInUse
                | K::GuestFailure
                | K::HostFailure
                | K::GateRefused => {}
            }
        }
        kinds
    }

    #[test]
    fn every_error_kind_has_a_hint() {
        let kinds = every_kind();
        assert_eq!(kinds.len(), 24);
        for kind in kinds {
            let hint = hint(kind, None);
            assert!(hint.len() > 20, "{kind}: {hint}");
        }
        // The exceptions a script commonly leaves uncaught get their own.
        let generic = hint(RunErrorKind::Uncaught, None);
        for exception in [
            "AgentError",
            "BudgetExceeded",
            "AgentCapExceeded",
            "ToolError",
            "ToolCapExceeded",
            "ValueError",
            "TypeError",
            "NameError",
        ] {
            assert_ne!(
                hint(RunErrorKind::Uncaught, Some(exception)),
                generic,
                "{exception}"
            );
        }
        assert!(hint(RunErrorKind::Uncaught, Some("ValueError")).contains("model profiles"));
    }
}
