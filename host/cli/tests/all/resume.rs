//! What a journaled thread saves a later run: `flowbox resume` after a SIGKILL calls no finished
//! leaf again (and a live run's thread cannot be driven twice), and `run --reuse-leaves` calls
//! the backend only for the leaves an edited script changed.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{
    assert_exit, call_log, calls_by_prompt, command, flowbox, scripted_backend, stdout_json,
    write_file,
};

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
        scripted_backend(
            &dir,
            &format!("right-{right_ms}.json"),
            json!({
                "latency_ms": 150,
                "fallback": "fake",
                "call_log": log,
                "rules": [{"prompt": "^right$", "text": "[fake leaf] {prompt}", "latency_ms": right_ms}]
            }),
        )
    });
    let [slow, backend] = &backends;
    let workflow = write_file(
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
    let resume = || {
        flowbox(&[
            "resume",
            "killed",
            "--db",
            db,
            "--backend",
            backend,
            "--json",
        ])
    };
    // While the run is alive, a second process cannot drive the thread too.
    let rival = resume();
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

    let resumed = resume();
    assert_exit(&resumed, 0);
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
    let again = resume();
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
fn reuse_leaves_calls_the_backend_only_for_changed_requests() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    let log = dir.path().join("calls.jsonl");
    let backend = scripted_backend(
        &dir,
        "answers.json",
        json!({"rules": [{"prompt": ".", "text": "answer to {prompt}"}], "call_log": log}),
    );
    let workflow = |beta: &str| {
        format!(
            "pair = await parallel([lambda: agent('alpha'), lambda: agent('{beta}')])\n\
             last = await agent('gamma')\n\
             return pair + [last]\n"
        )
    };
    let v1 = write_file(&dir, "v1.py", &workflow("beta"));
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
        assert_exit(&output, 0);
        stdout_json(&output)
    };
    let first = run(&v1, "reuse-a", None);
    assert_eq!(
        first["result"],
        json!(["answer to alpha", "answer to beta", "answer to gamma"])
    );
    assert_eq!(call_log(&log).len(), 3);

    // The edited script may not resume thread A, but it may reuse A's identical leaves.
    let v2 = write_file(&dir, "v2.py", &workflow("beta, revised"));
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
