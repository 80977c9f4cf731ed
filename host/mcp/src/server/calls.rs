//! The tools' calls: `run_workflow` and `resume_workflow` run on the server's runtime (a
//! 2026-07-28 client under `--leaves sampling` round-tripping its leaves' requests), and
//! `list_threads` and `show_thread` read the journal; and the results they answer with.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use flowbox::events::history;
use flowbox::orchestrator::{WorkflowError, WorkflowErrorKind, WorkflowInput, WorkflowOutput};
use flowbox::store::StoreError;
use flowbox::store::view::{self, ThreadList, ThreadRecord};
use flowbox::{RunErrorKind, RunRequest};
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::app::THREAD_EVENTS;
use crate::stateless::{Retry, Rounds};
use crate::tools::{LIST_THREADS, RESUME_WORKFLOW, RUN_WORKFLOW, SHOW_THREAD};

use super::Server;

impl Server {
    pub(super) async fn call(
        &self,
        name: &str,
        arguments: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        match name {
            RUN_WORKFLOW => {
                let input: WorkflowInput = match parse(name, arguments) {
                    Ok(input) => input,
                    Err(message) => return Ok(invalid_arguments(&message)),
                };
                let (thread_id, work) = self.start(input);
                Ok(match self.run(thread_id, work, context).await {
                    Some(output) => outcome_result(&output),
                    None => cancelled(),
                })
            }
            RESUME_WORKFLOW => {
                let ThreadInput { thread_id } = match parse(name, arguments) {
                    Ok(input) => input,
                    Err(message) => return Ok(invalid_arguments(&message)),
                };
                // Boxed, as `start`'s: unboxed, the future of a server's session spawned in an
                // embedder's async block overflowed the compiler's default recursion limit for
                // layouts once the run's path grew by one await.
                let work = Box::pin(self.inner.workflow.resume(&thread_id));
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
            THREAD_EVENTS => {
                let EventsInput { thread_id, after } = match parse(name, arguments) {
                    Ok(input) => input,
                    Err(message) => return Ok(invalid_arguments(&message)),
                };
                Ok(self.thread_events(&thread_id, after).await)
            }
            _ => Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {name:?}: the tools are {RUN_WORKFLOW}, {RESUME_WORKFLOW}, \
                     {LIST_THREADS}, {SHOW_THREAD} and {THREAD_EVENTS}"
                ),
                None,
            )),
        }
    }

    /// A call of a 2026-07-28 client under `--leaves sampling`: `run_workflow` or
    /// `resume_workflow` runs its thread until it ends or its leaves wait for the client's
    /// model, which the input-required result asks for; the client's retry brings the answers
    /// (see [`crate::stateless`]).
    pub(super) async fn round_trip(
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
        let (thread_id, work): (String, BoxFuture<'_, WorkflowOutput>) = match name {
            RUN_WORKFLOW => {
                let mut input: WorkflowInput = match parse(name, arguments) {
                    Ok(input) => input,
                    Err(message) => return Ok(invalid_arguments(&message).into()),
                };
                if let Some(retry) = &retry {
                    if let Some(named) = input.thread_id.as_ref().filter(|t| **t != retry.thread_id)
                    {
                        return Err(other_thread(&retry.thread_id, named));
                    }
                    self.journaled(&retry.thread_id).await?;
                    input.thread_id = Some(retry.thread_id.clone());
                }
                self.start(input)
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

    /// The run of `run_workflow`'s `input` and the thread it runs as: the one the input names
    /// (which may be one to resume), or a new one drawn here, as the call's events are found
    /// by its thread id.
    fn start(&self, input: WorkflowInput) -> (String, BoxFuture<'_, WorkflowOutput>) {
        let thread_id = input
            .thread_id
            .clone()
            .unwrap_or_else(RunRequest::new_thread_id);
        let work = self.inner.workflow.start(input, thread_id.clone());
        (thread_id, Box::pin(work))
    }

    /// Refuses a retry whose request state names a thread the journal does not hold.
    pub(super) async fn journaled(&self, thread_id: &str) -> Result<(), ErrorData> {
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

    pub(super) async fn list_threads(&self) -> CallToolResult {
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

    /// The run view's page of a thread's events: at most 1000 after `after`, the thread's
    /// status, and `next`, the number to ask after next time.
    pub(super) async fn thread_events(&self, thread_id: &str, after: u64) -> CallToolResult {
        let Some(store) = self.inner.runtime.store() else {
            return failure(
                WorkflowErrorKind::Run(RunErrorKind::JournalFailure),
                "this server keeps no journal",
                JOURNAL_HINT,
            );
        };
        let page = async {
            let status = store.status(thread_id).await?;
            let events = history::read(store.as_ref(), thread_id, after, history::PAGE).await?;
            Ok::<_, StoreError>((status, events))
        };
        match page.await {
            Ok((Some(status), events)) => {
                let next = events.last().map_or(after, |event| event.seq);
                let text = format!("{} events of thread {thread_id} ({status})", events.len());
                let value = json!({"thread_id": thread_id, "status": status, "events": events,
                    "next": next});
                with_text(CallToolResult::structured(value), text)
            }
            Ok((None, _)) => failure(
                WorkflowErrorKind::Run(RunErrorKind::UnknownThread),
                &format!("no thread {thread_id} in the journal"),
                "list_threads lists the threads there are",
            ),
            Err(error) => journal_failure(&error),
        }
    }

    pub(super) async fn show_thread(&self, thread_id: &str) -> CallToolResult {
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

/// A retry whose request state is of another thread than its arguments name.
pub(super) fn other_thread(state: &str, named: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "the requestState is of thread {state}, but the call names thread {named}: retry \
             the call with the arguments it was first made with"
        ),
        None,
    )
}

/// A call carrying answers that no call of this server asks for.
pub(super) fn no_input_asked(tool: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "{tool} asks for no input, so it takes no requestState or inputResponses: only \
             {RUN_WORKFLOW} and {RESUME_WORKFLOW} under --leaves sampling do"
        ),
        None,
    )
}

pub(super) const JOURNAL_HINT: &str = "the host's journal failed, not the script; tell the user";

/// The input of `resume_workflow` and `show_thread`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ThreadInput {
    pub(super) thread_id: String,
}

/// The input of `thread_events`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsInput {
    thread_id: String,
    #[serde(default)]
    after: u64,
}

/// The input of `list_threads`: nothing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NoInput {}

/// The tool's arguments as `T`, or what is wrong with them.
pub(super) fn parse<T: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: Value,
) -> Result<T, String> {
    serde_json::from_value(arguments)
        .map_err(|error| format!("invalid arguments for {tool}: {error}"))
}

/// The `isError` result of arguments that do not fit the tool's input schema.
pub(super) fn invalid_arguments(message: &str) -> CallToolResult {
    failure(
        WorkflowErrorKind::InvalidArguments,
        message,
        "call the tool with the arguments its input schema lists, with their types",
    )
}

/// A run's output as a tool result: an error when the run did not succeed.
pub(super) fn outcome_result(output: &WorkflowOutput) -> CallToolResult {
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
pub(super) fn cancelled() -> CallToolResult {
    failure(
        WorkflowErrorKind::Cancelled,
        "the client cancelled the call; its thread stays in the journal",
        "resume_workflow with the thread id continues it without paying again for the leaves \
         that finished",
    )
}

pub(super) fn journal_failure(error: &StoreError) -> CallToolResult {
    failure(
        WorkflowErrorKind::Run(RunErrorKind::JournalFailure),
        &error.to_string(),
        JOURNAL_HINT,
    )
}

/// An `isError` result shaped like a run's error.
pub(super) fn failure(kind: WorkflowErrorKind, message: &str, hint: &str) -> CallToolResult {
    outcome_result(&WorkflowOutput::failed(WorkflowError::new(
        kind, message, hint,
    )))
}

pub(super) fn with_text(mut result: CallToolResult, text: String) -> CallToolResult {
    result.content = vec![ContentBlock::text(text)];
    result
}
