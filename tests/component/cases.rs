//! Script cases stored as folders under `tests/cases/NAME/`:
//!
//! - `workflow.py` — the script;
//! - `args.json` — its args (default `{}`); `backend.json` — a scripted backend (default fake);
//!   `limits.json` — limits (default [`Limits::default`]);
//! - `expected.json` — `{"ok": true, "result": …}` or `{"ok": false, "error": {…}}`.
//!
//! `FLOWBOX_BLESS=1 cargo test --release -p flowbox-tests cases` rewrites the expectations
//! from what the scripts do now; review the diff before committing it.

use std::path::Path;
use std::sync::Arc;

use flowbox::backends::{FakeBackend, ScriptedBackend};
use flowbox::{LeafBackend, Limits, RunRequest};
use flowbox_tests::{root, runtime_with};
use serde_json::{Value, json};

fn read_json(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// What a case checks: the outcome without the parts that vary between runs.
fn observed(outcome: &flowbox::RunOutcome) -> Value {
    let json = outcome.to_json();
    match &outcome.result {
        Ok(result) => json!({"ok": true, "result": result}),
        Err(_) => json!({"ok": false, "error": json["error"]}),
    }
}

#[tokio::test]
async fn script_cases() {
    let bless = std::env::var_os("FLOWBOX_BLESS").is_some();
    let dir = root().join("tests").join("cases");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/cases exists")
        .map(|entry| entry.expect("readable").path())
        .filter(|path| path.join("workflow.py").is_file())
        .collect();
    names.sort();
    assert!(
        names.len() >= 10,
        "expected the script cases in {}",
        dir.display()
    );
    let mut failures = Vec::new();
    for case in &names {
        let script = std::fs::read_to_string(case.join("workflow.py")).expect("readable");
        let args = read_json(&case.join("args.json")).unwrap_or_else(|| json!({}));
        let backend: Arc<dyn LeafBackend> = match std::fs::read_to_string(case.join("backend.json"))
        {
            Ok(config) => {
                Arc::new(ScriptedBackend::from_json(&config).expect("valid backend.json"))
            }
            Err(_) => Arc::new(FakeBackend::new()),
        };
        let limits: Limits = read_json(&case.join("limits.json"))
            .map(|v| serde_json::from_value(v).expect("valid limits.json"))
            .unwrap_or_default();
        let runtime = runtime_with(backend, limits);
        let outcome = runtime
            .run_request(RunRequest::new(script).args(args).thread_id("case"))
            .await;
        let got = observed(&outcome);
        let expected_path = case.join("expected.json");
        if bless {
            let text = serde_json::to_string_pretty(&got).expect("serialisable") + "\n";
            std::fs::write(&expected_path, text).expect("writable");
            continue;
        }
        let expected = read_json(&expected_path).unwrap_or_else(|| {
            panic!(
                "{} is missing; run with FLOWBOX_BLESS=1",
                expected_path.display()
            )
        });
        if got != expected {
            failures.push(format!(
                "{}:\n  expected {expected}\n  got      {got}\n  logs {:?}",
                case.display(),
                outcome.summary.logs
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
