//! [`RestateEngine`]: the one way a run reaches Restate from outside — submitted to the
//! ingress (after the same checks a local run makes) and its outcome waited for. A
//! [`flowbox::Runtime`] built with `RuntimeBuilder::remote` sends its runs through it, so an
//! embedder's `run_workflow` runs there by configuration alone; `flowbox run --restate` and
//! `flowbox attach` use it too, and keep only the display.

use std::time::{Duration, Instant};

use flowbox::external::Remote;
use flowbox::store::sha256_hex;
use flowbox::{RunError, RunOutcome, RunRequest, Summary};
use serde_json::Value;

use crate::client::{Client, ClientError};
use crate::protocol::WorkflowInput;

/// How long a submitted run keeps asking a server it lost (a restart) for its outcome.
const PATIENCE: Duration = Duration::from_secs(60);

/// Runs requests as `FlowboxWorkflow` workflows on a Restate server, keyed by their thread id
/// (a new one when the request names none), and waits for their outcomes.
#[derive(Debug, Clone)]
pub struct RestateEngine {
    ingress: Client,
}

/// Why a run on Restate did not come to an outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The run was refused, as a local run would refuse it: an invalid thread id, a script or
    /// args that are not the ones the thread started with, an option Restate does not offer;
    /// or Restate knows no such thread.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Restate could not be reached, or answered an error: the run itself failed there (its
    /// workflow ran out of attempts, say) or the request did.
    #[error(transparent)]
    Restate(#[from] ClientError),
}

impl EngineError {
    /// The error as a run error: Restate's trouble is the machinery's
    /// ([`RunError::Host`]), with the message of its answer.
    pub fn into_run_error(self) -> RunError {
        match self {
            Self::Run(error) => error,
            Self::Restate(ClientError::Status { status, body, url }) => RunError::Host(format!(
                "Restate answered {status} to {url}: {}",
                restate_message(&body)
            )),
            Self::Restate(error) => RunError::Host(error.to_string()),
        }
    }
}

impl RestateEngine {
    /// An engine submitting to the Restate ingress at `url` (`http://host:port`); a [`Client`]
    /// of the ingress converts into one too.
    pub fn new(url: &str) -> Result<Self, ClientError> {
        Ok(Self {
            ingress: Client::new(url)?,
        })
    }

    /// Submits `request` as its thread's run, without waiting for it, and returns the thread
    /// id (a new one when the request names none). A thread Restate already holds must have
    /// started with the same script and args ([`RunError::Divergence`] otherwise); its run is
    /// not started again.
    pub async fn submit(&self, request: &RunRequest) -> Result<String, EngineError> {
        let parts = request.parts();
        let thread_id = parts
            .thread_id
            .map_or_else(RunRequest::new_thread_id, str::to_owned);
        RunRequest::check_thread_id(&thread_id)?;
        if parts.reuse_leaves_from.is_some() {
            return Err(RunError::Host(
                "reusing an earlier thread's leaves is not available on Restate".into(),
            )
            .into());
        }
        let input = WorkflowInput {
            script: parts.script.to_owned(),
            args: parts.args.clone(),
            limits: parts.limits.cloned(),
            guard: parts.guard,
        };
        if let Some(start) = self.ingress.started(&thread_id).await? {
            if start.script_sha256 != sha256_hex(input.script.as_bytes()) {
                return Err(RunError::Divergence(format!(
                    "the script is not the one thread {thread_id} started with"
                ))
                .into());
            }
            if start.args_sha256 != sha256_hex(input.args.to_string().as_bytes()) {
                return Err(RunError::Divergence(format!(
                    "the args are not the ones thread {thread_id} started with"
                ))
                .into());
            }
        }
        self.ingress.submit(&thread_id, &input).await?;
        Ok(thread_id)
    }

    /// Waits for thread `thread_id`'s outcome, through a lost connection and the server's
    /// restart (for up to a minute).
    pub async fn outcome(&self, thread_id: &str) -> Result<RunOutcome, EngineError> {
        let started = Instant::now();
        loop {
            let answer = self.ingress.attach(thread_id).await;
            let lost = matches!(
                &answer,
                Err(ClientError::Unreachable { .. })
                    | Err(ClientError::Status {
                        status: 502..=504,
                        ..
                    })
            );
            if !lost || started.elapsed() >= PATIENCE {
                return decode(thread_id, answer);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Thread `thread_id`'s outcome, waiting for its run but not for a server that cannot be
    /// reached.
    pub async fn outcome_now(&self, thread_id: &str) -> Result<RunOutcome, EngineError> {
        decode(thread_id, self.ingress.attach(thread_id).await)
    }

    /// Submits `request` and waits for its outcome.
    pub async fn run(&self, request: &RunRequest) -> Result<RunOutcome, EngineError> {
        let thread_id = self.submit(request).await?;
        self.outcome(&thread_id).await
    }

    /// The client of the ingress.
    pub fn client(&self) -> &Client {
        &self.ingress
    }
}

/// An attach's answer as the run's outcome.
fn decode(
    thread_id: &str,
    answer: Result<Option<Value>, ClientError>,
) -> Result<RunOutcome, EngineError> {
    match answer? {
        Some(outcome) => Ok(crate::outcome_from_json(thread_id, outcome)?),
        None => Err(RunError::UnknownThread(thread_id.to_owned()).into()),
    }
}

/// The message of a Restate error body (`{"message": ...}`), else the body.
pub fn restate_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|value| {
            value
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| body.to_owned())
}

impl From<Client> for RestateEngine {
    fn from(ingress: Client) -> Self {
        Self { ingress }
    }
}

#[flowbox::async_trait]
impl Remote for RestateEngine {
    async fn run(&self, request: RunRequest) -> RunOutcome {
        let thread_id = request
            .parts()
            .thread_id
            .map_or_else(RunRequest::new_thread_id, str::to_owned);
        let request = request.thread_id(thread_id.clone());
        match RestateEngine::run(self, &request).await {
            Ok(outcome) => outcome,
            Err(error) => RunOutcome {
                result: Err(error.into_run_error()),
                summary: Summary::new(thread_id),
                recorded: false,
            },
        }
    }
}
