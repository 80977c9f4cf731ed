//! `flowbox run`: the README's offline demo, a script's `args` from a flag or a file, and the
//! thread id a run prints and journals under.

use serde_json::{Value, json};

use crate::support::{assert_exit, flowbox, stdout_json, write_file};

#[test]
fn the_demo_command_runs_the_example_offline() {
    let output = flowbox(&[
        "run",
        "examples/review.py",
        "--backend",
        "scripted:examples/review.backend.json",
    ]);
    assert_exit(&output, 0);
    let result: Value = serde_json::from_slice(&output.stdout).expect("pretty JSON");
    assert_eq!(result["verdict"]["verdict"], "approve");
    assert_eq!(
        result["reviews"][0],
        "review parser.rs: two naming nits, no bugs found"
    );
}

#[test]
fn args_come_from_flags_or_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "echo.py", "return args\n");
    let output = flowbox(&["run", &path, "--args", r#"{"a": [1]}"#, "--json"]);
    assert_eq!(stdout_json(&output)["result"], json!({"a": [1]}));
    let args = write_file(&dir, "args.json", r#"{"b": "ü"}"#);
    let output = flowbox(&["run", &path, "--args-file", &args, "--json"]);
    assert_eq!(stdout_json(&output)["result"], json!({"b": "ü"}));
    let output = flowbox(&["run", &path, "--json"]);
    assert_eq!(stdout_json(&output)["result"], json!({}));
}

#[test]
fn runs_print_their_thread_and_are_journaled_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(&dir, "one.py", "return await agent('x')\n");
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

/// docs/security.md: on Linux the binary is linked position-dependent (`host/cli/build.rs`), so
/// the loader relocates nothing of its own at start-up. Its ELF type is `ET_EXEC`, not the
/// `ET_DYN` of a position-independent executable.
#[test]
#[cfg(target_os = "linux")]
fn the_binary_is_linked_position_dependent() {
    let binary = std::fs::read(env!("CARGO_BIN_EXE_flowbox")).unwrap();
    assert_eq!(&binary[..4], b"\x7fELF");
    let e_type = u16::from_le_bytes([binary[16], binary[17]]);
    assert_eq!(e_type, 2, "ET_EXEC (2), not ET_DYN (3)");
}
