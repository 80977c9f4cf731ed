//! flowbox on Restate: `flowbox worker` (serve the workflow and leaf services), `flowbox run
//! --restate` (submit a run and wait for its outcome) and `flowbox attach` (wait for the
//! outcome of a run submitted earlier). The outcome prints exactly as a local run's.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use flowbox::events::{EventRelay, history};
use flowbox::{RunError, RunOutcome, RunRequest};
use flowbox_restate::{
    Client, ClientError, EngineError, IdentityKey, RestateEngine, Services, Worker, restate_message,
};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::options::{RunOptions, TraceOptions, runtime_builder};
use crate::report::report;
use crate::{Failure, FailureKind};

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
    /// Serve only requests signed by the Restate server with this public key (`publickeyv1_…`,
    /// which the server logs at start); others are refused (401) before anything runs. Repeat
    /// it, or separate keys with commas, for several servers.
    #[arg(
        long = "identity-key",
        value_name = "KEY",
        env = "FLOWBOX_IDENTITY_KEYS",
        value_delimiter = ','
    )]
    identity_keys: Vec<IdentityKey>,
    /// Serve requests nobody signed on an address other than loopback: without an identity
    /// key, a worker otherwise listens on loopback only, since whoever reaches it can run
    /// workflows and leaves on its backend.
    #[arg(long)]
    insecure: bool,
    #[command(flatten)]
    options: RunOptions,
    #[command(flatten)]
    trace: TraceOptions,
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
    /// Write the run's events (those Restate still keeps, then the rest as they are published)
    /// as JSON Lines to FILE, or to stdout with `-`.
    #[arg(long, value_name = "FILE|-")]
    events: Option<PathBuf>,
}

pub(crate) async fn worker(args: WorkerArgs) -> Result<u8, Failure> {
    let unverified = args.identity_keys.is_empty();
    if unverified && !args.listen.ip().is_loopback() && !args.insecure {
        return Err(Failure::input(anyhow::anyhow!(
            "refusing to serve {} without --identity-key: whoever can reach it could run \
             workflows and leaves on this worker's backend. Pass the Restate server's public key \
             (--identity-key publickeyv1_…, logged by the server at start), listen on loopback, \
             or pass --insecure to serve unsigned requests anyway",
            args.listen
        )));
    }
    let limits = args.options.limits().map_err(Failure::input)?;
    let backends = args.options.backends().map_err(Failure::input)?;
    // A leaf worker runs no guest: it keeps no pool.
    let warm_pool = match args.services {
        ServiceChoice::Leaf => 0,
        ServiceChoice::All | ServiceChoice::Workflow => args.warm_pool,
    };
    let runtime = runtime_builder(limits, &backends, None)?
        .warm_pool(warm_pool)
        .otlp(args.trace.otlp()?)
        .build()
        .map_err(Failure::setup)?;
    let worker = Worker {
        runtime,
        backend: Arc::clone(&backends.leaf),
        tools: backends.tools.clone(),
        services: match args.services {
            ServiceChoice::All => Services::All,
            ServiceChoice::Workflow => Services::Workflow,
            ServiceChoice::Leaf => Services::Leaf,
        },
        identity_keys: args.identity_keys,
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
    if unverified && !address.ip().is_loopback() {
        err!(
            "warning: serving unsigned requests on {address}: whoever reaches it can run \
             workflows and leaves on this worker's backend"
        );
    }
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

/// `flowbox run SCRIPT --restate URL`: submits `request` (which names its thread) through the
/// engine and prints its outcome as a local run's. A thread Restate already holds must have
/// been started with the same script and args (else the run is a divergence); its outcome is
/// waited for, as `attach` does.
pub(crate) async fn run(
    ingress: &str,
    request: RunRequest,
    json: bool,
    events: Option<&PathBuf>,
) -> Result<u8, Failure> {
    let engine = RestateEngine::new(ingress).map_err(Failure::input)?;
    let thread_id = request.parts().thread_id.unwrap_or_default().to_owned();
    RunRequest::check_thread_id(&thread_id).map_err(Failure::run)?;
    let follower = Follower::start(engine.client(), &thread_id, events, json)?;
    if !json {
        err!("thread {thread_id}");
    }
    engine.submit(&request).await.map_err(failed)?;
    // Submitted: the server may restart meanwhile (the run goes on), so keep asking.
    let outcome = engine.outcome(&thread_id).await;
    follower.finish().await?;
    report_outcome(&thread_id, outcome, json)
}

pub(crate) async fn attach(args: AttachArgs) -> Result<u8, Failure> {
    let engine = RestateEngine::new(&args.restate).map_err(Failure::input)?;
    let follower = Follower::start(
        engine.client(),
        &args.thread,
        args.events.as_ref(),
        args.json,
    )?;
    let outcome = engine.outcome_now(&args.thread).await;
    follower.finish().await?;
    report_outcome(&args.thread, outcome, args.json)
}

/// How often a follower asks Restate for a run's new events.
const POLL: Duration = Duration::from_millis(50);

/// How long the last read of a run's events may take once its outcome is in.
const LAST_READ: Duration = Duration::from_secs(10);

/// How many events the display may fall behind, and the writer hold, before the follower
/// waits for them (as a local runtime's event capacity).
const EVENT_CAPACITY: usize = 4096;

/// Follows a thread's events as its workflow publishes them (its shared `events` handler)
/// into the progress display, when stderr is a terminal, and `--events`, as for a local run:
/// through a relay, the writer gets every event (the follower waits for it) and the display
/// what it keeps up with (the rest as a gap). A follower that falls behind slows nothing but
/// itself: the workflow never waits for it.
struct Follower {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    display: Option<crate::progress::Display>,
    log: Option<crate::events::EventLog>,
}

impl Follower {
    fn start(
        client: &Client,
        thread_id: &str,
        events: Option<&PathBuf>,
        json: bool,
    ) -> Result<Self, Failure> {
        let relay = EventRelay::new(EVENT_CAPACITY);
        let log = match events {
            Some(target) => Some(
                crate::events::spawn(target, relay.subscribe_lossless(), json)
                    .map_err(Failure::input)?,
            ),
            None => None,
        };
        let display = std::io::stderr()
            .is_terminal()
            .then(|| crate::progress::spawn(relay.subscribe()));
        let mut follower = Self {
            stop: None,
            task: None,
            display,
            log,
        };
        if follower.log.is_some() || follower.display.is_some() {
            let (stop, stopped) = oneshot::channel();
            let history =
                history::Follower::new(Arc::new(client.clone()), thread_id, 0).with_poll(POLL);
            follower.stop = Some(stop);
            follower.task = Some(tokio::spawn(follow(history, relay, stopped)));
        }
        Ok(follower)
    }

    /// Reads what was published up to the outcome, then stops the display and the writer.
    async fn finish(self) -> Result<(), Failure> {
        if let Some(stop) = self.stop {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task {
            // Its last read waits for the workflow's worker; one that is gone ends it.
            if tokio::time::timeout(LAST_READ, &mut task).await.is_err() {
                task.abort();
            }
        }
        if let Some(display) = self.display {
            display.finish().await;
        }
        match self.log {
            Some(log) => log.finish().await.map_err(Failure::output),
            None => Ok(()),
        }
    }
}

/// Relays the thread's events until its run ends or the follower is told to stop, then
/// reads once more (the workflow published its last events before its outcome) and ends,
/// which ends the relay's streams. Events Restate no longer keeps, or that a full buffer of
/// the worker dropped, arrive as a gap each. Restate restarting, or the thread not there
/// yet, is asked again.
async fn follow(
    mut history: history::Follower<Client>,
    relay: EventRelay,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            next = history.next() => match next {
                Ok(Some(events)) => {
                    for event in events {
                        relay.publish(event).await;
                    }
                }
                Ok(None) => return,
                Err(_) => tokio::time::sleep(POLL).await,
            },
            _ = &mut stopped => {
                if let Ok(events) = history.read_now().await {
                    for event in events {
                        relay.publish(event).await;
                    }
                }
                return;
            }
        }
    }
}

/// Prints an outcome from Restate as a local run's outcome.
fn report_outcome(
    thread_id: &str,
    outcome: Result<RunOutcome, EngineError>,
    json: bool,
) -> Result<u8, Failure> {
    match outcome {
        Ok(outcome) => report(outcome, json),
        Err(EngineError::Restate(ClientError::Status { status, body, .. })) => Err(Failure {
            code: 1,
            kind: FailureKind::Restate,
            error: anyhow::anyhow!(
                "the run of thread {thread_id} failed on Restate ({status}): {}",
                restate_message(&body)
            ),
        }),
        Err(error) => Err(failed(error)),
    }
}

/// A run Restate refused (a failure of the run's own kind) or could not be asked about (the
/// machinery failed: exit code 1).
fn failed(error: EngineError) -> Failure {
    match error {
        EngineError::Run(error) => Failure::run(error),
        EngineError::Restate(error) => unreachable(error),
        other => Failure::run(other.into_run_error()),
    }
}

/// Restate could not be asked, or answered an error: the machinery failed (exit code 1).
fn unreachable(error: ClientError) -> Failure {
    Failure {
        code: 1,
        kind: FailureKind::Restate,
        error: error.into(),
    }
}
