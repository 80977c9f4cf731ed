//! `flowbox plan`: leaves, waves, tokens and dollars per phase and profile without running; a
//! granted directory listed for real; the expected cost beside the ceiling, learnt from the
//! journal; the gates that refuse a run by its plan; price tables and dollar flags that cannot
//! work.

use std::process::Output;

use serde_json::Value;

use crate::support::{assert_exit, flowbox, notes_dir, scripted_backend, stdout_json, write_file};

/// The plan command of the README and `docs/plans.md`, on the example with the example price
/// table.
const PLAN: &[&str] = &[
    "plan",
    "examples/review.py",
    "--model",
    "claude-sonnet-4-5",
    "--profile",
    "fast=claude-haiku-4-5",
    "--prices",
    "examples/prices.json",
];

#[test]
fn plan_shows_leaves_waves_tokens_and_dollars_per_phase_and_profile_without_running() {
    let output = flowbox(PLAN);
    assert_exit(&output, 0);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.starts_with("plan of code-review: 5 leaves, 0 tool calls; widest fan-out 4"),
        "{text}"
    );
    assert!(text.contains("(prices written 2025-11-30)"), "{text}");
    assert!(
        text.contains("default (claude-sonnet-4-5, approximate)"),
        "{text}"
    );
    assert!(text.contains("Estimates: input tokens"), "{text}");

    let mut args = PLAN.to_vec();
    args.extend([
        "--args",
        r#"{"files": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]}"#,
    ]);
    args.extend(["--fanout-profile", "fast", "--fanout-width", "8", "--json"]);
    let plan = stdout_json(&flowbox(&args));
    assert_eq!(plan["ok"], true, "{plan}");
    let plan = &plan["plan"];
    assert_eq!(plan["leaves"], 11);
    assert_eq!(plan["phases"][0]["name"], "review");
    assert_eq!(plan["phases"][0]["leaves"], 10);
    // The ten reviewers form a group wider than 8: they move to the fast profile.
    let profiles: Vec<(String, u64)> = plan["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["leaves"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        profiles,
        [("default".to_owned(), 1), ("fast".to_owned(), 10)]
    );
    assert_eq!(plan["profiles"][1]["model"], "claude-haiku-4-5");
    assert!(plan["usd"].as_f64().unwrap() > 0.0, "{plan}");
}

/// Reviewers that write 180 output tokens and a synthesis that writes 60.
const MEASURED_REPLIES: &str = r#"{"rules": [
    {"label": "^review ", "text": "{label}: two nits", "tokens": {"input": 400, "output": 180}},
    {"label": "^synthesis$", "json": {"verdict": "approve", "summary": "ok"},
     "tokens": {"input": 300, "output": 60}}
]}"#;

#[test]
fn plan_expects_the_output_the_journal_recorded_else_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    let backend = scripted_backend(&dir, "backend.json", MEASURED_REPLIES);
    let plan = |flags: &[&str]| -> Output {
        let mut args = vec![
            "plan",
            "examples/review.py",
            "--model",
            "gpt-4o",
            "--prices",
            "examples/prices.json",
            "--args",
            r#"{"files": ["a.py", "b.py", "c.py"]}"#,
        ];
        args.extend_from_slice(flags);
        let output = flowbox(&args);
        assert_exit(&output, 0);
        output
    };
    let plan_json = |flags: &[&str]| -> Value {
        let mut flags = flags.to_vec();
        flags.push("--json");
        stdout_json(&plan(&flags))["plan"].clone()
    };
    let expected = |plan: &Value| {
        (
            plan["expected_output_tokens"].as_u64().unwrap(),
            plan["expected_from_history"].as_u64().unwrap(),
            plan["expected_from_default"].as_u64().unwrap(),
        )
    };

    // No journal yet: every leaf expects the default, 300 tokens, under its 4096 ceiling.
    let fresh = plan_json(&["--db", db]);
    assert_eq!(expected(&fresh), (4 * 300, 0, 4), "{fresh}");
    assert_eq!(fresh["max_output_tokens"], 4 * 4096);
    assert!(fresh["expected_usd"].as_f64().unwrap() < fresh["usd"].as_f64().unwrap());

    let output = flowbox(&[
        "run",
        "examples/review.py",
        "--backend",
        &backend,
        "--model",
        "gpt-4o",
        "--db",
        db,
        "--json",
    ]);
    assert_exit(&output, 0);

    // The journal has seen reviews of 180 tokens and a synthesis of 60: a plan of other
    // files expects those, per phase too.
    let learnt = plan_json(&["--db", db]);
    assert_eq!(expected(&learnt), (3 * 180 + 60, 4, 0), "{learnt}");
    assert_eq!(expected(&learnt["phases"][0]), (3 * 180, 3, 0));
    assert_eq!(expected(&learnt["phases"][1]), (60, 1, 0));
    assert_eq!(expected(&learnt["profiles"][0]), (3 * 180 + 60, 4, 0));
    // Only the output differs from the ceiling: at $10 per million output tokens of gpt-4o.
    let saved = (4 * 4096 - (3 * 180 + 60)) as f64 * 10.0 / 1e6;
    let gap = learnt["usd"].as_f64().unwrap() - learnt["expected_usd"].as_f64().unwrap();
    assert!((gap - saved).abs() < 1e-9, "{learnt}");
    assert_eq!(learnt["usd"], fresh["usd"], "the ceiling does not learn");

    // Told to read no journal, the plan expects the defaults.
    assert_eq!(
        expected(&plan_json(&["--db", db, "--no-journal"])),
        (4 * 300, 0, 4)
    );

    // The text shows both figures and where the expected one came from.
    let text = plan(&["--db", db]).stdout;
    let text = String::from_utf8_lossy(&text);
    let usd = |key: &str| format!("{:.4}", learnt[key].as_f64().unwrap());
    for part in [
        format!("~600 output expected (at most {})", 4 * 4096),
        format!(
            "cost: expected ~${}, at most ${}",
            usd("expected_usd"),
            usd("usd")
        ),
        "expected output: from the journal's replies for 4 leaves, the default for 0".to_owned(),
        "output~  output<=     usd~    usd<=".to_owned(),
    ] {
        assert!(text.contains(&part), "{part}\n{text}");
    }

    // A journal that cannot be opened is an error, as for every command that reads one.
    let output = flowbox(&[
        "plan",
        "examples/review.py",
        "--db",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert_exit(&output, 2);
    let refused = stdout_json(&output);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("it is not a regular file"),
        "{refused}"
    );
    assert_eq!(refused["ok"], false);
}

/// A `--backend` that answers as the fake one does and logs every call to the file it returns.
fn logged_fake(dir: &tempfile::TempDir) -> (String, std::path::PathBuf) {
    let log = dir.path().join("calls.jsonl");
    let config = format!(
        r#"{{"fallback": "fake", "call_log": {:?}}}"#,
        log.to_str().unwrap()
    );
    (scripted_backend(dir, "backend.json", config), log)
}

#[test]
fn a_gate_below_the_plan_refuses_the_run_before_any_leaf_with_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    // The scripted backend's call log would show any call that was made.
    let (backend, log) = logged_fake(&dir);
    let output = flowbox(&[
        "run",
        "examples/review.py",
        "--backend",
        &backend,
        "--gate-leaves",
        "4",
        "--db",
        db.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(2));
    let refused = stdout_json(&output);
    assert_eq!(refused["error"]["kind"], "gate_refused", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the plan starts 5 leaves and the gate admits at most 4"),
        "{message}"
    );
    assert_eq!(refused["error"]["plan"]["leaves"], 5);
    // The refused plan carries the expected figures too: a new journal, so the defaults.
    assert_eq!(refused["error"]["plan"]["expected_output_tokens"], 5 * 300);
    assert_eq!(refused["error"]["plan"]["expected_from_default"], 5);
    assert!(
        std::fs::read_to_string(&log).unwrap_or_default().is_empty(),
        "a leaf was called"
    );

    // The same run under a gate it passes.
    let output = flowbox(&[
        "run",
        "examples/review.py",
        "--gate-leaves",
        "5",
        "--model",
        "gpt-4o",
        "--prices",
        "examples/prices.json",
        "--gate-usd",
        "1",
        "--budget-usd",
        "1",
        "--no-journal",
        "--json",
    ]);
    assert_eq!(stdout_json(&output)["ok"], true);
}

#[test]
fn bad_price_tables_and_dollar_flags_without_one_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let ok = write_file(&dir, "ok.py", "return 1\n");
    let bad_json = write_file(&dir, "bad.json", "{\"written\": ");
    let negative = write_file(
        &dir,
        "negative.json",
        r#"{"written": "2025-11-30", "models": {"gpt-4o": {"input": -2.5, "output": 10}}}"#,
    );
    let cases: [(&[&str], &str); 5] = [
        (&["--prices", &bad_json], "is invalid: not JSON"),
        (
            &["--prices", &negative, "--model", "gpt-4o"],
            "is invalid: gpt-4o: input must not be negative; it is -2.5",
        ),
        (
            &[
                "--prices",
                "examples/prices.json",
                "--model",
                "gpt-4o",
                "--profile",
                "fast=llama-3",
            ],
            "--profile fast runs on \"llama-3\": the price table examples/prices.json (written \
             2025-11-30) has no price for model \"llama-3\"",
        ),
        (&["--budget-usd", "1"], "--budget-usd needs --prices FILE"),
        (
            &["--fanout-profile", "fast"],
            "--fanout-profile fast is not a profile",
        ),
    ];
    for (flags, message) in cases {
        let mut args = vec!["plan", ok.as_str(), "--json"];
        args.extend_from_slice(flags);
        let output = flowbox(&args);
        assert_eq!(output.status.code(), Some(2), "{flags:?}");
        let refused = stdout_json(&output);
        let text = refused["error"]["message"].as_str().unwrap();
        assert!(text.contains(message), "{flags:?}: {text}");
    }
}

/// One leaf per file of a granted directory the script lists itself.
const PER_FILE: &str = r#"
listing = await call_tool("list_dir", path="notes")
files = [e["name"] for e in listing["entries"] if e["kind"] == "file"]
return await parallel([lambda f=f: agent(f"review notes/{f}") for f in files])
"#;

#[test]
fn plan_lists_a_granted_directory_for_real_and_counts_the_leaves_the_run_starts() {
    let dir = tempfile::tempdir().unwrap();
    let notes = notes_dir(&dir);
    for name in ["a.md", "b.md", "c.md", "d.md"] {
        std::fs::write(notes.join(name), "text").unwrap();
    }
    let notes = notes.to_str().unwrap();
    let script = write_file(&dir, "per_file.py", PER_FILE);
    let (backend, log) = logged_fake(&dir);
    let common = ["--backend", &backend, "--allow-read", notes, "--json"];

    let mut args = vec!["plan", &script];
    args.extend(common);
    let output = flowbox(&args);
    assert_exit(&output, 0);
    let plan = stdout_json(&output);
    let plan = &plan["plan"];
    assert_eq!(plan["ended"], serde_json::Value::Null, "{plan}");
    assert_eq!(
        (plan["leaves"].as_u64(), plan["tool_calls"].as_u64()),
        (Some(5), Some(1))
    );
    assert_eq!(plan["script_tools"], serde_json::json!(["list_dir"]));
    assert!(
        std::fs::read_to_string(&log).unwrap_or_default().is_empty(),
        "the plan called a leaf"
    );

    let mut args = vec!["run", &script, "--no-journal"];
    args.extend(common);
    let output = flowbox(&args);
    assert_exit(&output, 0);
    let run = stdout_json(&output);
    assert_eq!(run["summary"]["leaves"], plan["leaves"]);
    assert_eq!(run["result"].as_array().map(Vec::len), Some(5));
    // Nothing failed and nothing looked wrong: both lists are there, empty.
    assert_eq!(run["summary"]["failed_branches"], serde_json::json!([]));
    assert_eq!(run["summary"]["warnings"], serde_json::json!([]));

    // Without the grant there is no `list_dir`: the plan ends where the run does.
    let output = flowbox(&["plan", &script, "--json"]);
    assert_exit(&output, 0);
    let plan = stdout_json(&output);
    let ended = &plan["plan"]["ended"];
    assert_eq!(
        (ended["exception"].as_str(), ended["line"].as_u64()),
        (Some("ToolError"), Some(2))
    );
    assert_eq!(plan["plan"]["leaves"], 0);
    let output = flowbox(&["run", &script, "--no-journal", "--json"]);
    assert_eq!(stdout_json(&output)["error"], *ended);
}

/// A draft, a check, and a redo when the check fails: which the plan counted depends on the
/// placeholder verdict.
const RETRY: &str = r#"phase("draft")
draft = await agent("draft")
phase("check")
verdict = await agent("check", schema={"type": "object", "required": ["ok"],
                                       "properties": {"ok": {"type": "boolean"}}})
if verdict["ok"] is not True or verdict["ok"] is True:
    draft = await agent("redo " + draft)
return draft
"#;

#[test]
fn the_phase_table_says_which_leaves_the_placeholders_led_to() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_file(&dir, "retry.py", RETRY);
    let output = flowbox(&["plan", &script]);
    assert_exit(&output, 0);
    let text = String::from_utf8_lossy(&output.stdout);
    let row = |name: &str| {
        text.lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row in\n{text}"))
            .to_owned()
    };
    assert!(row("phase").ends_with("  placeholders led to"), "{text}");
    assert!(row("draft").ends_with("  -"), "{text}");
    assert!(row("check").ends_with("  1 (line 6)"), "{text}");
    assert!(text.contains("reply-dependent: line 6 if"), "{text}");

    let output = flowbox(&["plan", &script, "--json"]);
    let plan = &stdout_json(&output)["plan"];
    assert_eq!(plan["placeholder_path_leaves"], 1);
    assert_eq!(
        plan["phases"][1]["placeholder_path_lines"],
        serde_json::json!([6])
    );
}
