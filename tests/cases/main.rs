//! Script cases stored as folders beside this file, `tests/cases/NAME/`, each its own test
//! (`cases::NAME`):
//!
//! - `workflow.py` — the script;
//! - `args.json` — its args (default `{}`); `backend.json` — a scripted backend (default fake);
//!   `limits.json` — limits (default [`Limits::default`]);
//! - `expected.json` — `{"ok": true, "result": …}` or `{"ok": false, "error": {…}}`.
//!
//! `cargo test --release -p flowbox-tests --test cases -- NAME` runs the cases whose names
//! contain NAME. `FLOWBOX_BLESS=1 cargo test --release -p flowbox-tests --test cases` rewrites
//! the expectations from what the scripts do now; review the diff before committing it.
//!
//! The tests are [`libtest_mimic`] trials, one per folder, so this binary has its own `main`
//! (`harness = false`) and takes the usual test-harness arguments.

use std::path::Path;
use std::sync::Arc;

use flowbox::backends::{FakeBackend, ScriptedBackend};
use flowbox::{LeafBackend, Limits, RunRequest};
use flowbox_tests::{case_folders, case_name, read_case_json, root, runtime_with};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::{Value, json};

/// Fewer folders than this means the cases were not found, not that they all passed.
const AT_LEAST: usize = 10;

fn main() {
    let arguments = Arguments::from_args();
    let bless = std::env::var_os("FLOWBOX_BLESS").is_some();
    let dir = root().join("tests").join("cases");
    let folders = case_folders(&dir);
    let count = folders.len();
    let mut trials = vec![Trial::test(
        "cases::the_folder_holds_the_cases",
        move || {
            if count >= AT_LEAST {
                Ok(())
            } else {
                Err(format!("expected at least {AT_LEAST} cases, found {count}").into())
            }
        },
    )];
    trials.extend(folders.into_iter().map(|folder| {
        Trial::test(format!("cases::{}", case_name(&folder)), move || {
            check(&folder, bless)
        })
    }));
    libtest_mimic::run(&arguments, trials).exit();
}

/// What a case checks: the outcome without the parts that vary between runs.
fn observed(outcome: &flowbox::RunOutcome) -> Value {
    let json = outcome.to_json();
    match &outcome.result {
        Ok(result) => json!({"ok": true, "result": result}),
        Err(_) => json!({"ok": false, "error": json["error"]}),
    }
}

/// Runs one case folder and compares (or, blessing, rewrites) its expectation.
fn check(case: &Path, bless: bool) -> Result<(), Failed> {
    let script = std::fs::read_to_string(case.join("workflow.py"))
        .map_err(|e| format!("{}: {e}", case.display()))?;
    let args = read_case_json(&case.join("args.json"))?.unwrap_or_else(|| json!({}));
    let backend: Arc<dyn LeafBackend> = match std::fs::read_to_string(case.join("backend.json")) {
        Ok(config) => Arc::new(
            ScriptedBackend::from_json(&config)
                .map_err(|e| format!("invalid backend.json: {e}"))?,
        ),
        Err(_) => Arc::new(FakeBackend::new()),
    };
    let limits: Limits = match read_case_json(&case.join("limits.json"))? {
        Some(value) => {
            serde_json::from_value(value).map_err(|e| format!("invalid limits.json: {e}"))?
        }
        None => Limits::default(),
    };
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let outcome = tokio.block_on(async {
        runtime_with(backend, limits)
            .run_request(RunRequest::new(script).args(args).thread_id("case"))
            .await
    });
    let got = observed(&outcome);
    let expected_path = case.join("expected.json");
    if bless {
        let text = serde_json::to_string_pretty(&got).expect("serialisable") + "\n";
        std::fs::write(&expected_path, text).map_err(|e| format!("cannot bless: {e}"))?;
        return Ok(());
    }
    let expected = read_case_json(&expected_path)?.ok_or_else(|| {
        format!(
            "{} is missing; run with FLOWBOX_BLESS=1",
            expected_path.display()
        )
    })?;
    if got != expected {
        return Err(format!(
            "{}:\n  expected {expected}\n  got      {got}\n  logs {:?}",
            case.display(),
            outcome.summary.logs
        )
        .into());
    }
    Ok(())
}
