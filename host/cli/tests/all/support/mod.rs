//! What more than one test module needs: the `flowbox` command as the tests run it, its output
//! checked for panics and read as JSON, files written for it, JSON Lines read back, and waiting
//! for something another process does. Helpers one module alone uses stay in that module.

pub(crate) mod chat_server;
pub(crate) mod http;
pub(crate) mod otlp;

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use flowbox_testkit::restate::workspace_root;
use serde_json::Value;

/// The compiled guest's cache the whole workspace's tests share, so the guest compiles once.
pub(crate) fn cache_dir() -> PathBuf {
    workspace_root().join("target/flowbox-cache")
}

/// A journal for the runs of this test process that name none, so nothing lands in the user's
/// data directory.
fn journal() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
}

/// `flowbox ARGS` from the workspace root (where the examples' relative paths resolve), with
/// the shared cache, journaling to this process's journal unless the arguments name one.
pub(crate) fn command(args: &[&str]) -> Command {
    command_with_db(&journal().join("journal.db"), args)
}

/// [`command`] with its journal at `db`.
pub(crate) fn command_with_db(db: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flowbox"));
    command
        .args(args)
        .current_dir(workspace_root())
        .env("FLOWBOX_CACHE_DIR", cache_dir())
        .env("FLOWBOX_DB", db);
    command
}

/// `flowbox ARGS` run to its end (see [`RunToEnd`]).
pub(crate) fn flowbox(args: &[&str]) -> Output {
    command(args).run_to_end()
}

/// Running a `flowbox` command to its end, failing the test if the process panicked: whatever
/// it printed or exited with, a panic is a bug (every test's stderr is checked here).
pub(crate) trait RunToEnd {
    fn run_to_end(&mut self) -> Output;
}

impl RunToEnd for Command {
    fn run_to_end(&mut self) -> Output {
        no_panic(self.output().expect("the flowbox binary runs"))
    }
}

/// The output of a spawned `flowbox`, once it has ended without a panic.
pub(crate) fn finish(child: Child) -> Output {
    no_panic(child.wait_with_output().expect("flowbox runs"))
}

/// `output`, after checking its process did not panic.
pub(crate) fn no_panic(output: Output) -> Output {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("panicked at"),
        "flowbox panicked ({}):\n{stderr}",
        output.status
    );
    output
}

/// Asserts that `output`'s process exited with `code`, showing what it printed when it did not.
#[track_caller]
pub(crate) fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The one JSON line a `--json` command printed.
pub(crate) fn stdout_json(output: &Output) -> Value {
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        text.lines().count(),
        1,
        "expected one JSON line, got {text}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&text).expect("stdout is JSON")
}

/// Writes `text` to `dir/name`; returns the file's path.
pub(crate) fn write_file(dir: impl AsRef<Path>, name: &str, text: &str) -> String {
    let path = dir.as_ref().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// Writes a scripted backend's configuration to `dir/name`; returns the `--backend` value
/// that loads it.
pub(crate) fn scripted_backend(dir: impl AsRef<Path>, name: &str, config: impl Display) -> String {
    format!("scripted:{}", write_file(dir, name, &config.to_string()))
}

/// A directory `notes` holding `todo.txt` ("ship it"), to grant with `--allow-read`.
pub(crate) fn notes_dir(dir: impl AsRef<Path>) -> PathBuf {
    let notes = dir.as_ref().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("todo.txt"), "ship it").unwrap();
    notes
}

/// The values of JSON Lines text, one a line.
pub(crate) fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line:?}")))
        .collect()
}

/// The events of a JSON Lines file `--events` wrote.
pub(crate) fn events_of(path: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    json_lines(&text)
}

/// The scripted backend's call log: one JSON object per call, in the order calls started
/// (none before the first). A line still being written when it is read is not a call yet.
pub(crate) fn call_log(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    json_lines(whole)
}

/// How many times each prompt was sent to the scripted backend, from its call log.
pub(crate) fn calls_by_prompt(log: &Path) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for call in call_log(log) {
        *counts
            .entry(call["prompt"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    counts
}

/// Checks `done` every 20 ms until it holds, failing with `never` once `limit` has passed.
pub(crate) fn wait_until(limit: Duration, never: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{never}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
