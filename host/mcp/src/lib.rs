//! flowbox over the Model Context Protocol: an agent host (a coding agent, a desktop chat app,
//! an IDE) runs the workflows its model writes through four tools — `run_workflow`,
//! `resume_workflow`, `list_threads`, `show_thread` — with the workflow guidance as the
//! server's instructions. Every call runs in a fresh guest of the embedder's
//! [`Runtime`], concurrently with the others; progress and the script's log
//! lines go to the client as they happen; a 2026-07-28 client that declares the tasks extension
//! gets its long calls as tasks; and with [`Sampling`] the leaves are answered by the client's
//! own model.
//!
//! ```no_run
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! use flowbox::Runtime;
//! use flowbox::backends::FakeBackend;
//!
//! let runtime = Runtime::builder().backend(FakeBackend::new()).build()?;
//! let server = flowbox_mcp::Server::builder(runtime).patterns(true).build();
//! // Until the client closes stdin; or `serve_http(addr, &door, ...)` for several clients at once.
//! let served = server.serve_stdio().await?;
//! eprintln!("{} call(s) cancelled when the client left", served.cancelled);
//! # Ok(())
//! # }
//! ```
//!
//! The modules: the handler ([`Server`], in `server`), the tools' schemas (`tools`), what a
//! running call tells its client (`progress`), leaves answered by the client's model under the
//! 2025-11-25 revision (`sampling`) and the stateless 2026-07-28 one (`stateless`), calls run
//! as tasks (`tasks`), and the transports (`stdin`, `http`).

#![warn(missing_docs)]

mod app;
mod http;
mod progress;
mod sampling;
mod server;
mod stateless;
mod stdio;
mod tasks;
mod tools;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flowbox::backends::{AgentBackend, AgentConfig};
use flowbox::tools::ToolSet;
use flowbox::{LeafBackend, Runtime};
use rmcp::ServiceExt;

pub use server::Server;

/// How long a finished task (a call of a 2026-07-28 client that declared the tasks extension)
/// answers `tasks/get` by default, in seconds after it finished.
pub const DEFAULT_TASK_TTL: Duration = Duration::from_secs(tasks::DEFAULT_TTL_SECS);

/// How long a stdio server waits, once the client has gone, for the runs it cancelled to let
/// go of their threads (journal writes finish; leaves in flight are dropped).
const DRAIN: Duration = Duration::from_secs(10);

/// Why a server stopped serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The client left (or spoke something else) before the initialize handshake ended; no
    /// call ran.
    #[error("the client left before initializing: {0}")]
    Handshake(String),
    /// The address cannot be listened on.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The door refused to open (an address others can reach, without a token) or failed.
    #[error(transparent)]
    Door(#[from] flowbox_door::DoorError),
}

/// How a stdio session ended: the client closed stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Served {
    /// Calls that were running when the client left, and so were cancelled; their threads stay
    /// in the journal, resumable.
    pub cancelled: usize,
}

/// Leaves answered by the client's own model (MCP sampling): a 2025-11-25 client gets a
/// `sampling/createMessage` request per model turn of a leaf; a 2026-07-28 client gets an
/// input-required result with the requests of every leaf waiting, and retries the call with
/// the answers. Give [`Sampling::backend`] to the runtime as its leaf backend and the
/// `Sampling` itself to [`ServerBuilder::sampling`].
#[derive(Debug, Clone)]
pub struct Sampling {
    clients: Arc<sampling::Clients>,
    rounds: Arc<stateless::Rounds>,
    backend: Arc<dyn LeafBackend>,
}

impl Sampling {
    /// Leaves run by the agent loop with `config` (their prompt and limits) over the clients'
    /// models, with `tools` in their loop.
    pub fn new(config: AgentConfig, tools: ToolSet) -> Self {
        let clients = Arc::new(sampling::Clients::default());
        let rounds = Arc::new(stateless::Rounds::default());
        let sessions = Arc::new(sampling::SamplingChat::new(Arc::clone(&clients)));
        let chat = Arc::new(stateless::BatchChat::new(Arc::clone(&rounds), sessions));
        let agents = AgentBackend::new(chat, config, tools);
        let backend = Arc::new(stateless::Leaves::new(
            Arc::new(agents),
            Arc::clone(&rounds),
        ));
        Self {
            clients,
            rounds,
            backend,
        }
    }

    /// The leaf backend the runtime must use for its leaves to reach the clients' models.
    pub fn backend(&self) -> Arc<dyn LeafBackend> {
        Arc::clone(&self.backend)
    }
}

/// Builds a [`Server`].
#[derive(Debug)]
#[must_use = "a builder does nothing until built"]
pub struct ServerBuilder {
    runtime: Runtime,
    patterns: bool,
    sampling: Option<Sampling>,
    task_ttl: Duration,
}

impl ServerBuilder {
    /// Puts the pattern library (fan-out, pipeline, review loop, plan-execute-check
    /// templates) in the workflow guidance the server sends as its instructions. Off by
    /// default.
    pub fn patterns(mut self, patterns: bool) -> Self {
        self.patterns = patterns;
        self
    }

    /// Answers the leaves with the client's own model: the runtime must have been built with
    /// `sampling.backend()` as its leaf backend.
    pub fn sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = Some(sampling);
        self
    }

    /// How long a finished task answers `tasks/get` ([`DEFAULT_TASK_TTL`] by default); its
    /// thread stays in the journal after that.
    pub fn task_ttl(mut self, ttl: Duration) -> Self {
        self.task_ttl = ttl;
        self
    }

    /// The server.
    pub fn build(self) -> Server {
        Server::new(
            self.runtime,
            self.patterns,
            self.sampling
                .map(|sampling| (sampling.clients, sampling.rounds)),
            self.task_ttl,
        )
    }
}

impl Server {
    /// A server running workflows on `runtime`.
    pub fn builder(runtime: Runtime) -> ServerBuilder {
        ServerBuilder {
            runtime,
            patterns: false,
            sampling: None,
            task_ttl: DEFAULT_TASK_TTL,
        }
    }

    /// Serves one client on this process's stdin and stdout until it closes stdin. A line that
    /// is not JSON is skipped and a JSON value that is not a JSON-RPC message is answered with
    /// an Invalid Request error; neither ends the session. When the client leaves, the calls
    /// still running are cancelled at once (their threads stay resumable) and given a moment
    /// to let go of their threads. Stdin and stdout that are pipes or sockets are polled by the
    /// tokio runtime, which must have its I/O driver enabled (`enable_io` or `enable_all`):
    /// they are non-blocking for the session, and their flags are put back as it ends.
    pub async fn serve_stdio(self) -> Result<Served, ServeError> {
        let (input, output, restore) = stdio::open(self.gone());
        let service = self
            .clone()
            .serve((input, output))
            .await
            .map_err(|error| ServeError::Handshake(error.to_string()))?;
        let _ = service.waiting().await;
        // Before the drain: a client may stop the process soon after closing stdin.
        drop(restore);
        let cancelled = self.cancelled_on_exit();
        self.drained(DRAIN).await;
        Ok(Served { cancelled })
    }

    /// Serves Streamable HTTP at `http://ADDR/mcp`, each client in its own session, through
    /// `door` until interrupted (Ctrl-C or SIGTERM); `on_listening` is told the address taken
    /// (a port of 0 picks a free one). The door's rules hold for every request (see
    /// [`flowbox_door`]): only loopback without a token, the `Host` checked against the
    /// loopback names and the address listened on when anyone is admitted (against DNS
    /// rebinding), a browser's `Origin` loopback or allowed, the token on every request when
    /// there is one, and slow clients cut off.
    pub async fn serve_http(
        self,
        addr: SocketAddr,
        door: &flowbox_door::Door,
        on_listening: impl FnOnce(SocketAddr),
    ) -> Result<(), ServeError> {
        http::serve(self, addr, door, on_listening).await
    }
}
