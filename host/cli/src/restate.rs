//! flowbox on Restate: `flowbox worker` (serve the workflow and leaf services), `flowbox run
//! --restate` (submit a run and wait for its outcome) and `flowbox attach` (wait for the
//! outcome of a run submitted earlier). The outcome prints exactly as a local run's.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use flowbox::{Event, EventKind, Limits, RunError, Runtime};
use flowbox_restate::{
    Client, ClientError, RestateEngine, Services, Worker, WorkflowInput, sha256_hex,
};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

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
    /// Write the run's events (those Restate still keeps, then the rest as they are published)
    /// as JSON Lines to FILE, or to stdout with `-`.
    #[arg(long, value_name = "FILE|-")]
    events: Option<PathBuf>,
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
    events: Option<&PathBuf>,
) -> Result<u8, Failure> {
    let client = Client::new(ingress).map_err(Failure::input)?;
    flowbox::RunRequest::check_thread_id(&thread_id).map_err(Failure::run)?;
    let follower = Follower::start(&client, &thread_id, events, json)?;
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
    let answer = outcome(&client, &thread_id, true).await;
    follower.finish().await?;
    report_answer(&thread_id, answer, json)
}

pub(crate) async fn attach(args: AttachArgs) -> Result<u8, Failure> {
    let client = Client::new(&args.restate).map_err(Failure::input)?;
    let follower = Follower::start(&client, &args.thread, args.events.as_ref(), args.json)?;
    let answer = outcome(&client, &args.thread, false).await;
    follower.finish().await?;
    report_answer(&args.thread, answer, args.json)
}

/// How often a follower asks Restate for a run's new events.
const POLL: Duration = Duration::from_millis(50);

/// How long the last read of a run's events may take once its outcome is in.
const LAST_READ: Duration = Duration::from_secs(10);

/// Follows a thread's events as its workflow publishes them (its shared `events` handler)
/// into the progress display, when stderr is a terminal, and `--events`, as for a local run.
/// A follower that falls behind slows nothing but itself: the workflow never waits for it.
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
        let (log, log_feed) = match events {
            Some(target) => {
                let (feed, receiver) = mpsc::channel(4096);
                let log = crate::events::spawn(target, receiver, json).map_err(Failure::input)?;
                (Some(log), Some(feed))
            }
            None => (None, None),
        };
        let (display, display_feed) = match std::io::stderr().is_terminal() {
            true => {
                let (feed, receiver) = mpsc::channel(4096);
                (Some(crate::progress::spawn(receiver)), Some(feed))
            }
            false => (None, None),
        };
        if log_feed.is_none() && display_feed.is_none() {
            return Ok(Self {
                stop: None,
                task: None,
                display,
                log,
            });
        }
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(follow(
            client.clone(),
            thread_id.to_owned(),
            Feeds {
                log: log_feed,
                display: display_feed,
                display_missed: 0,
            },
            stopped,
        ));
        Ok(Self {
            stop: Some(stop),
            task: Some(task),
            display,
            log,
        })
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

/// Where a follower delivers: the writer gets every event (the follower waits for it), the
/// display what it keeps up with (the rest as a gap).
struct Feeds {
    log: Option<mpsc::Sender<Event>>,
    display: Option<mpsc::Sender<Event>>,
    display_missed: u64,
}

impl Feeds {
    async fn deliver(&mut self, event: Event) {
        if let Some(display) = &self.display {
            if self.display_missed > 0
                && display
                    .try_send(gap(&event.thread_id, self.display_missed))
                    .is_ok()
            {
                self.display_missed = 0;
            }
            if self.display_missed > 0 || display.try_send(event.clone()).is_err() {
                self.display_missed += 1;
            }
        }
        if let Some(log) = &self.log
            && log.send(event).await.is_err()
        {
            // The writer stopped (its reader went away): it reports why at the end.
            self.log = None;
        }
    }
}

fn gap(thread_id: &str, missed: u64) -> Event {
    Event {
        thread_id: thread_id.to_owned(),
        seq: 0,
        kind: EventKind::Gap { missed },
    }
}

/// Polls the thread's events until told to stop, then reads once more (the workflow
/// published its last events before its outcome) and ends. Events Restate no longer keeps, or
/// that a full buffer of the worker dropped, arrive as one gap.
async fn follow(
    client: Client,
    thread_id: String,
    mut feeds: Feeds,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut after = 0;
    let mut stopping = false;
    loop {
        // The server restarting, or the thread not there yet: ask again.
        if let Ok(page) = client.events(&thread_id, after).await {
            for event in page.events {
                if event.seq <= after {
                    continue;
                }
                if event.seq > after + 1 {
                    feeds.deliver(gap(&thread_id, event.seq - after - 1)).await;
                }
                after = event.seq;
                feeds.deliver(event).await;
            }
        }
        if stopping {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            _ = &mut stopped => stopping = true,
        }
    }
}

/// Waits for the thread's outcome and prints it as a local run's; `patient`, through a lost
/// connection and the server's restart (as [`RestateEngine::attach`] waits).
async fn outcome(
    client: &Client,
    thread_id: &str,
    patient: bool,
) -> Result<Option<Value>, ClientError> {
    match patient {
        true => RestateEngine::from(client.clone()).attach(thread_id).await,
        false => client.attach(thread_id).await,
    }
}

/// Prints the answer [`outcome`] got as a local run's outcome.
fn report_answer(
    thread_id: &str,
    answer: Result<Option<Value>, ClientError>,
    json: bool,
) -> Result<u8, Failure> {
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
