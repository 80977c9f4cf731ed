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
    let python = root().join("target/mcp-venv/bin/python");
    assert!(
        python.exists(),
        "the Python MCP client is not installed at {}: run `make mcp-client` (`make test` does)",
        python.display()
    );
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let output = Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py"))
        .arg(name)
        .env("FLOWBOX_BIN", env!("CARGO_BIN_EXE_flowbox"))
        .env("FLOWBOX_SCRATCH", scratch.path())
        .env("FLOWBOX_DB", scratch.path().join("journal.db"))
        .env("FLOWBOX_CACHE_DIR", root().join("target/flowbox-cache"))
        .stdin(Stdio::null())
        .output()
        .expect("the Python client runs");
    let server_stderr =
        std::fs::read_to_string(scratch.path().join("server.stderr")).unwrap_or_default();
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
fn a_fuel_bomb_ends_in_its_own_error_while_other_calls_complete() {
    scenario("hostile_script");
}

#[test]
fn a_client_that_disconnects_mid_run_leaves_the_thread_resumable() {
    scenario("disconnect");
}

/// Lines no SDK sends: text that is not JSON, JSON that is not JSON-RPC, invalid UTF-8. The
/// server skips the first and last, answers the second with Invalid Request, and goes on.
#[test]
fn garbage_lines_do_not_end_the_server() {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowbox"))
        .arg("mcp")
        .env("FLOWBOX_DB", scratch.path().join("journal.db"))
        .env("FLOWBOX_CACHE_DIR", root().join("target/flowbox-cache"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("flowbox mcp starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut send = move |line: &[u8]| {
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let mut recv = || {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    send(b"this is not json");
    send(b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ");
    send(&[0xff, 0xfe, b'{', b'}']);
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}})
        .to_string()
        .as_bytes(),
    );
    let init = recv();
    assert_eq!(init["id"], 1, "{init}");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    send(br#"{"not": "json-rpc"}"#);
    let refused = recv();
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    send(b"still not json");
    send(br#"{"jsonrpc":"2.0","id":2,"method":"no/such/method"}"#);
    let unknown = recv();
    assert_eq!(
        (unknown["id"].clone(), unknown["error"]["code"].clone()),
        (json!(2), json!(-32601)),
        "{unknown}"
    );
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "run_workflow", "arguments": {"script": "return [1, 2.5, 12345678901234567890]"}}})
        .to_string()
        .as_bytes(),
    );
    let called = recv();
    assert_eq!(called["id"], 3, "{called}");
    // The result's numbers are the script's, to the digit.
    assert_eq!(
        called["result"]["structuredContent"]["result"].to_string(),
        "[1,2.5,12345678901234567890]",
        "{called}"
    );
    drop(send);
    let status = child.wait().expect("flowbox mcp exits");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
