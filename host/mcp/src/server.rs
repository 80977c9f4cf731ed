//! The MCP server: its instructions (the workflow guidance), its tools, and how a call runs —
//! each in its own fresh guest, concurrently with the others, cancelled by the client's
//! `notifications/cancelled` or by its leaving. A rejected or failed script is a tool result
//! with `isError: true` carrying kind, message, line and hint, never a protocol error, so the
//! host's model can fix the script and call again. A 2026-07-28 client that declares the tasks
//! extension gets its `run_workflow` and `resume_workflow` calls run as tasks
//! ([`crate::tasks`]), answered from memory or, for a thread no task holds, from the journal.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowbox::orchestrator::{
    Guidance, WorkflowError, WorkflowErrorKind, WorkflowInput, WorkflowOutput, WorkflowTool,
};
use flowbox::store::StoreError;
use flowbox::store::view::{self, ThreadList, ThreadRecord};
use flowbox::{RunErrorKind, RunRequest, Runtime};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CustomRequest, CustomResult, ErrorCode, GetTaskParams, GetTaskResult, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressToken, ProtocolVersion, ServerCapabilities,
    ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Notify;

use crate::progress::{self, LogLevel, StatusLine};
use crate::sampling::Clients;
use crate::stateless::{Answers, Retry, Rounds};
use crate::stdin::ClientGone;
use crate::tasks::{self, Entry, Journaled, Tasks};
use crate::tools::{self, LIST_THREADS, RESUME_WORKFLOW, RUN_WORKFLOW, SHOW_THREAD};

/// The MCP server: its instructions, its tools, and the calls running on its runtime. Built
/// with [`Server::builder`]; clones share everything.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("runtime", &self.inner.runtime)
            .field("sampling", &self.inner.sampling.is_some())
            .finish_non_exhaustive()
    }
}

struct Inner {
    runtime: Runtime,
    workflow: WorkflowTool,
    instructions: String,
    tools: Vec<Tool>,
    level: Arc<LogLevel>,
    in_flight: RunningCalls,
    gone: Arc<ClientGone>,
    /// With `--leaves sampling`: where each running thread's leaves go.
    sampling: Option<Arc<Clients>>,
    /// With `--leaves sampling`: the answers of the 2026-07-28 clients' calls.
    rounds: Option<Arc<Rounds>>,
    /// The calls run as tasks (the tasks extension).
    tasks: Tasks,
    /// The threads calls are running now, tasks or not, by how many calls run each.
    threads: Threads,
}

impl Server {
    /// A server running workflows on `runtime`; `patterns` puts the pattern library in its
    /// instructions, and the calls run as tasks are kept for `task_ttl` after they finish.
    pub(crate) fn new(
        runtime: Runtime,
        patterns: bool,
        sampling: Option<(Arc<Clients>, Arc<Rounds>)>,
        task_ttl: Duration,
    ) -> Self {
        let (sampling, rounds) = sampling.unzip();
        let guidance = if patterns {
            Guidance::new(&runtime)
        } else {
            Guidance::without_patterns(&runtime)
        };
        let workflow = WorkflowTool::new(runtime.clone());
        let tools = tools::list(&workflow);
        Self {
            inner: Arc::new(Inner {
                instructions: match sampling {
                    Some(_) => format!("{}\n\n{SAMPLING_NOTE}", guidance.text()),
                    None => guidance.text().to_owned(),
                },
                runtime,
                workflow,
                tools,
                level: Arc::default(),
                in_flight: RunningCalls::default(),
                gone: Arc::default(),
                sampling,
                rounds,
                tasks: Tasks::new(task_ttl),
                threads: Threads::default(),
            }),
        }
    }

    /// What trips when the client of a stdio session has gone.
    pub(crate) fn gone(&self) -> Arc<ClientGone> {
        Arc::clone(&self.inner.gone)
    }

    /// How many calls were running when the client went away (and so were cancelled).
    pub(crate) fn cancelled_on_exit(&self) -> usize {
        self.inner.in_flight.cancelled.load(Ordering::SeqCst)
    }

    /// Waits, at most `limit`, until no call is running any more.
    pub(crate) async fn drained(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.inner.in_flight.idle()).await;
    }

    /// Runs `run_workflow` or `resume_workflow` on `thread_id`, with its progress and log
    /// lines sent to the client; `None` when the client cancelled the call.
    async fn run<T>(
        &self,
        thread_id: String,
        work: impl Future<Output = T>,
        context: &RequestContext<RoleServer>,
    ) -> Option<T> {
        let call = Call {
            peer: context.peer.clone(),
            token: context.meta.get_progress_token(),
            status: None,
        };
        self.run_as(thread_id, work, call, context.ct.cancelled())
            .await
    }

    /// Runs `work` on `thread_id` for `call` until it ends, `cancelled` resolves or the client
    /// goes away (`None` for both).
    async fn run_as<T>(
        &self,
        thread_id: String,
        work: impl Future<Output = T>,
        call: Call,
        cancelled: impl Future<Output = ()>,
    ) -> Option<T> {
        let _running = self.inner.threads.enter(&thread_id);
        let _attached = self
            .inner
            .sampling
            .as_ref()
            .map(|clients| clients.attach(&thread_id, call.peer.clone()));
        let forwarder = progress::spawn(
            self.inner.runtime.subscribe(),
            thread_id,
            call.token,
            call.peer,
            Arc::clone(&self.inner.level),
            call.status,
        );
        // Dropping the run's future cancels it: leaves in flight are dropped, what finished
        // is journaled, and the thread stays resumable.
        let output = tokio::select! {
            output = work => Some(output),
            () = cancelled => None,
            () = self.inner.gone.wait() => {
                self.inner.in_flight.cancelled.fetch_add(1, Ordering::SeqCst);
                None
            }
        };
        forwarder.finish().await;
        output
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        match name {
            RUN_WORKFLOW => {
                let mut input: WorkflowInput = match parse(name, arguments) {
                    Ok(input) => input,
                    Err(message) => return Ok(invalid_arguments(&message)),
                };
                // The call's events are found by its thread id, so every call has one.
                let thread_id = input
                    .thread_id
                    .get_or_insert_with(RunRequest::new_thread_id)
                    .clone();
                let workflow = &self.inner.workflow;
                Ok(
                    match self.run(thread_id, workflow.execute(input), context).await {
                        Some(output) => outcome_result(&output),
                        None => cancelled(),
                    },
                )
            }
            RESUME_WORKFLOW => {
                let ThreadInput { thread_id } = match parse(name, arguments) {
                    Ok(input) => input,
                    Err(message) => return Ok(invalid_arguments(&message)),
                };
                let workflow = &self.inner.workflow;
                let work = workflow.resume(&thread_id);
                Ok(match self.run(thread_id.clone(), work, context).await {
                    Some(output) => outcome_result(&output),
                    None => cancelled(),
                })
            }
            LIST_THREADS => {
                if let Err(message) = parse::<NoInput>(name, arguments) {
                    return Ok(invalid_arguments(&message));
                }
                Ok(self.list_threads().await)
            }
            SHOW_THREAD => {
                let ThreadInput { thread_id } = match parse(name, arguments) {
                    Ok(input) => input,
                    Err(message) => return Ok(invalid_arguments(&message)),
                };
                Ok(self.show_thread(&thread_id).await)
            }
            _ => Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {name:?}: the tools are {RUN_WORKFLOW}, {RESUME_WORKFLOW}, \
                     {LIST_THREADS} and {SHOW_THREAD}"
                ),
                None,
            )),
        }
    }

    /// A call of a 2026-07-28 client under `--leaves sampling`: `run_workflow` or
    /// `resume_workflow` runs its thread until it ends or its leaves wait for the client's
    /// model, which the input-required result asks for; the client's retry brings the answers
    /// (see [`crate::stateless`]).
    async fn round_trip(
        &self,
        rounds: &Arc<Rounds>,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let retry = Retry::of(
            request.request_state.as_deref(),
            request.input_responses.as_ref(),
        )?;
        let name = request.name.as_ref();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let workflow = &self.inner.workflow;
        let (thread_id, work): (String, futures_util::future::BoxFuture<'_, WorkflowOutput>) =
            match name {
                RUN_WORKFLOW => {
                    let mut input: WorkflowInput = match parse(name, arguments) {
                        Ok(input) => input,
                        Err(message) => return Ok(invalid_arguments(&message).into()),
                    };
                    if let Some(retry) = &retry {
                        if let Some(named) =
                            input.thread_id.as_ref().filter(|t| **t != retry.thread_id)
                        {
                            return Err(other_thread(&retry.thread_id, named));
                        }
                        self.journaled(&retry.thread_id).await?;
                        input.thread_id = Some(retry.thread_id.clone());
                    }
                    let thread_id = input
                        .thread_id
                        .get_or_insert_with(RunRequest::new_thread_id)
                        .clone();
                    (thread_id, Box::pin(workflow.execute(input)))
                }
                RESUME_WORKFLOW => {
                    let ThreadInput { thread_id } = match parse(name, arguments) {
                        Ok(input) => input,
                        Err(message) => return Ok(invalid_arguments(&message).into()),
                    };
                    if let Some(retry) = retry.as_ref().filter(|r| r.thread_id != thread_id) {
                        return Err(other_thread(&retry.thread_id, &thread_id));
                    }
                    let resumed = thread_id.clone();
                    (
                        thread_id,
                        Box::pin(async move { workflow.resume(&resumed).await }),
                    )
                }
                _ if retry.is_some() => return Err(no_input_asked(name)),
                _ => return self.call(name, arguments, context).await.map(Into::into),
            };
        let sampling = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.sampling.is_some());
        let answers = retry.map(|retry| retry.answers).unwrap_or_default();
        let round = rounds.open(&thread_id, answers, sampling);
        // Once the batch is ready the run can go no further: it is dropped, its journal kept.
        let work = async {
            tokio::select! {
                biased;
                output = work => Ok(output),
                batch = round.batch() => Err(batch),
            }
        };
        Ok(match self.run(thread_id.clone(), work, context).await {
            Some(Ok(output)) => CallToolResponse::Complete(outcome_result(&output)),
            Some(Err(batch)) => CallToolResponse::InputRequired(batch.input_required(&thread_id)),
            None => CallToolResponse::Complete(cancelled()),
        })
    }

    /// Refuses a retry whose request state names a thread the journal does not hold.
    async fn journaled(&self, thread_id: &str) -> Result<(), ErrorData> {
        let Some(store) = self.inner.runtime.store() else {
            return Ok(());
        };
        match store.load(thread_id).await {
            Ok(None) => Err(ErrorData::invalid_params(
                format!(
                    "the requestState names thread {thread_id}, which is not in this server's \
                     journal: start the call again without a requestState"
                ),
                None,
            )),
            // A journal that fails is the run's to report.
            Ok(Some(_)) | Err(_) => Ok(()),
        }
    }

    /// A `run_workflow` or `resume_workflow` call of a 2026-07-28 client that declared the
    /// tasks extension: it answers at once with a task handle (its id the thread's), the run
    /// going on in the background (see [`crate::tasks`]).
    fn start_task(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.request_state.is_some() || request.input_responses.is_some() {
            return Err(ErrorData::invalid_params(
                "a call run as a task takes no requestState or inputResponses: its leaves' \
                 requests are answered with tasks/update",
                None,
            ));
        }
        let name = request.name.as_ref();
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let work = match name {
            RUN_WORKFLOW => {
                let mut input: WorkflowInput = match parse(name, arguments) {
                    Ok(input) => input,
                    Err(message) => return Ok(invalid_arguments(&message).into()),
                };
                input
                    .thread_id
                    .get_or_insert_with(RunRequest::new_thread_id);
                TaskWork::Run(input)
            }
            _ => match parse::<ThreadInput>(name, arguments) {
                Ok(input) => TaskWork::Resume(input.thread_id),
                Err(message) => return Ok(invalid_arguments(&message).into()),
            },
        };
        let thread_id = work.thread_id().to_owned();
        let Some(entry) = self.inner.tasks.create(&thread_id) else {
            return Ok(failure(
                WorkflowErrorKind::Run(RunErrorKind::ThreadInUse),
                &format!("thread {thread_id} is running as a task already"),
                "poll that task with tasks/get, or cancel it with tasks/cancel",
            )
            .into());
        };
        let sampling = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.sampling.is_some());
        let call = Call {
            peer: context.peer.clone(),
            token: None,
            status: Some(entry.status_line()),
        };
        let server = self.clone();
        let task = Arc::clone(&entry);
        let handle = tokio::spawn(async move {
            let _running = server.inner.in_flight.enter();
            match server.task_run(work, &task, call, sampling).await {
                Some(result) => task.ended(result),
                None => task.cancelled(),
            }
        });
        entry.set_abort(handle.abort_handle());
        Ok(CallToolResponse::Task(
            entry.created(self.inner.tasks.ttl()),
        ))
    }

    /// Runs a task's work to its tool result; under `--leaves sampling` the task goes
    /// `input_required` with each batch of its leaves' requests, and the next round runs once
    /// a `tasks/update` answered them. `None` when the client went away.
    async fn task_run(
        &self,
        work: TaskWork,
        entry: &Entry,
        call: Call,
        sampling: bool,
    ) -> Option<Result<CallToolResult, ErrorData>> {
        let thread_id = work.thread_id().to_owned();
        let workflow = &self.inner.workflow;
        let never = std::future::pending::<()>;
        let Some(rounds) = &self.inner.rounds else {
            let output = self
                .run_as(thread_id, work.start(workflow), call, never())
                .await?;
            return Some(Ok(outcome_result(&output)));
        };
        let mut answers = Answers::default();
        loop {
            let round = rounds.open(&thread_id, answers, sampling);
            // Once the batch is ready the run can go no further: it is dropped, its journal
            // kept, and replayed in the next round.
            let run = async {
                tokio::select! {
                    biased;
                    output = work.start(workflow) => Ok(output),
                    batch = round.batch() => Err(batch),
                }
            };
            let ran = self
                .run_as(thread_id.clone(), run, call.clone(), never())
                .await?;
            drop(round);
            let batch = match ran {
                Ok(output) => return Some(Ok(outcome_result(&output))),
                Err(batch) => batch,
            };
            let (requests, pending) = batch.for_task();
            let answered = entry.input_required(requests, pending);
            answers = tokio::select! {
                answered = answered => answered.ok()?,
                () = self.inner.gone.wait() => {
                    self.inner.in_flight.cancelled.fetch_add(1, Ordering::SeqCst);
                    return None;
                }
            };
        }
    }

    /// The error of an update or cancel (`method`) of task `id`, which this server does not
    /// run.
    async fn not_running(&self, id: &str, method: &str) -> ErrorData {
        let Some(store) = self.inner.runtime.store() else {
            return tasks::unknown(id);
        };
        match store.load(id).await {
            Ok(Some(run)) => tasks::not_running(id, run.end.is_some(), method),
            Ok(None) => tasks::unknown(id),
            Err(error) => journal_error(&error),
        }
    }

    /// What the journal says of task `id`, which this server does not hold in memory.
    async fn journaled_task(&self, id: &str) -> Result<Journaled, ErrorData> {
        let store = self
            .inner
            .runtime
            .store()
            .ok_or_else(|| tasks::unknown(id))?;
        let run = match store.load(id).await {
            Ok(Some(run)) => run,
            Ok(None) => return Err(tasks::unknown(id)),
            Err(error) => return Err(journal_error(&error)),
        };
        let created_ms = run.header.created_unix_ms;
        let Some(end) = &run.end else {
            let running = self.inner.threads.running(id);
            return Ok(Journaled::Unfinished {
                created_ms,
                running,
            });
        };
        let finished_ms = end.finished_unix_ms;
        let ttl = self.inner.tasks.ttl();
        if tasks::is_expired(finished_ms, ttl) {
            return Err(tasks::expired(id, ttl));
        }
        // A finished thread answers with its recorded outcome; nothing runs.
        let mut output = self.inner.workflow.resume(id).await;
        output.note = None;
        Ok(Journaled::Finished {
            created_ms,
            finished_ms,
            result: Box::new(outcome_result(&output)),
        })
    }

    async fn list_threads(&self) -> CallToolResult {
        let Some(store) = self.inner.runtime.store() else {
            return failure(
                WorkflowErrorKind::Run(RunErrorKind::JournalFailure),
                "this server keeps no journal",
                JOURNAL_HINT,
            );
        };
        match store.list().await {
            Ok(listing) => {
                let list = ThreadList::from(listing);
                let mut text = view::table(&list.threads).join("\n");
                for damaged in &list.damaged {
                    text.push_str(&format!("\nerror: {damaged}"));
                }
                let value = serde_json::to_value(&list).expect("listings serialise");
                with_text(CallToolResult::structured(value), text)
            }
            Err(error) => journal_failure(&error),
        }
    }

    async fn show_thread(&self, thread_id: &str) -> CallToolResult {
        let Some(store) = self.inner.runtime.store() else {
            return failure(
                WorkflowErrorKind::Run(RunErrorKind::JournalFailure),
                "this server keeps no journal",
                JOURNAL_HINT,
            );
        };
        match store.load(thread_id).await {
            Ok(Some(run)) => with_text(
                CallToolResult::structured(
                    serde_json::to_value(ThreadRecord::from(&run)).expect("threads serialise"),
                ),
                view::lines(&run).join("\n"),
            ),
            Ok(None) => failure(
                WorkflowErrorKind::Run(RunErrorKind::UnknownThread),
                &format!("no thread {thread_id} in the journal"),
                "list_threads lists the threads there are",
            ),
            Err(error) => journal_failure(&error),
        }
    }
}

/// Where a run's progress goes: the client's peer (log lines, and progress notifications when
/// the request carried a token) and, for a task, its status line.
#[derive(Clone)]
struct Call {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    status: Option<StatusLine>,
}

/// What a task runs.
enum TaskWork {
    Run(WorkflowInput),
    Resume(String),
}

impl TaskWork {
    fn thread_id(&self) -> &str {
        match self {
            Self::Run(input) => input.thread_id.as_deref().unwrap_or_default(),
            Self::Resume(thread_id) => thread_id,
        }
    }

    /// One run of the work: the first, or a replay from the journal after a batch.
    fn start<'a>(
        &'a self,
        workflow: &'a WorkflowTool,
    ) -> futures_util::future::BoxFuture<'a, WorkflowOutput> {
        match self {
            Self::Run(input) => Box::pin(workflow.execute(input.clone())),
            Self::Resume(thread_id) => Box::pin(workflow.resume(thread_id)),
        }
    }
}

/// A journal that fails while a task is looked up.
fn journal_error(error: &StoreError) -> ErrorData {
    ErrorData::internal_error(format!("the journal failed: {error}"), None)
}

/// What the instructions add under `--leaves sampling`.
const SAMPLING_NOTE: &str = "On this server every leaf is answered by the client's own model: \
each model turn of a leaf is a sampling/createMessage request to the client running the \
workflow (under the 2026-07-28 revision, the requests of every waiting leaf come back at once \
in an input-required result, and the call is retried with the answers), so the client must \
offer the sampling capability (a run on a client without it fails at its first leaf). Leaves \
cannot use tools here. Token counts are the client's where its sampling results report them in \
`_meta.usage` (`inputTokens`, `outputTokens`) and estimates otherwise: the run summary's \
`estimated_tokens` says how many of its tokens are estimates.";

/// A retry whose request state is of another thread than its arguments name.
fn other_thread(state: &str, named: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "the requestState is of thread {state}, but the call names thread {named}: retry \
             the call with the arguments it was first made with"
        ),
        None,
    )
}

/// A call carrying answers that no call of this server asks for.
fn no_input_asked(tool: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "{tool} asks for no input, so it takes no requestState or inputResponses: only \
             {RUN_WORKFLOW} and {RESUME_WORKFLOW} under --leaves sampling do"
        ),
        None,
    )
}

const JOURNAL_HINT: &str = "the host's journal failed, not the script; tell the user";

/// The input of `resume_workflow` and `show_thread`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ThreadInput {
    thread_id: String,
}

/// The input of `list_threads`: nothing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoInput {}

/// The tool's arguments as `T`, or what is wrong with them.
fn parse<T: serde::de::DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, String> {
    serde_json::from_value(arguments)
        .map_err(|error| format!("invalid arguments for {tool}: {error}"))
}

/// The `isError` result of arguments that do not fit the tool's input schema.
fn invalid_arguments(message: &str) -> CallToolResult {
    failure(
        WorkflowErrorKind::InvalidArguments,
        message,
        "call the tool with the arguments its input schema lists, with their types",
    )
}

/// A run's output as a tool result: an error when the run did not succeed.
fn outcome_result(output: &WorkflowOutput) -> CallToolResult {
    let value = output.to_value();
    let text = serde_json::to_string_pretty(&value).expect("JSON values serialise");
    let result = if output.ok {
        CallToolResult::structured(value)
    } else {
        CallToolResult::structured_error(value)
    };
    with_text(result, text)
}

/// The answer to a call the client cancelled (which the client ignores, by the protocol).
fn cancelled() -> CallToolResult {
    failure(
        WorkflowErrorKind::Cancelled,
        "the client cancelled the call; its thread stays in the journal",
        "resume_workflow with the thread id continues it without paying again for the leaves \
         that finished",
    )
}

fn journal_failure(error: &StoreError) -> CallToolResult {
    failure(
        WorkflowErrorKind::Run(RunErrorKind::JournalFailure),
        &error.to_string(),
        JOURNAL_HINT,
    )
}

/// An `isError` result shaped like a run's error.
fn failure(kind: WorkflowErrorKind, message: &str, hint: &str) -> CallToolResult {
    outcome_result(&WorkflowOutput::failed(WorkflowError::new(
        kind, message, hint,
    )))
}

fn with_text(mut result: CallToolResult, text: String) -> CallToolResult {
    result.content = vec![ContentBlock::text(text)];
    result
}

impl ServerHandler for Server {
    #[expect(deprecated, reason = "MCP logging is what 2025-11-25 clients show")]
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .enable_tasks()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("flowbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.inner.instructions.clone())
    }

    /// Every revision up to the stateless 2026-07-28: clients of 2025-11-25 and before
    /// initialize a session, clients of 2026-07-28 send self-contained requests (and may ask
    /// `server/discover` first).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _running = self.inner.in_flight.enter();
        let stateless = context
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        let tasks = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        if stateless && tasks && [RUN_WORKFLOW, RESUME_WORKFLOW].contains(&request.name.as_ref()) {
            return self.start_task(request, &context);
        }
        if let Some(rounds) = self.inner.rounds.as_ref().filter(|_| stateless) {
            return self.round_trip(rounds, request, &context).await;
        }
        if request.request_state.is_some() || request.input_responses.is_some() {
            return Err(no_input_asked(&request.name));
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let result = self.call(&request.name, arguments, &context).await?;
        Ok(CallToolResponse::Complete(result))
    }

    /// `tasks/get`: a task held in memory, else what the journal says of its thread.
    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let id = request.task_id;
        let ttl = self.inner.tasks.ttl();
        let task = match self.inner.tasks.get(&id) {
            Some(entry) => entry.detailed(ttl),
            None => tasks::from_journal(&id, self.journaled_task(&id).await?, ttl)?,
        };
        Ok(GetTaskResult::new(task))
    }

    /// `tasks/update`: the answers of an `input_required` task's batch.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let id = request.task_id;
        match self.inner.tasks.get(&id) {
            Some(entry) => entry.update(&request.input_responses),
            None => Err(self.not_running(&id, "tasks/update").await),
        }
    }

    /// `tasks/cancel`: cancels a running task; its thread stays resumable.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let id = request.task_id;
        match self.inner.tasks.get(&id) {
            Some(entry) => entry.cancel(),
            None => Err(self.not_running(&id, "tasks/cancel").await),
        }
    }

    #[expect(deprecated, reason = "MCP logging is what 2025-11-25 clients show")]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner.level.set(request.level);
        Ok(())
    }

    /// A request rmcp could not decode as one it knows: the method is unknown (Method not
    /// found), or it is one this server serves whose params do not fit (Invalid params, saying
    /// what is wrong) — rmcp alone would call both an unknown method.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let CustomRequest { method, params, .. } = request;
        let params = params.unwrap_or(Value::Null);
        let problem = match method.as_str() {
            "tools/call" => serde_json::from_value::<CallToolRequestParams>(params).err(),
            "initialize" | "ping" | "tools/list" | "logging/setLevel" | "tasks/get"
            | "tasks/update" | "tasks/cancel" => None,
            _ => {
                return Err(ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "unknown method {method:?}: this server serves initialize, ping, \
                         tools/list, tools/call, logging/setLevel and (the tasks extension) \
                         tasks/get, tasks/update and tasks/cancel"
                    ),
                    None,
                ));
            }
        };
        let detail = problem.map_or_else(String::new, |error| format!(": {error}"));
        Err(ErrorData::invalid_params(
            format!("invalid params for {method}{detail}"),
            None,
        ))
    }
}

/// The threads calls are running now, by how many calls run each (a second call of a running
/// thread is refused, but counts until it is).
#[derive(Debug, Default)]
struct Threads(std::sync::Mutex<std::collections::HashMap<String, usize>>);

impl Threads {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn enter(&self, thread_id: &str) -> OnThread<'_> {
        *self.lock().entry(thread_id.to_owned()).or_default() += 1;
        OnThread(self, thread_id.to_owned())
    }

    fn running(&self, thread_id: &str) -> bool {
        self.lock().contains_key(thread_id)
    }
}

struct OnThread<'a>(&'a Threads, String);

impl Drop for OnThread<'_> {
    fn drop(&mut self) {
        let mut threads = self.0.lock();
        if let Some(count) = threads.get_mut(&self.1) {
            *count -= 1;
            if *count == 0 {
                threads.remove(&self.1);
            }
        }
    }
}

/// The calls running now, so the server can wait for them to end before it exits.
#[derive(Debug, Default)]
struct RunningCalls {
    count: AtomicUsize,
    /// Calls cancelled because the client went away.
    cancelled: AtomicUsize,
    idle: Notify,
}

impl RunningCalls {
    fn enter(&self) -> Running<'_> {
        self.count.fetch_add(1, Ordering::SeqCst);
        Running(self)
    }

    async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

struct Running<'a>(&'a RunningCalls);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
