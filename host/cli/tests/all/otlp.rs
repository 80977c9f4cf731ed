//! The traces `--otlp-endpoint` exports, received by a real OTLP/HTTP receiver that decodes
//! them with the OpenTelemetry project's own protobuf definitions (tests/otlp/receiver.py, with
//! the pinned `opentelemetry-proto` from tests/otlp/requirements.txt, installed by
//! `make otlp-receiver` into target/otlp-venv): the span tree of a fan-out and of a pipeline,
//! a leaf agent's model turns and tools, contents only when asked for, a resumed run joining
//! its thread's trace, and a collector that is down or refuses costing the run nothing.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::chat_server::ChatServer;
use crate::support::otlp::{Receiver, trace_id};
use crate::support::{
    RunToEnd, assert_exit, calls_by_prompt, command_with_db, notes_dir, scripted_backend,
    stdout_json, wait_until, write_file,
};

fn by_name<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|span| span["name"] == name).collect()
}

fn one<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found = by_name(spans, name);
    assert_eq!(found.len(), 1, "one span named {name:?} in {spans:#?}");
    found[0]
}

fn children<'a>(spans: &'a [Value], parent: &Value) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|span| span["parent_span_id"] == parent["span_id"])
        .collect()
}

const FAN: &str = r#"
meta = {"name": "fan", "description": "a fan-out, then a pipeline",
        "phases": [{"title": "gather"}, {"title": "judge"}]}
phase("gather")
xs = await parallel([lambda i=i: agent(f"item {i}", label=f"item-{i}") for i in range(3)])
phase("judge")
ys = await pipeline([1, 2], lambda x: agent(f"draft {x}"), lambda r: agent(f"check {r}"))
return len(xs) + len(ys)
"#;

#[test]
fn a_fan_out_and_a_pipeline_export_their_span_tree() {
    let receiver = Receiver::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let workflow = write_file(&dir, "fan.py", FAN);
    let db = dir.path().join("journal.db");
    let output = command_with_db(
        &db,
        &[
            "run",
            &workflow,
            "--thread",
            "traced-tree",
            "--otlp-endpoint",
            &receiver.url,
            "--model",
            "gpt-4o",
            "--prices",
            "examples/prices.json",
            "--json",
        ],
    )
    .env("OTEL_EXPORTER_OTLP_HEADERS", "x-test-header=sent")
    .run_to_end();
    assert_exit(&output, 0);
    assert_eq!(stdout_json(&output)["result"], 5);

    let spans = receiver.trace(&trace_id("traced-tree"), "run_workflow fan");
    assert_eq!(spans.len(), 1 + 2 + 2 + 7, "{spans:#?}");
    let run = one(&spans, "run_workflow fan");
    assert_eq!(run["parent_span_id"], "", "the run is the root");
    assert_eq!(run["status"]["code"], "STATUS_CODE_OK");
    let attributes = &run["attributes"];
    assert_eq!(attributes["flowbox.thread_id"], "traced-tree");
    assert_eq!(attributes["flowbox.leaves"], 7);
    let run_cost = attributes["flowbox.cost_usd"].as_f64().unwrap();
    assert!(attributes["flowbox.fuel_used"].as_i64().unwrap() > 0);
    assert_eq!(run["resource"]["service.name"], "flowbox");
    for span in &spans {
        assert_eq!(span["scope"], "flowbox");
        assert_eq!(span["header"], "sent", "OTEL_EXPORTER_OTLP_HEADERS applies");
        assert!(
            span["attributes"].get("gen_ai.input.messages").is_none(),
            "contents are off by default: {span}"
        );
        // Every span lies within its parent.
        if let Some(parent) = spans
            .iter()
            .find(|p| p["span_id"] == span["parent_span_id"])
        {
            assert!(
                span["start"].as_u64() >= parent["start"].as_u64(),
                "{span} {parent}"
            );
            assert!(
                span["end"].as_u64() <= parent["end"].as_u64(),
                "{span} {parent}"
            );
        }
    }

    let gather = one(&spans, "phase gather");
    let judge = one(&spans, "phase judge");
    for phase in [gather, judge] {
        assert_eq!(phase["parent_span_id"], run["span_id"]);
    }
    let parallel = one(&spans, "parallel 1");
    assert_eq!(parallel["parent_span_id"], gather["span_id"]);
    assert_eq!(parallel["attributes"]["flowbox.group.size"], 3);
    let branches = children(&spans, parallel);
    assert_eq!(branches.len(), 3);
    for i in 0..3 {
        let leaf = one(&spans, &format!("invoke_agent item-{i}"));
        assert_eq!(leaf["parent_span_id"], parallel["span_id"], "{i}");
        assert_eq!(leaf["attributes"]["gen_ai.operation.name"], "invoke_agent");
        assert_eq!(leaf["attributes"]["gen_ai.agent.name"], format!("item-{i}"));
        assert_eq!(leaf["attributes"]["flowbox.index"], i);
        assert_eq!(leaf["attributes"]["flowbox.replayed"], false);
    }
    // Priced: each leaf's cost, adding up to the run's.
    let leaf_costs: f64 = spans
        .iter()
        .filter_map(|span| span["attributes"]["flowbox.cost_usd"].as_f64())
        .sum::<f64>()
        - run_cost;
    assert!(
        run_cost > 0.0 && (leaf_costs - run_cost).abs() < 1e-12,
        "{leaf_costs} {run_cost}"
    );

    let pipeline = one(&spans, "pipeline 2");
    assert_eq!(pipeline["parent_span_id"], judge["span_id"]);
    let items = children(&spans, pipeline);
    assert_eq!(items.len(), 4, "two items through two stages");
    let stage = |item: i64, stage: i64| {
        *items
            .iter()
            .find(|s| {
                s["attributes"]["flowbox.index"] == item
                    && s["attributes"]["flowbox.stage"] == stage
            })
            .unwrap_or_else(|| panic!("item {item} stage {stage} in {items:#?}"))
    };
    for item in [0, 1] {
        assert!(
            stage(item, 2)["start"].as_u64() >= stage(item, 1)["end"].as_u64(),
            "an item's second stage starts after its first ends"
        );
        // Its check quotes its draft's reply.
        assert_eq!(
            stage(item, 2)["attributes"]["flowbox.fed_by"],
            json!([stage(item, 1)["attributes"]["flowbox.call_id"]])
        );
        assert!(stage(item, 1)["attributes"].get("flowbox.fed_by").is_none());
    }
}

#[test]
fn a_leaf_agents_turns_and_tools_are_its_children_and_contents_are_opt_in() {
    let receiver = Receiver::start(&[]);
    let server = ChatServer::start();
    // The leaf's first turn is answered on its second attempt.
    server.fail_next(503);
    let dir = tempfile::tempdir().unwrap();
    let notes = notes_dir(&dir);
    let events = dir.path().join("events.jsonl");
    let workflow = write_file(
        &dir,
        "tools.py",
        "found = await agent('use the tool on the notes', label='reader')\n\
         direct = await call_tool('read_file', path='notes/todo.txt')\n\
         return [found, direct['content']]\n",
    );
    let db = dir.path().join("journal.db");
    let output = command_with_db(
        &db,
        &[
            "run",
            &workflow,
            "--thread",
            "traced-tools",
            "--backend",
            "openai",
            "--model",
            "base-model",
            "--allow-read",
            notes.to_str().unwrap(),
            "--base-url",
            &server.url,
            "--otlp-contents",
            "--events",
            events.to_str().unwrap(),
            "--json",
        ],
    )
    .env("OPENAI_API_KEY", "sk-test")
    // The standard variable instead of the flag: `/v1/traces` is added to it.
    .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
    .env("OTEL_SERVICE_NAME", "tools-test")
    .run_to_end();
    assert_exit(&output, 0);

    let spans = receiver.trace(&trace_id("traced-tools"), "run_workflow");
    let leaf = one(&spans, "invoke_agent reader");
    let inside: Vec<&str> = children(&spans, leaf)
        .iter()
        .map(|span| span["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        inside,
        [
            "chat base-model",
            "execute_tool read_file",
            "chat base-model"
        ],
        "the leaf's turns and its tool call, in order"
    );
    let turns = by_name(&spans, "chat base-model");
    let retries: Vec<&Value> = turns
        .iter()
        .map(|turn| &turn["attributes"]["flowbox.retries"])
        .collect();
    assert_eq!(
        retries,
        [&json!(1), &Value::Null],
        "the retried turn says so"
    );
    let turn_events: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["type"] == "leaf_turn")
        .collect();
    assert_eq!(turn_events.len(), 2, "{turn_events:?}");
    assert_eq!(turn_events[0]["retries"], 1);
    assert!(turn_events[1].get("retries").is_none(), "left out when 0");
    for turn in turns {
        assert_eq!(turn["attributes"]["gen_ai.operation.name"], "chat");
        assert_eq!(turn["attributes"]["gen_ai.request.model"], "base-model");
        assert_eq!(turn["attributes"]["gen_ai.usage.input_tokens"], 11);
        assert_eq!(turn["attributes"]["gen_ai.usage.output_tokens"], 7);
    }
    let attributes = &leaf["attributes"];
    assert_eq!(attributes["gen_ai.usage.input_tokens"], 22);
    assert_eq!(attributes["gen_ai.usage.output_tokens"], 14);
    assert_eq!(
        attributes["gen_ai.input.messages"], "\"use the tool on the notes\"",
        "with --otlp-contents, the prompt"
    );
    assert!(
        attributes["gen_ai.output.messages"]
            .as_str()
            .unwrap()
            .contains("ship it"),
        "and the reply: {attributes}"
    );
    // The script's own call_tool, beside the leaf under the run.
    let run = one(&spans, "run_workflow");
    let tools: Vec<&Value> = by_name(&spans, "execute_tool read_file")
        .into_iter()
        .filter(|span| span["parent_span_id"] == run["span_id"])
        .collect();
    assert_eq!(tools.len(), 1, "{spans:#?}");
    assert_eq!(tools[0]["attributes"]["gen_ai.tool.name"], "read_file");
    assert_eq!(run["resource"]["service.name"], "tools-test");
}

#[test]
fn a_resumed_run_joins_its_threads_trace_with_its_replayed_leaves_marked() {
    let receiver = Receiver::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let log = dir.path().join("calls.jsonl");
    let backends = [600_000, 0].map(|slow_ms| {
        scripted_backend(
            &dir,
            &format!("slow-{slow_ms}.json"),
            json!({"fallback": "fake", "call_log": log,
                   "rules": [{"prompt": "^second$", "text": "done", "latency_ms": slow_ms}]}),
        )
    });
    let workflow = write_file(
        &dir,
        "two.py",
        "a = await agent('first')\nb = await agent('second')\nreturn [a, b]\n",
    );
    let mut child = command_with_db(
        &db,
        &[
            "run",
            &workflow,
            "--thread",
            "traced-resume",
            "--backend",
            &backends[0],
            "--otlp-endpoint",
            &receiver.url,
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // `second` is called once `first` is journaled; kill the process while it waits, once
    // the first leaf's span is exported.
    let trace = trace_id("traced-resume");
    let killed_leaf = || {
        receiver
            .spans()
            .into_iter()
            .find(|span| span["trace_id"] == trace && span["name"] == "invoke_agent leaf")
    };
    wait_until(Duration::from_secs(60), "the second leaf", || {
        calls_by_prompt(&log).contains_key("second") && killed_leaf().is_some()
    });
    let killed_leaf = killed_leaf().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();

    let output = command_with_db(
        &db,
        &[
            "resume",
            "traced-resume",
            "--backend",
            &backends[1],
            "--otlp-endpoint",
            &receiver.url,
            "--json",
        ],
    )
    .run_to_end();
    assert_exit(&output, 0);
    let spans = receiver.trace(&trace, "run_workflow");
    let runs = by_name(&spans, "run_workflow");
    assert_eq!(
        runs.len(),
        1,
        "the killed run never ended, so only the resume's run span"
    );
    let resumed = runs[0];
    assert!(
        spans.contains(&killed_leaf),
        "the killed run's leaf is in the same trace"
    );
    let leaves: HashMap<i64, &Value> = by_name(&spans, "invoke_agent leaf")
        .into_iter()
        .filter(|span| span["parent_span_id"] == resumed["span_id"])
        .map(|span| {
            (
                span["attributes"]["flowbox.call_id"].as_i64().unwrap(),
                span,
            )
        })
        .collect();
    assert_eq!(
        leaves[&1]["attributes"]["flowbox.replayed"], true,
        "first, from the journal"
    );
    assert_ne!(
        leaves[&1]["span_id"], killed_leaf["span_id"],
        "a span of its own"
    );
    assert_eq!(
        leaves[&2]["attributes"]["flowbox.replayed"], false,
        "second, called again"
    );
}

#[test]
fn a_collector_that_is_down_or_refuses_costs_the_run_nothing() {
    let refusing = Receiver::start(&["--refuse", "1000"]);
    // A port nothing listens on: the receiver's, once it is gone.
    let down = {
        let gone = Receiver::start(&[]);
        gone.url.clone()
    };
    let dir = tempfile::tempdir().unwrap();
    let workflow = write_file(&dir, "fan.py", FAN);
    for collector in [down.as_str(), refusing.url.as_str()] {
        let output = command_with_db(
            &dir.path().join("journal.db"),
            &[
                "run",
                &workflow,
                "--no-journal",
                "--otlp-endpoint",
                collector,
                "--json",
            ],
        )
        .run_to_end();
        assert_exit(&output, 0);
        assert_eq!(stdout_json(&output)["result"], 5, "the run is unaffected");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("12 trace span(s) not exported"),
            "the lost spans are counted: {stderr}"
        );
    }
    assert!(refusing.spans().is_empty());
}

#[test]
fn trace_flags_on_a_run_sent_to_restate_are_refused_with_where_they_belong() {
    let output = crate::support::flowbox(&[
        "run",
        "examples/review.py",
        "--restate",
        "http://127.0.0.1:9",
        "--otlp-endpoint",
        "http://127.0.0.1:4318",
    ]);
    assert_exit(&output, 2);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("flowbox worker --otlp-endpoint"),
        "{stderr}"
    );
}

/// `flowbox run` of the offline example with the trace flags `flags`.
fn review_with(flags: &[&str]) -> std::process::Output {
    let mut args = vec![
        "run",
        "examples/review.py",
        "--backend",
        "scripted:examples/review.backend.json",
        "--no-journal",
    ];
    args.extend_from_slice(flags);
    crate::support::flowbox(&args)
}

#[test]
fn an_endpoint_that_is_not_an_http_url_is_a_usage_error_naming_the_flag() {
    for endpoint in ["not a url", "ftp://127.0.0.1:4318", "http://"] {
        let output = review_with(&["--otlp-endpoint", endpoint]);
        assert_exit(&output, 2);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--otlp-endpoint: "), "{endpoint}: {stderr}");
    }
    // Contents asked for with nowhere to send them.
    let output = review_with(&["--otlp-contents"]);
    assert_exit(&output, 2);
    assert!(String::from_utf8_lossy(&output.stderr).contains("give --otlp-endpoint URL"));
}
