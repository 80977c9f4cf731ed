//! `flowbox ask`: a root model that answers directly or writes workflows, offline and over an
//! OpenAI-compatible loopback server; a rejected script handed back to it; the workflows it ran,
//! listed by `flowbox workflows`.

use serde_json::{Value, json};

use crate::support::chat_server::ChatServer;
use crate::support::{
    RunToEnd, assert_exit, call_log, command, events_of, flowbox, scripted_backend, stdout_json,
};

#[test]
fn ask_over_an_openai_compatible_server() {
    let server = ChatServer::start();
    let output = command(&[
        "ask",
        "plan a workflow for this",
        "--backend",
        "openai",
        "--model",
        "root-m",
        "--base-url",
        &server.url,
        "--max-output-tokens",
        "900",
        "--no-journal",
        "--json",
    ])
    .env("OPENAI_API_KEY", "sk-ask-secret")
    .run_to_end();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_exit(&output, 0);
    let out = stdout_json(&output);
    let answer = out["answer"].as_str().unwrap();
    // The root model got the workflow's output back and answered from it.
    assert!(answer.starts_with("the file says"), "{answer}");
    assert!(answer.contains("inner leaf via root-m"), "{answer}");
    assert_eq!(out["workflows"].as_array().unwrap().len(), 1, "{out}");
    assert!(!stdout.contains("sk-ask-secret"));

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let tool_names = |body: &Value| -> Vec<String> {
        body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(tool_names(&requests[0].2), ["run_workflow"]);
    // The root agent and its leaves write at most --max-output-tokens a turn.
    assert!(requests.iter().all(|(_, _, r)| r["max_tokens"] == 900));
    assert_eq!(requests[1].2["messages"][1]["content"], "inner leaf");
    assert_eq!(requests[1].2["model"], "root-m");
    assert!(tool_names(&requests[1].2).is_empty());
    assert_eq!(
        requests[2].2["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["role"],
        "tool"
    );
}

#[test]
fn ask_answers_a_trivial_question_directly() {
    let output = flowbox(&["ask", "What is 2+2?", "--json", "--no-journal"]);
    assert_exit(&output, 0);
    let out = stdout_json(&output);
    assert_eq!(out["answer"], "[fake root] What is 2+2?");
    assert_eq!(out["workflows"], json!([]));
    assert_eq!(out["turns"], 1);
}

#[test]
fn ask_runs_the_offline_demo_with_events_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let db = dir.path().join("journal.db");
    let output = flowbox(&[
        "ask",
        "Should the parser ship?",
        "--backend",
        "scripted:examples/ask.backend.json",
        "--events",
        events.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
        "--conversation",
        "demo",
    ]);
    assert_exit(&output, 0);
    let answer = String::from_utf8_lossy(&output.stdout);
    assert!(answer.starts_with("The parser needs one fix"), "{answer}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("conversation demo · 1 workflows (0 failed) · 4 leaves"),
        "{stderr}"
    );
    assert!(
        stderr.contains("see its workflows live in `flowbox serve`, or list them with `flowbox workflows --conversation demo`"),
        "{stderr}"
    );
    // The workflow runs are recorded: per conversation, and in total.
    let db_arg = db.to_str().unwrap();
    let listed = flowbox(&[
        "workflows",
        "--conversation",
        "demo",
        "--json",
        "--db",
        db_arg,
    ]);
    let listed = stdout_json(&listed);
    assert_eq!(listed["totals"]["runs"], 1, "{listed}");
    assert_eq!(listed["totals"]["leaves"], 4, "{listed}");
    assert_eq!(listed["workflows"][0]["ok"], true, "{listed}");
    let none = stdout_json(&flowbox(&[
        "workflows",
        "--conversation",
        "x",
        "--json",
        "--db",
        db_arg,
    ]));
    assert_eq!(none["totals"]["runs"], 0, "{none}");
    let table = flowbox(&["workflows", "--db", db_arg]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("1 runs (0 failed) · 4 leaves"), "{table}");

    let lines = events_of(&events);
    let types: Vec<&str> = lines.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"run_started"));
    assert_eq!(types.last(), Some(&"run_finished"));
    assert_eq!(types.iter().filter(|t| **t == "leaf_started").count(), 4);
    assert_eq!(types.iter().filter(|t| **t == "leaf_finished").count(), 4);
    let seqs: Vec<u64> = lines.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=lines.len() as u64).collect::<Vec<_>>());
    let grouped = lines
        .iter()
        .filter(|e| {
            e["type"] == "leaf_started"
                && e["path"] == json!([{"group": 1, "kind": "parallel", "index": 2, "size": 3}])
        })
        .count();
    assert_eq!(grouped, 1);
    let listing = stdout_json(&flowbox(&[
        "threads",
        "--db",
        db.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(listing[0]["name"], "parser-review");
}

#[test]
fn ask_hands_a_rejected_script_back_to_the_root_model_which_fixes_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let config = json!({
        "fallback": "fake",
        "call_log": log,
        "root": [
            {"tool_calls": [{"name": "run_workflow", "arguments": {"script": "import subprocess\nreturn 1"}}]},
            {"tool_calls": [{"name": "run_workflow", "arguments": {"script": "return await parallel([lambda i=i: agent(f'part {i}') for i in range(3)])"}}]},
            {"text": "All three parts are done."}
        ]
    });
    let backend = scripted_backend(&dir, "root.json", config);
    let output = flowbox(&[
        "ask",
        "Do it in parts",
        "--backend",
        &backend,
        "--json",
        "--no-journal",
    ]);
    assert_exit(&output, 0);
    let out = stdout_json(&output);
    assert_eq!(out["answer"], "All three parts are done.");
    assert_eq!(out["workflows"].as_array().unwrap().len(), 2);
    assert_eq!(out["workflows"][0]["ok"], false);
    assert_eq!(out["workflows"][1]["leaves"], 3);

    let calls = call_log(&log);
    let root_requests: Vec<Value> = calls
        .iter()
        .filter(|line| line.get("root_turn").is_some())
        .map(|line| line["request"].clone())
        .collect();
    assert_eq!(root_requests.len(), 3);
    let last_message = |request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        let tool = messages.last().unwrap();
        assert_eq!(tool["role"], "tool");
        serde_json::from_str::<Value>(tool["content"].as_str().unwrap()).unwrap()
    };
    let rejected = last_message(&root_requests[1]);
    assert_eq!(rejected["error"]["kind"], "forbidden");
    assert!(
        rejected["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("imports are not available")
    );
    let fixed = last_message(&root_requests[2]);
    assert_eq!(
        fixed["result"],
        json!([
            "[fake leaf] part 0",
            "[fake leaf] part 1",
            "[fake leaf] part 2"
        ])
    );
    // Besides the root turns, the log holds the three leaf calls of the fixed script.
    let leaf_calls = calls
        .iter()
        .filter(|line| line.get("root_turn").is_none())
        .count();
    assert_eq!(leaf_calls, 3);
}
