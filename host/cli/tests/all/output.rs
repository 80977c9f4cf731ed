//! A stdout or stderr the command cannot write: a reader that stops reading ends the command
//! quietly with its own exit code, a stderr nobody can write changes nothing, and a result that
//! cannot be written fails the command.

use std::process::Stdio;

use crate::support::{RunToEnd, command, finish, flowbox, write_file};

#[test]
fn a_reader_that_stops_reading_ends_the_command_quietly_with_its_own_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let many = write_file(&dir, "many.py", "return list(range(20000))\n");
    let failing = write_file(&dir, "failing.py", "raise ValueError('no')\nreturn 1\n");
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
        let output = finish(child);
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
    let one = write_file(&dir, "one.py", "log('a warning-sized line')\nreturn 1\n");
    let failing = write_file(&dir, "failing.py", "raise ValueError('no')\nreturn 1\n");
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

#[cfg(target_os = "linux")]
#[test]
fn output_that_cannot_be_written_fails_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "one.py", "return 1\n");
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
