//! Helpers shared by the integration tests: one runtime per backend, built from the one
//! compiled guest, and reading script cases stored as folders (`tests/cases/`, `tests/escapes/`).
//! The backends, tools and loopback server they share with the other crates' tests are
//! `flowbox_testkit`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flowbox::backends::{FakeBackend, ScriptedBackend};
use flowbox::{LeafBackend, Limits, RunOutcome, RunRequest, Runtime};
use serde_json::{Value, json};

pub use flowbox_testkit::{CountingBackend, FnTool, PanickingBackend};

/// The README's Rust snippets, compiled as doctests (and run, unless marked `no_run`), so the
/// embedding instructions cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct Readme;

/// The book's pages in `docs/`, one item each, so their Rust snippets are doctests too (a page
/// without one costs nothing).
#[cfg(doctest)]
mod book {
    #[doc = include_str!("../docs/README.md")]
    struct BookIndex;
    #[doc = include_str!("../docs/script.md")]
    struct ScriptContract;
    #[doc = include_str!("../docs/cli.md")]
    struct CommandLine;
    #[doc = include_str!("../docs/backends.md")]
    struct Backends;
    #[doc = include_str!("../docs/plans.md")]
    struct Plans;
    #[doc = include_str!("../docs/durability.md")]
    struct Durability;
    #[doc = include_str!("../docs/events.md")]
    struct Events;
    #[doc = include_str!("../docs/embedding.md")]
    struct Embedding;
    #[doc = include_str!("../docs/python.md")]
    struct Python;
    #[doc = include_str!("../docs/warm-pool.md")]
    struct WarmPool;
    #[doc = include_str!("../docs/orchestrator.md")]
    struct Orchestrator;
    #[doc = include_str!("../docs/restate.md")]
    struct Restate;
    #[doc = include_str!("../docs/mcp.md")]
    struct Mcp;
    #[doc = include_str!("../docs/security.md")]
    struct Security;
    #[doc = include_str!("../docs/limits.md")]
    struct Limits;
    #[doc = include_str!("../docs/environment.md")]
    struct Environment;
    #[doc = include_str!("../docs/testing.md")]
    struct Testing;
    #[doc = include_str!("../docs/benchmarks.md")]
    struct Benchmarks;
    #[doc = include_str!("../docs/layout.md")]
    struct Layout;
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_owned()
}

/// A runtime over `backend`, sharing the compiled guest through the cache under `target/`.
pub fn runtime_with(backend: Arc<dyn LeafBackend>, limits: Limits) -> Runtime {
    Runtime::builder()
        .shared_backend(backend)
        .limits(limits)
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .expect("the guest loads")
}

/// A runtime over the fake backend with default limits.
pub fn runtime() -> Runtime {
    runtime_with(Arc::new(FakeBackend::new()), Limits::default())
}

/// A runtime over a scripted backend given as JSON text.
pub fn scripted(config: &str, limits: Limits) -> Runtime {
    let backend = ScriptedBackend::from_json(config).expect("a valid scripted config");
    runtime_with(Arc::new(backend), limits)
}

/// The case folders in `dir` (each one holds a `workflow.py`), sorted by name.
pub fn case_folders(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list the cases in {}: {e}", dir.display()));
    let mut folders: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|path| path.join("workflow.py").is_file())
        .collect();
    folders.sort();
    folders
}

/// A case folder's name: what its test is called and what other cases refer to it by.
pub fn case_name(folder: &Path) -> String {
    folder
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// A case's JSON file: `None` when it does not exist, an error naming it when it is not JSON.
pub fn read_case_json(path: &Path) -> Result<Option<Value>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("{}: {error}", path.display())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|error| format!("{}: {error}", path.display()))
}

/// Runs `script` with `args` and returns the outcome, printing the summary's logs when the
/// run failed so a failing test shows what the guest said.
pub async fn run(runtime: &Runtime, script: &str, args: Value) -> RunOutcome {
    let outcome = runtime
        .run_request(RunRequest::new(script).args(args))
        .await;
    if let Err(error) = &outcome.result {
        eprintln!("run failed: {error}\nlogs: {:#?}", outcome.summary.logs);
    }
    outcome
}

/// Runs `script` with empty args and returns its result, panicking with the error otherwise.
pub async fn result_of(runtime: &Runtime, script: &str) -> Value {
    match run(runtime, script, json!({})).await.result {
        Ok(value) => value,
        Err(error) => panic!("expected a result, got {error:?}"),
    }
}

/// The error a script ends with, as `{"kind", "message", "line", "exception"}`.
pub async fn error_of(runtime: &Runtime, script: &str) -> Value {
    let outcome = runtime.run(script, json!({})).await;
    match &outcome.result {
        Ok(value) => panic!("expected an error, got {value}"),
        Err(_) => outcome.to_json()["error"].clone(),
    }
}
