//! `flowbox serve` end to end: the real binary on a loopback port over a real journal, its
//! JSON API (shapes, 404s, 400s, events from a sequence number, the live stream) and the
//! embedded web app's files.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{
    assert_exit, command_with_db, http, scripted_backend, wait_until, write_file,
};

/// A `flowbox serve` on a free loopback port, stopped (by its pid) when dropped.
struct Server {
    child: Child,
    port: u16,
}

/// `flowbox serve` with `args` on the journal `db`, started, and the first line it wrote to
/// stderr: where it listens, or why it cannot.
fn spawn_serve(db: &Path, args: &[&str]) -> (Child, String) {
    let mut child = command_with_db(db, &[&["serve"], args].concat())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

impl Server {
    fn start(db: &Path) -> Self {
        let (child, line) = spawn_serve(db, &["--listen", "127.0.0.1:0"]);
        assert!(line.contains("(loopback only)"), "{line}");
        let port = line
            .split("http://127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Self { child, port }
    }

    /// A GET: the status, the headers (lowercased) and the body.
    fn get(&self, path: &str) -> (u16, String, String) {
        let answer = http::get(&format!("127.0.0.1:{}", self.port), path);
        (answer.status, answer.head, answer.body)
    }

    /// How much memory the server holds now and has held at most, as Linux tells it; `None`
    /// elsewhere.
    fn memory(&self) -> Option<Memory> {
        if !cfg!(target_os = "linux") {
            return None;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let mib = |field: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|size| size.trim().strip_suffix(" kB"))
                .and_then(|kib| kib.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no {field} in {status}"))
                / 1024
        };
        Some(Memory {
            resident_mib: mib("VmRSS:"),
            peak_mib: mib("VmHWM:"),
        })
    }

    fn json(&self, path: &str) -> (u16, Value) {
        let (status, head, body) = self.get(path);
        assert!(
            head.contains("content-type: application/json"),
            "{path}: {head}"
        );
        (status, serde_json::from_str(&body).unwrap())
    }
}

/// A process's resident memory, in MiB.
#[derive(Debug, Clone, Copy)]
struct Memory {
    resident_mib: u64,
    peak_mib: u64,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const FAN: &str = r#"
meta = {"name": "fan", "description": "d", "phases": [{"title": "review"}, {"title": "sum"}]}
async def main():
    phase("review")
    log("<b>three</b> reviewers")
    out = await parallel([lambda i=i: agent(f"review {i}", label=f"r{i}") for i in range(3)])
    phase("sum")
    return {"n": 1180591620717411303424, "out": out}
"#;

const BACKEND: &str = r#"{"latency_ms": 10, "fallback": "fake",
  "rules": [{"label": "^r1$", "text": "<script>alert(1)</script> is text"}]}"#;

/// Two items through three stages; the second is a parallel of two.
const STAGED: &str = r#"
async def review(draft, item):
    return await parallel([lambda: agent(f"check {item}", label=f"check {item}"),
                           lambda: agent(f"style {item}", label=f"style {item}")])
return await pipeline(["a", "b"],
                      lambda item: agent(f"draft {item}", label=f"draft {item}"),
                      review,
                      lambda prev, item: agent(f"revise {item}", label=f"revise {item}"))
"#;

/// Ten thousand leaves with long prompts: a thread whose history and completions are large.
const WIDE: &str = r#"
results = await parallel([lambda i=i: agent(f"leaf number {i} " + "x" * 200) for i in range(10000)])
return len(results)
"#;

const SLOW: &str = r#"{"latency_ms": 800, "fallback": "fake"}"#;

/// The (event type, seq) pairs of an SSE stream's text, up to its `end`.
fn sse(text: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut id = 0;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("id: ") {
            id = rest.trim().parse().unwrap();
        } else if let Some(rest) = line.strip_prefix("event: ") {
            out.push((rest.trim().to_owned(), id));
        }
    }
    out
}

#[test]
fn the_api_serves_threads_events_leaves_and_a_live_stream() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    // Before any run there is no journal: an empty list, and 404 for a thread.
    let server = Server::start(&db);
    let (status, empty) = server.json("/api/threads");
    assert_eq!(
        (status, empty["threads"].as_array().unwrap().len()),
        (200, 0)
    );
    assert_eq!(server.json("/api/threads/fan").0, 404);

    let fan = write_file(dir.path(), "fan.py", FAN);
    let backend = scripted_backend(dir.path(), "backend.json", BACKEND);
    let run = command_with_db(
        &db,
        &["run", &fan, "--thread", "fan", "--backend", &backend],
    )
    .output()
    .unwrap();
    assert_exit(&run, 0);
    let failing = write_file(
        dir.path(),
        "failing.py",
        "x = await agent('a')\nif x:\n    raise ValueError('no <i>way</i>')\nreturn x\n",
    );
    let run = command_with_db(&db, &["run", &failing, "--thread", "failing"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));

    let (status, listing) = server.json("/api/threads");
    assert_eq!(status, 200);
    let threads = listing["threads"].as_array().unwrap();
    let names: Vec<(&str, &str)> = threads
        .iter()
        .map(|t| {
            (
                t["thread_id"].as_str().unwrap(),
                t["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(names, [("failing", "failed"), ("fan", "succeeded")]);
    let fan_line = &threads[1];
    assert_eq!(fan_line["name"], "fan");
    assert_eq!(fan_line["leaves"], 3);
    assert!(fan_line["tokens"].as_u64().unwrap() > 0);
    assert!(fan_line["duration_ms"].is_u64() && fan_line["finished_unix_ms"].is_u64());

    let (status, thread) = server.json("/api/threads/fan");
    assert_eq!(status, 200);
    assert_eq!(thread["script"], FAN);
    assert_eq!(thread["resume_command"], Value::Null);
    // The result's numbers as they were.
    assert!(
        thread["outcome"]["result"]
            .to_string()
            .contains("1180591620717411303424"),
        "{thread}"
    );
    let last = thread["last_event_seq"].as_u64().unwrap();
    assert!(last >= 10, "{thread}");
    let (_, failed) = server.json("/api/threads/failing");
    assert_eq!(failed["outcome"]["error"]["line"], 3);

    // Events from a sequence number, in pages.
    let (status, page) = server.json("/api/threads/fan/events?after=2&limit=3");
    assert_eq!(status, 200);
    let seqs: Vec<u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!((seqs, page["next"].as_u64()), (vec![3, 4, 5], Some(5)));
    let (_, all) = server.json("/api/threads/fan/events");
    let events = all["events"].as_array().unwrap();
    assert_eq!(events.len() as u64, last);
    assert_eq!(events[0]["type"], "run_started");
    assert_eq!(events.last().unwrap()["type"], "run_finished");
    let (_, none) = server.json(&format!("/api/threads/fan/events?after={last}"));
    assert_eq!(none["events"].as_array().unwrap().len(), 0);
    assert_eq!(none["next"].as_u64(), Some(last));

    // One leaf: its request and its reply, as the model wrote it.
    let started = events
        .iter()
        .find(|e| e["type"] == "leaf_started" && e["label"] == "r1")
        .unwrap();
    let call = started["call_id"].as_u64().unwrap();
    let (status, leaf) = server.json(&format!("/api/threads/fan/leaves/{call}"));
    assert_eq!(status, 200, "{leaf}");
    assert_eq!(leaf["status"], "ok");
    assert_eq!(leaf["request"]["prompt"], "review 1");
    assert_eq!(leaf["request"]["label"], "r1");
    assert_eq!(leaf["reply"], "<script>alert(1)</script> is text");
    // Its place: branch 1 of the run's first group, a parallel of three (no stage).
    assert_eq!(
        started["path"],
        serde_json::json!([{"group": 1, "kind": "parallel", "index": 1, "size": 3}])
    );

    // Clear errors.
    for (path, status, says) in [
        ("/api/threads/nope", 404, "no thread nope"),
        ("/api/threads/nope/events", 404, "no thread nope"),
        ("/api/threads/nope/leaves/1", 404, "no thread nope"),
        ("/api/threads/nope/stream", 404, "no thread nope"),
        ("/api/threads/fan/leaves/999", 404, "has no call 999"),
        ("/api/threads/fan/leaves/one", 400, "whole number"),
        (
            "/api/threads/fan/events?after=-1",
            400,
            "after: invalid digit",
        ),
        (
            "/api/threads/fan/events?limit=0",
            400,
            "limit must be from 1",
        ),
        (
            "/api/threads/fan/events?since=1",
            400,
            "unknown field `since`",
        ),
        ("/api/nothing", 404, "no such API path"),
    ] {
        let (got, body) = server.json(path);
        assert_eq!(got, status, "{path}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(says),
            "{path}: {body}"
        );
    }

    // The stream of a finished thread: every event from the one asked for, then its end.
    let (status, head, body) = server.get("/api/threads/fan/stream?after=5");
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    let streamed = sse(&body);
    assert_eq!(
        streamed.first(),
        Some(&(events[5]["type"].as_str().unwrap().to_owned(), 6))
    );
    assert_eq!(
        streamed[streamed.len() - 2],
        ("run_finished".to_owned(), last)
    );
    assert_eq!(streamed.last().unwrap().0, "end");

    // A pipeline's leaves say which item and which stage they are in, a parallel's inside a
    // stage nest under it.
    let staged = write_file(dir.path(), "staged.py", STAGED);
    let run = command_with_db(
        &db,
        &["run", &staged, "--thread", "staged", "--backend", "fake"],
    )
    .output()
    .unwrap();
    assert_exit(&run, 0);
    let (_, staged) = server.json("/api/threads/staged/events");
    let mut places: Vec<(String, Value)> = staged["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "leaf_started")
        .map(|e| (e["label"].as_str().unwrap().to_owned(), e["path"].clone()))
        .collect();
    places.sort_by(|a, b| a.0.cmp(&b.0));
    let pipe = |index, stage| {
        serde_json::json!({"group": 1, "kind": "pipeline", "index": index, "size": 2,
            "stage": stage})
    };
    let par = |group, index| serde_json::json!({"group": group, "kind": "parallel", "index": index, "size": 2});
    // Each item's review opens a parallel of its own, numbered 2 and 3 in the order the items
    // reach it.
    let inner = |label: &str| {
        let (_, path) = places.iter().find(|(l, _)| l == label).unwrap();
        path[1]["group"].as_u64().unwrap()
    };
    let (a, b) = (inner("check a"), inner("check b"));
    assert_eq!((a.min(b), a.max(b)), (2, 3));
    assert_eq!(
        places,
        [
            ("check a".into(), serde_json::json!([pipe(0, 2), par(a, 0)])),
            ("check b".into(), serde_json::json!([pipe(1, 2), par(b, 0)])),
            ("draft a".into(), serde_json::json!([pipe(0, 1)])),
            ("draft b".into(), serde_json::json!([pipe(1, 1)])),
            ("revise a".into(), serde_json::json!([pipe(0, 3)])),
            ("revise b".into(), serde_json::json!([pipe(1, 3)])),
            ("style a".into(), serde_json::json!([pipe(0, 2), par(a, 1)])),
            ("style b".into(), serde_json::json!([pipe(1, 2), par(b, 1)])),
        ]
    );

    // The web app: its page and files, from the binary, under a policy that runs no other code.
    let (status, head, page) = server.get("/runs/fan");
    assert_eq!(status, 200);
    assert!(head.contains("content-security-policy: default-src 'none'; script-src 'self'"));
    assert!(page.contains("/assets/app.js"));
    for asset in [
        "/assets/app.js",
        "/assets/app.css",
        "/assets/timeline.js",
        "/assets/timeline.css",
        "/",
    ] {
        assert_eq!(server.get(asset).0, 200, "{asset}");
    }
    assert_eq!(server.json("/no/such/page").0, 404);
}

#[test]
fn a_running_thread_streams_live_and_a_killed_one_is_resumable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let fan = write_file(dir.path(), "fan.py", FAN);
    let slow = scripted_backend(dir.path(), "slow.json", SLOW);
    let mut run = command_with_db(&db, &["run", &fan, "--thread", "live", "--backend", &slow])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server::start(&db);
    wait_until(Duration::from_secs(60), "the thread never appeared", || {
        server.json("/api/threads/live").0 == 200
    });
    let (_, thread) = server.json("/api/threads/live");
    assert_eq!(thread["status"], "running", "{thread}");
    // Followed from the start while it runs, to its end.
    let (status, _, body) = server.get("/api/threads/live/stream");
    assert_eq!(status, 200);
    assert!(run.wait().unwrap().success());
    let kinds: Vec<String> = sse(&body).into_iter().map(|(kind, _)| kind).collect();
    let first_done = kinds.iter().position(|k| k == "leaf_finished").unwrap();
    let started: Vec<usize> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| *k == "leaf_started")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(started.len(), 3);
    assert!(started.iter().all(|n| *n < first_done), "{kinds:?}");
    assert_eq!(&kinds[kinds.len() - 2..], ["run_finished", "end"]);

    // A run killed midway: its thread is resumable, with the command that resumes it.
    let mut killed = command_with_db(
        &db,
        &["run", &fan, "--thread", "killed", "--backend", &slow],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    while server.json("/api/threads/killed").1["leaves"] != 0
        || server.json("/api/threads/killed").0 != 200
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    killed.kill().unwrap();
    killed.wait().unwrap();
    let (_, thread) = server.json("/api/threads/killed");
    assert_eq!(thread["status"], "resumable", "{thread}");
    assert_eq!(thread["resume_command"], "flowbox resume killed");
}

#[test]
fn many_clients_of_a_large_thread_leave_the_server_small() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let wide = write_file(dir.path(), "wide.py", WIDE);
    let run = command_with_db(
        &db,
        &["run", &wide, "--thread", "wide", "--max-agents", "20000"],
    )
    .output()
    .unwrap();
    assert_exit(&run, 0);
    let server = Server::start(&db);
    let (_, thread) = server.json("/api/threads/wide");
    assert_eq!(thread["leaves"], 10_000, "{thread}");
    // Every page of the thread at once, 300 clients a round, a few of them following its
    // stream from the start to its end.
    let paths = [
        "/api/threads/wide",
        "/api/threads/wide/events",
        "/api/threads",
        "/api/threads/wide/leaves/5000",
        "/runs/wide",
    ];
    let round = || {
        std::thread::scope(|scope| {
            let clients: Vec<_> = (0..300)
                .map(|n| {
                    let path = if n % 50 == 0 {
                        "/api/threads/wide/stream"
                    } else {
                        paths[n % paths.len()]
                    };
                    let server = &server;
                    scope.spawn(move || (path, server.get(path)))
                })
                .collect();
            for client in clients {
                let (path, (status, _, body)) = client.join().unwrap();
                assert_eq!(status, 200, "{path}: {body}");
            }
        });
    };
    round();
    let first = server.memory();
    round();
    round();
    let last = server.memory();
    // Measured: tens of MiB however many clients, where reading the whole thread for each of
    // them, all waiting on the journal at once, took it past 1.5 GiB in the first round and
    // kept growing.
    if let (Some(first), Some(last)) = (first, last) {
        assert!(last.peak_mib < 200, "{first:?}, then {last:?}");
        assert!(
            last.resident_mib < first.peak_mib + 64,
            "{first:?}, then {last:?}"
        );
    }
}

#[test]
fn serve_refuses_an_address_it_cannot_listen_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let output = command_with_db(&db, &["serve", "--listen", &address])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {address}")),
        "{stderr}"
    );
    let output = command_with_db(&db, &["serve", "--listen", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid socket address"));
}

#[test]
fn serve_listens_on_loopback_port_7878_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let (mut child, line) = spawn_serve(&db, &[]);
    child.kill().unwrap();
    child.wait().unwrap();
    // Served there, or refused because another process on this machine holds that port: either
    // way the address is the default one.
    assert!(
        line.contains("flowbox serve: http://127.0.0.1:7878/ (loopback only)")
            || line.contains("cannot listen on 127.0.0.1:7878"),
        "{line}"
    );
}
