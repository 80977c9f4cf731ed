//! The `flowbox` binary end to end: the commands the README and `docs/` show, `--json`, and
//! every exit code.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use flowbox_testkit::{Reply, TestServer};
use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A journal for the runs of this test process, so nothing lands in the user's data directory.
fn journal() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
}

fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flowbox"));
    command
        .args(args)
        .current_dir(root())
        .env("FLOWBOX_CACHE_DIR", root().join("target/flowbox-cache"))
        .env("FLOWBOX_DB", journal().join("journal.db"));
    command
}

fn flowbox(args: &[&str]) -> Output {
    command(args).run_to_end()
}

/// Running a `flowbox` command to its end, failing the test if the process panicked: whatever
/// it printed or exited with, a panic is a bug (every test's stderr is checked here).
trait RunToEnd {
    fn run_to_end(&mut self) -> Output;
}

impl RunToEnd for Command {
    fn run_to_end(&mut self) -> Output {
        no_panic(self.output().expect("the flowbox binary runs"))
    }
}

/// `output`, after checking its process did not panic.
fn no_panic(output: Output) -> Output {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("panicked at"),
        "flowbox panicked ({}):\n{stderr}",
        output.status
    );
    output
}

fn stdout_json(output: &Output) -> Value {
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        text.lines().count(),
        1,
        "expected one JSON line, got {text}"
    );
    serde_json::from_str(&text).expect("stdout is JSON")
}

fn script(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn the_demo_command_runs_the_example_offline() {
    let output = flowbox(&[
        "run",
        "examples/review.py",
        "--backend",
        "scripted:examples/review.backend.json",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_slice(&output.stdout).expect("pretty JSON");
    assert_eq!(result["verdict"]["verdict"], "approve");
    assert_eq!(
        result["reviews"][0],
        "review parser.rs: two naming nits, no bugs found"
    );
}

#[test]
fn run_json_prints_exactly_one_object() {
    let output = flowbox(&["run", "examples/review.py", "--json"]);
    assert_eq!(output.status.code(), Some(0));
    let out = stdout_json(&output);
    assert_eq!(out["ok"], true);
    assert_eq!(out["error"], Value::Null);
    assert_eq!(out["summary"]["name"], "code-review");
    assert_eq!(out["summary"]["leaves"], 5);
    assert_eq!(out["summary"]["phases"], json!(["review", "synthesise"]));
    assert_eq!(out["result"]["files"].as_array().unwrap().len(), 4);
}

#[test]
fn args_come_from_flags_or_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(&dir, "echo.py", "return args\n");
    let output = flowbox(&["run", &path, "--args", r#"{"a": [1]}"#, "--json"]);
    assert_eq!(stdout_json(&output)["result"], json!({"a": [1]}));
    let args = script(&dir, "args.json", r#"{"b": "ü"}"#);
    let output = flowbox(&["run", &path, "--args-file", &args, "--json"]);
    assert_eq!(stdout_json(&output)["result"], json!({"b": "ü"}));
    let output = flowbox(&["run", &path, "--json"]);
    assert_eq!(stdout_json(&output)["result"], json!({}));
}

/// The issue's own example, 2**70, -(2**65), a float a lossy parser gets one bit wrong, the
/// smallest subnormal, a negative zero, and keys out of alphabetical order.
const EXACT_ARGS: &str = r#"{"id":12345678901234567890123,"zeta":1180591620717411303424,"neg":-36893488147419103232,"r":0.21599615170364495,"tiny":5e-324,"nz":-0.0,"x":{"b":1,"a":2}}"#;

#[test]
fn json_keeps_numbers_and_key_order_through_run_show_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    let path = script(
        &dir,
        "exact.py",
        "await agent(args)\nreturn {'args': args, 'made': [2**70, -(2**65), 0.21599615170364495, 5e-324, -0.0]}\n",
    );
    let expected = format!(
        r#"{{"args":{EXACT_ARGS},"made":[1180591620717411303424,-36893488147419103232,0.21599615170364495,5e-324,-0.0]}}"#
    );
    let run = |extra: &[&str]| {
        let mut argv = vec!["run", &path, "--args", EXACT_ARGS, "--db", db];
        argv.extend(extra);
        flowbox(&argv)
    };
    let output = run(&["--thread", "exact", "--json"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout_json(&output)["result"].to_string(), expected);
    // The printed text itself, not only what it parses to.
    let printed = String::from_utf8(output.stdout).unwrap();
    assert!(printed.contains(&expected), "{printed}");

    let shown = flowbox(&["show", "exact", "--db", db, "--json"]);
    let shown = stdout_json(&shown);
    assert_eq!(shown["header"]["args"].to_string(), EXACT_ARGS);
    assert_eq!(
        shown["entries"][0]["request"]["prompt"].to_string(),
        EXACT_ARGS
    );
    assert_eq!(shown["outcome"]["result"].to_string(), expected);

    // The finished thread's args still match their recorded hash: no divergence.
    for output in [
        flowbox(&["resume", "exact", "--db", db, "--json"]),
        run(&["--thread", "exact", "--json"]),
    ] {
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stdout)
        );
        assert_eq!(stdout_json(&output)["result"].to_string(), expected);
    }

    // The pretty-printed result keeps them too.
    let output = run(&["--no-journal"]);
    assert_eq!(output.status.code(), Some(0));
    let pretty = String::from_utf8(output.stdout).unwrap();
    assert!(
        pretty.contains("\"id\": 12345678901234567890123,"),
        "{pretty}"
    );
    let value: Value = serde_json::from_str(&pretty).unwrap();
    assert_eq!(value.to_string(), expected);
}

#[test]
fn a_failing_script_exits_1_with_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(
        &dir,
        "fail.py",
        "x = 1\nraise ValueError('bad value')\nreturn x\n",
    );
    let output = flowbox(&["run", &path, "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let out = stdout_json(&output);
    assert_eq!(
        out["error"],
        json!({"kind": "uncaught", "message": "bad value", "line": 2, "exception": "ValueError"})
    );
    let output = flowbox(&["run", &path]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad value (line 2)"), "{stderr}");
}

#[test]
fn json_mode_prints_one_object_even_when_nothing_ran() {
    let dir = tempfile::tempdir().unwrap();
    let ok = script(&dir, "ok.py", "return 1\n");
    for args in [
        vec!["run", "/nonexistent/x.py", "--json"],
        vec!["run", &ok, "--json", "--args", "{nope"],
        vec!["run", &ok, "--json", "--backend", "openai2"],
        vec!["run", &ok, "--json", "--events", "-"],
        vec!["resume", "no-such-thread", "--json"],
    ] {
        let output = flowbox(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let object = stdout_json(&output);
        assert_eq!(object["ok"], false, "{args:?}");
        assert_eq!(object["result"], Value::Null, "{args:?}");
        let message = object["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "{args:?}: {object}");
        assert!(object["error"]["kind"].is_string(), "{args:?}: {object}");
    }
}

#[test]
fn rejected_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let syntax = script(&dir, "syntax.py", "return (\n");
    assert_eq!(flowbox(&["run", &syntax]).status.code(), Some(2));
    let import = script(&dir, "import.py", "import os\nreturn 1\n");
    let output = flowbox(&["run", &import, "--json"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stdout_json(&output)["error"]["kind"], "forbidden");
    let ok = script(&dir, "ok.py", "return 1\n");
    assert_eq!(
        flowbox(&["run", &ok, "--args", "{nope"]).status.code(),
        Some(2)
    );
    assert_eq!(
        flowbox(&["run", "/nonexistent/x.py"]).status.code(),
        Some(2)
    );
    assert_eq!(
        flowbox(&["run", &ok, "--backend", "openai2"]).status.code(),
        Some(2)
    );
    assert_eq!(
        flowbox(&["run", &ok, "--backend", "scripted:/nonexistent.json"])
            .status
            .code(),
        Some(2)
    );
    let big = script(
        &dir,
        "big.py",
        &format!("# {}\nreturn 1\n", "x".repeat(70_000)),
    );
    assert_eq!(flowbox(&["run", &big]).status.code(), Some(2));
}

#[test]
fn breached_limits_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let spin = script(&dir, "spin.py", "while True:\n    pass\nreturn 1\n");
    let output = flowbox(&["run", &spin, "--fuel", "100000000", "--json"]);
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(stdout_json(&output)["error"]["kind"], "out_of_fuel");
    let output = flowbox(&[
        "run",
        &spin,
        "--fuel",
        "100000000000000",
        "--timeout",
        "0.3",
    ]);
    assert_eq!(output.status.code(), Some(3));
    let hog = script(
        &dir,
        "hog.py",
        "x = []\nwhile True:\n    x.append('a' * 100000)\nreturn 1\n",
    );
    let output = flowbox(&["run", &hog, "--memory-mib", "48", "--json"]);
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(stdout_json(&output)["error"]["kind"], "out_of_memory");
}

/// A limit no run could work under is a mistake in the input, not a limit to breach: it is
/// refused before anything runs (no thread is journaled), naming the flag and its range.
#[test]
fn every_limit_flag_out_of_range_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let ok = script(&dir, "ok.py", "return 1\n");
    let cases = [
        (
            "--recursion-limit",
            "0",
            "--recursion-limit must be from 1 to 2147483647; it is 0",
        ),
        (
            "--max-concurrency",
            "0",
            "--max-concurrency must be from 1 to 1048576; it is 0",
        ),
        (
            "--timeout",
            "0",
            "--timeout must be more than 0 and at most 31536000 s; it is 0 s",
        ),
        ("--fuel", "0", "--fuel must be at least 1; it is 0"),
        (
            "--memory-mib",
            "0",
            "--memory-mib must be from 1 to 4096; it is 0",
        ),
        (
            "--memory-mib",
            "4097",
            "--memory-mib must be from 1 to 4096; it is 4097",
        ),
        ("--budget", "0", "--budget must be at least 1; it is 0"),
        (
            "--budget-usd",
            "0",
            "--budget-usd must be more than 0 and at most 1000000000 (dollars); it is 0",
        ),
        (
            "--gate-leaves",
            "0",
            "--gate-leaves must be from 1 to 4294967295; it is 0",
        ),
        (
            "--max-result-bytes",
            "0",
            "--max-result-bytes must be from 1 to 4294967296; it is 0",
        ),
    ];
    for (flag, value, message) in cases {
        let output = flowbox(&[
            "run",
            &ok,
            flag,
            value,
            "--db",
            db.to_str().unwrap(),
            "--json",
        ]);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}");
        let refused = stdout_json(&output);
        assert_eq!(refused["error"]["kind"], "input", "{refused}");
        assert_eq!(refused["error"]["message"], message, "{flag} {value}");
    }
    // So is a limits file with a value out of range, naming the field.
    let file = dir.path().join("limits.json");
    std::fs::write(&file, r#"{"max_concurrency": 0}"#).unwrap();
    let output = flowbox(&["run", &ok, "--limits", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the limit max_concurrency must be from 1 to 1048576; it is 0"),
        "{stderr}"
    );
    assert!(!db.exists(), "a refused run created its journal");
}

#[test]
fn a_memory_cap_below_the_interpreters_start_is_refused_and_the_thread_stays_open() {
    let dir = tempfile::tempdir().unwrap();
    let ok = script(&dir, "ok.py", "return 1\n");
    let thread = "memory-cap-too-small";
    let output = flowbox(&[
        "run",
        &ok,
        "--memory-mib",
        "8",
        "--thread",
        thread,
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(2));
    let object = stdout_json(&output);
    assert_eq!(object["error"]["kind"], "memory_cap_too_small", "{object}");
    assert!(
        object["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the interpreter starts with"),
        "{object}"
    );
    let output = flowbox(&["resume", thread, "--memory-mib", "64", "--json"]);
    assert_eq!(stdout_json(&output)["result"], 1);
    assert!(output.status.success());
}

#[test]
fn offline_leaves_follow_the_same_allowlists_as_real_ones() {
    let dir = tempfile::tempdir().unwrap();
    let critic = script(
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

    let types = script(
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
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_eq!(stdout_json(&output)["result"], "[fake critic] review this");

    // A template naming a tool that was not granted, or a malformed file, is refused up front.
    let greedy = script(
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
    let typo = script(&dir, "typo.json", r#"{"critic": {"prompt": "x"}}"#);
    let output = flowbox(&["run", &critic, "--json", "--agent-types", &typo]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn limits_load_from_a_file_and_flags_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let fan = script(
        &dir,
        "fan.py",
        "return await parallel([lambda i=i: agent(str(i)) for i in range(4)])\n",
    );
    let limits = script(&dir, "limits.json", r#"{"max_agents": 2}"#);
    let output = flowbox(&["run", &fan, "--limits", &limits, "--json"]);
    let nulls = stdout_json(&output)["result"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v.is_null())
        .count();
    assert_eq!(nulls, 2);
    let output = flowbox(&[
        "run",
        &fan,
        "--limits",
        &limits,
        "--max-agents",
        "3",
        "--json",
    ]);
    let nulls = stdout_json(&output)["result"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v.is_null())
        .count();
    assert_eq!(nulls, 1);
    let bad = script(&dir, "bad.json", r#"{"fuel_units": 2}"#);
    assert_eq!(
        flowbox(&["run", &fan, "--limits", &bad]).status.code(),
        Some(2)
    );
}

#[test]
fn check_prints_meta_without_running() {
    let output = flowbox(&["check", "examples/review.py"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let meta: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(meta["name"], "code-review");
    let dir = tempfile::tempdir().unwrap();
    let bad = script(
        &dir,
        "bad.py",
        "meta = {'name': 1, 'description': 'd'}\nreturn 1\n",
    );
    let output = flowbox(&["check", &bad]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("name"));
}

#[test]
fn help_documents_the_exit_codes() {
    let output = flowbox(&["--help"]);
    let help = String::from_utf8_lossy(&output.stdout);
    for needle in ["Exit codes", "3  a limit was breached", "run", "check"] {
        assert!(help.contains(needle), "{needle} missing from --help");
    }
    for command in ["run", "resume"] {
        let output = flowbox(&[command, "--help"]);
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(
            help.contains("3  a limit was breached"),
            "{command} --help: {help}"
        );
    }
}

/// The scripted backend's call log: one JSON object per call, in the order calls started.
fn call_log(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("call log lines are JSON"))
        .collect()
}

/// A directory `notes` holding `todo.txt` ("ship it"), to grant with `--allow-read`.
fn notes_dir(dir: &tempfile::TempDir) -> PathBuf {
    let notes = dir.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("todo.txt"), "ship it").unwrap();
    notes
}

/// How many times each prompt was sent to the scripted backend, from its call log.
fn calls_by_prompt(log: &Path) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for call in call_log(log) {
        *counts
            .entry(call["prompt"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    counts
}

/// The prompts of a thread's journaled completions, with their handles.
fn journaled_prompts(shown: &Value) -> Vec<(String, u64)> {
    shown["entries"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|e| {
            (
                e["request"]["prompt"].as_str().unwrap().to_owned(),
                e["handle"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_killed_run_resumes_without_paying_twice_for_finished_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    let log = dir.path().join("calls.jsonl");
    // Before the kill `right` is slow, so the kill lands while it is in flight and `left` is
    // journaled, however loaded the machine; after it, every leaf answers in 150 ms.
    let backends = [600_000, 150].map(|right_ms| {
        let file = script(
            &dir,
            &format!("right-{right_ms}.json"),
            &json!({
                "latency_ms": 150,
                "fallback": "fake",
                "call_log": log,
                "rules": [{"prompt": "^right$", "text": "[fake leaf] {prompt}", "latency_ms": right_ms}]
            })
            .to_string(),
        );
        format!("scripted:{file}")
    });
    let [slow, backend] = &backends;
    let workflow = script(
        &dir,
        "steps.py",
        "out = []\nfor i in range(4):\n    out.append(await agent(f'step {i}'))\n\
         pair = await parallel([lambda: agent('left'), lambda: agent('right')])\n\
         for i in range(4, 7):\n    out.append(await agent(f'step {i}'))\n\
         return {'steps': out, 'pair': pair}\n",
    );

    let mut child = command(&[
        "run",
        &workflow,
        "--thread",
        "killed",
        "--db",
        db,
        "--backend",
        slow,
        "--json",
    ])
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(dir.path().join("stderr.txt")).unwrap())
    .spawn()
    .unwrap();
    // Wait until the backend has been called more often than the journal holds completions
    // (with `right` among the calls and `left` journaled), then kill the process outright.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let called = calls_by_prompt(&log);
        let shown = flowbox(&["show", "killed", "--db", db, "--json"]);
        let journaled = serde_json::from_slice::<Value>(&shown.stdout)
            .map(|v| journaled_prompts(&v))
            .unwrap_or_default();
        let journaled: Vec<&str> = journaled.iter().map(|(p, _)| p.as_str()).collect();
        if called.contains_key("right") && journaled.contains(&"left") {
            break;
        }
        assert!(
            Instant::now() < deadline && child.try_wait().unwrap().is_none(),
            "the run never reached the pair: {:?}, calls {called:?}, journal {journaled:?}, {}",
            child.try_wait(),
            std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // While the run is alive, a second process cannot drive the thread too.
    let rival = flowbox(&[
        "resume",
        "killed",
        "--db",
        db,
        "--backend",
        backend,
        "--json",
    ]);
    assert_eq!(rival.status.code(), Some(2));
    let rival = stdout_json(&rival);
    assert_eq!(rival["error"]["kind"], "thread_in_use", "{rival}");
    let holder = format!("process {}", child.id());
    assert!(
        rival["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&holder),
        "{rival}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // The kill released the claim: the resume below goes ahead at once.
    let before = call_log(&log);
    let shown: Value =
        serde_json::from_slice(&flowbox(&["show", "killed", "--db", db, "--json"]).stdout).unwrap();
    assert_eq!(shown["status"], "resumable", "no process holds it any more");
    let finished = journaled_prompts(&shown);
    let finished_prompts: Vec<&str> = finished.iter().map(|(p, _)| p.as_str()).collect();
    // Called before the kill but never journaled: in flight when the process died.
    let in_flight: Vec<&Value> = before
        .iter()
        .filter(|call| !finished_prompts.contains(&call["prompt"].as_str().unwrap()))
        .collect();
    assert_eq!(
        in_flight.len(),
        1,
        "exactly `right` was in flight at the kill: {before:?}"
    );
    assert_eq!(in_flight[0]["prompt"], "right");
    assert_eq!(before.len(), finished.len() + 1);
    // A journaled leaf was called with its thread's key for its handle.
    for (prompt, handle) in &finished {
        let call = before
            .iter()
            .find(|c| c["prompt"] == prompt.as_str())
            .unwrap();
        assert_eq!(
            call["idempotency_key"],
            format!("killed/{handle}"),
            "{call}"
        );
    }

    let resumed = flowbox(&[
        "resume",
        "killed",
        "--db",
        db,
        "--backend",
        backend,
        "--json",
    ]);
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let resumed = stdout_json(&resumed);

    let uninterrupted = flowbox(&["run", &workflow, "--no-journal", "--json"]);
    assert_eq!(resumed["result"], stdout_json(&uninterrupted)["result"]);

    // Every leaf journaled before the kill was called exactly once; the one in flight at the
    // kill was called once more after the resume, with the same idempotency key; every other
    // leaf was called once, after the resume.
    let after = call_log(&log);
    let counts = calls_by_prompt(&log);
    for prompt in &finished_prompts {
        assert_eq!(counts[*prompt], 1, "{prompt} was called again: {counts:?}");
    }
    let retried: Vec<&Value> = after[before.len()..]
        .iter()
        .filter(|call| call["prompt"] == "right")
        .collect();
    assert_eq!(retried.len(), 1, "{after:?}");
    assert_eq!(
        retried[0]["idempotency_key"],
        in_flight[0]["idempotency_key"]
    );
    assert_eq!(retried[0]["call_id"], in_flight[0]["call_id"]);
    assert_eq!(counts.values().sum::<usize>(), 9 + 1);
    assert_eq!(counts.len(), 9);

    // Resuming a finished thread returns its outcome and calls nothing.
    let again = flowbox(&[
        "resume",
        "killed",
        "--db",
        db,
        "--backend",
        backend,
        "--json",
    ]);
    assert_eq!(stdout_json(&again)["result"], resumed["result"]);
    assert_eq!(call_log(&log).len(), after.len());
    // A finished thread keeps no lease file, even after being asked for again.
    let leases = std::fs::read_dir(format!("{db}.leases")).unwrap().count();
    assert_eq!(leases, 0);

    let listing = flowbox(&["threads", "--db", db, "--json"]);
    let listing: Value = serde_json::from_slice(&listing.stdout).unwrap();
    assert_eq!(listing[0]["thread_id"], "killed");
    assert_eq!(listing[0]["status"], "succeeded");
    assert_eq!(listing[0]["leaves"], 9);
    let table = String::from_utf8_lossy(&flowbox(&["threads", "--db", db]).stdout).into_owned();
    assert!(
        table.contains("killed") && table.contains("succeeded"),
        "{table}"
    );
    let text =
        String::from_utf8_lossy(&flowbox(&["show", "killed", "--db", db]).stdout).into_owned();
    assert!(text.contains("journal  9 completions"), "{text}");
    assert!(text.contains("status   succeeded"), "{text}");
}

#[test]
fn show_names_the_tools_a_thread_called() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let notes = notes_dir(&dir);
    let workflow = script(
        &dir,
        "tool.py",
        "return (await call_tool('read_file', path='notes/todo.txt'))['content']\n",
    );
    let run = flowbox(&[
        "run",
        &workflow,
        "--allow-read",
        notes.to_str().unwrap(),
        "--thread",
        "with-tool",
        "--db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0));
    let text = String::from_utf8_lossy(
        &flowbox(&["show", "with-tool", "--db", db.to_str().unwrap()]).stdout,
    )
    .into_owned();
    assert!(
        text.contains(r#"tool read_file({"path":"notes/todo"#),
        "{text}"
    );
    assert!(text.contains("status   succeeded"), "{text}");
}

#[test]
fn reuse_leaves_calls_the_backend_only_for_changed_requests() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    let log = dir.path().join("calls.jsonl");
    let backend = script(
        &dir,
        "answers.json",
        &json!({"rules": [{"prompt": ".", "text": "answer to {prompt}"}], "call_log": log})
            .to_string(),
    );
    let backend = format!("scripted:{backend}");
    let workflow = |beta: &str| {
        format!(
            "pair = await parallel([lambda: agent('alpha'), lambda: agent('{beta}')])\n\
             last = await agent('gamma')\n\
             return pair + [last]\n"
        )
    };
    let v1 = script(&dir, "v1.py", &workflow("beta"));
    let run = |path: &str, thread: &str, reuse: Option<&str>| {
        let mut args = vec![
            "run",
            path,
            "--thread",
            thread,
            "--db",
            db,
            "--backend",
            &backend,
            "--json",
        ];
        args.extend(
            reuse
                .map(|from| ["--reuse-leaves", from])
                .into_iter()
                .flatten(),
        );
        let output = flowbox(&args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout_json(&output)
    };
    let first = run(&v1, "reuse-a", None);
    assert_eq!(
        first["result"],
        json!(["answer to alpha", "answer to beta", "answer to gamma"])
    );
    assert_eq!(call_log(&log).len(), 3);

    // The edited script may not resume thread A, but it may reuse A's identical leaves.
    let v2 = script(&dir, "v2.py", &workflow("beta, revised"));
    let second = run(&v2, "reuse-b", Some("reuse-a"));
    assert_eq!(
        second["result"],
        json!([
            "answer to alpha",
            "answer to beta, revised",
            "answer to gamma"
        ])
    );
    let calls = call_log(&log);
    let new: Vec<&Value> = calls[3..].iter().collect();
    assert_eq!(new.len(), 1, "{calls:?}");
    assert_eq!(new[0]["prompt"], "beta, revised");
    assert!(
        new[0]["idempotency_key"]
            .as_str()
            .unwrap()
            .starts_with("reuse-b/"),
        "{}",
        new[0]
    );
    assert_eq!(second["summary"]["leaves"], 3);
    // Thread B journals all three leaves, reused or not, so it resumes without the backend.
    let shown = stdout_json(&flowbox(&["show", "reuse-b", "--db", db, "--json"]));
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["entries"].as_array().unwrap().len(), 3);
}

#[test]
fn journal_commands_explain_their_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    let output = flowbox(&["resume", "ghost", "--db", db]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no thread ghost"));
    let output = flowbox(&["show", "ghost", "--db", db]);
    assert_eq!(output.status.code(), Some(2));
    let garbage = script(&dir, "garbage.db", &"not a database ".repeat(200));
    let output = flowbox(&["threads", "--db", &garbage]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a readable flowbox journal"));
    // A thread id that exists with another script is refused, not overwritten.
    let one = script(&dir, "one.py", "return 1\n");
    let two = script(&dir, "two.py", "return 2\n");
    assert_eq!(
        flowbox(&["run", &one, "--thread", "same", "--db", db])
            .status
            .code(),
        Some(0)
    );
    let output = flowbox(&["run", &two, "--thread", "same", "--db", db, "--json"]);
    assert_eq!(stdout_json(&output)["error"]["kind"], "divergence");
}

#[test]
fn runs_print_their_thread_and_are_journaled_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(&dir, "one.py", "return await agent('x')\n");
    let output = flowbox(&["run", &path]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let thread = stderr
        .lines()
        .find_map(|line| line.strip_prefix("thread "))
        .expect("the thread id is printed")
        .to_owned();
    let shown = stdout_json(&flowbox(&["show", &thread, "--json"]));
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["entries"].as_array().unwrap().len(), 1);
}

/// The shared loopback server (`flowbox_testkit`) speaking OpenAI's Chat Completions: it
/// answers from the request's content and records each request, serving until dropped.
struct ChatServer {
    url: String,
    server: TestServer,
}

impl ChatServer {
    fn start() -> Self {
        let server = TestServer::answering(|request| {
            let (status, reply) = ChatServer::answer(&request.json());
            let reply = Reply::json(status, reply);
            // A rate limit asks for a 30-second pause.
            match status {
                429 => reply.header("Retry-After", "30"),
                _ => reply,
            }
        });
        let url = format!("{}/v1", server.url());
        Self { url, server }
    }

    /// Each request's path, authorization header and JSON body, oldest first.
    fn requests(&self) -> Vec<(String, String, Value)> {
        self.server
            .requests()
            .iter()
            .map(|request| {
                let auth = request.header("authorization").unwrap_or("").to_owned();
                (request.path.clone(), auth, request.json())
            })
            .collect()
    }

    fn answer(request: &Value) -> (u16, Value) {
        let messages = request["messages"].as_array().unwrap();
        let user = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_owned();
        let usage = json!({"prompt_tokens": 11, "completion_tokens": 7});
        let message = if let Some(tool) = messages.iter().find(|m| m["role"] == "tool") {
            json!({"role": "assistant", "content": format!("the file says {}", tool["content"].as_str().unwrap())})
        } else if request.get("response_format").is_some() {
            json!({"role": "assistant", "content": "{\"score\": 4}"})
        } else if user.contains("plan a workflow") {
            let script = json!({"script": "return await agent('inner leaf')"}).to_string();
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "run_workflow", "arguments": script}
            }]})
        } else if user.contains("use the tool") {
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\": \"notes/todo.txt\"}"}
            }]})
        } else {
            json!({"role": "assistant", "content": format!("{} via {}", user, request["model"].as_str().unwrap())})
        };
        // A request to write at length runs into the output-token limit.
        let finish = if user.contains("at length") {
            "length"
        } else {
            "stop"
        };
        if user.contains("rate limited") {
            return (
                429,
                json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
            );
        }
        (
            200,
            json!({"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}),
        )
    }
}

#[test]
fn leaf_turn_output_and_backoff_limits_come_from_the_command_line() {
    let server = ChatServer::start();
    let dir = tempfile::tempdir().unwrap();
    let notes = notes_dir(&dir);
    let workflow = script(
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
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
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
fn real_leaf_agents_over_an_openai_compatible_server() {
    let server = ChatServer::start();
    let dir = tempfile::tempdir().unwrap();
    let notes = notes_dir(&dir);
    let workflow = script(
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
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
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
    let path = script(&dir, "one.py", "return 1\n");
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

#[test]
fn ask_answers_a_trivial_question_directly() {
    let output = flowbox(&["ask", "What is 2+2?", "--json", "--no-journal"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
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
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
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

    let lines: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("every line is one JSON event"))
        .collect();
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
    let backend = script(&dir, "root.json", &config.to_string());
    let output = flowbox(&[
        "ask",
        "Do it in parts",
        "--backend",
        &format!("scripted:{backend}"),
        "--json",
        "--no-journal",
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let out = stdout_json(&output);
    assert_eq!(out["answer"], "All three parts are done.");
    assert_eq!(out["workflows"].as_array().unwrap().len(), 2);
    assert_eq!(out["workflows"][0]["ok"], false);
    assert_eq!(out["workflows"][1]["leaves"], 3);

    let root_requests: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
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
    let leaf_calls = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|line| !line.contains("\"root_turn\""))
        .count();
    assert_eq!(leaf_calls, 3);
}

#[test]
fn run_writes_events_to_stdout_before_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(&dir, "two.py", "log('hi')\nreturn await agent('x')\n");
    let output = flowbox(&["run", &path, "--events", "-", "--no-journal"]);
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let events: Vec<Value> = lines[..5]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "run_started",
            "log",
            "leaf_started",
            "leaf_finished",
            "run_finished"
        ]
    );
    assert_eq!(lines[5], "\"[fake leaf] x\"");
}

/// A script that logs `lines` lines: `0`, `1`, ...
fn long_log(dir: &tempfile::TempDir, lines: u64) -> String {
    script(
        dir,
        "long.py",
        &format!("for i in range({lines}):\n    log(str(i))\nreturn 1\n"),
    )
}

/// Waits for `child`, which must succeed without a panic.
fn succeeded(child: std::process::Child) {
    let output = no_panic(child.wait_with_output().unwrap());
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Checks that `text` is the record of one run of [`long_log`]: every event, in order, with
/// consecutive sequence numbers and no gap marker.
fn assert_every_log_event(text: &str, lines: u64) {
    let events: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("every line is one JSON event"))
        .collect();
    let gaps = events.iter().filter(|e| e["type"] == "gap").count();
    assert_eq!(gaps, 0, "{gaps} gap markers in the record");
    assert_eq!(events.len() as u64, lines + 2, "events recorded");
    for (at, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], at as u64 + 1, "{event}");
    }
    assert_eq!(events[0]["type"], "run_started");
    for (i, event) in events[1..=lines as usize].iter().enumerate() {
        assert_eq!(event["type"], "log");
        assert_eq!(event["message"], i.to_string());
    }
    assert_eq!(events[lines as usize + 1]["type"], "run_finished");
}

#[test]
fn events_to_a_file_record_every_one_of_200_000_log_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = long_log(&dir, 200_000);
    let record = dir.path().join("events.jsonl");
    let output = flowbox(&[
        "run",
        &path,
        "--no-journal",
        // 200 000 lines are more than the default 1 MiB of log output.
        "--max-output-bytes",
        "2000000",
        "--events",
        record.to_str().unwrap(),
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_every_log_event(&std::fs::read_to_string(&record).unwrap(), 200_000);
}

/// A regular file keeps up with the run on an idle machine; a named pipe read late is the same
/// `--events FILE`, falling behind for certain.
#[cfg(unix)]
#[test]
fn an_events_file_read_late_still_gets_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = long_log(&dir, 100_000);
    let fifo = dir.path().join("events.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo {}", fifo.display());
    let child = command(&["run", &path, "--no-journal", "--events"])
        .arg(&fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Opening the pipe waits for the command to open it too; then read nothing for a while.
    let (opened, open) = std::sync::mpsc::channel();
    std::thread::spawn(move || opened.send(std::fs::File::open(&fifo)));
    let mut reader = open
        .recv_timeout(Duration::from_secs(60))
        .expect("the command opens the events file")
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let mut text = String::new();
    std::io::Read::read_to_string(&mut reader, &mut text).unwrap();
    succeeded(child);
    assert_every_log_event(&text, 100_000);
}

#[test]
fn a_reader_of_events_on_stdout_that_pauses_still_gets_every_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = long_log(&dir, 100_000);
    let mut child = command(&["run", &path, "--no-journal", "--events", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // Read nothing for a while (the pipe fills and the command must wait), then everything.
    std::thread::sleep(Duration::from_secs(2));
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
    succeeded(child);
    let (events, result) = text.trim_end().rsplit_once('\n').unwrap();
    assert_eq!(result, "1");
    assert_every_log_event(events, 100_000);
}

#[test]
fn a_reader_that_stops_reading_ends_the_command_quietly_with_its_own_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let many = script(&dir, "many.py", "return list(range(20000))\n");
    let failing = script(&dir, "failing.py", "raise ValueError('no')\nreturn 1\n");
    let cases = [
        (vec!["run", &many, "--no-journal", "--json"], 0),
        (vec!["run", &failing, "--no-journal", "--json"], 1),
        (vec!["run", &many, "--no-journal", "--events", "-"], 0),
    ];
    for (args, code) in cases {
        let mut child = command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the pipe before the command writes its result.
        drop(child.stdout.take());
        let output = no_panic(child.wait_with_output().unwrap());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{stderr}");
    }
}

/// Stderr carries only messages for a person (the thread id, progress, warnings, errors): one
/// nobody can write to, full or a pipe whose reader has gone, changes nothing about the run.
#[cfg(target_os = "linux")]
#[test]
fn a_stderr_that_cannot_be_written_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let one = script(&dir, "one.py", "log('a warning-sized line')\nreturn 1\n");
    let failing = script(&dir, "failing.py", "raise ValueError('no')\nreturn 1\n");
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    for (args, code) in [
        (vec!["run", &one, "--db", db], 0),
        (vec!["run", &failing, "--db", db], 1),
        (vec!["threads", "--db", "/nowhere/x.db"], 0),
        (vec!["run", &one, "--max-concurrency", "0"], 2),
    ] {
        let stdout = String::from_utf8_lossy(&flowbox(&args).stdout).into_owned();
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let output = command(&args).stderr(full).run_to_end();
        assert_eq!(output.status.code(), Some(code), "{args:?} to /dev/full");
        assert!(!stdout.is_empty() || code != 0, "{args:?} printed nothing");
        assert_eq!(String::from_utf8_lossy(&output.stdout), stdout, "{args:?}");
        let mut child = command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stderr.take());
        let output = child.wait_with_output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(code),
            "{args:?} to a closed pipe"
        );
        assert_eq!(String::from_utf8_lossy(&output.stdout), stdout, "{args:?}");
    }
}

/// Only a run creates a journal, and says where. Reading a journal that is not there creates
/// no file or directory: `threads` and `workflows` list nothing, `show` and `resume` name the
/// missing journal; and what is not a regular file is no journal.
#[test]
fn reading_commands_never_create_a_journal() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing/dir/x.db");
    let missing = missing.to_str().unwrap();
    for (args, code) in [
        (vec!["threads", "--db", missing], 0),
        (vec!["threads", "--db", missing, "--json"], 0),
        (vec!["workflows", "--db", missing], 0),
        (vec!["show", "t", "--db", missing], 2),
        (vec!["resume", "t", "--db", missing], 2),
    ] {
        let output = flowbox(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("journal at {missing}")),
            "{stderr}"
        );
    }
    assert_eq!(
        String::from_utf8_lossy(&flowbox(&["threads", "--db", missing, "--json"]).stdout),
        "[]\n"
    );
    assert!(
        !dir.path().join("missing").exists(),
        "a reading command created the directory"
    );
    for command in [&["threads"][..], &["show", "t"], &["resume", "t"]] {
        let mut args = command.to_vec();
        args.extend(["--db", "/dev/null"]);
        let output = flowbox(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("cannot use /dev/null as a journal: it is not a regular file"),
            "{stderr}"
        );
    }
    assert!(!Path::new("/dev/null-journal").exists());
    let one = script(&dir, "one.py", "return 1\n");
    let made = dir.path().join("made/here.db");
    let output = flowbox(&["run", &one, "--db", made.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("created the journal {}", made.display())),
        "{stderr}"
    );
    let again = flowbox(&["run", &one, "--db", made.to_str().unwrap()]);
    assert!(!String::from_utf8_lossy(&again.stderr).contains("created the journal"));
}

/// Another application's SQLite file is refused in one line before flowbox writes anything:
/// it keeps its journal mode and every byte.
#[test]
fn another_applications_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE runs (x); CREATE TABLE notes (y); INSERT INTO notes VALUES (1);",
        )
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    let one = script(&dir, "one.py", "return 1\n");
    for args in [
        vec!["run", &one, "--db", path.to_str().unwrap()],
        vec!["threads", "--db", path.to_str().unwrap()],
        vec!["resume", "t", "--db", path.to_str().unwrap()],
    ] {
        let output = flowbox(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let error: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with("thread "))
            .collect();
        assert_eq!(
            error,
            [format!(
                "error: {} is not a flowbox journal (it holds the tables notes, runs); it was \
                 left untouched",
                path.display()
            )],
            "{args:?}"
        );
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let mode: String = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
}

/// One thread whose row is damaged does not hide the others: `threads` lists them, names the
/// damaged one and what is wrong with it (never a wrapped-around count), and exits 1.
#[test]
fn threads_lists_what_reads_and_names_a_damaged_thread() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    let leaf = script(&dir, "leaf.py", "return await agent('x')\n");
    for thread in ["good", "bad"] {
        let output = flowbox(&["run", &leaf, "--thread", thread, "--db", db]);
        assert_eq!(output.status.code(), Some(0));
    }
    let sql = |statement: &str| {
        rusqlite::Connection::open(db)
            .unwrap()
            .execute_batch(statement)
            .unwrap();
    };
    for (damage, named) in [
        (
            "UPDATE runs SET status = 'paused' WHERE thread_id = 'bad'",
            "unknown run status \"paused\"",
        ),
        (
            "UPDATE runs SET status = (SELECT status FROM runs WHERE thread_id = 'good')
                WHERE thread_id = 'bad';
             UPDATE entries SET output_tokens = -5 WHERE thread_id = 'bad'",
            "an entry's token count is -5",
        ),
    ] {
        sql(damage);
        for json in [false, true] {
            let mut args = vec!["threads", "--db", db];
            if json {
                args.push("--json");
            }
            let output = flowbox(&args);
            assert_eq!(output.status.code(), Some(1), "{damage}");
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(stdout.contains("good"), "{stdout}");
            assert!(!stdout.contains("bad"), "{stdout}");
            assert!(!stdout.contains("18446744073709551611"), "{stdout}");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(stderr.contains("thread bad"), "{stderr}");
            assert!(stderr.contains(named), "{stderr}");
        }
    }
}

/// A journal this process may not write — the file, its `-wal` or `-shm`, or the directory it
/// would be created in — is refused before the run, naming that file and the operating
/// system's reason, with the other unusable journals (exit 2). (Run as an unprivileged user
/// when the tests run as root, for whom permissions do not bind.)
#[cfg(target_os = "linux")]
#[test]
fn a_journal_that_cannot_be_written_is_named_with_its_reason() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let one = script(&dir, "one.py", "return 1\n");
    let writable = dir.path().join("open");
    std::fs::create_dir(&writable).unwrap();
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o777)).unwrap();
    let db = writable.join("journal.db");
    let run = |db: &Path| {
        let as_user = unprivileged();
        let mut command = match &as_user {
            Some(setpriv) => {
                let mut command = Command::new(setpriv[0]);
                command
                    .args(&setpriv[1..])
                    .arg(env!("CARGO_BIN_EXE_flowbox"));
                command
            }
            None => Command::new(env!("CARGO_BIN_EXE_flowbox")),
        };
        command
            .args(["run", &one, "--db", db.to_str().unwrap()])
            .current_dir(root())
            .env("FLOWBOX_CACHE_DIR", root().join("target/flowbox-cache"))
            .run_to_end()
    };
    // Made by the user who will run, then made read-only piece by piece.
    let output = run(&db);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let wal = writable.join("journal.db-wal");
    std::fs::write(&wal, b"").unwrap();
    std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o666)).unwrap();
    for file in [&db, &wal] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o444)).unwrap();
        let output = run(&db);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "cannot use {} as a journal: it cannot be written: Permission denied",
                file.display()
            )),
            "{stderr}"
        );
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o555)).unwrap();
    let output = run(&writable.join("new.db"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot use {} as a journal: the directory cannot be written",
            writable.display()
        )) && stderr.contains("Permission denied"),
        "{stderr}"
    );
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o777)).unwrap();
}

/// The command prefix that runs a program as an unprivileged user, when this test runs as root
/// (for whom file permissions do not bind); `None` otherwise.
#[cfg(target_os = "linux")]
fn unprivileged() -> Option<[&'static str; 5]> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let root = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0");
    root.then_some([
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
    ])
}

#[cfg(target_os = "linux")]
#[test]
fn output_that_cannot_be_written_fails_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = script(&dir, "one.py", "return 1\n");
    let output = command(&["run", &path, "--no-journal", "--json"])
        .stdout(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
        .run_to_end();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot write the output"), "{stderr}");
}

#[test]
fn a_journal_of_the_previous_format_resumes_and_shows() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let dump =
        std::fs::read_to_string(root().join("host/store/tests/fixtures/journal-v2.sql")).unwrap();
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(&dump)
        .unwrap();
    let db = db.to_str().unwrap();
    // The thread read notes/plan.txt before it was interrupted; that read is journaled, so
    // what the file says now never reaches the script.
    let notes = dir.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("plan.txt"), "changed since").unwrap();
    // Only the leaf the journal lost may reach the backend; any other prompt fails.
    let log = dir.path().join("calls.jsonl");
    let backend = dir.path().join("backend.json");
    std::fs::write(
        &backend,
        json!({
            "call_log": log,
            "rules": [{"prompt": "^summarise approve / ship on friday$", "text": "all good",
                       "tokens": {"input": 30, "output": 5}}]
        })
        .to_string(),
    )
    .unwrap();
    let resumed = flowbox(&[
        "resume",
        "old-interrupted",
        "--db",
        db,
        "--backend",
        &format!("scripted:{}", backend.display()),
        "--allow-read",
        notes.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let resumed = stdout_json(&resumed);
    assert_eq!(
        resumed["result"].to_string(),
        r#"{"verdict":{"verdict":"approve","n":1180591620717411303425},"failure":"provider unavailable","summary":"all good","n":1180591620717411303424}"#
    );
    assert_eq!(resumed["summary"]["leaves"], 3);
    assert_eq!(resumed["summary"]["tools_called"], 1);
    let calls = calls_by_prompt(&log);
    assert_eq!(
        calls.into_iter().collect::<Vec<_>>(),
        [("summarise approve / ship on friday".to_owned(), 1)]
    );
    let shown = stdout_json(&flowbox(&["show", "old-interrupted", "--db", db, "--json"]));
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["entries"].as_array().unwrap().len(), 4);
    assert_eq!(shown["outcome"]["result"], resumed["result"]);

    // The finished thread shows as it ended, and resuming it prints its recorded outcome.
    let shown = flowbox(&["show", "old-finished", "--db", db]);
    assert_eq!(shown.status.code(), Some(0));
    let text = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(text.contains("status   succeeded"), "{text}");
    assert!(text.contains("greet"), "{text}");
    assert!(text.contains("5e-324"), "{text}");
    let shown = stdout_json(&flowbox(&["show", "old-finished", "--db", db, "--json"]));
    assert_eq!(
        shown["outcome"]["result"].to_string(),
        r#"{"reply":"[fake greet] hello from an old journal","x":5e-324}"#
    );
    assert_eq!(shown["header"]["args"].to_string(), r#"{"x":5e-324}"#);
    assert!(shown["header"].get("seed").is_none(), "{shown}");
    let again = stdout_json(&flowbox(&["resume", "old-finished", "--db", db, "--json"]));
    assert_eq!(again["ok"], true);
    assert_eq!(again["result"], shown["outcome"]["result"]);
    assert_eq!(again["summary"]["logs"], json!(["greeted"]));
    let workflows = flowbox(&["workflows", "--conversation", "conv-old", "--db", db]);
    assert_eq!(workflows.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&workflows.stdout).contains("old-finished"),
        "{}",
        String::from_utf8_lossy(&workflows.stdout)
    );
}

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
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
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

#[test]
fn a_gate_below_the_plan_refuses_the_run_before_any_leaf_with_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    // The scripted backend's call log would show any call that was made.
    let log = dir.path().join("calls.jsonl");
    let backend = script(
        &dir,
        "backend.json",
        &format!(
            r#"{{"fallback": "fake", "call_log": {:?}}}"#,
            log.to_str().unwrap()
        ),
    );
    let output = flowbox(&[
        "run",
        "examples/review.py",
        "--backend",
        &format!("scripted:{backend}"),
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
    let ok = script(&dir, "ok.py", "return 1\n");
    let bad_json = script(&dir, "bad.json", "{\"written\": ");
    let negative = script(
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

#[test]
fn guidance_names_the_profiles_templates_tools_and_limits_the_flags_configure() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    let profiles = script(
        &dir,
        "profiles.json",
        r#"{"deep": {"model": "large-model", "description": "slow, for judgement"},
            "local": "llama3:8b", "fast": "replaced by the flag"}"#,
    );
    let types = script(
        &dir,
        "types.json",
        r#"{"critic": {"description": "finds the weak points of a draft",
                       "base_prompt": "You criticise.", "model": "deep", "tools": []}}"#,
    );
    let equipped = flowbox(&[
        "guidance",
        "--profiles",
        &profiles,
        "--profile",
        "fast=small-model:cheap, for sweeps",
        "--agent-types",
        &types,
        "--allow-read",
        &docs.to_string_lossy(),
        "--budget",
        "5000",
    ]);
    assert!(
        equipped.status.success(),
        "{}",
        String::from_utf8_lossy(&equipped.stderr)
    );
    let text = String::from_utf8(equipped.stdout).unwrap();
    for part in [
        "- `deep`: slow, for judgement\n- `fast`: cheap, for sweeps\n- `local`: the model llama3:8b\n",
        "- `critic`: finds the weak points of a draft (profile `deep`; no tools)",
        "- `read_file(path: string)` [leaves, call_tool]: Read a UTF-8 text file. `path` starts \
         with a granted directory's name (docs)",
        "a budget of 5000 tokens",
        "## Patterns",
        "call_tool(\"read_file\"",
    ] {
        assert!(text.contains(part), "{part}\n---\n{text}");
    }

    let bare = flowbox(&["guidance", "--no-patterns"]);
    assert!(bare.status.success());
    let text = String::from_utf8(bare.stdout).unwrap();
    for part in [
        "Model profiles: none",
        "Leaf templates: none",
        "Host tools: none",
        "no token budget",
    ] {
        assert!(text.contains(part), "{part}");
    }
    assert!(!text.contains("## Patterns"));

    // A profiles file that is not one is refused up front.
    let broken = script(&dir, "broken.json", r#"{"fast": 5}"#);
    let output = flowbox(&["guidance", "--profiles", &broken]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("is not valid"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
