//! Isolation, proven from the outside: a secret is planted on the host (a file, an environment
//! variable) and a TCP listener waits on loopback; then
//!
//! 1. scripts run **without the guard**, with the interpreter's `os`, `sys`, `io`,
//!    `builtins.open` and the raw host bindings in hand, try to read, list, connect and call
//!    outside the WIT interface;
//! 2. the escape corpus (`tests/escapes/*.py`, guard on) tries every known way out.
//!
//! Nothing may reveal the secret — not the results, errors, logs or events — nothing may
//! connect, and the runtime must keep serving good runs. This binary has its own `main`
//! (`harness = false`) so the environment variable is planted before any thread exists.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowbox::{Limits, RunRequest, Runtime};
use flowbox_tests::{root, runtime};
use serde_json::{Value, json};

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
        let runtime = runtime();
        let seen = collect_events(&runtime);
        unguarded_scripts(&runtime, &secret_file, port, &mut failures).await;
        escape_corpus(&runtime, &mut failures).await;
        healthy_afterwards(&runtime, &mut failures).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let events = seen.lock().expect("not poisoned").join("\n");
        if events.contains(SECRET) {
            failures.push("the secret appeared in the event stream".to_owned());
        }
        if events.is_empty() {
            failures.push("no events were observed".to_owned());
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

/// Every event of every run, as JSON text.
fn collect_events(runtime: &Runtime) -> Arc<Mutex<Vec<String>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut stream = runtime.subscribe();
    let sink = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Some(event) = stream.recv().await {
            let text = serde_json::to_string(&event).expect("events serialise");
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
import componentize_py_runtime as runtime
for name in dir(runtime):
    if not name.startswith("_"):
        attempt("runtime." + name, lambda name=name: getattr(runtime, name)(2**31, 0, 0))
return seen
"#;

async fn unguarded_scripts(
    runtime: &Runtime,
    secret_file: &std::path::Path,
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
    match &outcome.result {
        Ok(seen) => {
            for (name, expectation) in [
                ("open", "refused"),
                ("builtins.open", "refused"),
                ("io.open", "refused"),
                ("os.open", "refused"),
                ("stat", "refused"),
                ("write", "refused"),
                ("system", "refused"),
                ("tcp connect", "refused"),
                ("tcp listen", "refused"),
                ("udp send", "refused"),
                ("name lookup", "refused"),
                ("import ctypes", "refused"),
                ("import subprocess", "refused"),
                ("raw await_next with nothing pending", "refused"),
            ] {
                let got = seen[name].as_str().unwrap_or("");
                if !got.starts_with(expectation) {
                    failures.push(format!(
                        "unguarded {name}: expected {expectation}, got {got}"
                    ));
                }
            }
            for (name, empty) in [("environ", "{}"), ("getenv", "None"), ("argv", "[]")] {
                if seen[name] != json!(empty) {
                    failures.push(format!(
                        "unguarded {name}: expected {empty}, got {}",
                        seen[name]
                    ));
                }
            }
            println!(
                "unguarded attempts: {}",
                serde_json::to_string_pretty(seen).unwrap_or_default()
            );
        }
        // Calling the raw runtime with garbage may end the run; it must not end the host.
        Err(error) => println!("unguarded script ended with {error}"),
    }
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

/// How an escape attempt is expected to end, from its first line.
fn expectation(script: &str) -> &'static str {
    let first = script.lines().next().unwrap_or("");
    if first.starts_with("# expect: forbidden") {
        "forbidden"
    } else if first.starts_with("# expect: harmless") {
        "harmless"
    } else {
        "unspecified"
    }
}

async fn escape_corpus(runtime: &Runtime, failures: &mut Vec<String>) {
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
    let (mut forbidden, mut harmless) = (0, 0);
    for path in &paths {
        let name = path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let script = std::fs::read_to_string(path).expect("readable");
        let outcome = runtime
            .run_request(RunRequest::new(script.clone()).limits(corpus_limits()))
            .await;
        let text = everything(&outcome);
        if text.contains(SECRET) {
            failures.push(format!("{name}: the secret leaked: {text}"));
        }
        let kind = outcome.result.as_ref().err().map(|e| e.kind());
        match (expectation(&script), kind) {
            ("forbidden", Some("forbidden")) => {
                forbidden += 1;
                if outcome
                    .result
                    .as_ref()
                    .err()
                    .and_then(|e| e.line())
                    .is_none()
                {
                    failures.push(format!("{name}: rejected without a line"));
                }
            }
            // Harmless: a result, a script error, or a breached limit — never a crash.
            ("harmless", Some("guest_failure" | "host_failure" | "forbidden")) => {
                failures.push(format!("{name}: expected to run harmlessly, got {text}"));
            }
            ("harmless", _) => harmless += 1,
            (expected, _) => failures.push(format!("{name}: expected {expected}, got {text}")),
        }
        println!(
            "{name:<36} {}",
            match &outcome.result {
                Ok(value) => format!("ran: {}", truncate(&value.to_string(), 70)),
                Err(error) => format!("{}: {}", error.kind(), truncate(&error.to_string(), 70)),
            }
        );
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

fn truncate(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}
