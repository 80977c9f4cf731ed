//! Runs driven by another durable-execution engine: the seam a crate such as `flowbox-restate`
//! plugs into. The guest, the limits, the caps and budgets, the events and the summary are the
//! local engine's; only where the calls go and the order their completions come back in belong
//! to the [`CompletionSource`], whose own journal is then the checkpoint log (the runtime keeps
//! none beside it).
//!
//! A source must be deterministic across attempts: an attempt that replays the engine's journal
//! has to hand back the same completions in the same batches as the first attempt did, so the
//! guest takes the same path and uses the same fuel.

use std::time::Duration;

use serde_json::Value;

use flowbox_backends::{BackendError, LeafReply, LeafRequest};

use crate::{RunError, RunRequest};

/// A call the script made, for the source to carry out.
#[derive(Debug, Clone, PartialEq)]
pub enum ExternalCall {
    /// A leaf agent call, as a [`LeafBackend`](crate::LeafBackend) would receive it.
    Agent(Box<LeafRequest>),
    /// A code-callable host tool (`call_tool`), its arguments already checked against its
    /// schema.
    Tool {
        /// The tool's name.
        name: String,
        /// Its arguments.
        arguments: Value,
    },
}

/// A finished call, as the source reports it.
#[derive(Debug, Clone)]
pub struct ExternalCompletion {
    /// The handle [`CompletionSource::start`] was given.
    pub handle: u64,
    /// The reply (a tool's output is a reply without tokens), or why the call failed.
    pub result: Result<LeafReply, BackendError>,
    /// How long the call took, for events and the journal's records.
    pub duration: Duration,
}

/// Where a run's calls go and where their completions come from, instead of the runtime's
/// backend and tools.
#[async_trait::async_trait]
pub trait CompletionSource: Send + std::fmt::Debug {
    /// Starts a call. Calls are started in the order the script makes them, each once, with
    /// handles counting up from 1; a call refused at once (a cap, a budget, a bad request)
    /// never reaches the source.
    fn start(&mut self, handle: u64, call: ExternalCall);

    /// The next batch of finished calls: at least one, in the order the script receives them.
    /// Called only while calls are pending. An error ends the run with it (use a machinery
    /// error, such as [`RunError::Host`], for the engine's own trouble).
    async fn next_batch(&mut self) -> Result<Vec<ExternalCompletion>, RunError>;
}

/// Where a [`Runtime`](crate::Runtime) built with
/// [`RuntimeBuilder::engine`](crate::RuntimeBuilder::engine) sends its runs: another
/// durable-execution engine (`flowbox_restate::RestateEngine`), so an embedder's
/// `run_workflow` runs there by configuration alone.
#[async_trait::async_trait]
pub trait Engine: Send + Sync + std::fmt::Debug {
    /// Runs `request` to its outcome.
    async fn run(&self, request: RunRequest) -> crate::RunOutcome;
}

/// A [`RunRequest`]'s parts, for an [`Engine`] that carries the request elsewhere.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RunRequestParts<'a> {
    /// The script's source.
    pub script: &'a str,
    /// Its `args`.
    pub args: &'a Value,
    /// The thread id, when the request names one.
    pub thread_id: Option<&'a str>,
    /// The request's own limits, when it has them.
    pub limits: Option<&'a crate::Limits>,
    /// Whether the in-guest script guard is on.
    pub guard: bool,
    /// The earlier thread whose leaves the request reuses, if any.
    pub reuse_leaves_from: Option<&'a str>,
}

/// A run whose calls a [`CompletionSource`] carries out; see [`crate::Runtime::run_external`].
#[derive(Debug)]
pub struct ExternalRun {
    /// The request; it must name its thread ([`RunRequest::thread_id`]), which seeds the
    /// guest's randomness.
    pub request: RunRequest,
    /// The thread's recorded start, in nanoseconds since the Unix epoch: the guest's clocks
    /// start there, and the deadline counts from it.
    pub start_unix_nanos: u64,
    /// Where the calls go.
    pub source: Box<dyn CompletionSource>,
    /// Where the run's events go as well as to the runtime's subscribers, each with the
    /// thread id and sequence number a subscriber sees (`None`: only to the subscribers).
    pub events: Option<std::sync::Arc<dyn EventSink>>,
}

/// Receives every event of one external run as it is published, in sequence order: how an
/// engine publishes a run's events where another process can follow them.
pub trait EventSink: Send + Sync + std::fmt::Debug {
    /// One event. Called while the run's events are being numbered: it must return at once
    /// (buffer, never wait).
    fn event(&self, event: &crate::Event);
}
