//! The workflow service: one Restate workflow per thread id, running the guest with
//! [`Runtime::run_external`] and Restate's journal as the checkpoint log.
//!
//! The guest runs in a task of its own and talks to the handler through a channel: the
//! handler owns the Restate context, turns each call the script starts into a call to the leaf
//! service (a durable call, never a concurrent `ctx.run`, which breaks replay), and decides
//! what each `await-next` receives. Every attempt re-runs the guest from the start; what makes
//! it take the same path is that everything it sees comes from the journal: the start time
//! (one `ctx.run` on the first attempt), the completions, and each batch's membership (one
//! `ctx.run` per batch whenever more than one call is pending).

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use flowbox::external::{CompletionSource, ExternalCall, ExternalCompletion, ExternalRun};
use flowbox::store::{now_unix_nanos, sha256_hex};
use flowbox::{BackendError, Event, RunError, RunOutcome, RunRequest, Runtime, Summary};
use restate_sdk::context::{DurableFuture, RequestTarget};
use restate_sdk::prelude::*;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::events::{EVENTS_KEY, EventIndex, EventsPage, EventsQuery, Publisher, chunk_key};
use crate::protocol::{LEAF_SERVICE, LeafCall, LeafResult, StartRecord, WorkflowInput};

/// How long a batch waits for more completions once one has come, while others are pending.
const GATHER: Duration = Duration::from_micros(1500);

/// The state key holding the thread's [`StartRecord`].
const START_KEY: &str = "start";

/// The workflow service: runs scripts on a [`Runtime`] whose calls go to the leaf service.
#[derive(Debug, Clone)]
pub struct FlowboxWorkflow {
    runtime: Runtime,
}

impl FlowboxWorkflow {
    /// A workflow service running scripts on `runtime` (its limits are the default limits; its
    /// backend only checks and prices leaves, which the leaf service answers).
    pub fn new(runtime: Runtime) -> Self {
        Self { runtime }
    }
}

#[restate_sdk::workflow]
impl FlowboxWorkflow {
    /// Runs the thread's script to its outcome: `{"ok", "result", "error", "summary"}`, as
    /// `flowbox run --json` prints it. A breached limit or a script error is an outcome; the
    /// machinery failing is an error Restate retries (a bounded number of times).
    #[handler]
    async fn run(
        &self,
        ctx: WorkflowContext<'_>,
        input: Json<WorkflowInput>,
    ) -> Result<Json<Value>, HandlerError> {
        let input = input.into_inner();
        let thread_id = ctx.key().to_owned();
        let script_sha256 = sha256_hex(input.script.as_bytes());
        let args_sha256 = sha256_hex(input.args.to_string().as_bytes());
        let first = StartRecord {
            start_unix_nanos: now_unix_nanos(),
            script_sha256: script_sha256.clone(),
            args_sha256: args_sha256.clone(),
        };
        let start = ctx
            .run(|| async move { Ok(Json(first)) })
            .name("start")
            .await?
            .into_inner();
        ctx.set(START_KEY, Json(start.clone()));
        if start.script_sha256 != script_sha256 || start.args_sha256 != args_sha256 {
            let error = RunError::Divergence(format!(
                "the script or args are not the ones thread {thread_id} started with"
            ));
            return Ok(Json(rejected(&thread_id, error).to_json()));
        }
        let max_concurrency = input
            .limits
            .as_ref()
            .unwrap_or_else(|| self.runtime.limits())
            .max_concurrency
            .max(1);
        let mut request = RunRequest::new(input.script)
            .args(input.args)
            .thread_id(&thread_id)
            .guard(input.guard);
        if let Some(limits) = input.limits {
            request = request.limits(limits);
        }
        let (commands, receiver) = mpsc::unbounded_channel();
        let mut publisher = Publisher::default();
        let runtime = self.runtime.clone();
        let run = ExternalRun {
            request,
            start_unix_nanos: start.start_unix_nanos,
            source: Box::new(ChannelSource { commands }),
            events: Some(publisher.sink()),
        };
        let mut guest = Guest(tokio::spawn(async move { runtime.run_external(run).await }));
        drive(&ctx, receiver, max_concurrency, &mut publisher).await?;
        let outcome = (&mut guest.0)
            .await
            .map_err(|error| HandlerError::from(format!("the run's task failed: {error}")))?;
        if let Err(error) = &outcome.result
            && !error.kind().ends_thread()
        {
            // Machinery trouble (the host, the engine): another attempt may get past it, and
            // publishes its own end.
            return Err(HandlerError::from(format!("{error}")));
        }
        publisher.flush(&ctx).await?;
        Ok(Json(outcome.to_json()))
    }

    /// The thread's start as its journal recorded it (`null` before it started).
    #[handler]
    async fn started(
        &self,
        ctx: SharedWorkflowContext<'_>,
    ) -> Result<Json<Option<StartRecord>>, HandlerError> {
        let start = ctx.get::<Json<StartRecord>>(START_KEY).await?;
        Ok(Json(start.map(Json::into_inner)))
    }

    /// The run's events published so far with a sequence number above `after` (the last few
    /// thousand; see [`crate::events`]).
    #[handler]
    async fn events(
        &self,
        ctx: SharedWorkflowContext<'_>,
        query: Json<EventsQuery>,
    ) -> Result<Json<EventsPage>, HandlerError> {
        let after = query.into_inner().after;
        let Some(index) = ctx.get::<Json<EventIndex>>(EVENTS_KEY).await? else {
            return Ok(Json(EventsPage::default()));
        };
        let index = index.into_inner();
        let mut events = Vec::new();
        for chunk in index.chunks.iter().filter(|chunk| chunk.last > after) {
            if let Some(stored) = ctx.get::<Json<Vec<Event>>>(&chunk_key(chunk.n)).await? {
                events.extend(stored.into_inner().into_iter().filter(|e| e.seq > after));
            }
        }
        Ok(Json(EventsPage {
            events,
            last_seq: index.last_seq,
        }))
    }
}

/// The outcome of a run refused before it started.
fn rejected(thread_id: &str, error: RunError) -> RunOutcome {
    RunOutcome {
        result: Err(error),
        summary: Summary::new(thread_id),
        recorded: false,
    }
}

/// The guest's task, aborted if the handler is dropped (Restate ended the attempt).
struct Guest(tokio::task::JoinHandle<RunOutcome>);

impl Drop for Guest {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the guest's calls ask of the handler.
enum Command {
    Start(u64, ExternalCall),
    Next(oneshot::Sender<Result<Vec<ExternalCompletion>, RunError>>),
}

/// The guest's side of the channel.
struct ChannelSource {
    commands: mpsc::UnboundedSender<Command>,
}

impl std::fmt::Debug for ChannelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelSource").finish_non_exhaustive()
    }
}

fn driver_gone() -> RunError {
    RunError::Host("the Restate handler driving this run has gone".into())
}

#[flowbox::async_trait]
impl CompletionSource for ChannelSource {
    fn start(&mut self, handle: u64, call: ExternalCall) {
        // A handler that is gone ends the attempt; `next_batch` says so.
        let _ = self.commands.send(Command::Start(handle, call));
    }

    async fn next_batch(&mut self) -> Result<Vec<ExternalCompletion>, RunError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Next(reply))
            .map_err(|_| driver_gone())?;
        answer.await.map_err(|_| driver_gone())?
    }
}

type LeafFuture<'a> =
    Pin<Box<dyn DurableFuture<Output = Result<Json<LeafResult>, TerminalError>> + Send + 'a>>;

/// The calls of one attempt, as Restate sees them.
struct Calls<'a> {
    ctx: &'a WorkflowContext<'a>,
    /// Issued and not yet taken, by the index they were pushed with.
    issued: DurableFuturesUnordered<LeafFuture<'a>>,
    /// The handle of each pushed index.
    handles: Vec<u64>,
    /// Finished (taken from `issued`) and not yet delivered, in the order taken.
    taken: Vec<(u64, Result<Json<LeafResult>, TerminalError>)>,
    /// Started by the script, waiting for a concurrency slot.
    queued: VecDeque<(u64, ExternalCall)>,
    max_concurrency: usize,
}

/// Serves the guest's commands until its run ends (it drops its side of the channel).
async fn drive(
    ctx: &WorkflowContext<'_>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    max_concurrency: usize,
    publisher: &mut Publisher,
) -> Result<(), HandlerError> {
    let mut calls = Calls {
        ctx,
        issued: DurableFuturesUnordered::new(),
        handles: Vec::new(),
        taken: Vec::new(),
        queued: VecDeque::new(),
        max_concurrency,
    };
    while let Some(command) = commands.recv().await {
        match command {
            Command::Start(handle, call) => {
                calls.queued.push_back((handle, call));
                calls.release();
            }
            Command::Next(mut reply) => {
                // The guest waits, its calls in flight: publish what it did meanwhile (the
                // round trip overlaps the calls).
                publisher.flush(ctx).await?;
                let batch = tokio::select! {
                    batch = calls.next_batch() => batch?,
                    // The guest stopped waiting (its deadline): its run is ending.
                    () = reply.closed() => continue,
                };
                calls.release();
                let _ = reply.send(batch);
            }
        }
    }
    Ok(())
}

impl<'a> Calls<'a> {
    /// Calls issued and not yet delivered.
    fn pending(&self) -> usize {
        self.issued.len() + self.taken.len()
    }

    /// Issues queued calls while there are free slots. It runs only where the script's path
    /// decides (a start, a delivered batch), so the calls land in the journal in the same
    /// order on every attempt.
    fn release(&mut self) {
        while self.pending() < self.max_concurrency
            && let Some((handle, call)) = self.queued.pop_front()
        {
            let call = match call {
                ExternalCall::Agent(request) => LeafCall::Agent { request },
                ExternalCall::Tool { name, arguments } => LeafCall::Tool { name, arguments },
            };
            let future = self
                .ctx
                .request::<Json<LeafCall>, Json<LeafResult>>(
                    RequestTarget::service(LEAF_SERVICE, "call"),
                    Json(call),
                )
                .call();
            self.issued.push(Box::pin(future));
            self.handles.push(handle);
        }
    }

    /// Takes the next finished call from Restate, waiting for one.
    async fn take_next(&mut self) -> Result<bool, HandlerError> {
        match self.issued.next().await? {
            Some((index, output)) => {
                self.taken.push((self.handles[index], output));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The next batch: at least one finished call and every other one already finished. Its
    /// membership is journaled (unless a single call was pending), so an attempt replaying the
    /// journal delivers the same batch whatever has arrived by then.
    async fn next_batch(
        &mut self,
    ) -> Result<Result<Vec<ExternalCompletion>, RunError>, HandlerError> {
        let pending = self.pending();
        if pending == 0 {
            return Ok(Err(RunError::Host(
                "the script waits with no call issued to Restate".into(),
            )));
        }
        if self.taken.is_empty() {
            self.take_next().await?;
        }
        // Each batch of several costs a journaled record (a round trip to the server), so
        // completions arriving within a moment of each other share one.
        while !self.issued.is_empty() {
            match tokio::time::timeout(GATHER, self.issued.next()).await {
                Ok(Ok(Some((index, output)))) => {
                    self.taken.push((self.handles[index], output));
                }
                Ok(Err(error)) => return Err(error.into()),
                Ok(Ok(None)) | Err(_) => break,
            }
        }
        let candidate: Vec<u64> = self.taken.iter().map(|(handle, _)| *handle).collect();
        let batch = if pending == 1 {
            candidate
        } else {
            self.ctx
                .run(|| async move { Ok(Json(candidate)) })
                .name("batch")
                .await?
                .into_inner()
        };
        let mut completions = Vec::with_capacity(batch.len());
        for handle in batch {
            while !self.taken.iter().any(|(taken, _)| *taken == handle) {
                if !self.take_next().await? {
                    return Ok(Err(RunError::Divergence(format!(
                        "Restate's journal delivers call {handle} next, which this attempt \
                         never issued"
                    ))));
                }
            }
            let position = self
                .taken
                .iter()
                .position(|(taken, _)| *taken == handle)
                .expect("just found");
            let (handle, output) = self.taken.remove(position);
            completions.push(completion(handle, output));
        }
        Ok(Ok(completions))
    }
}

fn completion(handle: u64, output: Result<Json<LeafResult>, TerminalError>) -> ExternalCompletion {
    let (result, duration_ms) = match output {
        Ok(result) => result.into_inner().into_reply(),
        Err(error) => (
            Err(BackendError::terminal(format!(
                "the leaf service failed: {}",
                error.message()
            ))),
            0,
        ),
    };
    ExternalCompletion {
        handle,
        result,
        duration: Duration::from_millis(duration_ms),
    }
}
