//! Limits from flags and from a `--limits` file: the file loaded and overridden by flags, a value
//! out of range refused before anything runs, a memory cap too small for the interpreter.

use std::process::Output;

use crate::support::{flowbox, stdout_json, write_file};

/// A limit no run could work under is a mistake in the input, not a limit to breach: it is
/// refused before anything runs (no thread is journaled), naming the flag and its range.
#[test]
fn every_limit_flag_out_of_range_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let ok = write_file(&dir, "ok.py", "return 1\n");
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
    let ok = write_file(&dir, "ok.py", "return 1\n");
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
fn limits_load_from_a_file_and_flags_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let fan = write_file(
        &dir,
        "fan.py",
        "return await parallel([lambda i=i: agent(str(i)) for i in range(4)])\n",
    );
    let limits = write_file(&dir, "limits.json", r#"{"max_agents": 2}"#);
    let nulls = |output: &Output| {
        stdout_json(output)["result"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v.is_null())
            .count()
    };
    let output = flowbox(&["run", &fan, "--limits", &limits, "--json"]);
    assert_eq!(nulls(&output), 2);
    let output = flowbox(&[
        "run",
        &fan,
        "--limits",
        &limits,
        "--max-agents",
        "3",
        "--json",
    ]);
    assert_eq!(nulls(&output), 1);
    let bad = write_file(&dir, "bad.json", r#"{"fuel_units": 2}"#);
    assert_eq!(
        flowbox(&["run", &fan, "--limits", &bad]).status.code(),
        Some(2)
    );
}
