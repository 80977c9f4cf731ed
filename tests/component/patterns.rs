//! The pattern library in `host/flowbox/patterns/`: every script passes `check`, runs with no args,
//! and runs against a backend scripted to walk the path that makes its pattern what it is (a
//! branch that fails, a review that asks for a revision, a check that sends a step back).

use std::path::PathBuf;
use std::sync::Arc;

use flowbox::backends::ScriptedBackend;
use flowbox::tools::ReadRoots;
use flowbox::{EventKind, LeafBackend, Limits, RunOutcome, RunRequest, Runtime};
use flowbox_tests::{root, run, runtime, scripted};
use serde_json::{Value, json};

/// Every pattern, each with a test below; `every_pattern_has_a_test` keeps this list complete.
const PATTERNS: &[&str] = &[
    "draft_review_revise",
    "fan_out_synthesise",
    "independent_tasks",
    "pipeline_over_items",
    "plan_execute_check",
    "structured_decision",
    "tool_then_interpret",
];

fn patterns_dir() -> PathBuf {
    root().join("host/flowbox/patterns")
}

fn pattern(name: &str) -> String {
    let path = patterns_dir().join(format!("{name}.py"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs a pattern and returns its result and summary, failing the test if the run failed.
async fn run_pattern(rt: &Runtime, name: &str, args: Value) -> (Value, flowbox::Summary) {
    let outcome = run(rt, &pattern(name), args).await;
    ok(name, outcome)
}

fn ok(name: &str, outcome: RunOutcome) -> (Value, flowbox::Summary) {
    match outcome.result {
        Ok(value) => (value, outcome.summary),
        Err(error) => panic!("{name} failed: {error}"),
    }
}

#[test]
fn every_pattern_has_a_test() {
    let mut found: Vec<String> = std::fs::read_dir(patterns_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "py"))
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(
        found, PATTERNS,
        "add a test (and a PATTERNS entry) for each new pattern"
    );
}

#[tokio::test]
async fn every_pattern_passes_check_with_a_full_meta_and_stays_short() {
    let rt = runtime();
    for name in PATTERNS {
        let script = pattern(name);
        let lines = script.lines().count();
        assert!((15..=45).contains(&lines), "{name} has {lines} lines");
        let meta = rt
            .check(&script)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .unwrap_or_else(|| panic!("{name} has no meta"));
        for field in ["name", "description"] {
            assert!(
                meta[field].as_str().is_some_and(|s| !s.is_empty()),
                "{name}: {meta}"
            );
        }
        let phases = meta["phases"].as_array().expect("phases");
        assert!(!phases.is_empty(), "{name}: {meta}");
        assert!(phases.iter().all(|p| p["title"].is_string()), "{name}");
    }
}

#[tokio::test]
async fn every_pattern_runs_with_no_args_and_enters_only_its_declared_phases() {
    // The fake backend answers every schema validly, and there are no tools: each default path
    // must still end in a JSON result.
    let rt = runtime();
    for name in PATTERNS {
        let script = pattern(name);
        let meta = rt.check(&script).await.unwrap().unwrap();
        let titles: Vec<&str> = meta["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["title"].as_str().unwrap())
            .collect();
        let (result, summary) = ok(name, run(&rt, &script, json!({})).await);
        assert!(result.is_object(), "{name}: {result}");
        assert!(
            summary.phases.iter().all(|p| titles.contains(&p.as_str())),
            "{name} entered {:?}, declared {titles:?}",
            summary.phases
        );
    }
}

#[tokio::test]
async fn fan_out_synthesise_merges_only_the_branches_that_succeeded() {
    let rt = scripted(
        r#"{"rules": [
            {"label": "^perspective cost$", "error": "provider unavailable"},
            {"label": "^perspective ", "text": "{label}: looks fine"},
            {"label": "^synthesis$", "text": "merged {prompt}"}
        ]}"#,
        Limits::default(),
    );
    let (result, summary) = run_pattern(&rt, "fan_out_synthesise", json!({})).await;
    assert_eq!(
        result["used"],
        json!(["reliability", "operations", "security"])
    );
    assert_eq!(result["failed"], json!(["cost"]));
    let answer = result["answer"].as_str().unwrap();
    assert!(answer.starts_with("merged "), "{answer}");
    assert!(
        answer.contains("perspective security: looks fine"),
        "{answer}"
    );
    assert!(!answer.contains("perspective cost"), "{answer}");
    assert_eq!(summary.leaves, 5);
    assert_eq!(summary.phases, ["fan out", "synthesise"]);
    assert!(
        summary
            .logs
            .iter()
            .any(|l| l.contains("provider unavailable")),
        "{:?}",
        summary.logs
    );

    // When every branch fails there is nothing to synthesise, and no leaf is spent on it.
    let (result, summary) =
        run_pattern(&rt, "fan_out_synthesise", json!({"perspectives": ["cost"]})).await;
    assert_eq!(result["answer"], Value::Null);
    assert_eq!(result["failed"], json!(["cost"]));
    assert_eq!(summary.leaves, 1);
    assert_eq!(summary.phases, ["fan out"]);
}

#[tokio::test]
async fn pipeline_over_items_has_no_barrier_and_reports_the_failed_item() {
    // Ticket 0 is slow to extract; ticket 1 fails in its second stage.
    let rt = scripted(
        r#"{"rules": [
            {"label": "^extract 0$", "text": "facts 0", "latency_ms": 300},
            {"label": "^extract ", "text": "facts of {label}"},
            {"label": "^summarise 1$", "error": "model overloaded"},
            {"label": "^summarise ", "text": "summary of {prompt}"},
            {"label": "^classify 0$", "json": {"category": "bug", "urgent": true}},
            {"label": "^classify ", "json": {"category": "question", "urgent": false}}
        ]}"#,
        Limits::default(),
    );
    let mut events = rt.subscribe();
    let tickets = json!(["export crashes", "costs per team?", "rotate my key?"]);
    let (result, summary) =
        run_pattern(&rt, "pipeline_over_items", json!({"tickets": tickets})).await;

    let results = result["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(
        (
            &results[0]["ticket"],
            &results[0]["category"],
            &results[0]["urgent"]
        ),
        (&json!("export crashes"), &json!("bug"), &json!(true))
    );
    assert!(results[0]["summary"].as_str().unwrap().contains("facts 0"));
    assert_eq!(
        (&results[1]["ticket"], &results[1]["category"]),
        (&json!("rotate my key?"), &json!("question"))
    );
    assert_eq!(
        result["failed"],
        json!([{"index": 1, "ticket": "costs per team?"}])
    );
    // 3 extracts, 3 summaries (one failing), 2 classifications.
    assert_eq!(summary.leaves, 8);
    assert_eq!(summary.phases, ["process"]);
    assert!(
        summary
            .logs
            .iter()
            .any(|l| l.contains("pipeline item 1 failed in stage 2 (summarise)")),
        "{:?}",
        summary.logs
    );
    assert!(
        summary
            .logs
            .contains(&"2 of 3 tickets processed".to_owned())
    );

    // No barrier: ticket 2 is classified before the slow ticket 0 even reaches its summary.
    let mut started = Vec::new();
    while let Some(event) = events.recv().await {
        match event.kind {
            EventKind::LeafStarted { label, .. } => started.push(label.unwrap_or_default()),
            EventKind::RunFinished { .. } => break,
            _ => {}
        }
    }
    let at = |label: &str| started.iter().position(|l| l == label).unwrap();
    assert!(at("classify 2") < at("summarise 0"), "{started:?}");
}

#[tokio::test]
async fn draft_review_revise_revises_once_then_stops_when_approved() {
    // The revision only matches when it was given the review's issues, and the second review
    // only approves the revised draft.
    let rt = scripted(
        r#"{"rules": [
            {"label": "^draft$", "text": "first draft"},
            {"label": "^review 1$", "json": {"verdict": "revise", "issues": ["too long", "no example"]}},
            {"label": "^revise 1$", "prompt": "too long", "text": "second draft"},
            {"label": "^review 2$", "prompt": "second draft", "json": {"verdict": "approve", "issues": []}}
        ]}"#,
        Limits::default(),
    );
    let (result, summary) = run_pattern(&rt, "draft_review_revise", json!({})).await;
    assert_eq!(
        result,
        json!({"draft": "second draft", "approved": true, "rounds": 2, "open_issues": []})
    );
    assert_eq!(summary.leaves, 4);
    assert_eq!(summary.phases, ["draft", "review"]);
}

#[tokio::test]
async fn draft_review_revise_is_bounded_by_rounds_and_by_the_budget() {
    // A reviewer that is never satisfied; every leaf costs 100 tokens.
    let rt = scripted(
        r#"{"rules": [
            {"label": "^draft$", "text": "first draft", "tokens": {"input": 50, "output": 50}},
            {"label": "^review ", "json": {"verdict": "revise", "issues": ["still vague"]}, "tokens": {"input": 50, "output": 50}},
            {"label": "^revise ", "text": "draft after {label}", "tokens": {"input": 50, "output": 50}}
        ]}"#,
        Limits::default(),
    );
    // Two rounds: draft, review, revise, review; the last review is not revised.
    let (result, summary) = run_pattern(&rt, "draft_review_revise", json!({"max_rounds": 2})).await;
    assert_eq!(
        result,
        json!({"draft": "draft after revise 1", "approved": false, "rounds": 2,
               "open_issues": ["still vague"]})
    );
    assert_eq!(summary.leaves, 4);

    // With 250 tokens, after the draft and one review (200) a round no longer fits.
    let request = RunRequest::new(pattern("draft_review_revise"))
        .limits(Limits::default().with_budget_tokens(Some(250)));
    let (result, summary) = ok("draft_review_revise", rt.run_request(request).await);
    assert_eq!(
        result,
        json!({"draft": "first draft", "approved": false, "rounds": 1,
               "open_issues": ["still vague"]})
    );
    assert_eq!(summary.leaves, 2);
    assert!(
        summary.logs.iter().any(|l| l.contains("budget")),
        "{:?}",
        summary.logs
    );
}

#[tokio::test]
async fn plan_execute_check_retries_a_failed_check_with_its_feedback() {
    // Unmatched calls fail the run, so each `prompt` below proves what context a step got:
    // step 2 sees step 1's output, its retry sees the checker's feedback, step 3 sees the retry.
    let rt = scripted(
        r#"{"rules": [
            {"label": "^plan$", "json": {"steps": ["collect the changes", "write the guide", "add examples"]}},
            {"label": "^step 1 try 1$", "text": "list of changes"},
            {"label": "^step 2 try 1$", "prompt": "list of changes", "text": "guide without keys"},
            {"label": "^step 2 try 2$", "prompt": "the renamed keys are missing", "text": "guide with renamed keys"},
            {"label": "^step 3 try 1$", "prompt": "guide with renamed keys", "text": "examples"},
            {"label": "^check 2 try 1$", "json": {"ok": false, "feedback": "the renamed keys are missing"}},
            {"label": "^check ", "json": {"ok": true, "feedback": "fine"}}
        ]}"#,
        Limits::default(),
    );
    let (result, summary) = run_pattern(&rt, "plan_execute_check", json!({})).await;
    assert_eq!(result["ok"], json!(true));
    assert_eq!(
        result["steps"],
        json!([
            {"step": "collect the changes", "output": "list of changes", "attempts": 1,
             "status": "ok", "feedback": "fine"},
            {"step": "write the guide", "output": "guide with renamed keys", "attempts": 2,
             "status": "ok", "feedback": "fine"},
            {"step": "add examples", "output": "examples", "attempts": 1,
             "status": "ok", "feedback": "fine"},
        ])
    );
    // plan + (step, check) × (1 + 2 + 1)
    assert_eq!(summary.leaves, 9);
    assert_eq!(summary.phases, ["plan", "execute"]);

    // With one attempt, step 2 fails its check, and step 3, which builds on it, is skipped.
    let (result, summary) =
        run_pattern(&rt, "plan_execute_check", json!({"max_attempts": 1})).await;
    assert_eq!(result["ok"], json!(false));
    assert_eq!(
        result["steps"][1],
        json!({"step": "write the guide", "output": "guide without keys", "attempts": 1,
               "status": "failed", "feedback": "the renamed keys are missing"})
    );
    assert_eq!(
        result["steps"][2],
        json!({"step": "add examples", "status": "skipped"})
    );
    assert_eq!(summary.leaves, 5);
}

#[tokio::test]
async fn independent_tasks_keep_each_failures_reason() {
    let rt = scripted(
        r#"{"rules": [
            {"label": "^task 1$", "error": "context window exceeded"},
            {"label": "^task ", "text": "done: {prompt}"}
        ]}"#,
        Limits::default(),
    );
    let (result, summary) =
        run_pattern(&rt, "independent_tasks", json!({"tasks": ["a", "b", "c"]})).await;
    assert_eq!(
        result,
        json!({
            "ok": false,
            "results": [
                {"task": "a", "ok": true, "output": "done: a"},
                {"task": "b", "ok": false, "error": "context window exceeded"},
                {"task": "c", "ok": true, "output": "done: c"},
            ],
            "failed": ["b"],
        })
    );
    assert_eq!(summary.leaves, 3);
    assert_eq!(summary.phases, ["run"]);
    // Caught in the branch, so parallel() logs no failure of its own.
    assert_eq!(summary.logs, ["2 of 3 tasks succeeded"]);

    // The agent cap is an AgentError too: the task it stops is reported like any other failure.
    let request = RunRequest::new(pattern("independent_tasks"))
        .args(json!({"tasks": ["a", "b", "c"]}))
        .limits(Limits::default().with_max_agents(2));
    let (result, summary) = ok("independent_tasks", rt.run_request(request).await);
    assert_eq!(result["failed"], json!(["b", "c"]));
    assert_eq!(result["results"][1]["error"], "context window exceeded");
    let capped = result["results"][2]["error"].as_str().unwrap();
    assert!(capped.contains("at most 2 leaf agents"), "{capped}");
    assert_eq!(summary.leaves, 2);
}

#[tokio::test]
async fn structured_decision_branches_on_the_choice_and_its_confidence() {
    let rt = scripted(
        r#"{"rules": [
            {"label": "^triage$", "prompt": "ticket 12", "json": {"action": "close", "confidence": 0.9, "reasons": ["duplicate of ticket 12"]}},
            {"label": "^triage$", "json": {"action": "fix", "confidence": 0.8, "reasons": ["a missing null check"]}},
            {"label": "^fix plan$", "text": "patch plan"},
            {"label": "^escalation$", "text": "note: {prompt}"}
        ]}"#,
        Limits::default(),
    );
    let (result, summary) = run_pattern(&rt, "structured_decision", json!({})).await;
    assert_eq!(
        (
            &result["decision"]["action"],
            &result["action"],
            &result["outcome"]
        ),
        (&json!("fix"), &json!("fix"), &json!("patch plan"))
    );
    assert_eq!(summary.leaves, 2);
    assert_eq!(summary.phases, ["decide", "act"]);

    // Not confident enough for the threshold: escalated, with the reasons passed on.
    let (result, summary) =
        run_pattern(&rt, "structured_decision", json!({"min_confidence": 0.95})).await;
    assert_eq!(
        (&result["decision"]["action"], &result["action"]),
        (&json!("fix"), &json!("escalate"))
    );
    assert!(
        result["outcome"]
            .as_str()
            .unwrap()
            .contains("a missing null check")
    );
    assert_eq!(summary.leaves, 2);

    // Closing needs no second leaf.
    let (result, summary) = run_pattern(
        &rt,
        "structured_decision",
        json!({"report": "Same as ticket 12: saving twice loses attachments"}),
    )
    .await;
    assert_eq!(
        (&result["action"], &result["outcome"]),
        (&json!("close"), &json!("Closed: duplicate of ticket 12"))
    );
    assert_eq!(summary.leaves, 1);
}

#[tokio::test]
async fn tool_then_interpret_reads_exact_files_and_reports_tool_errors() {
    let base = tempfile::tempdir().unwrap();
    let notes = base.path().join("notes");
    std::fs::create_dir_all(notes.join("archive")).unwrap();
    std::fs::write(notes.join("plan.md"), "# Plan\nship v2 in May").unwrap();
    std::fs::write(notes.join("todo.txt"), "- finish the docs").unwrap();
    std::fs::write(notes.join("logo.bin"), [0xff, 0xfe, 0x00, 0x01]).unwrap();
    let backend = ScriptedBackend::from_json(
        r#"{"rules": [{"label": "^interpret$", "text": "interpreted {prompt}"}]}"#,
    )
    .unwrap();
    let rt = Runtime::builder()
        .shared_backend(Arc::new(backend) as Arc<dyn LeafBackend>)
        .code_tools(ReadRoots::open(&[notes]).unwrap().tools())
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .expect("the guest loads");

    let (result, summary) = run_pattern(&rt, "tool_then_interpret", json!({"dir": "notes"})).await;
    assert_eq!(result["ok"], json!(true));
    assert_eq!(result["read"], json!(["notes/plan.md", "notes/todo.txt"]));
    let errors = result["errors"].as_object().unwrap();
    assert_eq!(errors.keys().collect::<Vec<_>>(), ["notes/logo.bin"]);
    assert!(
        errors["notes/logo.bin"].as_str().unwrap().contains("UTF-8"),
        "{errors:?}"
    );
    let answer = result["answer"].as_str().unwrap();
    assert!(
        answer.contains("ship v2 in May") && answer.contains("finish the docs"),
        "{answer}"
    );
    // One listing and three reads (the directory is skipped); one leaf.
    assert_eq!(summary.tools_called, 4);
    assert_eq!(summary.leaves, 1);
    assert_eq!(summary.phases, ["read", "interpret"]);

    // A directory that is not granted ends the run with the tool's error in the result.
    let (result, summary) =
        run_pattern(&rt, "tool_then_interpret", json!({"dir": "missing"})).await;
    assert_eq!(result["ok"], json!(false));
    assert!(
        result["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{result}"
    );
    assert_eq!(summary.leaves, 0);
    assert_eq!(summary.phases, ["read"]);
}
