//! Isolation, proven from the outside: a secret is planted on the host (a file, an environment
//! variable) and a TCP listener waits on loopback; then
//!
//! 1. scripts run **without the guard**, with the interpreter's `os`, `sys`, `io`,
//!    `builtins.open` and the raw host bindings in hand, try to read, list, connect and call
//!    outside the WIT interface; the interpreter's raw ABI bridge is called with garbage, one
//!    run per call, since a trap ends its run;
//! 2. the escape corpus (`tests/escapes/*.py`) tries every known way out, told where the
//!    secrets are; the guard is on except for the few attempts on the wasm boundary itself
//!    (raw host calls, forged handles, two runs in flight reaching for each other).
//!
//! Nothing may reveal the secret — not the results, errors, logs or events — nothing may
//! connect, and the runtime must keep serving good runs. This binary has its own `main`
//! (`harness = false`) so the environment variable is planted before any thread exists.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowbox::backends::FakeBackend;
use flowbox::{
    BackendError, EventKind, LeafBackend, LeafReply, LeafRequest, Limits, RunOutcome, RunRequest,
    Runtime,
};
use flowbox_tests::root;
use serde_json::{Value, json};
use tokio::sync::Notify;

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
    let failures = tokio.block_on(async {
        let mut failures = Vec::new();
        let backend = Arc::new(HoldingBackend::default());
        // Room for every event of every run, so the search for the secret misses none.
        let runtime = Runtime::builder()
            .shared_backend(backend.clone())
            .cache_dir(root().join("target").join("flowbox-cache"))
            .event_capacity(1 << 20)
            .build()
            .expect("the guest loads");
        let seen = collect_events(&runtime);
        unguarded_scripts(&runtime, &secret_file, port, &mut failures).await;
        escape_corpus(&runtime, &backend, &secret_file, &mut failures).await;
        healthy_afterwards(&runtime, &mut failures).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let events = seen.lock().expect("not poisoned").join("\n");
        if events.contains(SECRET) {
            failures.push("the secret appeared in the event stream".to_owned());
        }
        if events.is_empty() {
            failures.push("no events were observed".to_owned());
        }
        if events.contains(GAP_MARKER) {
            failures.push("events were dropped, so some were never searched".to_owned());
        }
        failures
    });
    if listener.accept().is_ok() {
        eprintln!("FAIL: a guest connected to the host's loopback listener");
        std::process::exit(1);
    }
    if !failures.is_empty() {
        for failure in &failures {
            eprintln!("FAIL: {failure}");
        }
        std::process::exit(1);
    }
    println!("isolation: all checks passed");
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
fn everything(outcome: &flowbox::RunOutcome) -> String {
    outcome.to_json().to_string()
}

const UNGUARDED: &str = r#"
import builtins, io, os, sys

seen = {}
def attempt(name, action):
    try:
        seen[name] = repr(action())[:300]
    except BaseException as error:
        seen[name] = "refused: " + type(error).__name__ + ": " + str(error)[:200]

path = args["path"]
attempt("open", lambda: open(path).read())
attempt("builtins.open", lambda: builtins.open(path).read())
attempt("io.open", lambda: io.open(path, "rb").read())
attempt("os.open", lambda: os.read(os.open(path, os.O_RDONLY), 100))
attempt("stat", lambda: os.stat(path))
attempt("listdir /", lambda: os.listdir("/"))
attempt("listdir parent", lambda: os.listdir(os.path.dirname(path)))
attempt("getcwd", lambda: os.getcwd())
attempt("walk /", lambda: [entry for entry in os.walk("/")][:5])
attempt("write", lambda: open("/tmp/flowbox-escape", "w").write("x"))
attempt("environ", lambda: dict(os.environ))
attempt("getenv", lambda: os.getenv(args["var"]))
attempt("argv", lambda: sys.argv)
attempt("stdin", lambda: sys.stdin.read())
attempt("system", lambda: os.system("cat " + path))
attempt("fork", lambda: os.fork())
attempt("import socket", lambda: __import__("socket"))
import _socket
def connect():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    s.connect(("127.0.0.1", args["port"]))
    return s.recv(10)
def listen():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s.getsockname()
def send_udp():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    return s.sendto(b"x", ("127.0.0.1", args["port"]))
attempt("tcp connect", connect)
attempt("tcp listen", listen)
attempt("udp send", send_udp)
attempt("name lookup", lambda: _socket.getaddrinfo(b"localhost", args["port"]))
attempt("import ssl", lambda: __import__("ssl"))
attempt("import ctypes", lambda: __import__("ctypes"))
attempt("import subprocess", lambda: __import__("subprocess").run(["cat", path]))

from wit_world.imports import host
attempt("raw await_next with nothing pending", lambda: host.await_next())
attempt("raw log", lambda: host.log("raw binding log line"))
return seen
"#;

/// What an unguarded attempt must have ended with (its `repr`, or `refused: <exception>`).
#[derive(Debug, Clone, Copy)]
enum Expected {
    /// An exception.
    Refused,
    /// Exactly this value: nothing of the host shows.
    Is(&'static str),
    /// An exception or exactly this value (an empty listing, the guest's own root).
    RefusedOr(&'static str),
}

/// Every attempt of [`UNGUARDED`] and how it must end; an attempt missing here fails the test.
const UNGUARDED_EXPECTED: &[(&str, Expected)] = &[
    ("open", Expected::Refused),
    ("builtins.open", Expected::Refused),
    ("io.open", Expected::Refused),
    ("os.open", Expected::Refused),
    ("stat", Expected::Refused),
    ("listdir /", Expected::RefusedOr("[]")),
    ("listdir parent", Expected::Refused),
    ("getcwd", Expected::RefusedOr("'/'")),
    ("walk /", Expected::RefusedOr("[]")),
    ("write", Expected::Refused),
    ("environ", Expected::Is("{}")),
    ("getenv", Expected::Is("None")),
    ("argv", Expected::Is("[]")),
    ("stdin", Expected::RefusedOr("''")),
    ("system", Expected::Refused),
    ("fork", Expected::Refused),
    ("import socket", Expected::Refused),
    ("tcp connect", Expected::Refused),
    ("tcp listen", Expected::Refused),
    ("udp send", Expected::Refused),
    ("name lookup", Expected::Refused),
    ("import ssl", Expected::Refused),
    ("import ctypes", Expected::Refused),
    ("import subprocess", Expected::Refused),
    ("raw await_next with nothing pending", Expected::Refused),
    ("raw log", Expected::Is("None")),
];

fn meets(got: &str, expected: Expected) -> bool {
    let refused = got.starts_with("refused: ");
    match expected {
        Expected::Refused => refused,
        Expected::Is(value) => got == value,
        Expected::RefusedOr(value) => refused || got == value,
    }
}

async fn unguarded_scripts(
    runtime: &Runtime,
    secret_file: &Path,
    port: u16,
    failures: &mut Vec<String>,
) {
    let args = json!({"path": secret_file, "port": port, "var": SECRET_VAR});
    let outcome = runtime
        .run_request(
            RunRequest::new(UNGUARDED)
                .args(args)
                .guard(false)
                .limits(corpus_limits()),
        )
        .await;
    let text = everything(&outcome);
    if text.contains(SECRET) {
        failures.push(format!("an unguarded script read the secret: {text}"));
    }
    // Every attempt catches its own exception, so the run itself must succeed; anything
    // else would skip every check below.
    match &outcome.result {
        Ok(Value::Object(seen)) => {
            println!(
                "unguarded attempts: {}",
                serde_json::to_string_pretty(seen).unwrap_or_default()
            );
            for (name, expected) in UNGUARDED_EXPECTED {
                match seen.get(*name).and_then(Value::as_str) {
                    Some(got) if meets(got, *expected) => {}
                    got => failures.push(format!(
                        "unguarded {name}: expected {expected:?}, got {got:?}"
                    )),
                }
            }
            for name in seen.keys() {
                if !UNGUARDED_EXPECTED.iter().any(|(known, _)| known == name) {
                    failures.push(format!("unguarded {name}: recorded but never checked"));
                }
            }
        }
        other => failures.push(format!(
            "the unguarded proof did not run to its result: {other:?}; logs: {:?}",
            outcome.summary.logs
        )),
    }
    raw_runtime_probes(runtime, failures).await;
    // Files under the host's working directory are just as unreachable.
    let cwd_file = root().join("Cargo.toml");
    let outcome = runtime
        .run_request(
            RunRequest::new("return open(args['p']).read()")
                .args(json!({"p": cwd_file}))
                .guard(false),
        )
        .await;
    if outcome.result.is_ok() {
        failures.push("an unguarded script read a file in the host's working directory".into());
    }
}

/// Argument lists, as Python literals, the raw runtime's functions are called with.
const GARBAGE_ARGUMENTS: &[&str] = &[
    "()",
    "(2**31,)",
    "(2**31, 0)",
    "(2**31, [])",
    "(0, [])",
    "(-1, [1, 2, 3])",
    "(0, None)",
    "(2**64, 'x')",
    "(2**31, 0, 0)",
];

/// The interpreter's own bridge to the component ABI (`componentize_py_runtime`), called with
/// garbage. A call may raise, or trap and end its run — so each call gets a run of its own —
/// but it must never end in a host failure or reveal anything.
async fn raw_runtime_probes(runtime: &Runtime, failures: &mut Vec<String>) {
    let names = runtime
        .run_request(
            RunRequest::new(
                "import componentize_py_runtime as runtime\n\
                 return [name for name in dir(runtime) if not name.startswith('_')]\n",
            )
            .guard(false),
        )
        .await
        .result;
    let names: Vec<String> = match names {
        Ok(Value::Array(names)) if !names.is_empty() => names
            .iter()
            .filter_map(|name| name.as_str().map(str::to_owned))
            .collect(),
        other => {
            failures.push(format!(
                "the raw runtime's functions were not listed: {other:?}"
            ));
            return;
        }
    };
    for name in &names {
        for arguments in GARBAGE_ARGUMENTS {
            let script = format!(
                "import componentize_py_runtime as runtime\n\
                 try:\n    \
                     return 'returned: ' + repr(getattr(runtime, args['name'])(*{arguments}))[:300]\n\
                 except Exception as error:\n    \
                     return 'refused: ' + type(error).__name__ + ': ' + str(error)[:200]\n"
            );
            let outcome = runtime
                .run_request(
                    RunRequest::new(script)
                        .args(json!({"name": name}))
                        .guard(false)
                        .limits(corpus_limits()),
                )
                .await;
            let text = everything(&outcome);
            if text.contains(SECRET) {
                failures.push(format!(
                    "runtime.{name}{arguments}: the secret leaked: {text}"
                ));
            }
            let probe = format!("runtime.{name}{arguments}");
            match &outcome.result {
                // A trap ends the guest (guest_failure); an exception the bridge raises past
                // the `except` ends the script (uncaught). Either way the host stands.
                Ok(_) => {}
                Err(error) if matches!(error.kind().as_str(), "guest_failure" | "uncaught") => {}
                Err(error) => failures.push(format!("{probe}: ended with {error:?}")),
            }
            println!("{probe:<40} {}", summary(&outcome));
        }
    }
}

/// One script of the escape corpus and what its header says about it.
///
/// The header is the script's leading comment lines: `# expect: forbidden|harmless — why`
/// first, then any of `# guard: off` (run without the guard: the attempt is against the wasm
/// boundary itself), `# result: <JSON>` (the exact result), `# error: <kind>: <text>` (the
/// error kind and text in its message), and `# while-running: <file>` (run while that other
/// script is in flight, held at `await agent(args["hold"])`; then once more after it ended).
#[derive(Debug)]
struct Attempt {
    file: String,
    name: String,
    script: String,
    expect: String,
    guard: bool,
    result: Option<Value>,
    error: Option<(String, String)>,
    while_running: Option<String>,
}

impl Attempt {
    fn load(path: &Path) -> Result<Self, String> {
        let file = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let name = file.trim_end_matches(".py").to_owned();
        let script = std::fs::read_to_string(path).map_err(|e| format!("{file}: {e}"))?;
        let mut attempt = Self {
            file,
            name,
            script: script.clone(),
            expect: String::new(),
            guard: true,
            result: None,
            error: None,
            while_running: None,
        };
        for line in script.lines().map_while(|line| line.strip_prefix("# ")) {
            let Some((key, value)) = line.split_once(": ") else {
                continue;
            };
            match key {
                "expect" => {
                    attempt.expect = value.split_whitespace().next().unwrap_or("").to_owned();
                }
                "guard" => attempt.guard = value != "off",
                "result" => {
                    let value = serde_json::from_str(value).map_err(|e| {
                        format!("{}: the result header is not JSON: {e}", attempt.name)
                    })?;
                    attempt.result = Some(value);
                }
                "error" => {
                    let (kind, text) = value.split_once(": ").unwrap_or((value, ""));
                    attempt.error = Some((kind.to_owned(), text.to_owned()));
                }
                "while-running" => attempt.while_running = Some(value.to_owned()),
                _ => {}
            }
        }
        if !matches!(attempt.expect.as_str(), "forbidden" | "harmless") {
            return Err(format!(
                "{}: the first line must be `# expect: forbidden` or `# expect: harmless`",
                attempt.name
            ));
        }
        Ok(attempt)
    }

    async fn run(&self, runtime: &Runtime, args: &Value) -> RunOutcome {
        runtime
            .run_request(
                RunRequest::new(self.script.clone())
                    .args(args.clone())
                    .guard(self.guard)
                    .limits(corpus_limits()),
            )
            .await
    }

    /// Checks `outcome` against the header; returns whether the guard rejected the attempt.
    /// `when` tells a repeated run apart in messages.
    fn judge(&self, outcome: &RunOutcome, when: &str, failures: &mut Vec<String>) -> bool {
        let name = format!("{}{when}", self.name);
        let text = everything(outcome);
        if text.contains(SECRET) {
            failures.push(format!("{name}: the secret leaked: {text}"));
        }
        println!("{name:<40} {}", summary(outcome));
        let kind = outcome.result.as_ref().err().map(|e| e.kind().as_str());
        match (self.expect.as_str(), kind) {
            ("forbidden", Some("forbidden")) => {
                if outcome
                    .result
                    .as_ref()
                    .err()
                    .and_then(|e| e.line())
                    .is_none()
                {
                    failures.push(format!("{name}: rejected without a line"));
                }
                return true;
            }
            ("forbidden", _) => failures.push(format!("{name}: expected forbidden, got {text}")),
            // Harmless: a result, a script error, or a breached limit — never a crash.
            (_, Some("guest_failure" | "host_failure" | "forbidden")) => {
                failures.push(format!("{name}: expected to run harmlessly, got {text}"));
            }
            _ => {}
        }
        if self.expect == "harmless" && self.result.is_none() && self.error.is_none() {
            failures.push(format!(
                "{name}: say what a harmless attempt ends with (`# result:` or `# error:`)"
            ));
        }
        if let Some(expected) = &self.result
            && outcome.result.as_ref().ok() != Some(expected)
        {
            failures.push(format!(
                "{name}: expected the result {expected}, got {text}"
            ));
        }
        if let Some((kind, message)) = &self.error {
            let matched = outcome.result.as_ref().err().is_some_and(|e| {
                e.kind().as_str() == kind && e.to_string().contains(message.as_str())
            });
            if !matched {
                failures.push(format!(
                    "{name}: expected {kind} with {message:?}, got {text}"
                ));
            }
        }
        false
    }
}

/// The prompt a `while-running` companion holds at until the other script has run.
const HOLD_PROMPT: &str = "hold until the other run has looked";

/// The fake backend, except that a call with [`HOLD_PROMPT`] waits for [`Self::release`].
#[derive(Debug, Default)]
struct HoldingBackend {
    arrived: Notify,
    released: Notify,
}

impl HoldingBackend {
    /// Waits until a call is being held (or was, since the last wait).
    async fn holding(&self) {
        self.arrived.notified().await;
    }

    /// Lets the held call (or the next one) answer.
    fn release(&self) {
        self.released.notify_one();
    }
}

#[async_trait::async_trait]
impl LeafBackend for HoldingBackend {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        if request.prompt_text() == HOLD_PROMPT {
            self.arrived.notify_one();
            self.released.notified().await;
        }
        FakeBackend::reply(request)
    }
}

async fn escape_corpus(
    runtime: &Runtime,
    backend: &HoldingBackend,
    secret_file: &Path,
    failures: &mut Vec<String>,
) {
    let dir = root().join("tests").join("escapes");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/escapes exists")
        .map(|entry| entry.expect("readable").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "py"))
        .collect();
    paths.sort();
    if paths.len() < 40 {
        failures.push(format!(
            "the escape corpus has only {} attempts",
            paths.len()
        ));
    }
    let mut attempts = Vec::new();
    for path in &paths {
        match Attempt::load(path) {
            Ok(attempt) => attempts.push(attempt),
            Err(error) => failures.push(error),
        }
    }
    // Where the secrets are, so every attempt aims at them — never the secret itself.
    let args = json!({"secret_path": secret_file, "secret_env": SECRET_VAR, "hold": HOLD_PROMPT});
    let companions: Vec<&str> = attempts
        .iter()
        .filter_map(|attempt| attempt.while_running.as_deref())
        .collect();
    let (mut forbidden, mut harmless) = (0, 0);
    let mut tally = |rejected: bool| {
        if rejected {
            forbidden += 1;
        } else {
            harmless += 1;
        }
    };
    for attempt in &attempts {
        if companions.contains(&attempt.file.as_str()) {
            continue; // runs alongside the attempt that names it
        }
        let Some(companion) = &attempt.while_running else {
            let outcome = attempt.run(runtime, &args).await;
            tally(attempt.judge(&outcome, "", failures));
            continue;
        };
        let Some(companion) = attempts.iter().find(|other| &other.file == companion) else {
            failures.push(format!("{}: no companion {companion}", attempt.name));
            continue;
        };
        let (companion_outcome, during) = tokio::join!(companion.run(runtime, &args), async {
            let held = tokio::time::timeout(Duration::from_secs(30), backend.holding()).await;
            let outcome = attempt.run(runtime, &args).await;
            backend.release();
            (held.is_ok(), outcome)
        });
        let (held, during) = during;
        if !held {
            failures.push(format!(
                "{}: {} never reached its hold, so the two were not in flight together",
                attempt.name, companion.name
            ));
        }
        tally(companion.judge(&companion_outcome, "", failures));
        tally(attempt.judge(&during, " (during)", failures));
        let after = attempt.run(runtime, &args).await;
        attempt.judge(&after, " (after)", failures);
    }
    println!(
        "escape corpus: {} attempts, {forbidden} rejected by the guard, {harmless} ran harmlessly",
        paths.len()
    );
}

async fn healthy_afterwards(runtime: &Runtime, failures: &mut Vec<String>) {
    let outcome = runtime
        .run("return await agent('still here')", Value::Null)
        .await;
    if outcome.result.as_ref().ok() != Some(&json!("[fake leaf] still here")) {
        failures.push(format!(
            "the runtime is unhealthy after the corpus: {:?}",
            outcome.result
        ));
    }
}

/// How a run ended, in one line.
fn summary(outcome: &RunOutcome) -> String {
    match &outcome.result {
        Ok(value) => format!("ran: {}", truncate(&value.to_string(), 70)),
        Err(error) => {
            let message = error.to_string();
            let first_line = message.lines().next().unwrap_or("");
            format!("{}: {}", error.kind(), truncate(first_line, 70))
        }
    }
}

fn truncate(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}
