//! `flowbox show THREAD --follow` from another process while a `flowbox run` writes the thread.

use std::process::Stdio;
use std::time::Duration;

use crate::support::{command_with_db, json_lines, scripted_backend, wait_until, write_file};
use flowbox_testkit::events::assert_one_run;

const SCRIPT: &str = r#"
meta = {"name": "slow-fan", "description": "d", "phases": [{"title": "review"}]}
async def main():
    phase("review")
    return await parallel([lambda i=i: agent(f"review {i}", label=f"r{i}") for i in range(3)])
"#;

const SLOW: &str = r#"{"latency_ms": 700, "fallback": "fake"}"#;

#[test]
fn follow_prints_a_runs_events_as_another_process_writes_them_and_exits_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let script = write_file(&dir, "fan.py", SCRIPT);
    let backend = scripted_backend(&dir, "slow.json", SLOW);
    let mut run = command_with_db(
        &db,
        &[
            "run",
            &script,
            "--thread",
            "followed",
            "--backend",
            &backend,
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Wait for the thread to exist, then follow it while it runs.
    wait_until(Duration::from_secs(60), "the thread never appeared", || {
        command_with_db(&db, &["show", "followed"])
            .output()
            .unwrap()
            .status
            .success()
    });
    assert!(run.try_wait().unwrap().is_none(), "the run is still going");
    let followed = command_with_db(&db, &["show", "followed", "--follow"])
        .output()
        .unwrap();
    let stdout = String::from_utf8(followed.stdout).unwrap();
    assert!(
        followed.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&followed.stderr)
    );
    assert!(run.wait().unwrap().success());
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("#1 "), "{stdout}");
    assert!(
        lines[0].contains("run started slow-fan (phases: review)"),
        "{stdout}"
    );
    let started = lines.iter().filter(|l| l.contains(" started r")).count();
    let done = lines.iter().filter(|l| l.contains(" done ")).count();
    assert_eq!((started, done), (3, 3), "{stdout}");
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(" started r1 in parallel 1 branch 1")),
        "{stdout}"
    );
    assert!(
        lines.last().unwrap().contains("run succeeded (3 leaves"),
        "{stdout}"
    );

    // Afterwards, the same history as JSON Lines, numbered without holes.
    let json = command_with_db(&db, &["show", "followed", "--follow", "--json"])
        .output()
        .unwrap();
    assert!(json.status.success());
    let events = json_lines(&String::from_utf8(json.stdout).unwrap());
    assert_eq!(events.len(), lines.len());
    assert_one_run(&events, "followed", Some(3));

    // A thread that does not exist is an input error, not a wait.
    let missing = command_with_db(&db, &["show", "nope", "--follow"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope"));
}

#[test]
fn follow_of_a_failed_run_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let script = write_file(
        &dir,
        "fail.py",
        "x = await agent('a')\nraise ValueError('no')\nreturn x\n",
    );
    let run = command_with_db(&db, &["run", &script, "--thread", "failing"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    // The run says how to follow it.
    assert!(
        String::from_utf8_lossy(&run.stderr).contains(
            "follow it with `flowbox show failing --follow`, or see it in `flowbox serve`"
        )
    );
    let followed = command_with_db(&db, &["show", "failing", "--follow"])
        .output()
        .unwrap();
    assert_eq!(followed.status.code(), Some(1));
    let stdout = String::from_utf8(followed.stdout).unwrap();
    assert!(
        stdout.lines().last().unwrap().contains("run failed"),
        "{stdout}"
    );
}
