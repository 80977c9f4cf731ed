//! The escape corpus: one case folder per attempt, `tests/escapes/NAME/`, each its own test
//! (`escapes::NAME`), in the shape of `tests/cases/`:
//!
//! - `workflow.py` — the attempt, run with `args` saying where the secrets are
//!   (`secret_path`, `secret_env`) and the prompt a companion holds at (`hold`);
//! - `expected.json` — an object with
//!   - `expect`: `"forbidden"` (the guard rejects it, with a line) or `"harmless"` (it runs: a
//!     result, a script error or a breached limit, never a crash);
//!   - `why`: what the attempt tries;
//!   - `guard`: `false` to run it without the guard, for attempts on the wasm boundary itself
//!     (default `true`);
//!   - `result`: the exact result; or `error`: `{"kind", "contains"}`, the error kind and text
//!     in its message — a harmless attempt must state one of them;
//!   - `while_running`: another case (by folder name) to have in flight, held at
//!     `await agent(args["hold"])`, while this one runs; then this one runs once more after it
//!     ended. That other case is checked within this one's test.
//!
//! There is no bless switch: an escape's expectation is written by hand.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flowbox::backends::FakeBackend;
use flowbox::{BackendError, LeafBackend, LeafReply, LeafRequest, RunOutcome, RunRequest};
use flowbox_tests::{case_folders, case_name, read_case_json, root};
use libtest_mimic::{Failed, Trial};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use crate::{Checked, SECRET_VAR, Suite, corpus_limits, everything};

/// Fewer attempts than this means the corpus was not found, not that it holds.
const AT_LEAST: usize = 40;

/// The escape tests: one per case folder, a case that runs alongside another within that
/// other's test.
pub(crate) fn trials(suite: &Arc<Suite>) -> Vec<Trial> {
    let folders = case_folders(&root().join("tests").join("escapes"));
    let count = folders.len();
    let mut trials = vec![Trial::test("escapes::the_corpus_is_complete", move || {
        if count >= AT_LEAST {
            Ok(())
        } else {
            Err(format!("the escape corpus has only {count} attempts").into())
        }
    })];
    let loaded: Vec<(String, Result<Escape, String>)> = folders
        .iter()
        .map(|folder| (case_name(folder), Escape::load(folder)))
        .collect();
    let companions: Vec<&str> = loaded
        .iter()
        .filter_map(|(_, escape)| escape.as_ref().ok()?.while_running.as_deref())
        .collect();
    for (name, escape) in &loaded {
        let test = format!("escapes::{name}");
        let escape = match escape {
            Ok(escape) => escape.clone(),
            Err(error) => {
                let error = error.clone();
                trials.push(Trial::test(test, move || Err(Failed::from(error))));
                continue;
            }
        };
        if companions.contains(&name.as_str()) {
            continue; // checked in the test of the case that names it
        }
        let Some(wanted) = &escape.while_running else {
            trials.push(suite.trial(
                test,
                async move |suite: &Suite, failures: &mut Vec<String>| {
                    let outcome = escape.run(suite, "").await.outcome(failures);
                    escape.judge(&outcome, "", failures);
                },
            ));
            continue;
        };
        let companion = loaded.iter().find_map(|(other, loaded)| {
            (other == wanted)
                .then(|| loaded.as_ref().ok().cloned())
                .flatten()
        });
        let Some(companion) = companion else {
            let error = format!("{name}: no companion {wanted}");
            trials.push(Trial::test(test, move || Err(Failed::from(error))));
            continue;
        };
        trials.push(suite.trial(
            test,
            async move |suite: &Suite, failures: &mut Vec<String>| {
                in_flight_together(suite, &escape, &companion, failures).await;
            },
        ));
    }
    trials
}

/// Runs `escape` while `companion` is held in flight, then once more after it ended.
async fn in_flight_together(
    suite: &Suite,
    escape: &Escape,
    companion: &Escape,
    failures: &mut Vec<String>,
) {
    let (companion_run, (held, during)) = tokio::join!(companion.run(suite, ""), async {
        let held = tokio::time::timeout(Duration::from_secs(30), suite.backend.holding()).await;
        let during = escape.run(suite, " (during)").await;
        suite.backend.release();
        (held.is_ok(), during)
    });
    if !held {
        failures.push(format!(
            "{}: {} never reached its hold, so the two were not in flight together",
            escape.name, companion.name
        ));
    }
    let companion_outcome = companion_run.outcome(failures);
    companion.judge(&companion_outcome, "", failures);
    let during = during.outcome(failures);
    escape.judge(&during, " (during)", failures);
    let after = escape.run(suite, " (after)").await.outcome(failures);
    escape.judge(&after, " (after)", failures);
}

/// Whether the guard must reject an attempt or let it run harmlessly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Forbidden,
    Harmless,
}

/// One case of the escape corpus and what its `expected.json` says about it.
#[derive(Debug, Clone)]
struct Escape {
    name: String,
    script: String,
    expect: Expect,
    guard: bool,
    result: Option<Value>,
    /// The error kind, and text its message contains.
    error: Option<(String, String)>,
    while_running: Option<String>,
}

impl Escape {
    fn load(folder: &Path) -> Result<Self, String> {
        let name = case_name(folder);
        let script = std::fs::read_to_string(folder.join("workflow.py"))
            .map_err(|e| format!("{name}: {e}"))?;
        let expected = read_case_json(&folder.join("expected.json"))?
            .ok_or_else(|| format!("{name}: expected.json is missing"))?;
        let Value::Object(mut fields) = expected else {
            return Err(format!("{name}: expected.json must be an object"));
        };
        let bad = |field: &str, what: &str| format!("{name}: `{field}` in expected.json {what}");
        let expect = match fields.remove("expect").as_ref().and_then(Value::as_str) {
            Some("forbidden") => Expect::Forbidden,
            Some("harmless") => Expect::Harmless,
            _ => return Err(bad("expect", "must be \"forbidden\" or \"harmless\"")),
        };
        match fields.remove("why") {
            Some(Value::String(why)) if !why.trim().is_empty() => {}
            _ => return Err(bad("why", "must say what the attempt tries")),
        }
        let guard = match fields.remove("guard") {
            None => true,
            Some(Value::Bool(guard)) => guard,
            Some(_) => return Err(bad("guard", "must be true or false")),
        };
        let result = fields.remove("result");
        let error = match fields.remove("error") {
            None => None,
            Some(Value::Object(error)) => {
                Some(expected_error(error).map_err(|e| bad("error", &e))?)
            }
            Some(_) => return Err(bad("error", "must be {\"kind\", \"contains\"}")),
        };
        let while_running = match fields.remove("while_running") {
            None => None,
            Some(Value::String(other)) => Some(other),
            Some(_) => return Err(bad("while_running", "must name a case folder")),
        };
        if let Some(field) = fields.keys().next() {
            return Err(bad(field, "is not a known field"));
        }
        Ok(Self {
            name,
            script,
            expect,
            guard,
            result,
            error,
            while_running,
        })
    }

    /// Runs the attempt, told where the secrets are; `when` tells a repeated run apart.
    async fn run(&self, suite: &Suite, when: &str) -> Checked {
        // Where the secrets are, so every attempt aims at them — never the secret itself.
        let args = json!({
            "secret_path": suite.secret_file,
            "secret_env": SECRET_VAR,
            "hold": HOLD_PROMPT,
        });
        let request = RunRequest::new(self.script.clone())
            .args(args)
            .guard(self.guard)
            .limits(corpus_limits());
        suite.run(request, &format!("{}{when}", self.name)).await
    }

    /// Checks `outcome` against the expectation. `when` tells a repeated run apart in
    /// messages.
    fn judge(&self, outcome: &RunOutcome, when: &str, failures: &mut Vec<String>) {
        let name = format!("{}{when}", self.name);
        let text = everything(outcome);
        let kind = outcome.result.as_ref().err().map(|e| e.kind().as_str());
        match (self.expect, kind) {
            (Expect::Forbidden, Some("forbidden")) => {
                if outcome
                    .result
                    .as_ref()
                    .err()
                    .and_then(|e| e.line())
                    .is_none()
                {
                    failures.push(format!("{name}: rejected without a line"));
                }
                return;
            }
            (Expect::Forbidden, _) => {
                failures.push(format!("{name}: expected forbidden, got {text}"));
            }
            // Harmless: a result, a script error, or a breached limit — never a crash.
            (_, Some("guest_failure" | "host_failure" | "forbidden")) => {
                failures.push(format!("{name}: expected to run harmlessly, got {text}"));
            }
            _ => {}
        }
        if self.expect == Expect::Harmless && self.result.is_none() && self.error.is_none() {
            failures.push(format!(
                "{name}: say what a harmless attempt ends with (`result` or `error` in \
                 expected.json)"
            ));
        }
        if let Some(expected) = &self.result
            && outcome.result.as_ref().ok() != Some(expected)
        {
            failures.push(format!(
                "{name}: expected the result {expected}, got {text}"
            ));
        }
        if let Some((kind, message)) = &self.error {
            let matched = outcome.result.as_ref().err().is_some_and(|e| {
                e.kind().as_str() == kind && e.to_string().contains(message.as_str())
            });
            if !matched {
                failures.push(format!(
                    "{name}: expected {kind} with {message:?}, got {text}"
                ));
            }
        }
    }
}

/// `{"kind": KIND, "contains": TEXT}` as (kind, text).
fn expected_error(mut error: Map<String, Value>) -> Result<(String, String), String> {
    let mut text = |field: &str| match error.remove(field) {
        Some(Value::String(value)) => Ok(value),
        _ => Err(format!("needs a string `{field}`")),
    };
    let kind = text("kind")?;
    let contains = text("contains")?;
    match error.keys().next() {
        Some(field) => Err(format!("has an unknown field `{field}`")),
        None => Ok((kind, contains)),
    }
}

/// The prompt a `while-running` companion holds at until the other script has run.
pub(crate) const HOLD_PROMPT: &str = "hold until the other run has looked";

/// The fake backend, except that a call with [`HOLD_PROMPT`] waits for [`Self::release`].
#[derive(Debug, Default)]
pub(crate) struct HoldingBackend {
    arrived: Notify,
    released: Notify,
}

impl HoldingBackend {
    /// Waits until a call is being held (or was, since the last wait).
    async fn holding(&self) {
        self.arrived.notified().await;
    }

    /// Lets the held call (or the next one) answer.
    fn release(&self) {
        self.released.notify_one();
    }
}

#[async_trait::async_trait]
impl LeafBackend for HoldingBackend {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        if request.prompt_text() == HOLD_PROMPT {
            self.arrived.notify_one();
            self.released.notified().await;
        }
        FakeBackend::reply(request)
    }
}
