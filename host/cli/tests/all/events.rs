//! `--events`: a run's events as JSON Lines on stdout before the result or in a file, every one of
//! them even when the reader is late or pauses.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{assert_exit, command, finish, flowbox, json_lines, write_file};
use flowbox_testkit::events::assert_one_run;

#[test]
fn run_writes_events_to_stdout_before_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "two.py", "log('hi')\nreturn await agent('x')\n");
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
    write_file(
        dir,
        "long.py",
        &format!("for i in range({lines}):\n    log(str(i))\nreturn 1\n"),
    )
}

/// Waits for `child`, which must succeed without a panic.
fn succeeded(child: Child) {
    let output = finish(child);
    assert_exit(&output, 0);
}

/// Checks that `text` is the record of one run of [`long_log`]: every event, in order, with
/// consecutive sequence numbers and no gap marker.
fn assert_every_log_event(text: &str, lines: u64) {
    let events = json_lines(text);
    assert_eq!(events.len() as u64, lines + 2, "events recorded");
    let thread = events[0]["thread_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_one_run(&events, &thread, Some(0));
    for (i, event) in events[1..=lines as usize].iter().enumerate() {
        assert_eq!(event["type"], "log");
        assert_eq!(event["message"], i.to_string());
    }
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
    assert_exit(&output, 0);
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
