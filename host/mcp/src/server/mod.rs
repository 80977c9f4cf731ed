//! The MCP server: its instructions (the workflow guidance), its tools, and how a call runs —
//! each in its own fresh guest, concurrently with the others, cancelled by the client's
//! `notifications/cancelled` or by its leaving. A rejected or failed script is a tool result
//! with `isError: true` carrying kind, message, line and hint, never a protocol error, so the
//! host's model can fix the script and call again. A 2026-07-28 client that declares the tasks
//! extension gets its `run_workflow` and `resume_workflow` calls run as tasks
//! ([`crate::tasks`]), answered from memory or, for a thread no task holds, from the journal.

mod calls;
mod handler;
mod sessions;
mod task_calls;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowbox::Runtime;
use flowbox::orchestrator::{Guidance, WorkflowTool};
use rmcp::model::{ProgressToken, Tool};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use tokio::sync::Notify;

use self::sessions::Sessions;
use crate::progress::{self, LogLevel, StatusLine};
use crate::sampling::Clients;
use crate::stateless::Rounds;
use crate::stdio::ClientGone;
use crate::tasks::Tasks;
use crate::tools;

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
    /// The HTTP sessions with calls running, which closing a session cancels.
    sessions: Sessions,
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
                sessions: Sessions::default(),
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

    /// Cancels the running calls of the HTTP session `id`, which its client deleted.
    pub(crate) fn session_closed(&self, id: &str) {
        self.inner.sessions.close(id);
    }

    /// Waits, at most `limit`, until no call is running any more.
    pub(crate) async fn drained(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.inner.in_flight.idle()).await;
    }

    /// Runs `run_workflow` or `resume_workflow` on `thread_id`, with its progress and log
    /// lines sent to the client; `None` when the client cancelled the call or deleted its session.
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
        let mut session = self.inner.sessions.enter(context);
        let cancelled = async {
            match session.as_mut() {
                Some(session) => tokio::select! {
                    () = context.ct.cancelled() => {}
                    () = session.closed() => {}
                },
                None => context.ct.cancelled().await,
            }
        };
        self.run_as(thread_id, work, call, cancelled).await
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
}

/// Where a run's progress goes: the client's peer (log lines, and progress notifications when
/// the request carried a token) and, for a task, its status line.
#[derive(Clone)]
struct Call {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    status: Option<StatusLine>,
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
