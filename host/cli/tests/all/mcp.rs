//! `flowbox mcp` end to end: the real binary, driven by the official Python MCP SDK (pinned in
//! tests/mcp/requirements.txt, installed by `make mcp-client` into target/mcp-venv), and by
//! raw JSON-RPC lines for what no SDK would send.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use flowbox_testkit::restate::workspace_root;
use serde_json::{Value, json};

use crate::support::{cache_dir, call_log, command_with_db, scripted_backend};

/// Runs one scenario of tests/mcp/client.py against a fresh journal, failing with the
/// client's and the server's output.
fn scenario(name: &str) {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    scenario_in(name, scratch.path(), None);
}

/// Runs a scenario with its scratch directory `scratch`, against `url` when it is given.
fn scenario_in(name: &str, scratch: &Path, url: Option<&str>) {
    let python = workspace_root().join("target/mcp-venv/bin/python");
    assert!(
        python.exists(),
        "the Python MCP client is not installed at {}: run `make mcp-client` (`make test` does)",
        python.display()
    );
    let mut command = Command::new(&python);
    if let Some(url) = url {
        command.env("FLOWBOX_URL", url);
    }
    let output = command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py"))
        .arg(name)
        .env("FLOWBOX_BIN", env!("CARGO_BIN_EXE_flowbox"))
        .env("FLOWBOX_SCRATCH", scratch)
        .env("FLOWBOX_DB", scratch.join("journal.db"))
        .env("FLOWBOX_CACHE_DIR", cache_dir())
        .stdin(Stdio::null())
        .output()
        .expect("the Python client runs");
    let server_stderr = std::fs::read_to_string(scratch.join("server.stderr")).unwrap_or_default();
    assert!(
        output.status.success() && !server_stderr.contains("panicked at"),
        "scenario {name} failed ({}):\n--- client stdout\n{}\n--- client stderr\n{}\n--- server \
         stderr\n{server_stderr}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
}

#[test]
fn initialize_list_tools_run_a_fanout_and_refuse_bad_input() {
    scenario("basics");
}

#[test]
fn a_cancelled_call_leaves_its_thread_resumable_while_other_calls_go_on() {
    scenario("cancel_and_resume");
}

#[test]
fn sampling_leaves_are_answered_by_the_clients_model() {
    scenario("sampling");
}

/// The stateless 2026-07-28 revision: discover, tools and a fan-out run without initialize.
#[test]
fn a_stateless_client_discovers_lists_tools_and_runs_a_fanout() {
    scenario("stateless_basics");
}

/// `--leaves sampling` under 2026-07-28: input-required batches (every waiting leaf's
/// request at once), the replayed continuation, the final result, and bad retries refused.
#[test]
fn stateless_sampling_leaves_come_back_in_input_required_batches() {
    scenario("stateless_sampling");
}

#[test]
fn a_cancelled_stateless_call_leaves_its_thread_resumable() {
    scenario("stateless_cancel");
}

#[test]
fn a_stateless_batch_holds_the_leaves_that_hold_a_concurrency_slot() {
    scenario("stateless_slots");
}

/// The tasks extension: a long fan-out run as a task, polled through `working` (the progress
/// line as its status message) to its structured result; bad task requests refused; the
/// journal answering `tasks/get` for the finished task after a restart.
#[test]
fn a_long_call_runs_as_a_task_polled_to_its_result() {
    scenario("tasks_basics");
}

#[test]
fn a_cancelled_task_leaves_its_thread_resumable() {
    scenario("tasks_cancel");
}

#[test]
fn a_finished_task_expires_after_its_ttl_and_its_thread_stays() {
    scenario("tasks_expiry");
}

/// `--leaves sampling` in a task: each batch is the task's `input_required` status, answered
/// with `tasks/update`.
#[test]
fn sampling_leaves_of_a_task_are_answered_with_tasks_update() {
    scenario("tasks_sampling");
}

#[test]
fn a_resumed_sampling_run_counts_its_replayed_estimates_as_estimates() {
    scenario("sampling_resume");
}

#[test]
fn a_fuel_bomb_ends_in_its_own_error_while_other_calls_complete() {
    scenario("hostile_script");
}

#[test]
fn a_memory_bomb_and_output_floods_end_in_their_own_errors_while_other_calls_complete() {
    scenario("hostile_memory_and_output");
}

/// Over Streamable HTTP (`--listen`, on a free loopback port): several clients at once, a
/// cancelled call resumed from another session.
#[test]
fn streamable_http_serves_several_clients() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let backend_flag = scripted_backend(
        scratch.path(),
        "backend.json",
        json!({"seed": 1, "fallback": "fake", "call_log": scratch.path().join("calls.jsonl"),
               "rules": [{"label": "^first$", "text": "first done", "latency_ms": 0},
                         {"label": "^slow ", "text": "slow done", "latency_ms": 1500}]}),
    );
    serve_http(scratch.path(), &["--backend", &backend_flag], "http");
}

/// `--leaves sampling` over Streamable HTTP: the leaves' sampling requests reach the calling
/// session's callback over its SSE stream, and the run's result is the callback's answers.
#[test]
fn sampling_leaves_over_streamable_http() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    serve_http(scratch.path(), &["--leaves", "sampling"], "http_sampling");
}

/// `flowbox mcp --listen` on a free loopback port with `flags` and its journal at `db`: the
/// process, the rest of its stderr, and its URL (`http://127.0.0.1:PORT/mcp`) once it listens.
fn listening(
    db: &Path,
    flags: &[&str],
) -> (
    std::process::Child,
    BufReader<std::process::ChildStderr>,
    String,
) {
    let mut child = command_with_db(db, &["mcp", "--listen", "127.0.0.1:0"])
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("flowbox mcp --listen starts");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let url = loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("flowbox mcp --listen exited before listening");
        }
        if let Some(url) = line.trim().strip_prefix("flowbox mcp: listening on ") {
            break url.to_owned();
        }
    };
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (child, stderr, url)
}

/// Starts `flowbox mcp --listen` on a free loopback port with `flags`, runs `scenario`
/// against it, and stops it by its pid.
fn serve_http(scratch: &Path, flags: &[&str], scenario: &str) {
    let (mut child, mut stderr, url) = listening(&scratch.join("journal.db"), flags);
    let result = std::panic::catch_unwind(|| scenario_in(scenario, scratch, Some(&url)));
    // Stopped by its pid, whatever the scenario did.
    let _ = child.kill();
    let _ = child.wait();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(!rest.contains("panicked"), "{rest}");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Tasks over Streamable HTTP with `--leaves sampling`: a task one client started is answered
/// with `tasks/update` by another and read back by the first.
#[test]
fn a_task_is_not_tied_to_the_session_that_started_it() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    serve_http(scratch.path(), &["--leaves", "sampling"], "tasks_http");
}

/// 2026-07-28 over Streamable HTTP with `--leaves sampling`: each client's leaves come back to
/// it in input-required batches.
#[test]
fn stateless_clients_over_http_answer_their_own_batches() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    serve_http(scratch.path(), &["--leaves", "sampling"], "stateless_http");
}

/// A client that goes away mid-run without cancelling (its process died): stdin closes, the
/// server cancels the run at once and exits by itself, and the thread resumes from its
/// journal without calling the finished leaf again.
#[test]
fn a_client_that_disconnects_mid_run_leaves_the_thread_resumable() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let calls = scratch.path().join("calls.jsonl");
    let backend_flag = scripted_backend(
        scratch.path(),
        "backend.json",
        json!({"seed": 1, "fallback": "fake", "call_log": calls, "rules": [
            {"label": "^first$", "text": "first done", "latency_ms": 0},
            {"label": "^slow ", "text": "slow done", "latency_ms": 3000}]}),
    );
    let mut server = Server::start(scratch.path(), &["--backend", &backend_flag]);
    server.initialize();
    let script = "first = await agent('first', label='first')\n\
                  rest = await parallel([lambda i=i: agent('slow', label='slow ' + str(i)) for i in range(2)])\n\
                  return [first, rest]";
    server.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "run_workflow", "arguments": {"script": script, "thread_id": "gone-1"},
            "_meta": {"progressToken": "t"}}})
        .to_string()
        .as_bytes(),
    );
    // Progress says the first leaf is done and the slow ones are running.
    loop {
        let message = server.recv();
        assert_eq!(message["method"], "notifications/progress", "{message}");
        let text = message["params"]["message"].as_str().unwrap_or_default();
        if text.starts_with("1/3 leaves · ") {
            break;
        }
    }
    // Had the run not been cancelled, it would have finished before the server exited.
    let stderr = server.close();
    assert!(
        stderr.contains("the client left; 1 running call(s) cancelled"),
        "{stderr}"
    );
    resumes_without_calling_first_again(
        &scratch.path().join("journal.db"),
        "gone-1",
        &backend_flag,
        &calls,
    );
}

/// `thread` (a run of a first leaf and two slow ones, cancelled while the slow ones ran)
/// resumes to its whole result without calling the finished first leaf again.
fn resumes_without_calling_first_again(db: &Path, thread: &str, backend_flag: &str, calls: &Path) {
    let resumed = command_with_db(db, &["resume", thread, "--json", "--backend", backend_flag])
        .output()
        .unwrap();
    let outcome: Value = serde_json::from_slice(&resumed.stdout).expect("one JSON object");
    assert_eq!(
        outcome["result"],
        json!(["first done", ["slow done", "slow done"]]),
        "{outcome}"
    );
    let log = call_log(calls);
    let firsts = log.iter().filter(|call| call["label"] == "first").count();
    assert_eq!(firsts, 1, "{log:?}");
}

/// `flowbox mcp` as a child process spoken to in raw JSON-RPC lines.
struct Server {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Server {
    fn start(scratch: &Path, flags: &[&str]) -> Self {
        let mut child = command_with_db(&scratch.join("journal.db"), &["mcp"])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("flowbox mcp starts");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    fn initialize(&mut self) -> Value {
        self.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}})
            .to_string()
            .as_bytes(),
        );
        let init = self.recv();
        self.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        init
    }

    /// Closes stdin, waits for the server to exit by itself (successfully, without a panic)
    /// and returns its stderr.
    fn close(mut self) -> String {
        drop(self.stdin.take());
        let status = self.child.wait().expect("flowbox mcp exits");
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut self.child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(status.success(), "{status}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        stderr
    }
}

/// Both revisions from one server: `server/discover` lists 2026-07-28 and the handshake
/// revisions; an `initialize` asking for 2026-07-28 (which has no handshake) is offered
/// 2025-11-25, the newest revision that has one.
#[test]
fn discover_offers_2026_07_28_and_initialize_offers_2025_11_25() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let mut server = Server::start(scratch.path(), &[]);
    server.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string()
        .as_bytes(),
    );
    let discovered = server.recv();
    let versions = discovered["result"]["supportedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        versions.contains(&json!("2026-07-28")) && versions.contains(&json!("2025-11-25")),
        "{discovered}"
    );
    assert!(
        discovered["result"]["instructions"]
            .as_str()
            .is_some_and(|text| text.contains("run_workflow")),
        "{discovered}"
    );
    server.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
            "protocolVersion": "2026-07-28", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}})
        .to_string()
        .as_bytes(),
    );
    let init = server.recv();
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    server.close();
}

/// Lines no SDK sends: text that is not JSON, JSON that is not JSON-RPC, invalid UTF-8. The
/// server skips the first and last, answers the second with Invalid Request, and goes on.
#[test]
fn garbage_lines_do_not_end_the_server() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let mut server = Server::start(scratch.path(), &[]);
    server.send(b"this is not json");
    server.send(b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ");
    server.send(&[0xff, 0xfe, b'{', b'}']);
    let init = server.initialize();
    assert_eq!(init["id"], 1, "{init}");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    server.send(br#"{"not": "json-rpc"}"#);
    let refused = server.recv();
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    server.send(b"still not json");
    server.send(br#"{"jsonrpc":"2.0","id":2,"method":"no/such/method"}"#);
    let unknown = server.recv();
    assert_eq!(
        (unknown["id"].clone(), unknown["error"]["code"].clone()),
        (json!(2), json!(-32601)),
        "{unknown}"
    );
    server.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "run_workflow",
            "arguments": {"script": "return [1, 2.5, 12345678901234567890]"}}})
        .to_string()
        .as_bytes(),
    );
    let called = server.recv();
    assert_eq!(called["id"], 3, "{called}");
    // The result's numbers are the script's, to the digit.
    assert_eq!(
        called["result"]["structuredContent"]["result"].to_string(),
        "[1,2.5,12345678901234567890]",
        "{called}"
    );
    server.close();
}

/// A client that stops reading its stdout while a run floods it with log lines and progress
/// never stalls the run (the event stream's gap rule: past its capacity of 4096 events a slow
/// consumer misses events, told so, instead of holding the run). The run finishes in the
/// journal while nothing is read; then what the client reads is consistent (log lines in
/// order, each exact, some perhaps missed; progress growing) and the result exact, and the
/// server goes on. How much is missed depends on the machine's speed, so it is not asserted:
/// a call also stops waiting for its last notifications a second after its run ends.
#[test]
fn a_client_that_does_not_read_never_stalls_the_run() {
    const LINES: usize = 6000;
    const LEAVES: usize = 60;
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let mut server = Server::start(scratch.path(), &[]);
    server.initialize();
    let padding = ".".repeat(50);
    let script = format!(
        "for i in range({LINES}):\n    log('line ' + str(i) + ' {padding}')\n\
         replies = await parallel([lambda i=i: agent('q' + str(i)) for i in range({LEAVES})])\n\
         return {{'lines': {LINES}, 'leaves': len(replies)}}"
    );
    server.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "run_workflow", "arguments": {"script": script, "thread_id": "unread-1"},
            "_meta": {"progressToken": "p"}}})
        .to_string()
        .as_bytes(),
    );
    // More is written than a pipe holds, and nothing is read until the journal says the
    // run is over. The bound only keeps a broken server from hanging the test.
    let mut status = Value::Null;
    for _ in 0..2400 {
        let threads = command_with_db(&scratch.path().join("journal.db"), &["threads", "--json"])
            .output()
            .unwrap();
        let listed: Value = serde_json::from_slice(&threads.stdout).unwrap_or(Value::Null);
        status = listed
            .as_array()
            .and_then(|threads| threads.iter().find(|t| t["thread_id"] == "unread-1"))
            .map(|t| t["status"].clone())
            .unwrap_or(Value::Null);
        if status != "running" && !status.is_null() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(status, "succeeded", "the run did not finish while unread");
    let mut logged = Vec::new();
    let mut progress = Vec::new();
    let answer = loop {
        let message = server.recv();
        match message["method"].as_str() {
            Some("notifications/message") => {
                logged.push(message["params"]["data"].as_str().unwrap().to_owned());
            }
            Some("notifications/progress") => progress.push(message["params"].clone()),
            _ => break message,
        }
    };
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["result"],
        json!({"lines": LINES, "leaves": LEAVES}),
        "{answer}"
    );
    // Log lines in order, each exactly as the script wrote it.
    let mut next = 0;
    for line in &logged {
        let index: usize = line
            .strip_prefix("line ")
            .and_then(|rest| rest.strip_suffix(&format!(" {padding}")))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a line of the script: {line:?}"));
        assert!(index >= next && index < LINES, "{index} after {next}");
        next = index + 1;
    }
    // Progress values grow, and no message counts more leaves than the script has (a gap may
    // have taken a leaf's start and left its end, so done is not bounded by started).
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    for message in progress.iter().map(|p| p["message"].as_str().unwrap()) {
        let counts = message.split(" leaves").next().unwrap();
        let (done, started) = counts.split_once('/').expect("done/started");
        let (done, started): (usize, usize) = (done.parse().unwrap(), started.parse().unwrap());
        assert!(done <= LEAVES && started <= LEAVES, "{message}");
    }
    // The server goes on serving.
    server.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "run_workflow", "arguments": {"script": "return 7"}}})
        .to_string()
        .as_bytes(),
    );
    let after = server.recv();
    assert_eq!(after["result"]["structuredContent"]["result"], 7, "{after}");
    server.close();
}

/// Requests no SDK would send: `tools/call` whose params are not an object, lack the tool's
/// name or are missing, and a known method with params that do not fit, are Invalid params
/// saying what is wrong; an unknown method is Method not found naming the methods there are.
/// None ends the server.
#[test]
fn mistyped_requests_are_invalid_params() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let mut server = Server::start(scratch.path(), &[]);
    server.initialize();
    let requests = [
        (
            json!({"name": "run_workflow", "arguments": "return 1"}),
            "tools/call",
            -32602,
            "expected a map",
        ),
        (json!({"arguments": {}}), "tools/call", -32602, "`name`"),
        (
            Value::Null,
            "tools/call",
            -32602,
            "invalid params for tools/call",
        ),
        (
            json!({"level": "loud"}),
            "logging/setLevel",
            -32602,
            "logging/setLevel",
        ),
        (json!({}), "no/such/method", -32601, "tools/call"),
    ];
    for (id, (params, method, code, says)) in requests.into_iter().enumerate() {
        let mut request = json!({"jsonrpc": "2.0", "id": id + 10, "method": method});
        if !params.is_null() {
            request["params"] = params;
        }
        server.send(request.to_string().as_bytes());
        let answer = server.recv();
        assert_eq!(answer["id"], id + 10, "{answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{method}: {message}");
    }
    server.send(br#"{"jsonrpc":"2.0","id":99,"method":"ping"}"#);
    assert_eq!(server.recv()["id"], 99);
    server.close();
}

/// A client of Streamable HTTP that deletes its session (`DELETE /mcp` with its
/// `Mcp-Session-Id`) mid-run: the session's running call is cancelled as a dropped client's is,
/// the call's stream ends, and the thread resumes from its journal.
#[test]
fn deleting_a_session_cancels_its_running_calls() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let db = scratch.path().join("journal.db");
    let calls = scratch.path().join("calls.jsonl");
    let backend_flag = scripted_backend(
        scratch.path(),
        "backend.json",
        json!({"seed": 1, "fallback": "fake", "call_log": calls, "rules": [
            {"label": "^first$", "text": "first done", "latency_ms": 0},
            {"label": "^slow ", "text": "slow done", "latency_ms": 3000}]}),
    );
    let (mut child, _stderr, url) = listening(&db, &["--backend", &backend_flag]);
    let host = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let post = |session: Option<&str>, body: &Value| {
        let session = session
            .map(|id| format!("Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: 2025-11-25\r\n"))
            .unwrap_or_default();
        let body = body.to_string();
        let mut stream = std::net::TcpStream::connect(&host).unwrap();
        write!(
            stream,
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{session}Connection: close\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        BufReader::new(stream)
    };
    let mut init = post(
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "deleter", "version": "1"}}}),
    );
    let session = std::iter::from_fn(|| {
        let mut line = String::new();
        (init.read_line(&mut line).unwrap() > 0).then_some(line)
    })
    .find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_owned())
    })
    .expect("a session id");
    drop(init);
    drop(post(
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ));
    let script = "first = await agent('first', label='first')\n\
                  rest = await parallel([lambda i=i: agent('slow', label='slow ' + str(i)) for i in range(2)])\n\
                  return [first, rest]";
    let mut call = post(
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "run_workflow", "arguments": {"script": script, "thread_id": "deleted-1"},
            "_meta": {"progressToken": "t"}}}),
    );
    // Progress says the first leaf is done and the slow ones are running.
    let mut line = String::new();
    while !line.contains("1/3 leaves") {
        line.clear();
        assert!(
            call.read_line(&mut line).unwrap() > 0,
            "the call's stream ended early"
        );
    }
    let deleted = crate::support::http::exchange(
        &host,
        &format!(
            "DELETE /mcp HTTP/1.1\r\nHost: {host}\r\nMcp-Session-Id: {session}\r\n\
             MCP-Protocol-Version: 2025-11-25\r\nConnection: close\r\n\r\n"
        ),
    );
    assert!(deleted.status < 300, "{}: {}", deleted.head, deleted.body);
    // The call's stream ends without a result, and the thread is left resumable: had the run
    // gone on, it would have finished (the slow leaves take 3 s) and the thread succeeded.
    let mut rest = String::new();
    let _ = call.read_to_string(&mut rest);
    assert!(!rest.contains("slow done"), "{rest}");
    let status = || {
        let output = command_with_db(&db, &["threads", "--json"])
            .output()
            .unwrap();
        let threads: Value = serde_json::from_slice(&output.stdout).unwrap();
        threads[0]["status"].as_str().unwrap_or_default().to_owned()
    };
    crate::support::wait_until(
        std::time::Duration::from_secs(20),
        "the thread stays running",
        || status() != "running",
    );
    assert_eq!(status(), "resumable");
    let _ = child.kill();
    let _ = child.wait();
    resumes_without_calling_first_again(&db, "deleted-1", &backend_flag, &calls);
}

/// The requests of the stdio tests below: the handshake and a run whose result is exact.
fn handshake_and_a_run() -> String {
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "run_workflow", "arguments": {"script": "return [1, 2.5, 'é']"}}}),
    ]
    .iter()
    .map(|message| format!("{message}\n"))
    .collect()
}

/// The lines read from `output` up to the answer to the run of [`handshake_and_a_run`].
fn read_to_the_run(output: impl Read) -> String {
    let mut reader = BufReader::new(output);
    let mut lines = String::new();
    while !lines.contains("\"id\":2") {
        assert!(reader.read_line(&mut lines).unwrap() > 0, "{lines}");
    }
    lines
}

/// The answer to the run of [`handshake_and_a_run`] among `lines`, checked.
fn assert_ran(lines: &str) {
    let called = lines
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|message| message["id"] == 2)
        .unwrap_or_else(|| panic!("no answer to the call in {lines:?}"));
    assert_eq!(
        called["result"]["structuredContent"]["result"],
        json!([1, 2.5, "é"]),
        "{called}"
    );
}

/// Stdio as clients give it: a socket (what Node's child processes get) for stdin and stdout
/// alike, a pipe that stdout and stderr share (`2>&1`), and a file for stdout. The pipes and
/// sockets the server polls are made non-blocking, a flag their other holders share (here this
/// test's copy of the stdin pipe): it is put back when the session ends.
#[cfg(unix)]
#[test]
fn the_server_talks_over_sockets_shared_pipes_and_files() {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;

    let scratch = tempfile::tempdir().expect("a temporary directory");
    let db = scratch.path().join("journal.db");
    let requests = handshake_and_a_run();

    // A socket pair: the server's stdin and stdout are one end.
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    let kept = theirs.try_clone().unwrap();
    let mut child = command_with_db(&db, &["mcp"])
        .stdin(Stdio::from(OwnedFd::from(theirs.try_clone().unwrap())))
        .stdout(Stdio::from(OwnedFd::from(theirs)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // A server that died would leave this test's copy of its end open: a read never ending.
    ours.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    ours.write_all(requests.as_bytes()).unwrap();
    assert_ran(&read_to_the_run(ours.try_clone().unwrap()));
    #[cfg(target_os = "linux")]
    assert!(non_blocking(&kept), "the server polls its socket");
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(child.wait().unwrap().success());
    #[cfg(target_os = "linux")]
    assert!(!non_blocking(&kept), "the socket was left non-blocking");
    drop(kept);

    // A pipe for stdin, of which this test keeps a copy, and one pipe for stdout and stderr.
    let (stdin_reader, mut stdin_writer) = std::io::pipe().unwrap();
    let kept = stdin_reader.try_clone().unwrap();
    let (output, output_writer) = std::io::pipe().unwrap();
    let mut child = command_with_db(&db, &["mcp"])
        .stdin(stdin_reader)
        .stdout(output_writer.try_clone().unwrap())
        .stderr(output_writer)
        .spawn()
        .unwrap();
    stdin_writer.write_all(requests.as_bytes()).unwrap();
    assert_ran(&read_to_the_run(output));
    #[cfg(target_os = "linux")]
    assert!(non_blocking(&kept), "the server polls its stdin pipe");
    drop(stdin_writer);
    assert!(child.wait().unwrap().success());
    #[cfg(target_os = "linux")]
    assert!(!non_blocking(&kept), "the stdin pipe was left non-blocking");
    drop(kept);

    // A file for stdout (not pollable: written through tokio's stdout).
    let out = scratch.path().join("out.jsonl");
    let mut child = command_with_db(&db, &["mcp"])
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(requests.as_bytes()).unwrap();
    let waited = std::time::Instant::now();
    // Read as bytes: a line being written may end in the middle of a character.
    let written = || String::from_utf8_lossy(&std::fs::read(&out).unwrap()).into_owned();
    while !written().contains("\"id\":2") {
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(60),
            "no answer in the file"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_ran(&written());
}

/// Whether the open file behind `fd` is non-blocking (`O_NONBLOCK` in its flags, which Linux
/// shows in octal in `/proc/self/fdinfo`).
#[cfg(target_os = "linux")]
fn non_blocking(fd: &impl std::os::fd::AsRawFd) -> bool {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).unwrap();
    let flags = info
        .lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .map(|flags| u32::from_str_radix(flags.trim(), 8).unwrap())
        .unwrap();
    flags & 0o4000 != 0
}
