//! Scripts run without the guard, with the interpreter's `os`, `sys`, `io`, `builtins.open`,
//! sockets and the raw host bindings in hand: every attempt must find nothing of the host.

use std::sync::Arc;

use flowbox::{RunOutcome, RunRequest};
use flowbox_tests::root;
use libtest_mimic::Trial;
use serde_json::{Value, json};

use crate::{SECRET_VAR, Suite, corpus_limits};

/// The unguarded tests.
pub(crate) fn trials(suite: &Arc<Suite>) -> Vec<Trial> {
    vec![
        suite.trial("unguarded::host_resources", host_resources),
        suite.trial("unguarded::raw_runtime_bridge", raw_runtime_bridge),
        suite.trial("unguarded::host_working_directory", host_working_directory),
    ]
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

/// [`UNGUARDED`]: every attempt ends as [`UNGUARDED_EXPECTED`] says.
async fn host_resources(suite: &Suite, failures: &mut Vec<String>) {
    let args = json!({"path": suite.secret_file, "port": suite.port, "var": SECRET_VAR});
    let request = RunRequest::new(UNGUARDED)
        .args(args)
        .guard(false)
        .limits(corpus_limits());
    let outcome = suite
        .run(request, "the unguarded script")
        .await
        .outcome(failures);
    // Every attempt catches its own exception, so the run itself must succeed; anything
    // else would skip every check below.
    match &outcome.result {
        Ok(Value::Object(seen)) => {
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
}

/// Files under the host's working directory are just as unreachable.
async fn host_working_directory(suite: &Suite, failures: &mut Vec<String>) {
    let cwd_file = root().join("Cargo.toml");
    let request = RunRequest::new("return open(args['p']).read()")
        .args(json!({"p": cwd_file}))
        .guard(false);
    let outcome = suite
        .run(request, "the working-directory read")
        .await
        .outcome(failures);
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
async fn raw_runtime_bridge(suite: &Suite, failures: &mut Vec<String>) {
    let request = RunRequest::new(
        "import componentize_py_runtime as runtime\n\
         return [name for name in dir(runtime) if not name.startswith('_')]\n",
    )
    .guard(false);
    let names = suite
        .run(request, "the bridge's listing")
        .await
        .outcome(failures)
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
            let probe = format!("runtime.{name}{arguments}");
            let request = RunRequest::new(script)
                .args(json!({"name": name}))
                .guard(false)
                .limits(corpus_limits());
            let outcome: RunOutcome = suite.run(request, &probe).await.outcome(failures);
            match &outcome.result {
                // A trap ends the guest (guest_failure); an exception the bridge raises past
                // the `except` ends the script (uncaught). Either way the host stands.
                Ok(_) => {}
                Err(error) if matches!(error.kind().as_str(), "guest_failure" | "uncaught") => {}
                Err(error) => failures.push(format!("{probe}: ended with {error:?}")),
            }
        }
    }
}
