//! Calls run as tasks (the tasks extension of the 2026-07-28 revision): started at once with a
//! task handle, run in the background, answered from memory or, for a thread no task holds,
//! from the journal.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use flowbox::orchestrator::{WorkflowErrorKind, WorkflowInput, WorkflowOutput, WorkflowTool};
use flowbox::store::StoreError;
use flowbox::{RunErrorKind, RunRequest};
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use crate::stateless::Answers;
use crate::tasks::{self, Entry, Journaled};
use crate::tools::RUN_WORKFLOW;

use super::calls::{ThreadInput, failure, invalid_arguments, outcome_result, parse};
use super::{Call, Server};

impl Server {
    /// A `run_workflow` or `resume_workflow` call of a 2026-07-28 client that declared the
    /// tasks extension: it answers at once with a task handle (its id the thread's), the run
    /// going on in the background (see [`crate::tasks`]).
    pub(super) fn start_task(
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
    pub(super) async fn task_run(
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
    pub(super) async fn not_running(&self, id: &str, method: &str) -> ErrorData {
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
    pub(super) async fn journaled_task(&self, id: &str) -> Result<Journaled, ErrorData> {
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
}

/// What a task runs.
pub(super) enum TaskWork {
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
pub(super) fn journal_error(error: &StoreError) -> ErrorData {
    ErrorData::internal_error(format!("the journal failed: {error}"), None)
}
