//! `flowbox check`: a script's `meta`, checked without running it.

use serde_json::Value;

use crate::support::{assert_exit, flowbox, write_file};

#[test]
fn check_prints_meta_without_running() {
    let output = flowbox(&["check", "examples/review.py"]);
    assert_exit(&output, 0);
    let meta: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(meta["name"], "code-review");
    let dir = tempfile::tempdir().unwrap();
    let bad = write_file(
        &dir,
        "bad.py",
        "meta = {'name': 1, 'description': 'd'}\nreturn 1\n",
    );
    let output = flowbox(&["check", &bad]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("name"));
}
