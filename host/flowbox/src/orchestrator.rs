//! The front door: a `run_workflow` tool any root agent can carry, the guidance that teaches a
//! root model to use it, and an [`Orchestrator`] — a root agent loop over the same chat models as
//! the leaves.
//!
//! The root agent answers simple requests itself; for complex ones it writes a workflow script,
//! runs it with `run_workflow`, reads the structured result (or an error it can act on: kind,
//! message, line and a hint), and decides whether more work is needed.

use std::sync::{Arc, Mutex};

use flowbox_backends::{
    BackendError, ChatModel, ChatRequest, Conversation, Message, Tool, ToolError, ToolSet,
    ToolSpec, Usage,
};
use flowbox_store::WorkflowRecord;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::clock::unix_millis;
use crate::{ErrorInfo, Limits, RunErrorKind, RunRequest, Runtime};

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

/// The patterns, as runnable scripts (in the crate's `patterns/`, each run by the tests).
pub const PATTERNS: &[(&str, &str)] = &[
    (
        "fan out, then synthesise",
        include_str!("../patterns/fan_out_synthesise.py"),
    ),
    (
        "a pipeline over items",
        include_str!("../patterns/pipeline_over_items.py"),
    ),
    (
        "draft, review, revise in a bounded loop",
        include_str!("../patterns/draft_review_revise.py"),
    ),
    (
        "plan, execute each step, check with bounded retries",
        include_str!("../patterns/plan_execute_check.py"),
    ),
    (
        "independent tasks in parallel, errors kept per task",
        include_str!("../patterns/independent_tasks.py"),
    ),
    (
        "a structured decision with a schema",
        include_str!("../patterns/structured_decision.py"),
    ),
    (
        "exact facts from call_tool, then a leaf to interpret them",
        include_str!("../patterns/tool_then_interpret.py"),
    ),
];

/// The text a root agent's system prompt gets to learn the script contract: appended to the
/// embedder's own prompt, never replacing it, and optional.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guidance {
    text: String,
}

impl Guidance {
    /// The default guidance for runs under `limits`, with the pattern library.
    pub fn new(limits: &Limits) -> Self {
        let mut text = guidance_text(limits);
        text.push_str("\n\n## Patterns\n");
        for (title, script) in PATTERNS {
            text.push_str(&format!(
                "\n### {title}\n```python\n{}\n```\n",
                script.trim_end()
            ));
        }
        Self { text }
    }

    /// The default guidance without the pattern library (about a quarter of the length).
    pub fn without_patterns(limits: &Limits) -> Self {
        Self {
            text: guidance_text(limits),
        }
    }

    /// Guidance of the embedder's own.
    pub fn custom(text: impl Into<String>) -> Self {
        Self { text: text.into() }
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// `system_prompt` with this guidance appended.
    pub fn append_to(&self, system_prompt: &str) -> String {
        if system_prompt.trim().is_empty() {
            self.text.clone()
        } else {
            format!("{}\n\n{}", system_prompt.trim_end(), self.text)
        }
    }
}

fn guidance_text(limits: &Limits) -> String {
    let budget = limits.budget_tokens.map_or(
        "no token ceiling unless the host sets one".to_owned(),
        |b| format!("a budget of {b} tokens"),
    );
    format!(
        r#"## Workflows (the `run_workflow` tool)

Answer directly whenever you can. Use `run_workflow` only when a task genuinely needs several
coordinated leaf agents: many independent items, distinct perspectives to combine, a draft that
must be reviewed and revised, or a plan whose steps must each be executed and checked. Do not use
it for a single question, for arithmetic or lookups you can do yourself, or to "think harder".

A workflow is a short Python script that runs in a sandbox: no files, no network, no imports
except these pure modules: json, re, math, random, time, datetime, itertools, functools,
collections, statistics, textwrap, string, heapq, bisect, copy, typing, dataclasses, decimal,
fractions, enum, operator, hashlib, base64, difflib, unicodedata. Everything else is injected;
never import it:

- `await agent(prompt, *, schema=None, label=None, instruction=None, model=None, tools=None,
  instance_id=None, agent_type=None)` runs one leaf agent and returns its text, or — with
  `schema=` (a JSON Schema dict) — a validated object. `prompt` is text or any JSON value. It
  raises `AgentError` when the leaf fails; `BudgetExceeded` and `AgentCapExceeded` (subclasses)
  when no more leaves may start; `ValueError` for a malformed request.
- `await parallel([...])` runs zero-argument callables (`lambda x=x: agent(...)`) or awaitables
  concurrently and returns results in input order; a branch that raises becomes `None`.
- `await pipeline(items, stage1, stage2, ...)` sends each item through the stages on its own;
  a stage is called as `stage(prev)`, `stage(prev, item)` or `stage(prev, item, index)`; a stage
  that raises or returns `None` makes that item `None`.
- `await call_tool(name, **kwargs)` calls a host tool the host allows scripts to call; it
  raises `ToolError` on failure.
- `phase(title)` and `log(message)` report progress; `args` holds the JSON you pass as `args`;
  `budget.total`, `budget.spent()`, `budget.remaining()` track tokens.

Write either `meta = {{"name": ..., "description": ..., "phases": [{{"title": ...}}]}}` (literal
values only, the first assignment) followed by `async def main():` returning the result, or a
plain body that uses `await` at top level and ends with `return result`. The result must be
JSON (dicts, lists, strings, numbers, booleans, None). Dunder names and attributes, `eval`,
`exec`, `open`, `getattr` and similar are rejected before the script runs. Keep scripts as
orchestration glue: the leaves do the thinking.

Limits per run: {max_agents} leaf agents at most, {concurrency} at a time, {budget}, a
{timeout} s deadline, a {script_kib} KiB script. The tool returns `{{"ok": true, "result": ...,
"summary": ...}}`, or `{{"ok": false, "error": {{"kind", "message", "line", "hint"}}}}` — read the
error and hint, fix the script and call the tool again. Results larger than the host's cap come
back truncated with a marker: return only what you need."#,
        max_agents = limits.max_agents,
        concurrency = limits.max_concurrency,
        timeout = limits.timeout.as_secs(),
        script_kib = limits.max_script_bytes / 1024,
    )
}

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
    /// summary, or an error it can act on.
    pub async fn execute(&self, input: WorkflowInput) -> Value {
        let mut request = RunRequest::new(input.script);
        if let Some(args) = input.args {
            request = request.args(args);
        }
        if let Some(thread_id) = input.thread_id {
            // Within a conversation, a model's thread names are its own: it can resume its
            // threads but cannot reach another conversation's.
            request = request.thread_id(match &self.conversation_id {
                Some(conversation) => format!("{conversation}.{thread_id}"),
                None => thread_id,
            });
        }
        let outcome = self.runtime.run_request(request).await;
        let summary = &outcome.summary;
        let record = WorkflowRecord {
            conversation_id: self.conversation_id.clone().unwrap_or_default(),
            thread_id: summary.thread_id.clone(),
            name: summary.name.clone(),
            leaves: u64::from(summary.agents_spawned),
            tokens: summary.tokens_spent,
            ok: outcome.result.is_ok(),
            recorded_unix_ms: unix_millis(),
        };
        let mut output = json!({
            "ok": outcome.result.is_ok(),
            "summary": {
                "thread_id": summary.thread_id,
                "name": summary.name,
                "leaves": summary.agents_spawned,
                "tokens": summary.tokens_spent,
                "phases": summary.phases,
                "duration_ms": summary.duration_ms,
            },
        });
        match &outcome.result {
            Ok(result) => output["result"] = self.truncated(result),
            Err(error) => {
                let info = ErrorInfo::from(error);
                output["error"] = json!({
                    "kind": info.kind,
                    "message": info.message,
                    "line": info.line,
                    "exception": info.exception,
                    "hint": hint(&info),
                });
            }
        }
        // A finished thread asked for again, or one another run holds, ran nothing here: it
        // is not a run of its own, so the totals count every run once.
        if outcome.recorded {
            output["note"] = json!(
                "this thread had already finished: this is its recorded outcome and nothing ran \
                 again; leave thread_id out to run the script anew"
            );
            return output;
        }
        if matches!(outcome.result, Err(crate::RunError::ThreadInUse(_))) {
            return output;
        }
        if let Some(store) = self.runtime.store() {
            // The answer matters more than the bookkeeping: a failed record is reported in
            // the output rather than failing the tool.
            if let Err(error) = store.record_workflow(&record).await {
                output["journal_error"] = json!(error.to_string());
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

/// What to do about an error, for a model that is about to retry.
fn hint(error: &ErrorInfo) -> Option<&'static str> {
    use RunErrorKind as K;
    Some(match error.kind {
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
        K::Uncaught => match error.exception.as_deref() {
            Some("AgentError") => {
                "a leaf failed; catch AgentError around that call, or use parallel(), which turns \
                 failed branches into None"
            }
            Some("BudgetExceeded") => {
                "the token budget is spent; do less work or report what you have"
            }
            Some("AgentCapExceeded") => {
                "the run started too many leaves; batch the work into fewer agent calls"
            }
            Some("ToolError") => {
                "a tool call failed; check the tool name and arguments, or catch ToolError"
            }
            Some("NameError") => "only the injected primitives and the script's own names exist",
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
        K::InvalidArgs => "pass args as one JSON value within the host's message limit",
        K::UnknownThread
        | K::MemoryCapTooSmall
        | K::JournalFailure
        | K::GuestFailure
        | K::HostFailure => return None,
    })
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
                    "thread_id": {"type": "string", "description": "A name for this run (letters, digits, -_.:); naming an earlier run of this conversation resumes it or returns its result."}
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
        Ok(self.execute(input).await)
    }
}

/// How the root agent behaves.
#[derive(Debug, Clone)]
struct RootConfig {
    /// The provider model id of the root agent.
    model: String,
    /// The embedder's own system prompt.
    system_prompt: String,
    /// Guidance appended to the system prompt; `None` turns it off.
    guidance: Option<Guidance>,
    /// Most root turns per question.
    max_turns: u32,
    /// Most tokens one root turn may write.
    max_tokens: u32,
    /// Results larger than this go back to the root model truncated.
    max_result_bytes: usize,
}

/// The answer to one question.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The root agent's final text.
    pub text: String,
    /// The conversation id (workflow runs are recorded under it).
    pub conversation_id: String,
    /// The workflows the root agent ran, in order.
    pub workflows: Vec<WorkflowRecord>,
    /// The root agent's own tokens (the workflows' are in `workflows`).
    pub usage: Usage,
    /// Root turns taken.
    pub turns: u32,
}

/// A root agent with `run_workflow`, over a [`Runtime`] the embedder already has: its
/// workflows run there, on that runtime's leaf backend, limits and journal.
///
/// For leaves on the root's own model and tools, build the runtime with an
/// [`AgentBackend`](crate::backends::AgentBackend) over the same [`ChatModel`]:
///
/// ```no_run
/// # use std::sync::Arc;
/// # use flowbox::Runtime;
/// # use flowbox::backends::{AgentBackend, AgentConfig};
/// # use flowbox::chat::ChatModel;
/// # use flowbox::orchestrator::Orchestrator;
/// # use flowbox::tools::ToolSet;
/// # fn demo(model: Arc<dyn ChatModel>, tools: ToolSet) -> Result<(), flowbox::SetupError> {
/// let config = AgentConfig { model: "gpt-4o".into(), ..AgentConfig::default() };
/// let leaves = AgentBackend::new(Arc::clone(&model), config, tools.clone());
/// let runtime = Runtime::builder().backend(leaves).build()?;
/// let orchestrator = Orchestrator::builder(runtime, model, "gpt-4o").tools(tools).build();
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Orchestrator {
    model: Arc<dyn ChatModel>,
    runtime: Runtime,
    tools: ToolSet,
    config: RootConfig,
}

/// Configures an [`Orchestrator`].
#[derive(Debug)]
pub struct OrchestratorBuilder {
    model: Arc<dyn ChatModel>,
    tools: ToolSet,
    runtime: Runtime,
    config: RootConfig,
    guidance_default: bool,
}

impl Orchestrator {
    /// A root agent over `model` (the provider's model id `model_id`) whose workflows run on
    /// `runtime`. The guidance (with patterns, for the runtime's limits) is on by default.
    pub fn builder(
        runtime: Runtime,
        model: Arc<dyn ChatModel>,
        model_id: impl Into<String>,
    ) -> OrchestratorBuilder {
        OrchestratorBuilder {
            model,
            tools: ToolSet::new(),
            runtime,
            config: RootConfig {
                model: model_id.into(),
                system_prompt: String::new(),
                guidance: None,
                max_turns: 12,
                max_tokens: 4096,
                max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            },
            guidance_default: true,
        }
    }

    /// The runtime workflows run on.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The system prompt the root model gets.
    pub fn system_prompt(&self) -> String {
        match &self.config.guidance {
            Some(guidance) => guidance.append_to(&self.config.system_prompt),
            None => self.config.system_prompt.clone(),
        }
    }

    /// Answers `question` in a new conversation.
    pub async fn ask(&self, question: &str) -> Result<Answer, BackendError> {
        self.ask_in(&crate::thread::new_thread_id(), question).await
    }

    /// Answers `question`, recording workflow runs under `conversation_id`.
    pub async fn ask_in(
        &self,
        conversation_id: &str,
        question: &str,
    ) -> Result<Answer, BackendError> {
        let workflows = WorkflowTool::new(self.runtime.clone())
            .max_result_bytes(self.config.max_result_bytes)
            .conversation(conversation_id);
        let mut tools = self.tools.clone();
        tools
            .insert(Arc::new(workflows.clone()))
            .map_err(BackendError::terminal)?;
        let mut conversation = Conversation::new(
            self.model.as_ref(),
            ChatRequest {
                model: self.config.model.clone(),
                system: self.system_prompt(),
                messages: vec![Message::User {
                    text: question.to_owned(),
                }],
                tools: tools.specs(),
                structured: None,
                max_tokens: self.config.max_tokens,
                idempotency_key: None,
            },
            self.config.max_turns,
        );
        let reply = conversation.run_tools(&tools, None).await?;
        Ok(Answer {
            text: reply.text,
            conversation_id: conversation_id.to_owned(),
            workflows: workflows.runs(),
            usage: conversation.usage(),
            turns: conversation.turns(),
        })
    }
}

impl OrchestratorBuilder {
    /// The root agent's own tools (the leaves' tools are their backend's).
    pub fn tools(mut self, tools: ToolSet) -> Self {
        self.tools = tools;
        self
    }

    /// The embedder's system prompt (the guidance is appended to it, never replaces it).
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.config.system_prompt = prompt.into();
        self
    }

    /// Replaces the default guidance, or turns it off with `None`.
    pub fn guidance(mut self, guidance: Option<Guidance>) -> Self {
        self.config.guidance = guidance;
        self.guidance_default = false;
        self
    }

    /// Most root turns per question (default 12).
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.config.max_turns = turns;
        self
    }

    /// Most tokens one root turn may write (default 4096); a reply cut off there fails.
    pub fn max_tokens(mut self, tokens: u32) -> Self {
        self.config.max_tokens = tokens;
        self
    }

    /// Results larger than this go back to the root model truncated (default 32 KiB).
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.config.max_result_bytes = bytes;
        self
    }

    /// The orchestrator.
    pub fn build(self) -> Orchestrator {
        let mut config = self.config;
        if self.guidance_default {
            config.guidance = Some(Guidance::new(self.runtime.limits()));
        }
        Orchestrator {
            model: self.model,
            runtime: self.runtime,
            tools: self.tools,
            config,
        }
    }
}
