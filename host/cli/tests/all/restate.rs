//! flowbox on Restate end to end: a real `restate-server` (installed by `make restate-setup`),
//! the workflow service and two leaf workers as separate `flowbox worker` processes, the leaf
//! workers behind HAProxy (one HTTP/2 endpoint, as a fleet is deployed), and a scripted backend
//! whose every call lands in a per-worker log; and a worker that serves only the server holding
//! its identity key. Servers bind loopback on free ports, keep their data in temporary
//! directories, and are stopped by pid.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use flowbox_testkit::events::assert_one_run;
use flowbox_testkit::restate::{IdentityKeyPair, RestateServer, free_port, h2c_request};
use serde_json::Value;

use crate::support::otlp::{Receiver, trace_id};
use crate::support::{
    RunToEnd, assert_exit, call_log, command, events_of, finish, flowbox, http, scripted_backend,
    stdout_json, wait_until, write_file,
};

/// One cluster at a time: each test starts its own, and two at once would only compete for
/// the same two cores.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A child process, killed (SIGKILL, by its pid) when dropped.
struct Process {
    child: Child,
    /// Its stderr lines as they come.
    lines: mpsc::Receiver<String>,
    name: String,
}

impl Process {
    fn spawn(name: &str, command: &mut Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {name}: {error}"));
        let stderr = child.stderr.take().expect("piped");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            name: name.to_owned(),
        }
    }

    /// Waits for a stderr line starting with `prefix`; returns the rest of it.
    fn wait_for(&self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.to_owned();
                    }
                    seen.push(line);
                }
                Err(_) => break,
            }
        }
        panic!(
            "{} never printed {prefix:?}; it printed:\n{}",
            self.name,
            seen.join("\n")
        );
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Rows of the admin API's SQL introspection (what `docs/restate.md` tells to read threads with).
fn query(server: &RestateServer, sql: &str) -> Vec<Value> {
    let answer = http::post_json(
        &format!("{}/query", server.admin),
        &serde_json::json!({ "query": sql }),
    );
    answer["rows"].as_array().cloned().unwrap_or_default()
}

/// The `--backend` of one worker: the same canned rules, its own call log.
fn backend(dir: &Path, name: &str, latency_ms: u64) -> String {
    let config = serde_json::json!({
        "seed": 3,
        "latency_ms": latency_ms,
        "jitter_ms": latency_ms,
        "fallback": "fake",
        "call_log": format!("{name}.calls.jsonl"),
        "rules": [
            {"label": "^review ", "text": "{label}: fine", "tokens": {"input": 40, "output": 6}},
            {"label": "^step ", "text": "{label} done", "tokens": {"input": 10, "output": 2}},
            {"label": "^broken$", "error": "the provider refused", "retryable": false},
            {"label": "^flaky$", "error": "the provider is overloaded", "retryable": true}
        ]
    });
    scripted_backend(dir, &format!("{name}.backend.json"), config)
}

/// The calls a worker's backend logged (by label).
fn logged(dir: &Path, name: &str) -> Vec<String> {
    call_log(&dir.join(format!("{name}.calls.jsonl")))
        .iter()
        .map(|call| call["label"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// Starts a worker serving `services`, with `extra` arguments (`--advertise`,
/// `--identity-key`); returns it once registered.
fn worker(
    server: &RestateServer,
    dir: &Path,
    name: &str,
    services: &str,
    listen: &str,
    extra: &[&str],
    latency_ms: u64,
) -> Process {
    let backend = backend(dir, name, latency_ms);
    let mut command = command(&[
        "worker",
        "--listen",
        listen,
        "--services",
        services,
        "--backend",
        &backend,
        "--register",
        &server.admin,
    ]);
    command.args(extra);
    let process = Process::spawn(name, &mut command);
    process.wait_for("listening on ");
    process.wait_for("registered ");
    process
}

/// HAProxy in front of the leaf workers at `servers`: one h2c endpoint, round robin per
/// request, a dead worker taken out by its health check.
fn haproxy(dir: &Path, port: u16, servers: &[u16]) -> Process {
    let config = dir.join("haproxy.cfg");
    let mut text = format!(
        "global\n  maxconn 2000\ndefaults\n  mode http\n  timeout connect 1s\n  \
         timeout client 10m\n  timeout server 10m\n  retries 3\n  option redispatch\n\
         frontend leaves\n  bind 127.0.0.1:{port} proto h2\n  default_backend workers\n\
         backend workers\n  balance roundrobin\n"
    );
    for (n, server) in servers.iter().enumerate() {
        text.push_str(&format!(
            "  server w{n} 127.0.0.1:{server} proto h2 check inter 200ms fall 1 rise 1\n"
        ));
    }
    std::fs::write(&config, text).unwrap();
    let process = Process::spawn(
        "haproxy",
        Command::new("haproxy").args(["-db", "-f"]).arg(&config),
    );
    wait_until(Duration::from_secs(10), "HAProxy never listened", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    process
}

/// A server, a workflow worker and two leaf workers behind HAProxy.
struct Cluster {
    dir: tempfile::TempDir,
    server: RestateServer,
    workflow: Option<Process>,
    leaves: Vec<Option<Process>>,
    /// The workflow worker's port: a restarted worker must come back at the address its
    /// deployment was registered with.
    workflow_port: u16,
    _proxy: Process,
    latency_ms: u64,
    /// The workflow worker's flags beyond the cluster's (`--otlp-endpoint`).
    workflow_flags: Vec<String>,
}

impl Cluster {
    fn start(latency_ms: u64) -> Self {
        Self::start_with(latency_ms, &[])
    }

    /// A cluster whose workflow worker also gets `workflow_flags`.
    fn start_with(latency_ms: u64, workflow_flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = RestateServer::start(dir.path());
        let leaf_ports = [free_port(), free_port()];
        let proxy_port = free_port();
        let proxy = haproxy(dir.path(), proxy_port, &leaf_ports);
        let advertise = format!("http://127.0.0.1:{proxy_port}");
        let leaves = leaf_ports
            .iter()
            .enumerate()
            .map(|(n, port)| {
                Some(worker(
                    &server,
                    dir.path(),
                    &format!("leaf{n}"),
                    "leaf",
                    &format!("127.0.0.1:{port}"),
                    &["--advertise", &advertise],
                    latency_ms,
                ))
            })
            .collect();
        let mut cluster = Self {
            dir,
            server,
            workflow: None,
            leaves,
            workflow_port: free_port(),
            _proxy: proxy,
            latency_ms,
            workflow_flags: workflow_flags.iter().map(|f| f.to_string()).collect(),
        };
        cluster.start_workflow();
        cluster
    }

    fn start_workflow(&mut self) {
        let flags: Vec<&str> = self.workflow_flags.iter().map(String::as_str).collect();
        self.workflow = Some(worker(
            &self.server,
            self.dir.path(),
            "workflow",
            "workflow",
            &format!("127.0.0.1:{}", self.workflow_port),
            &flags,
            self.latency_ms,
        ));
    }

    fn script(&self, name: &str, text: &str) -> PathBuf {
        write_file(&self.dir, name, text).into()
    }

    /// `flowbox run SCRIPT --restate INGRESS --json` with `extra` arguments.
    fn run(&self, script: &Path, extra: &[&str]) -> Command {
        let mut command = command(&["run"]);
        command
            .arg(script)
            .args(["--restate", &self.server.ingress, "--json"])
            .args(extra);
        command
    }

    /// All leaf calls the backends logged, with the worker that made each.
    fn leaf_calls(&self) -> Vec<(usize, String)> {
        (0..self.leaves.len())
            .flat_map(|n| {
                logged(self.dir.path(), &format!("leaf{n}"))
                    .into_iter()
                    .map(move |label| (n, label))
            })
            .collect()
    }
}

/// The summary's fields that must match between engines (not durations).
fn comparable(outcome: &Value) -> Value {
    let mut outcome = outcome.clone();
    let summary = outcome["summary"].as_object_mut().expect("a summary");
    summary.remove("duration_ms");
    summary.remove("thread_id");
    outcome
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

const FANOUT: &str = r#"
meta = {"name": "fanout", "description": "review twelve parts", "phases": [{"title": "review"}]}

async def main():
    phase("review")
    reviews = await parallel([
        lambda i=i: agent(f"Review part {i}", label=f"review {i}") for i in range(12)
    ])
    log(f"{len(reviews)} reviews")
    return {"reviews": reviews, "big": 123456789012345678901234567890, "x": 0.1}
"#;

const SEQUENTIAL: &str = r#"
import random
import time

notes = []
for i in range(6):
    notes.append(await agent(f"Do step {i} after {notes[-1:] }", label=f"step {i}"))
return {"notes": notes, "random": random.random(), "now": int(time.time()) > 0}
"#;

#[test]
fn scripts_give_the_local_result_and_both_leaf_workers_serve() {
    let _one = one_at_a_time();
    let cluster = Cluster::start(5);
    let backend = backend(cluster.dir.path(), "local", 5);
    for (name, text) in [("fanout.py", FANOUT), ("sequential.py", SEQUENTIAL)] {
        let script = cluster.script(name, text);
        let thread = format!("t-{}", name.replace('.', "-"));
        let remote_events = cluster.dir.path().join(format!("{name}.remote.jsonl"));
        let local_events = cluster.dir.path().join(format!("{name}.local.jsonl"));
        let remote = cluster
            .run(
                &script,
                &[
                    "--thread",
                    &thread,
                    "--events",
                    remote_events.to_str().unwrap(),
                ],
            )
            .run_to_end();
        assert_exit(&remote, 0);
        // Under the same thread id, which seeds the guest's randomness.
        let local = command(&["run"])
            .arg(&script)
            .args(["--json", "--thread", &thread, "--events"])
            .arg(&local_events)
            .args(["--backend", &backend])
            .env("FLOWBOX_DB", cluster.dir.path().join("local.db"))
            .run_to_end();
        assert!(local.status.success());
        let (mut remote, mut local) = (stdout_json(&remote), stdout_json(&local));
        if name == "fanout.py" {
            // Completions of a fan-out arrive in batches that depend on timing, locally as on
            // Restate, and the guest's fuel depends on the batches.
            for outcome in [&mut remote, &mut local] {
                outcome["summary"]
                    .as_object_mut()
                    .unwrap()
                    .remove("fuel_used");
            }
        }
        assert_eq!(comparable(&remote), comparable(&local), "{name}");
        assert_eq!(remote["summary"]["thread_id"], thread.as_str());
        // The worker published the run's events; the CLI wrote them as a local run does.
        let leaves = if name == "fanout.py" { 12 } else { 6 };
        let (remote_events, local_events) = (events_of(&remote_events), events_of(&local_events));
        assert_eq!(
            assert_one_run(&remote_events, &thread, Some(leaves)),
            assert_one_run(&local_events, &thread, Some(leaves)),
            "{name}"
        );
        let last = remote_events.last().unwrap();
        assert_eq!(last["summary"]["leaves"], leaves);
        assert_eq!(last["ok"], true);
    }
    // Exact JSON numbers and key order came through Restate unchanged.
    let calls = cluster.leaf_calls();
    assert_eq!(calls.len(), 12 + 6, "{calls:?}");
    for n in 0..2 {
        assert!(
            calls.iter().any(|(worker, _)| *worker == n),
            "leaf worker {n} served no leaf: {calls:?}"
        );
    }
}

fn spawn(command: &mut Command) -> Child {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("flowbox starts")
}

/// Waits until the leaf workers logged at least `n` calls.
fn wait_for_calls(cluster: &Cluster, n: usize) {
    wait_until(Duration::from_secs(60), "the leaves never started", || {
        cluster.leaf_calls().len() >= n
    });
}

const LEAF_FAILURES: &str = r#"
caught = {}
for label in ["broken", "flaky"]:
    try:
        await agent("Do it", label=label)
    except AgentError as error:
        caught[label] = [type(error).__name__, str(error), error.retryable]
return caught
"#;

#[test]
fn hostile_scripts_end_in_their_limit_errors_and_good_runs_beside_them_complete() {
    let _one = one_at_a_time();
    let cluster = Cluster::start(20);
    let fuel = cluster.script("fuel.py", "n = 0\nwhile True:\n    n += 1\nreturn n\n");
    let memory = cluster.script(
        "memory.py",
        "hoard = []\nwhile True:\n    hoard.append('x' * (1 << 20))\nreturn len(hoard)\n",
    );
    let good = cluster.script("good.py", SEQUENTIAL);
    let failing = cluster.script("failing.py", LEAF_FAILURES);
    let children = [
        spawn(&mut cluster.run(&fuel, &["--thread", "fuel-bomb", "--fuel", "2000000000"])),
        spawn(&mut cluster.run(&memory, &["--thread", "memory-bomb", "--memory-mib", "64"])),
        spawn(&mut cluster.run(&good, &["--thread", "good-1"])),
        spawn(&mut cluster.run(&good, &["--thread", "good-2"])),
        spawn(&mut cluster.run(&failing, &["--thread", "failing-leaves"])),
    ];
    let [fuel, memory, good1, good2, failing] = children.map(finish);
    assert_exit(&fuel, 3);
    assert_eq!(stdout_json(&fuel)["error"]["kind"], "out_of_fuel");
    assert_exit(&memory, 3);
    assert_eq!(stdout_json(&memory)["error"]["kind"], "out_of_memory");
    for good in [good1, good2] {
        assert_exit(&good, 0);
        assert_eq!(stdout_json(&good)["summary"]["leaves"], 6);
    }
    // Failing leaves reach the script as `AgentError`: a refusal at once, a retryable failure
    // after the leaf's bounded attempts.
    assert_exit(&failing, 0);
    let caught = &stdout_json(&failing)["result"];
    assert_eq!(caught["broken"][0], "AgentError");
    assert!(
        caught["broken"][1]
            .as_str()
            .unwrap()
            .contains("the provider refused"),
        "{caught}"
    );
    assert_eq!(caught["broken"][2], false);
    assert_eq!(caught["flaky"][0], "AgentError");
    assert!(
        caught["flaky"][1]
            .as_str()
            .unwrap()
            .contains("failed 3 times"),
        "{caught}"
    );
    let calls = cluster.leaf_calls();
    let tries = |label: &str| calls.iter().filter(|(_, l)| l == label).count();
    assert_eq!((tries("broken"), tries("flaky")), (1, 3), "{calls:?}");
    // A breached limit is the thread's outcome, not a failure to retry: attaching again gets
    // the same error at once.
    let again = flowbox(&[
        "attach",
        "fuel-bomb",
        "--json",
        "--restate",
        &cluster.server.ingress,
    ]);
    assert_eq!(again.status.code(), Some(3));
    assert_eq!(stdout_json(&again)["error"]["kind"], "out_of_fuel");
}

#[test]
fn a_changed_script_diverges_and_attach_gets_the_outcome_of_a_killed_submitter() {
    let _one = one_at_a_time();
    let cluster = Cluster::start(150);
    let script = cluster.script("sequential.py", SEQUENTIAL);
    // The submitting CLI dies mid-run; the run goes on without it.
    let mut submitter = spawn(&mut cluster.run(&script, &["--thread", "orphan"]));
    wait_for_calls(&cluster, 2);
    submitter.kill().unwrap();
    submitter.wait().unwrap();
    let attached = flowbox(&[
        "attach",
        "orphan",
        "--json",
        "--restate",
        &cluster.server.ingress,
    ]);
    assert_exit(&attached, 0);
    let outcome = stdout_json(&attached);
    assert_eq!(outcome["summary"]["leaves"], 6);
    assert_eq!(outcome["result"]["notes"][5], "step 5 done");
    // Text output too, as a local run prints it.
    let text = flowbox(&["attach", "orphan", "--restate", &cluster.server.ingress]);
    assert!(text.status.success());
    let printed: Value = serde_json::from_slice(&text.stdout).unwrap();
    assert_eq!(printed, outcome["result"]);
    // The same script on the thread gets the recorded outcome; another one is a divergence.
    let same = cluster.run(&script, &["--thread", "orphan"]).run_to_end();
    assert_eq!(stdout_json(&same), outcome);
    let changed = cluster.script("changed.py", &SEQUENTIAL.replace("range(6)", "range(7)"));
    let diverged = cluster.run(&changed, &["--thread", "orphan"]).run_to_end();
    assert_eq!(diverged.status.code(), Some(1));
    assert_eq!(stdout_json(&diverged)["error"]["kind"], "divergence");
    // A thread Restate never saw, and a bad URL, are clear errors.
    let unknown = flowbox(&[
        "attach",
        "never-ran",
        "--json",
        "--restate",
        &cluster.server.ingress,
    ]);
    assert_eq!(unknown.status.code(), Some(2));
    assert_eq!(stdout_json(&unknown)["error"]["kind"], "unknown_thread");
    let bad = flowbox(&["attach", "orphan", "--restate", "ftp://x"]);
    assert_eq!(bad.status.code(), Some(2));
    // `--events -` cannot share stdout with `--json`; a file it cannot create is named.
    let clash = cluster
        .run(&script, &["--thread", "clash", "--events", "-"])
        .run_to_end();
    assert_eq!(clash.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&clash.stdout).contains("--events"));
    let missing = cluster.dir.path().join("missing").join("events.jsonl");
    let nowhere = cluster
        .run(
            &script,
            &["--thread", "nowhere", "--events", missing.to_str().unwrap()],
        )
        .run_to_end();
    assert_eq!(nowhere.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&nowhere.stdout).contains("cannot write events"));
}

/// Asserts every step ran to completion and at most `repeats` leaves were called twice.
fn assert_paid_once(cluster: &Cluster, labels: usize, repeats: usize) {
    let calls = cluster.leaf_calls();
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for (_, label) in &calls {
        *seen.entry(label.clone()).or_default() += 1;
    }
    assert_eq!(seen.len(), labels, "{calls:?}");
    let twice: usize = seen.values().map(|n| n - 1).sum();
    assert!(
        twice <= repeats,
        "{twice} leaves were paid again: {calls:?}"
    );
}

#[test]
fn a_killed_workflow_worker_resumes_without_calling_journaled_leaves_again() {
    let _one = one_at_a_time();
    // The workflow workers export traces: the run's spans from both join one trace.
    let collector = Receiver::start(&[]);
    let mut cluster = Cluster::start_with(150, &["--otlp-endpoint", &collector.url]);
    let trace = trace_id("kill-workflow");
    let script = cluster.script("sequential.py", SEQUENTIAL);
    let events = cluster.dir.path().join("kill-workflow.jsonl");
    let submitter = spawn(&mut cluster.run(
        &script,
        &[
            "--thread",
            "kill-workflow",
            "--events",
            events.to_str().unwrap(),
        ],
    ));
    wait_for_calls(&cluster, 3);
    // Once the first worker has exported a leaf's span.
    let of_first = || {
        collector
            .spans()
            .into_iter()
            .filter(|span| span["trace_id"] == trace)
            .collect::<Vec<_>>()
    };
    wait_until(
        Duration::from_secs(30),
        "a span from the first worker",
        || !of_first().is_empty(),
    );
    let first = of_first();
    cluster.workflow.as_mut().expect("running").kill9();
    cluster.start_workflow();
    let done = finish(submitter);
    assert_exit(&done, 0);
    assert_eq!(stdout_json(&done)["summary"]["leaves"], 6);
    let spans = collector.trace(&trace, "run_workflow");
    let roots: Vec<&Value> = spans.iter().filter(|s| s["parent_span_id"] == "").collect();
    assert_eq!(
        roots.len(),
        1,
        "the second worker's run ended; the first's never did"
    );
    assert_eq!(roots[0]["attributes"]["flowbox.leaves"], 6);
    let under_root = spans
        .iter()
        .filter(|s| s["parent_span_id"] == roots[0]["span_id"])
        .count();
    assert_eq!(under_root, 6, "the second worker's six leaves: {spans:#?}");
    for span in &first {
        assert!(
            spans.contains(span),
            "the first worker's spans are in the same trace"
        );
        assert_ne!(
            span["parent_span_id"], roots[0]["span_id"],
            "under its own run"
        );
    }
    // At most the leaf in flight at the kill ran again.
    assert_paid_once(&cluster, 6, 1);
    // The replayed attempt published none of the events the first one had: the sequence is
    // one run's, as a local run's.
    let events = events_of(&events);
    assert_one_run(&events, "kill-workflow", Some(6));
    let mut expected = vec!["run_started"];
    expected.extend(["leaf_started", "leaf_finished"].repeat(6));
    expected.push("run_finished");
    assert_eq!(kinds(&events), expected);
    // `attach` writes the same events, from the workflow's state.
    let again = cluster.dir.path().join("attach.jsonl");
    let attached = flowbox(&[
        "attach",
        "kill-workflow",
        "--json",
        "--restate",
        &cluster.server.ingress,
        "--events",
        again.to_str().unwrap(),
    ]);
    assert!(attached.status.success());
    assert_eq!(events_of(&again), events);
}

const FANOUT_THEN_STEPS: &str = r#"
reviews = await parallel([lambda i=i: agent(f"Review part {i}", label=f"review {i}") for i in range(8)])
notes = []
for i in range(4):
    notes.append(await agent(f"Do step {i}", label=f"step {i}"))
return {"reviews": reviews, "notes": notes}
"#;

#[test]
fn a_workflow_worker_killed_after_a_fan_out_replays_its_batches_from_the_journal() {
    let _one = one_at_a_time();
    let mut cluster = Cluster::start(100);
    let script = cluster.script("fanout-steps.py", FANOUT_THEN_STEPS);
    let events = cluster.dir.path().join("kill-after-fanout.jsonl");
    let submitter = spawn(&mut cluster.run(
        &script,
        &[
            "--thread",
            "kill-after-fanout",
            "--events",
            events.to_str().unwrap(),
        ],
    ));
    wait_for_calls(&cluster, 8 + 2);
    cluster.workflow.as_mut().expect("running").kill9();
    cluster.start_workflow();
    let done = finish(submitter);
    assert_exit(&done, 0);
    let outcome = stdout_json(&done);
    assert_eq!(outcome["summary"]["leaves"], 12);
    assert_eq!(outcome["result"]["reviews"][7], "review 7: fine");
    assert_eq!(outcome["result"]["notes"][3], "step 3 done");
    // The fan-out's completions, in the batches the first attempt received them, came from the
    // journal: none of its leaves ran again, and at most the step in flight did.
    let calls = cluster.leaf_calls();
    for i in 0..8 {
        let label = format!("review {i}");
        assert_eq!(
            calls.iter().filter(|(_, l)| *l == label).count(),
            1,
            "{label}: {calls:?}"
        );
    }
    assert_paid_once(&cluster, 12, 1);
    assert_one_run(&events_of(&events), "kill-after-fanout", Some(12));
    // The queries of `docs/restate.md` find the thread and its journal, batches included.
    let threads = query(
        &cluster.server,
        "SELECT id, target, status, created_at FROM sys_invocation \
         WHERE target_service_name = 'FlowboxWorkflow' AND target_handler_name = 'run'",
    );
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_eq!(
        threads[0]["target"],
        "FlowboxWorkflow/kill-after-fanout/run"
    );
    assert_eq!(threads[0]["status"], "completed");
    let id = threads[0]["id"].as_str().unwrap();
    let journal = query(
        &cluster.server,
        &format!("SELECT index, entry_type, name FROM sys_journal WHERE id = '{id}'"),
    );
    let named = |name: &str| journal.iter().filter(|e| e["name"] == name).count();
    assert_eq!(named("start"), 1, "{journal:?}");
    assert!(named("batch") >= 1, "{journal:?}");
}

#[test]
fn a_killed_server_restarts_on_its_data_and_only_the_leaf_in_flight_repeats() {
    let _one = one_at_a_time();
    let mut cluster = Cluster::start(150);
    let script = cluster.script("sequential.py", SEQUENTIAL);
    let submitter = spawn(&mut cluster.run(&script, &["--thread", "kill-server"]));
    wait_for_calls(&cluster, 3);
    cluster.server.kill9();
    cluster.server.restart();
    let done = finish(submitter);
    assert_exit(&done, 0);
    assert_eq!(stdout_json(&done)["result"]["notes"][5], "step 5 done");
    // Every journaled leaf came from the journal. The one in flight at the kill had called its
    // provider without its answer reaching the journal, so its retry calls again (with the same
    // idempotency key, which the HTTP providers send as `Idempotency-Key`).
    assert_paid_once(&cluster, 6, 1);
}

#[test]
fn a_killed_leaf_worker_s_leaves_run_elsewhere_and_the_run_completes() {
    let _one = one_at_a_time();
    let mut cluster = Cluster::start(400);
    let script = cluster.script("fanout.py", FANOUT);
    let submitter = spawn(&mut cluster.run(&script, &["--thread", "kill-leaf"]));
    wait_for_calls(&cluster, 8);
    let in_flight_at_kill = logged(cluster.dir.path(), "leaf0").len();
    cluster.leaves[0].as_mut().expect("running").kill9();
    let done = finish(submitter);
    assert_exit(&done, 0);
    let outcome = stdout_json(&done);
    assert_eq!(outcome["summary"]["leaves"], 12);
    assert_eq!(outcome["result"]["reviews"][11], "review 11: fine");
    assert!(in_flight_at_kill > 0);
    // The killed worker's leaves were answered by the other one.
    assert_paid_once(&cluster, 12, in_flight_at_kill);
}

#[test]
fn a_workflow_that_keeps_failing_ends_with_a_machinery_error_after_bounded_attempts() {
    let _one = one_at_a_time();
    let mut cluster = Cluster::start(150);
    let script = cluster.script("sequential.py", SEQUENTIAL);
    let submitter = spawn(&mut cluster.run(&script, &["--thread", "no-worker"]));
    wait_for_calls(&cluster, 2);
    // The workflow's deployment never answers again: every attempt fails, and Restate stops.
    cluster.workflow.as_mut().expect("running").kill9();
    let started = Instant::now();
    let done = finish(submitter);
    let outcome = stdout_json(&done);
    assert_eq!(done.status.code(), Some(1), "{outcome}");
    assert_eq!(outcome["error"]["kind"], "restate", "{outcome}");
    let message = outcome["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the run of thread no-worker failed on Restate"),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// The discovery manifest's content type Restate 1.7 asks for (the services' retry policies
/// need version 4).
const MANIFEST_V4: &str = "application/vnd.restate.endpointmanifest.v4+json";

/// Headers for a request to a worker: `extra`, then `signature` (none: unsigned).
fn headers(extra: &[(&str, &str)], signature: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut headers: Vec<_> = extra
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    headers.extend(signature);
    headers
}

/// Asserts that `address` refused `method path` for its identity: a 401 before anything ran.
#[track_caller]
fn assert_refused(address: &str, method: &str, path: &str, headers: &[(String, String)]) {
    let answer = h2c_request(address, method, path, headers, b"");
    assert_eq!(answer.status, 401, "{method} {path}: {answer:?}");
    assert_eq!(answer.content_type, "text/plain", "{answer:?}");
    assert!(
        answer.body.starts_with("Error when verifying identity"),
        "{method} {path}: {answer:?}"
    );
}

const SIGNED_REVIEWS: &str = r#"
reviews = await parallel([lambda i=i: agent(f"Review part {i}", label=f"review {i}") for i in range(3)])
return {"reviews": reviews}
"#;

#[test]
fn a_worker_serves_the_server_holding_its_identity_key_and_refuses_unsigned_requests() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let identity = IdentityKeyPair::generate();
    let server = RestateServer::start_signing(dir.path(), &identity);
    let address = format!("127.0.0.1:{}", free_port());
    // Registering it is the server's signed discovery request.
    let _worker = worker(
        &server,
        dir.path(),
        "signed",
        "all",
        &address,
        &["--identity-key", &identity.public],
        0,
    );
    // Straight to the worker, past the server: unsigned, or signed with another key, nothing is
    // served — not a leaf (the backend's log below has none of it), not a workflow start, not
    // even the worker's manifest or its health.
    let invocation = [("content-type", "application/vnd.restate.invocation.v5")];
    let leaf = "/invoke/FlowboxLeaf/call";
    assert_refused(&address, "POST", leaf, &headers(&invocation, vec![]));
    let workflow = "/invoke/FlowboxWorkflow/run";
    assert_refused(&address, "POST", workflow, &headers(&invocation, vec![]));
    let discover = [("accept", MANIFEST_V4)];
    assert_refused(&address, "GET", "/discover", &headers(&discover, vec![]));
    assert_refused(&address, "GET", "/health", &[]);
    let stranger = IdentityKeyPair::generate();
    assert_refused(
        &address,
        "POST",
        leaf,
        &headers(&invocation, stranger.sign(leaf)),
    );
    assert_refused(
        &address,
        "GET",
        "/discover",
        &headers(&discover, stranger.sign("/discover")),
    );
    // The same request signed with the server's key is served: the stranger lacked the key.
    let manifest = h2c_request(
        &address,
        "GET",
        "/discover",
        &headers(&discover, identity.sign("/discover")),
        b"",
    );
    assert_eq!(manifest.status, 200, "{manifest:?}");
    assert!(manifest.body.contains("FlowboxLeaf"), "{manifest:?}");
    // Through the server, a workflow and its leaves run end to end.
    let script = write_file(&dir, "reviews.py", SIGNED_REVIEWS);
    let run = command(&["run", &script, "--restate", &server.ingress, "--json"])
        .args(["--thread", "signed-1"])
        .run_to_end();
    assert_exit(&run, 0);
    assert_eq!(
        stdout_json(&run)["result"]["reviews"],
        serde_json::json!(["review 0: fine", "review 1: fine", "review 2: fine"])
    );
    // The backend answered the run's three leaves and nothing else.
    let mut calls = logged(dir.path(), "signed");
    calls.sort();
    assert_eq!(calls, ["review 0", "review 1", "review 2"]);
}

#[test]
fn a_worker_beyond_loopback_needs_an_identity_key_or_insecure() {
    // No key, not on loopback: refused before anything starts, saying what to pass.
    let refused = flowbox(&["worker", "--listen", "0.0.0.0:0", "--backend", "fake"]);
    assert_exit(&refused, 2);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("refusing to serve 0.0.0.0:0 without --identity-key")
            && stderr.contains("--insecure"),
        "{stderr}"
    );
    let worker = |extra: &[&str], keys: Option<&str>| {
        let mut command = command(&["worker", "--listen", "0.0.0.0:0", "--backend", "fake"]);
        command.args(["--warm-pool", "0"]).args(extra);
        if let Some(keys) = keys {
            command.env("FLOWBOX_IDENTITY_KEYS", keys);
        }
        let process = Process::spawn("worker", &mut command);
        // Whether it warned before it listened, and the port it took (reached on loopback).
        let mut line = process.wait_for("");
        let warned = line.starts_with("warning: serving unsigned requests on 0.0.0.0:");
        if warned {
            line = process.wait_for("");
        }
        let port = line
            .strip_prefix("listening on 0.0.0.0:")
            .and_then(|port| port.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("not where it listens: {line}"));
        (process, warned, format!("127.0.0.1:{port}"))
    };
    let discover = [("accept", MANIFEST_V4)];
    // `--insecure`: it starts, warns, and serves whoever asks.
    let (_insecure, warned, address) = worker(&["--insecure"], None);
    assert!(warned);
    let manifest = h2c_request(
        &address,
        "GET",
        "/discover",
        &headers(&discover, vec![]),
        b"",
    );
    assert_eq!(manifest.status, 200, "{manifest:?}");
    // Keys (here two, from the environment): it starts with no warning and serves either.
    let (one, two) = (IdentityKeyPair::generate(), IdentityKeyPair::generate());
    let keys = format!("{}, {}", one.public, two.public);
    let (_keyed, warned, address) = worker(&[], Some(&keys));
    assert!(!warned);
    assert_refused(&address, "GET", "/discover", &headers(&discover, vec![]));
    for key in [&one, &two] {
        let manifest = h2c_request(
            &address,
            "GET",
            "/discover",
            &headers(&discover, key.sign("/discover")),
            b"",
        );
        assert_eq!(manifest.status, 200, "{manifest:?}");
    }
}

#[test]
fn a_malformed_identity_key_is_a_usage_error_naming_the_flag() {
    let key = IdentityKeyPair::generate().public;
    let short = &key[..key.len() - 2];
    for bad in ["nonsense", "publickeyv1_0OIl", short, &format!("{key},")] {
        let refused = flowbox(&[
            "worker",
            "--listen",
            "127.0.0.1:0",
            "--backend",
            "fake",
            "--identity-key",
            bad,
        ]);
        assert_exit(&refused, 2);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            stderr.contains("for '--identity-key <KEY>'")
                && stderr.contains("not a Restate request-identity public key"),
            "{bad}: {stderr}"
        );
    }
    let from_env = command(&["worker", "--listen", "127.0.0.1:0", "--backend", "fake"])
        .env("FLOWBOX_IDENTITY_KEYS", "nonsense")
        .run_to_end();
    assert_exit(&from_env, 2);
    assert!(String::from_utf8_lossy(&from_env.stderr).contains("--identity-key"));
}
