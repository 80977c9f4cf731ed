//! Runs that another durable-execution engine drives: the [`Remote`] a runtime hands its
//! requests to, and the [`ExternalRun`] that engine's worker gives back to a runtime to run with
//! its own [`CompletionSource`](crate::external::CompletionSource). Published as
//! `flowbox::external`.

use crate::RunRequest;
use crate::calls::source::CompletionSource;
use crate::events::EventSink;

/// Where a [`Runtime`](crate::Runtime) built with
/// [`RuntimeBuilder::remote`](crate::RuntimeBuilder::remote) sends its runs: another
/// durable-execution engine (`flowbox_restate::RestateEngine`), so an embedder's
/// `run_workflow` runs there by configuration alone.
#[async_trait::async_trait]
pub trait Remote: Send + Sync + std::fmt::Debug {
    /// Runs `request` to its outcome.
    async fn run(&self, request: RunRequest) -> crate::RunOutcome;
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
