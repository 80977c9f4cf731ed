//! `flowbox mcp` end to end: the real binary, driven by the official Python MCP SDK (pinned in
//! tests/mcp/requirements.txt, installed by `make mcp-client` into target/mcp-venv), and by
//! raw JSON-RPC lines for what no SDK would send.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs one scenario of tests/mcp/client.py against a fresh journal, failing with the
/// client's and the server's output.
fn scenario(name: &str) {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    scenario_in(name, scratch.path(), None);
}

/// Runs a scenario with its scratch directory `scratch`, against `url` when it is given.
fn scenario_in(name: &str, scratch: &Path, url: Option<&str>) {
    let python = root().join("target/mcp-venv/bin/python");
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
        .env("FLOWBOX_CACHE_DIR", root().join("target/flowbox-cache"))
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

#[test]
fn a_fuel_bomb_ends_in_its_own_error_while_other_calls_complete() {
    scenario("hostile_script");
}

/// Over Streamable HTTP (`--listen`, on a free loopback port): several clients at once, a
/// cancelled call resumed from another session.
#[test]
fn streamable_http_serves_several_clients() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let backend = scratch.path().join("backend.json");
    std::fs::write(
        &backend,
        json!({"seed": 1, "fallback": "fake", "call_log": scratch.path().join("calls.jsonl"),
               "rules": [{"label": "^first$", "text": "first done", "latency_ms": 0},
                         {"label": "^slow ", "text": "slow done", "latency_ms": 1500}]})
        .to_string(),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowbox"))
        .args(["mcp", "--listen", "127.0.0.1:0", "--backend"])
        .arg(format!("scripted:{}", backend.display()))
        .env("FLOWBOX_DB", scratch.path().join("journal.db"))
        .env("FLOWBOX_CACHE_DIR", root().join("target/flowbox-cache"))
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
    let result = std::panic::catch_unwind(|| scenario_in("http", scratch.path(), Some(&url)));
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

/// 2026-07-28 over Streamable HTTP with `--leaves sampling`: each client's leaves come back to
/// it in input-required batches.
#[test]
fn stateless_clients_over_http_answer_their_own_batches() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowbox"))
        .args(["mcp", "--listen", "127.0.0.1:0", "--leaves", "sampling"])
        .env("FLOWBOX_DB", scratch.path().join("journal.db"))
        .env("FLOWBOX_CACHE_DIR", root().join("target/flowbox-cache"))
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
    let result =
        std::panic::catch_unwind(|| scenario_in("stateless_http", scratch.path(), Some(&url)));
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

/// A client that goes away mid-run without cancelling (its process died): stdin closes, the
/// server cancels the run at once and exits by itself, and the thread resumes from its
/// journal without calling the finished leaf again.
#[test]
fn a_client_that_disconnects_mid_run_leaves_the_thread_resumable() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let backend = scratch.path().join("backend.json");
    let calls = scratch.path().join("calls.jsonl");
    std::fs::write(
        &backend,
        json!({"seed": 1, "fallback": "fake", "call_log": calls, "rules": [
            {"label": "^first$", "text": "first done", "latency_ms": 0},
            {"label": "^slow ", "text": "slow done", "latency_ms": 3000}]})
        .to_string(),
    )
    .unwrap();
    let backend_flag = format!("scripted:{}", backend.display());
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
    let resumed = Command::new(env!("CARGO_BIN_EXE_flowbox"))
        .args(["resume", "gone-1", "--json", "--backend", &backend_flag])
        .env("FLOWBOX_DB", scratch.path().join("journal.db"))
        .env("FLOWBOX_CACHE_DIR", root().join("target/flowbox-cache"))
        .output()
        .unwrap();
    let outcome: Value = serde_json::from_slice(&resumed.stdout).expect("one JSON object");
    assert_eq!(
        outcome["result"],
        json!(["first done", ["slow done", "slow done"]]),
        "{outcome}"
    );
    let log = std::fs::read_to_string(&calls).unwrap();
    let firsts = log
        .lines()
        .filter(|l| l.contains("\"label\":\"first\""))
        .count();
    assert_eq!(firsts, 1, "{log}");
}

/// `flowbox mcp` as a child process spoken to in raw JSON-RPC lines.
struct Server {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Server {
    fn start(scratch: &Path, flags: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_flowbox"))
            .arg("mcp")
            .args(flags)
            .env("FLOWBOX_DB", scratch.join("journal.db"))
            .env("FLOWBOX_CACHE_DIR", root().join("target/flowbox-cache"))
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
