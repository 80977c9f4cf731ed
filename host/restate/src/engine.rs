//! [`RestateEngine`]: a [`flowbox::Runtime`] built with `RuntimeBuilder::remote` sends its runs
//! to Restate through it, so an embedder's `run_workflow` runs there by configuration alone.

use std::time::{Duration, Instant};

use flowbox::external::Remote;
use flowbox::{RunError, RunOutcome, RunRequest, Summary};

use crate::client::{Client, ClientError};
use crate::protocol::{WorkflowInput, sha256_hex};

/// How long a submitted run keeps asking a server it lost (a restart) for its outcome.
const PATIENCE: Duration = Duration::from_secs(60);

/// Runs requests as `FlowboxWorkflow` workflows on a Restate server, keyed by their thread id
/// (a new one when the request names none), and waits for their outcomes.
#[derive(Debug, Clone)]
pub struct RestateEngine {
    ingress: Client,
}

impl RestateEngine {
    /// An engine submitting to the Restate ingress at `url` (`http://host:port`); a [`Client`]
    /// of the ingress converts into one too.
    pub fn new(url: &str) -> Result<Self, ClientError> {
        Ok(Self {
            ingress: Client::new(url)?,
        })
    }

    /// Submits `request` and waits for its outcome. A thread Restate already holds must have
    /// started with the same script and args (else [`RunError::Divergence`]); its outcome is
    /// waited for. Restate unreachable, or failing the run, is a [`RunError::Host`].
    pub async fn run(&self, request: &RunRequest) -> RunOutcome {
        let parts = request.parts();
        let thread_id = parts
            .thread_id
            .map_or_else(RunRequest::new_thread_id, str::to_owned);
        let result = self.outcome(request, &thread_id).await;
        result.unwrap_or_else(|error| RunOutcome {
            result: Err(error),
            summary: Summary::new(thread_id),
            recorded: false,
        })
    }

    async fn outcome(&self, request: &RunRequest, thread_id: &str) -> Result<RunOutcome, RunError> {
        let parts = request.parts();
        RunRequest::check_thread_id(thread_id)?;
        if parts.reuse_leaves_from.is_some() {
            return Err(RunError::Host(
                "reusing an earlier thread's leaves is not available on Restate".into(),
            ));
        }
        let input = WorkflowInput {
            script: parts.script.to_owned(),
            args: parts.args.clone(),
            limits: parts.limits.cloned(),
            guard: parts.guard,
        };
        let host = |error: ClientError| RunError::Host(error.to_string());
        if let Some(start) = self.ingress.started(thread_id).await.map_err(host)?
            && (start.script_sha256 != sha256_hex(input.script.as_bytes())
                || start.args_sha256 != sha256_hex(input.args.to_string().as_bytes()))
        {
            return Err(RunError::Divergence(format!(
                "the script or args are not the ones thread {thread_id} started with"
            )));
        }
        self.ingress.submit(thread_id, &input).await.map_err(host)?;
        let answer = self.attach(thread_id).await;
        match answer {
            Ok(Some(outcome)) => crate::outcome_from_json(thread_id, outcome),
            Ok(None) => Err(RunError::UnknownThread(thread_id.to_owned())),
            Err(error) => Err(host(error)),
        }
    }

    /// Waits for thread `thread_id`'s outcome, through a lost connection and the server's
    /// restart (for up to a minute); `None` when Restate knows no such thread.
    pub async fn attach(&self, thread_id: &str) -> Result<Option<serde_json::Value>, ClientError> {
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
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl From<Client> for RestateEngine {
    fn from(ingress: Client) -> Self {
        Self { ingress }
    }
}

#[flowbox::async_trait]
impl Remote for RestateEngine {
    async fn run(&self, request: RunRequest) -> RunOutcome {
        RestateEngine::run(self, &request).await
    }
}
