//! flowbox on Restate: `flowbox worker` (serve the workflow and leaf services), `flowbox run
//! --restate` (submit a run and wait for its outcome) and `flowbox attach` (wait for the
//! outcome of a run submitted earlier). The outcome prints exactly as a local run's.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use flowbox::{Limits, RunError, Runtime};
use flowbox_restate::{
    Client, ClientError, RestateEngine, Services, Worker, WorkflowInput, sha256_hex,
};
use serde_json::Value;

use crate::Failure;
use crate::options::RunOptions;
use crate::run::report;

/// Arguments of `flowbox worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// The address to serve Restate's HTTP/2 requests on (`127.0.0.1:0` picks a free port; the
    /// address taken is printed on stderr).
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,
    /// Register this worker with the Restate admin API at this URL once it listens. The same
    /// code at the same address registers once; another version of flowbox or of its guest is
    /// another deployment, so in-flight runs stay on the code they started with.
    #[arg(long, value_name = "ADMIN_URL")]
    register: Option<String>,
    /// The URL Restate reaches this worker's services at, when it is not `http://ADDR` (a load
    /// balancer in front of a fleet of leaf workers).
    #[arg(long, value_name = "URL")]
    advertise: Option<String>,
    /// Which services to serve.
    #[arg(long, value_enum, default_value = "all")]
    services: ServiceChoice,
    /// Guests to keep instantiated ahead of demand (0: none).
    #[arg(long, value_name = "N", default_value_t = 2)]
    warm_pool: usize,
    #[command(flatten)]
    options: RunOptions,
}

/// `--services`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum ServiceChoice {
    /// The workflow service and the leaf service.
    All,
    /// The workflow service only.
    Workflow,
    /// The leaf service only.
    Leaf,
}

/// Arguments of `flowbox attach`.
#[derive(Debug, Args)]
pub(crate) struct AttachArgs {
    /// The thread whose outcome to wait for.
    thread: String,
    /// The Restate ingress URL the run was submitted to.
    #[arg(long, value_name = "INGRESS_URL")]
    restate: String,
    /// Print exactly one JSON object: {"ok", "result", "error", "summary"}.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn worker(args: WorkerArgs) -> Result<u8, Failure> {
    let limits = args.options.limits().map_err(Failure::input)?;
    let backends = args.options.backends().map_err(Failure::input)?;
    let mut builder = Runtime::builder()
        .shared_backend(Arc::clone(&backends.leaf))
        .code_tools(backends.tools.clone())
        .limits(limits)
        .warm_pool(if matches!(args.services, ServiceChoice::Leaf) {
            0
        } else {
            args.warm_pool
        });
    if let Some(prices) = &backends.prices {
        builder = builder.prices(prices.clone());
    }
    if let Some(fanout) = &backends.fanout {
        builder = builder.fanout_profile(fanout.clone());
    }
    let runtime = builder.build().map_err(Failure::setup)?;
    let worker = Worker {
        runtime,
        backend: Arc::clone(&backends.leaf),
        tools: backends.tools.clone(),
        services: match args.services {
            ServiceChoice::All => Services::All,
            ServiceChoice::Workflow => Services::Workflow,
            ServiceChoice::Leaf => Services::Leaf,
        },
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|error| {
            Failure::input(anyhow::anyhow!("cannot listen on {}: {error}", args.listen))
        })?;
    let address = listener
        .local_addr()
        .map_err(|error| Failure::input(anyhow::anyhow!("cannot listen: {error}")))?;
    let version = worker.version();
    let advertised = args
        .advertise
        .clone()
        .unwrap_or_else(|| format!("http://{address}"));
    let uri = format!("{}/{version}", advertised.trim_end_matches('/'));
    let serving = tokio::spawn(flowbox_restate::serve(
        listener,
        worker.endpoint(),
        shutdown(),
    ));
    err!("listening on {address}");
    if let Some(admin) = &args.register {
        let admin = Client::new(admin).map_err(Failure::input)?;
        let deployment = admin.register(&uri).await.map_err(unreachable)?;
        let id = deployment.get("id").and_then(Value::as_str).unwrap_or("?");
        err!("registered {uri} as deployment {id}");
    }
    serving
        .await
        .map_err(|error| Failure::run(RunError::Host(format!("the server failed: {error}"))))?;
    Ok(0)
}

/// Completes on SIGTERM or Ctrl-C.
async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// `flowbox run SCRIPT --restate URL`: submits the run as thread `thread_id` and prints its
/// outcome. A thread Restate already holds must have been started with the same script and
/// args (else the run is a divergence); its outcome is waited for, as `attach` does.
pub(crate) async fn run(
    ingress: &str,
    script: String,
    args: Value,
    thread_id: String,
    limits: Option<Limits>,
    json: bool,
) -> Result<u8, Failure> {
    let client = Client::new(ingress).map_err(Failure::input)?;
    flowbox::RunRequest::check_thread_id(&thread_id).map_err(Failure::run)?;
    if !json {
        err!("thread {thread_id}");
    }
    let input = WorkflowInput {
        script,
        args,
        limits,
        guard: true,
    };
    if let Some(start) = client.started(&thread_id).await.map_err(unreachable)? {
        if start.script_sha256 != sha256_hex(input.script.as_bytes()) {
            return Err(Failure::run(RunError::Divergence(format!(
                "the script is not the one thread {thread_id} started with"
            ))));
        }
        if start.args_sha256 != sha256_hex(input.args.to_string().as_bytes()) {
            return Err(Failure::run(RunError::Divergence(format!(
                "the args are not the ones thread {thread_id} started with"
            ))));
        }
    }
    client
        .submit(&thread_id, &input)
        .await
        .map_err(unreachable)?;
    // Submitted: the server may restart meanwhile (the run goes on), so keep asking.
    outcome(&client, &thread_id, json, true).await
}

pub(crate) async fn attach(args: AttachArgs) -> Result<u8, Failure> {
    let client = Client::new(&args.restate).map_err(Failure::input)?;
    outcome(&client, &args.thread, args.json, false).await
}

/// Waits for the thread's outcome and prints it as a local run's; `patient`, through a lost
/// connection and the server's restart (as [`RestateEngine::attach`] waits).
async fn outcome(
    client: &Client,
    thread_id: &str,
    json: bool,
    patient: bool,
) -> Result<u8, Failure> {
    let answer = match patient {
        true => RestateEngine::from(client.clone()).attach(thread_id).await,
        false => client.attach(thread_id).await,
    };
    let outcome = match answer {
        Ok(Some(outcome)) => outcome,
        Ok(None) => return Err(Failure::run(RunError::UnknownThread(thread_id.to_owned()))),
        Err(ClientError::Status { status, body, .. }) => {
            return Err(Failure {
                code: 1,
                kind: "restate".into(),
                error: anyhow::anyhow!(
                    "the run of thread {thread_id} failed on Restate ({status}): {}",
                    restate_message(&body)
                ),
            });
        }
        Err(error) => return Err(unreachable(error)),
    };
    let outcome = flowbox_restate::outcome_from_json(thread_id, outcome).map_err(Failure::run)?;
    report(outcome, json)
}

/// The message of a Restate error body (`{"message": ...}`), else the body.
fn restate_message(body: &str) -> String {
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

/// Restate could not be asked, or answered an error: the machinery failed (exit code 1).
fn unreachable(error: ClientError) -> Failure {
    Failure {
        code: 1,
        kind: "restate".into(),
        error: error.into(),
    }
}
