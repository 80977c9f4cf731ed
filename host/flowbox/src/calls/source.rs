//! Where a run's calls go when another durable-execution engine carries them out: the
//! [`CompletionSource`] a run on that engine hands its calls to, and the calls and completions
//! it speaks. Published as `flowbox::external`, with the rest of that seam.

use std::time::Duration;

use serde_json::Value;

use flowbox_backends::{BackendError, LeafReply, LeafRequest};

use crate::RunError;

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
