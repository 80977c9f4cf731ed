//! flowbox on [Restate](https://restate.dev): the same workflow scripts as durable Restate
//! workflows, their leaves on a fleet of workers, and Restate's journal as the checkpoint log.
//!
//! Two services, served by `flowbox worker` (or by an embedder through [`Worker`] and
//! [`serve`]):
//!
//! - **`FlowboxWorkflow`**, keyed by thread id: runs the guest with
//!   [`Runtime::run_external`](flowbox::Runtime::run_external). Each call the script makes is a
//!   durable call to the leaf service; the start time and the membership of every batch of
//!   completions are journaled, so an attempt that replays the journal takes the same path and
//!   uses the same fuel. Its result is the outcome `flowbox run --json` prints.
//! - **`FlowboxLeaf`**: one leaf agent (or host tool) call per invocation, the provider request
//!   inside `ctx.run` so that a retry after the provider answered does not pay again.
//!
//! A worker given the public key of its Restate server ([`Worker::identity_keys`]) serves only
//! requests that server signed ([`IdentityKey`]); without one it serves whoever connects.
//!
//! The workflow publishes the run's events in its own state as the run goes on; its shared
//! `events` handler ([`Client::events`]) reads them (see [`events`]).
//!
//! [`RestateEngine`] is the one way a run reaches Restate from outside: it submits a run (after
//! the checks a local run makes) and waits for its outcome. `flowbox run --restate` and `flowbox
//! attach` use it, and so does an embedder's runtime built with
//! `RuntimeBuilder::remote(Arc::new(RestateEngine::new(ingress_url)?))`, whose every
//! `run_request` (and so its orchestrator's `run_workflow`) then runs on Restate. Its
//! [`Client`] talks to the ingress and the admin API, and is a
//! [`HistorySource`](flowbox::events::history::HistorySource) a history
//! [`Follower`](flowbox::events::history::Follower) follows a run's events from.

#![warn(missing_docs)]

mod client;
mod engine;
pub mod events;
mod identity;
mod leaf;
mod protocol;
mod serve;
mod workflow;

pub use client::{Client, ClientError, Submitted};
pub use engine::{EngineError, RestateEngine, restate_message};
pub use identity::{IdentityKey, IdentityKeyError};
pub use leaf::{FlowboxLeaf, LEAF_ATTEMPTS};
pub use protocol::{
    LEAF_SERVICE, LeafCall, LeafResult, StartRecord, WORKFLOW_SERVICE, WorkflowInput,
};
pub use serve::{Services, WORKFLOW_ATTEMPTS, Worker, serve};
pub use workflow::FlowboxWorkflow;

use flowbox::{RunError, RunOutcome};
use serde_json::Value;

/// The outcome a workflow returned (`{"ok", "result", "error", "summary"}`) as a
/// [`RunOutcome`]; its error, if it failed, as [`RunError::Recorded`].
pub fn outcome_from_json(thread_id: &str, outcome: Value) -> Result<RunOutcome, RunError> {
    let record: flowbox::store::RecordedOutcome =
        serde_json::from_value(outcome).map_err(|error| {
            RunError::Host(format!("the workflow's outcome is unreadable: {error}"))
        })?;
    Ok(RunOutcome::from_record(thread_id, record))
}
