//! Isolation, proven from the outside: a secret is planted on the host (a file, an environment
//! variable) and a TCP listener waits on loopback; then
//!
//! 1. scripts run **without the guard** ([`unguarded`]), with the interpreter's `os`, `sys`,
//!    `io`, `builtins.open` and the raw host bindings in hand, try to read, list, connect and
//!    call outside the WIT interface; the interpreter's raw ABI bridge is called with garbage,
//!    one run per call, since a trap ends its run;
//! 2. the escape corpus ([`escapes`], one case folder per attempt in `tests/escapes/NAME/`)
//!    tries every known way out, told where the secrets are; the guard is on except for the
//!    few attempts on the wasm boundary itself (raw host calls, forged handles, two runs in
//!    flight reaching for each other).
//!
//! Nothing may reveal the secret — not the results, errors, logs or events — nothing may
//! connect, and the runtime must keep serving good runs.
//!
//! Each attempt is its own test (`escapes::NAME`, `unguarded::…`), so
//! `cargo test --release -p flowbox-tests --test isolation -- NAME` runs the ones whose names
//! contain NAME. After whichever were selected, the `after_all::…` tests always run: the
//! runtime still serves, no event of any run showed the secret and none was dropped, and nothing
//! connected to the listener. The tests are [`libtest_mimic`] trials: this binary has its own
//! `main` (`harness = false`) so the environment variable is planted before any thread exists.

mod escapes;
mod unguarded;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowbox::{EventKind, Limits, RunOutcome, RunRequest, Runtime};
use flowbox_tests::root;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::json;

use crate::escapes::HoldingBackend;

const SECRET: &str = "flowbox-isolation-secret-5f3a9c1e";
const SECRET_VAR: &str = "FLOWBOX_ISOLATION_SECRET";

#[expect(
    unsafe_code,
    reason = "set_var is unsafe because other threads may read the environment; main calls \
              this before starting any thread"
)]
fn plant_environment_secret() {
    // SAFETY: single-threaded at this point (see the reason above).
    unsafe { std::env::set_var(SECRET_VAR, SECRET) };
}

fn main() {
    plant_environment_secret();
    let arguments = Arguments::from_args();
    let suite = Arc::new(Suite::start());
    let mut trials = unguarded::trials(&suite);
    trials.extend(escapes::trials(&suite));
    let attempts = libtest_mimic::run(&arguments, trials);
    if arguments.list {
        return;
    }
    // The checks over every run so far: whatever the filter, in this order, one at a time.
    let everything = Arguments {
        filter: None,
        skip: Vec::new(),
        exact: false,
        test_threads: Some(1),
        ..arguments
    };
    let after_all = libtest_mimic::run(&everything, after_all(&suite));
    drop(suite);
    if attempts.has_failed() || after_all.has_failed() {
        std::process::exit(101);
    }
}

/// What every test shares: the planted secrets, the listener, and one runtime whose every
/// event is recorded.
struct Suite {
    tokio: tokio::runtime::Runtime,
    runtime: Runtime,
    backend: Arc<HoldingBackend>,
    /// Holds the secret file; removed when the suite ends.
    _dir: tempfile::TempDir,
    secret_file: PathBuf,
    listener: TcpListener,
    port: u16,
    /// Every event of every run, as JSON text.
    seen: Arc<Mutex<Vec<String>>>,
}

impl Suite {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let secret_file = dir.path().join("secret.txt");
        std::fs::write(&secret_file, SECRET).expect("the secret file is written");
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("bound").port();
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("tokio");
        let backend = Arc::new(HoldingBackend::default());
        let (runtime, seen) = tokio.block_on(async {
            // Room for every event of every run, so the search for the secret misses none.
            let runtime = Runtime::builder()
                .shared_backend(backend.clone())
                .cache_dir(root().join("target").join("flowbox-cache"))
                .event_capacity(1 << 20)
                .build()
                .expect("the guest loads");
            let seen = collect_events(&runtime);
            (runtime, seen)
        });
        Self {
            tokio,
            runtime,
            backend,
            _dir: dir,
            secret_file,
            listener,
            port,
            seen,
        }
    }

    /// A test named `name` that runs `check` on the suite's tokio runtime and fails with
    /// every problem it reports.
    fn trial<F>(self: &Arc<Self>, name: impl Into<String>, check: F) -> Trial
    where
        F: AsyncFnOnce(&Suite, &mut Vec<String>) + Send + 'static,
    {
        let suite = Arc::clone(self);
        Trial::test(name, move || {
            let mut failures = Vec::new();
            suite.tokio.block_on(check(&suite, &mut failures));
            verdict(&failures)
        })
    }

    /// Runs `request` and checks that neither its outcome nor any event it published shows
    /// the secret; `what` names the run in messages.
    async fn run(&self, request: RunRequest, what: &str) -> Checked {
        let mut stream = self.runtime.subscribe();
        let outcome = self.runtime.run_request(request).await;
        let mut problems = Vec::new();
        let text = everything(&outcome);
        if text.contains(SECRET) {
            problems.push(format!("{what}: the secret leaked: {text}"));
        }
        // The run published its end before it returned, so its events are all in the stream.
        let thread = outcome.thread_id().to_owned();
        loop {
            let Some(event) = stream.recv().await else {
                problems.push(format!(
                    "{what}: the event stream closed before the run ended"
                ));
                break;
            };
            if matches!(event.kind, EventKind::Gap { .. }) {
                problems.push(format!(
                    "{what}: events were dropped, so some were never searched"
                ));
                break;
            }
            if event.thread_id != thread {
                continue;
            }
            let event_text = serde_json::to_string(&event).expect("events serialise");
            if event_text.contains(SECRET) {
                problems.push(format!(
                    "{what}: the secret appeared in an event: {event_text}"
                ));
            }
            if matches!(event.kind, EventKind::RunFinished { .. }) {
                break;
            }
        }
        Checked { outcome, problems }
    }
}

/// A run's outcome, and what its search for the secret found.
struct Checked {
    outcome: RunOutcome,
    problems: Vec<String>,
}

impl Checked {
    /// The outcome, moving the problems found into `failures`.
    fn outcome(self, failures: &mut Vec<String>) -> RunOutcome {
        failures.extend(self.problems);
        self.outcome
    }
}

/// Passes when nothing failed; otherwise fails with every failure, one a line.
fn verdict(failures: &[String]) -> Result<(), Failed> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n").into())
    }
}

/// What `collect_events` records for events the stream dropped.
const GAP_MARKER: &str = "<<events dropped>>";

/// Every event of every run, as JSON text.
fn collect_events(runtime: &Runtime) -> Arc<Mutex<Vec<String>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut stream = runtime.subscribe();
    let sink = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Some(event) = stream.recv().await {
            let text = match event.kind {
                EventKind::Gap { .. } => GAP_MARKER.to_owned(),
                _ => serde_json::to_string(&event).expect("events serialise"),
            };
            sink.lock().expect("not poisoned").push(text);
        }
    });
    seen
}

/// Limits small enough that the corpus's bombs end quickly.
fn corpus_limits() -> Limits {
    Limits::default()
        .with_fuel(3_000_000_000)
        .with_memory_bytes(96 << 20)
        .with_timeout(Duration::from_secs(20))
        .with_max_agents(50)
        .with_max_output_bytes(64 << 10)
}

/// The outcome and summary as one JSON text, to search for the secret.
fn everything(outcome: &RunOutcome) -> String {
    outcome.to_json().to_string()
}

/// The checks over every run of the selected tests, run after them.
fn after_all(suite: &Arc<Suite>) -> Vec<Trial> {
    vec![
        suite.trial(
            "after_all::the_runtime_still_serves",
            async |suite: &Suite, failures: &mut Vec<String>| {
                let request = RunRequest::new("return await agent('still here')");
                let outcome = suite
                    .run(request, "the healthy run")
                    .await
                    .outcome(failures);
                if outcome.result.as_ref().ok() != Some(&json!("[fake leaf] still here")) {
                    failures.push(format!(
                        "the runtime is unhealthy after the corpus: {:?}",
                        outcome.result
                    ));
                }
            },
        ),
        suite.trial(
            "after_all::no_event_shows_the_secret",
            async |suite: &Suite, failures: &mut Vec<String>| {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let events = suite.seen.lock().expect("not poisoned").join("\n");
                if events.contains(SECRET) {
                    failures.push("the secret appeared in the event stream".to_owned());
                }
                if events.is_empty() {
                    failures.push("no events were observed".to_owned());
                }
                if events.contains(GAP_MARKER) {
                    failures.push("events were dropped, so some were never searched".to_owned());
                }
            },
        ),
        suite.trial(
            "after_all::nothing_connected_to_the_listener",
            async |suite: &Suite, failures: &mut Vec<String>| {
                if suite.listener.accept().is_ok() {
                    failures.push("a guest connected to the host's loopback listener".to_owned());
                }
            },
        ),
    ]
}
