//! `--json`: exactly one object on stdout, even when nothing ran, with a result's numbers and key
//! order as the script made them through `run`, `show` and `resume`.

use serde_json::{Value, json};

use crate::support::{assert_exit, flowbox, stdout_json, write_file};

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

/// The issue's own example, 2**70, -(2**65), a float a lossy parser gets one bit wrong, the
/// smallest subnormal, a negative zero, and keys out of alphabetical order.
const EXACT_ARGS: &str = r#"{"id":12345678901234567890123,"zeta":1180591620717411303424,"neg":-36893488147419103232,"r":0.21599615170364495,"tiny":5e-324,"nz":-0.0,"x":{"b":1,"a":2}}"#;

#[test]
fn json_keeps_numbers_and_key_order_through_run_show_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    let path = write_file(
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
    assert_exit(&output, 0);
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
        assert_exit(&output, 0);
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
fn json_mode_prints_one_object_even_when_nothing_ran() {
    let dir = tempfile::tempdir().unwrap();
    let ok = write_file(&dir, "ok.py", "return 1\n");
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

/// `--args` with a number no float holds is refused up front as `invalid_args` (exit 2),
/// naming where it is, rather than reaching the script as `inf`.
#[test]
fn args_past_the_largest_float_are_invalid_args() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_file(&dir, "echo.py", "return args\n");
    let output = flowbox(&["run", &script, "--json", "--args", r#"{"a": {"a": 1e400}}"#]);
    assert_exit(&output, 2);
    let error = &stdout_json(&output)["error"];
    assert_eq!(error["kind"], "invalid_args", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains(r#"args["a"]["a"] is 1e"#),
        "{error}"
    );
}
