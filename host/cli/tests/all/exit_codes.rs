//! The exit codes `--help` documents: 1 for a failed script, 2 for input refused before a run, 3
//! for a breached limit.

use serde_json::json;

use crate::support::{RunToEnd, command, flowbox, stdout_json, write_file};

#[test]
fn a_failing_script_exits_1_with_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(
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
fn rejected_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let syntax = write_file(&dir, "syntax.py", "return (\n");
    assert_eq!(flowbox(&["run", &syntax]).status.code(), Some(2));
    let import = write_file(&dir, "import.py", "import os\nreturn 1\n");
    let output = flowbox(&["run", &import, "--json"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stdout_json(&output)["error"]["kind"], "forbidden");
    let ok = write_file(&dir, "ok.py", "return 1\n");
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
    let big = write_file(
        &dir,
        "big.py",
        &format!("# {}\nreturn 1\n", "x".repeat(70_000)),
    );
    assert_eq!(flowbox(&["run", &big]).status.code(), Some(2));
}

#[test]
fn breached_limits_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let spin = write_file(&dir, "spin.py", "while True:\n    pass\nreturn 1\n");
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
    let hog = write_file(
        &dir,
        "hog.py",
        "x = []\nwhile True:\n    x.append('a' * 100000)\nreturn 1\n",
    );
    let output = flowbox(&["run", &hog, "--memory-mib", "48", "--json"]);
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(stdout_json(&output)["error"]["kind"], "out_of_memory");
}

/// The guest loads while the command parses its flags; a command line that only asks for help,
/// or is refused, ends the process without waiting for it. On an empty cache, loading it means
/// compiling it (seconds), and a process that waited would leave the compiled guest behind.
#[test]
fn help_and_refused_flags_end_without_waiting_for_the_guest() {
    let cache = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        command(args)
            .env("FLOWBOX_CACHE_DIR", cache.path())
            .run_to_end()
    };
    let help = run(&["run", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("Usage: flowbox run"));
    let refused = run(&["run", "--no-such-flag", "a.py"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--no-such-flag"));
    let compiled: Vec<_> = std::fs::read_dir(cache.path())
        .map(|entries| entries.flatten().map(|entry| entry.file_name()).collect())
        .unwrap_or_default();
    assert!(compiled.is_empty(), "{compiled:?}");
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
