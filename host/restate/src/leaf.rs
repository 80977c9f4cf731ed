//! The leaf service: one call of a script (a leaf agent or a host tool) per invocation, on
//! whichever leaf worker Restate (or the load balancer in front of the fleet) picks.
//!
//! The provider request runs inside `ctx.run`, so once it has answered, the answer is in
//! Restate's journal and a retry of the invocation (the worker killed right after) replays it
//! instead of paying again. A retryable failure is tried again a bounded number of times; what
//! still fails reaches the script as an `AgentError`.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowbox::tools::ToolSet;
use flowbox::{BackendError, LeafBackend};
use futures_util::FutureExt;
use restate_sdk::context::RunRetryPolicy;
use restate_sdk::prelude::*;

use crate::protocol::{LeafCall, LeafResult};

/// How often a retryable leaf failure is tried, in all, before it reaches the script.
pub const LEAF_ATTEMPTS: u32 = 3;

/// The leaf service: answers calls with a backend and host tools.
#[derive(Clone)]
pub struct FlowboxLeaf {
    backend: Arc<dyn LeafBackend>,
    tools: ToolSet,
}

impl std::fmt::Debug for FlowboxLeaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowboxLeaf").finish_non_exhaustive()
    }
}

impl FlowboxLeaf {
    /// A leaf service answering agents with `backend` and tools with `tools`.
    pub fn new(backend: Arc<dyn LeafBackend>, tools: ToolSet) -> Self {
        Self { backend, tools }
    }
}

#[restate_sdk::service]
impl FlowboxLeaf {
    /// Carries out one call of a script.
    #[handler]
    async fn call(
        &self,
        ctx: Context<'_>,
        call: Json<LeafCall>,
    ) -> Result<Json<LeafResult>, HandlerError> {
        let call = call.into_inner();
        let backend = Arc::clone(&self.backend);
        let tools = self.tools.clone();
        let outcome = ctx
            .run(|| async move {
                let started = Instant::now();
                let result = carry_out(backend.as_ref(), &tools, call).await;
                let duration_ms = millis(started.elapsed());
                match result {
                    Ok(reply) => Ok(Json(LeafResult::Ok {
                        value: reply.value,
                        usage: reply.usage,
                        duration_ms,
                    })),
                    // Restate tries the run again, up to the policy's attempts.
                    Err(error) if error.is_retryable() => Err(HandlerError::from(message(&error))),
                    Err(error) => Ok(Json(failed(&error, duration_ms))),
                }
            })
            .name("leaf")
            .retry_policy(
                RunRetryPolicy::new()
                    .initial_delay(Duration::from_millis(100))
                    .max_attempts(LEAF_ATTEMPTS),
            )
            .await;
        match outcome {
            Ok(result) => Ok(result),
            // The attempts are used up: the script gets the last failure.
            Err(terminal) => Ok(Json(LeafResult::Failed {
                message: format!(
                    "the leaf failed {LEAF_ATTEMPTS} times: {}",
                    terminal.message()
                ),
                retryable: true,
                usage: flowbox::Usage::default(),
                duration_ms: 0,
            })),
        }
    }
}

/// Calls the backend or the tool; a panic is the call's failure, not the worker's.
async fn carry_out(
    backend: &dyn LeafBackend,
    tools: &ToolSet,
    call: LeafCall,
) -> Result<flowbox::LeafReply, BackendError> {
    let work = async {
        match call {
            LeafCall::Agent { request } => backend.call(&request).await,
            LeafCall::Tool { name, arguments } => tools
                .call(&name, arguments)
                .await
                .map(|value| flowbox::LeafReply {
                    value,
                    usage: flowbox::Usage::default(),
                })
                .map_err(BackendError::from),
        }
    };
    AssertUnwindSafe(work)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            let text = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Err(BackendError::panicked(text))
        })
}

fn failed(error: &BackendError, duration_ms: u64) -> LeafResult {
    LeafResult::Failed {
        message: message(error),
        retryable: error.is_retryable(),
        usage: error.usage(),
        duration_ms,
    }
}

/// An error's message followed by its sources'.
fn message(error: &BackendError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
