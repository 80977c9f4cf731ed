//! Leaf backends from the command line: real leaf agents over an OpenAI-compatible loopback
//! server (tools, schemas, profiles, turn/output/backoff limits), the allowlists the offline
//! backend shares with them, and what a real backend needs that is missing.

use serde_json::json;

use crate::support::chat_server::ChatServer;
use crate::support::{RunToEnd, assert_exit, command, flowbox, notes_dir, stdout_json, write_file};

#[test]
fn offline_leaves_follow_the_same_allowlists_as_real_ones() {
    let dir = tempfile::tempdir().unwrap();
    let critic = write_file(
        &dir,
        "critic.py",
        "return await agent('review this', agent_type='critic', model='fast')\n",
    );
    // Without templates and profiles, the fake backend refuses what a real one would.
    let refused = flowbox(&["run", &critic, "--json", "--no-journal"]);
    assert_eq!(refused.status.code(), Some(1));
    let message = stdout_json(&refused)["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("unknown agent_type \"critic\""),
        "{message}"
    );

    let types = write_file(
        &dir,
        "types.json",
        r#"{"critic": {"base_prompt": "You criticise.", "tools": []}}"#,
    );
    let args = [
        "run",
        &critic,
        "--json",
        "--no-journal",
        "--agent-types",
        &types,
    ];
    let unprofiled = stdout_json(&flowbox(&args));
    assert!(
        unprofiled["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown model profile \"fast\""),
        "{unprofiled}"
    );
    let output = flowbox(&[&args[..], &["--profile", "fast=small"]].concat());
    assert_exit(&output, 0);
    assert_eq!(stdout_json(&output)["result"], "[fake critic] review this");

    // A template naming a tool that was not granted, or a malformed file, is refused up front.
    let greedy = write_file(
        &dir,
        "greedy.json",
        r#"{"critic": {"base_prompt": "x", "tools": ["read_file"]}}"#,
    );
    let output = flowbox(&["run", &critic, "--json", "--agent-types", &greedy]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stdout_json(&output)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("names a tool not granted"),
    );
    let typo = write_file(&dir, "typo.json", r#"{"critic": {"prompt": "x"}}"#);
    let output = flowbox(&["run", &critic, "--json", "--agent-types", &typo]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn leaf_turn_output_and_backoff_limits_come_from_the_command_line() {
    let server = ChatServer::start();
    let dir = tempfile::tempdir().unwrap();
    let notes = notes_dir(&dir);
    let workflow = write_file(
        &dir,
        "limited.py",
        r#"
out = []
for prompt in ["use the tool on the notes", "write at length", "rate limited"]:
    try:
        out.append(await agent(prompt))
    except AgentError as e:
        out.append(str(e))
return out
"#,
    );
    let output = command(&[
        "run",
        &workflow,
        "--backend",
        "openai",
        "--model",
        "m",
        "--allow-read",
        notes.to_str().unwrap(),
        "--base-url",
        &server.url,
        "--max-turns",
        "1",
        "--max-output-tokens",
        "77",
        "--max-backoff",
        "1",
        "--no-journal",
        "--json",
    ])
    .run_to_end();
    let out = stdout_json(&output);
    assert_eq!(out["ok"], true, "{out}");
    let result = out["result"].as_array().unwrap();
    // One turn is not enough to call a tool and then answer.
    assert!(
        result[0]
            .as_str()
            .unwrap()
            .contains("used all 1 of its turns"),
        "{out}"
    );
    assert!(
        result[1]
            .as_str()
            .unwrap()
            .contains("cut off at its limit of 77 output tokens"),
        "{out}"
    );
    // A Retry-After of 30 s is beyond --max-backoff: the call fails at once, as retryable.
    let limited = result[2].as_str().unwrap();
    assert!(
        limited.contains("wait 30 s, longer than max_backoff (1 s)")
            && limited.ends_with("(retryable)"),
        "{out}"
    );
    for bad in ["0", "many"] {
        let refused = command(&["run", &workflow, "--max-turns", bad]).run_to_end();
        assert_eq!(refused.status.code(), Some(2));
    }
}

#[test]
fn real_leaf_agents_over_an_openai_compatible_server() {
    let server = ChatServer::start();
    let dir = tempfile::tempdir().unwrap();
    let notes = notes_dir(&dir);
    let workflow = write_file(
        &dir,
        "leaves.py",
        r#"
plain = await agent("say hi")
with_file = await agent("use the tool on the notes")
rated = await agent("rate it", schema={"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]})
fast = await agent("quick", model="fast")
try:
    await agent("x", model="gpt-5")
    refused = None
except ValueError as e:
    refused = str(e)
direct = await call_tool("read_file", path="notes/todo.txt")
return {"plain": plain, "with_file": with_file, "rated": rated, "fast": fast,
        "refused": refused, "direct": direct["content"]}
"#,
    );
    let key = "sk-test-secret-0123456789";
    let output = command(&[
        "run",
        &workflow,
        "--backend",
        "openai",
        "--model",
        "base-model",
        "--profile",
        "fast=small-model",
        "--allow-read",
        notes.to_str().unwrap(),
        "--base-url",
        &server.url,
        "--max-output-tokens",
        "300",
        "--no-journal",
        "--json",
    ])
    // The flag wins over the environment.
    .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    .env("OPENAI_API_KEY", key)
    .run_to_end();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_exit(&output, 0);
    let out = stdout_json(&output);
    let result = &out["result"];
    assert_eq!(result["plain"], "say hi via base-model");
    assert_eq!(
        result["with_file"],
        // The tool's result with its keys in the tool's own order.
        "the file says {\"path\":\"notes/todo.txt\",\"content\":\"ship it\",\"bytes\":7,\"truncated\":false}"
    );
    assert_eq!(result["rated"], json!({"score": 4}));
    assert_eq!(result["fast"], "quick via small-model");
    assert_eq!(
        result["refused"],
        "unknown model profile \"gpt-5\"; profiles: fast"
    );
    assert_eq!(result["direct"], "ship it");
    assert_eq!(out["summary"]["leaves"], 4);
    assert_eq!(out["summary"]["input_tokens"], 11 * 5);
    assert!(!stdout.contains(key));

    let requests = server.requests();
    assert!(
        requests
            .iter()
            .all(|(path, auth, _)| path == "/v1/chat/completions"
                && auth == &format!("Bearer {key}"))
    );
    let first = &requests
        .iter()
        .find(|(_, _, r)| r["messages"][1]["content"] == "say hi")
        .unwrap()
        .2;
    assert_eq!(first["messages"][0]["role"], "system");
    assert_eq!(first["max_tokens"], 300);
    assert!(
        first["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("one step of a larger automated workflow")
    );
    assert_eq!(first["tools"][0]["function"]["name"], "list_dir");
    assert_eq!(first["tools"][1]["function"]["name"], "read_file");
}

#[test]
fn real_backends_explain_what_they_need() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "one.py", "return 1\n");
    let output = command(&["run", &path, "--backend", "openai", "--no-journal"])
        .env_remove("FLOWBOX_MODEL")
        .run_to_end();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--model"));
    let output = command(&[
        "run",
        &path,
        "--backend",
        "anthropic",
        "--model",
        "m",
        "--no-journal",
    ])
    .env_remove("ANTHROPIC_API_KEY")
    .run_to_end();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("ANTHROPIC_API_KEY"));
    let output = flowbox(&["run", &path, "--profile", "fast", "--no-journal"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("NAME=MODEL"));
    let output = flowbox(&[
        "run",
        &path,
        "--allow-read",
        "/nonexistent/dir",
        "--no-journal",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a directory"));
}

/// A `--profiles` or `--agent-types` file is held to the `--profile` flag's rules: no empty
/// name or model, no control characters in either; each refused before anything runs.
#[test]
fn profile_and_agent_type_files_follow_the_flag_rules() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_file(&dir, "one.py", "return 1\n");
    let cases = [
        ("--profiles", r#"{"": "m"}"#, "a profile cannot be empty"),
        (
            "--profiles",
            r#"{"fast": ""}"#,
            "a model id cannot be empty",
        ),
        ("--profiles", r#"{"fa\u0000st": "m"}"#, "control characters"),
        (
            "--profiles",
            r#"{"fast": {"model": "m\u001b[2J"}}"#,
            "control characters",
        ),
        (
            "--agent-types",
            r#"{"": {"base_prompt": "p"}}"#,
            "an agent type cannot be empty",
        ),
        (
            "--agent-types",
            r#"{"critic": {"base_prompt": "p", "model": ""}}"#,
            "a model cannot be empty",
        ),
        (
            "--agent-types",
            r#"{"cri\ntic": {"base_prompt": "p"}}"#,
            "control characters",
        ),
    ];
    for (flag, text, says) in cases {
        let file = write_file(&dir, "config.json", text);
        let output = flowbox(&["run", &script, flag, &file, "--no-journal"]);
        assert_exit(&output, 2);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{flag} {text}: {stderr}");
    }
    let output = flowbox(&["run", &script, "--profile", "fa\u{1}st=m", "--no-journal"]);
    assert_exit(&output, 2);
    assert!(String::from_utf8_lossy(&output.stderr).contains("control characters"));
}
