//! The journal file: errors that name it, reading commands that never create one, another
//! application's database or an unwritable journal refused untouched, a long log checkpointed
//! as a run's process ends, and a journal of the previous format resumed and shown.

use std::path::Path;
use std::process::Command;

use flowbox_testkit::restate::workspace_root;
use serde_json::json;

use crate::support::{
    RunToEnd, assert_exit, cache_dir, calls_by_prompt, flowbox, scripted_backend, stdout_json,
    write_file,
};

#[test]
fn journal_commands_explain_their_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    let output = flowbox(&["resume", "ghost", "--db", db]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no thread ghost"));
    let output = flowbox(&["show", "ghost", "--db", db]);
    assert_eq!(output.status.code(), Some(2));
    let garbage = write_file(&dir, "garbage.db", &"not a database ".repeat(200));
    let output = flowbox(&["threads", "--db", &garbage]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a readable flowbox journal"));
    // A thread id that exists with another script is refused, not overwritten.
    let one = write_file(&dir, "one.py", "return 1\n");
    let two = write_file(&dir, "two.py", "return 2\n");
    assert_eq!(
        flowbox(&["run", &one, "--thread", "same", "--db", db])
            .status
            .code(),
        Some(0)
    );
    let output = flowbox(&["run", &two, "--thread", "same", "--db", db, "--json"]);
    assert_eq!(stdout_json(&output)["error"]["kind"], "divergence");
}

/// A one-shot run closes its journal before its process ends, though the memory of its run is
/// still waiting to be dropped by a thread of its own: a log grown past its limit (1 MiB) is
/// checkpointed into the database then, so the log each later process reads back as it opens
/// the journal stays short however many runs the journal has seen.
#[test]
fn a_run_checkpoints_a_long_log_as_its_process_ends() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let log = dir.path().join("journal.db-wal");
    let script = write_file(&dir, "one.py", "return 1\n");
    assert_exit(&flowbox(&["run", &script, "--db", db.to_str().unwrap()]), 0);
    {
        // Another writer that never checkpoints, as many earlier runs would have been.
        let writer = rusqlite::Connection::open(&db).unwrap();
        writer.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        writer
            .set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                true,
            )
            .unwrap();
        for n in 0..400 {
            writer
                .execute(
                    "INSERT INTO runs (thread_id, header, status, created_unix_ms)
                     VALUES (?1, ?2, 'unfinished', 0)",
                    rusqlite::params![format!("filler-{n}"), "x".repeat(4000)],
                )
                .unwrap();
        }
    }
    let long = std::fs::metadata(&log).unwrap().len();
    assert!(long > 1 << 20, "{long}");
    assert_exit(&flowbox(&["run", &script, "--db", db.to_str().unwrap()]), 0);
    let after = std::fs::metadata(&log).map_or(0, |log| log.len());
    assert_eq!(
        after, 0,
        "the log of {long} bytes was left for the next process"
    );
}

/// A thread that is not there is one condition, `unknown_thread` (exit 2), whether the journal
/// lacks it or there is no journal at all; `show` exits 2 naming it in both cases too.
#[test]
fn a_missing_thread_is_unknown_thread_with_or_without_a_journal() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    let missing = dir.path().join("none.db");
    let missing = missing.to_str().unwrap();
    let script = write_file(&dir, "one.py", "return 1\n");
    assert_exit(&flowbox(&["run", &script, "--db", db]), 0);
    for journal in [db, missing] {
        let output = flowbox(&["resume", "ghost", "--db", journal, "--json"]);
        assert_exit(&output, 2);
        let error = &stdout_json(&output)["error"];
        assert_eq!(error["kind"], "unknown_thread", "{journal}: {error}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("no thread ghost"),
            "{error}"
        );
        let output = flowbox(&["show", "ghost", "--db", journal]);
        assert_exit(&output, 2);
        assert!(String::from_utf8_lossy(&output.stderr).contains("no thread ghost"));
    }
}

/// Only a run creates a journal, and says where. Reading a journal that is not there creates
/// no file or directory: `threads` and `workflows` list nothing, `show` and `resume` name the
/// missing journal; and what is not a regular file is no journal.
#[test]
fn reading_commands_never_create_a_journal() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing/dir/x.db");
    let missing = missing.to_str().unwrap();
    for (args, code) in [
        (vec!["threads", "--db", missing], 0),
        (vec!["threads", "--db", missing, "--json"], 0),
        (vec!["workflows", "--db", missing], 0),
        (vec!["show", "t", "--db", missing], 2),
        (vec!["resume", "t", "--db", missing], 2),
    ] {
        let output = flowbox(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("journal at {missing}")),
            "{stderr}"
        );
    }
    assert_eq!(
        String::from_utf8_lossy(&flowbox(&["threads", "--db", missing, "--json"]).stdout),
        "[]\n"
    );
    assert!(
        !dir.path().join("missing").exists(),
        "a reading command created the directory"
    );
    for command in [&["threads"][..], &["show", "t"], &["resume", "t"]] {
        let mut args = command.to_vec();
        args.extend(["--db", "/dev/null"]);
        let output = flowbox(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("cannot use /dev/null as a journal: it is not a regular file"),
            "{stderr}"
        );
    }
    assert!(!Path::new("/dev/null-journal").exists());
    let one = write_file(&dir, "one.py", "return 1\n");
    let made = dir.path().join("made/here.db");
    let output = flowbox(&["run", &one, "--db", made.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("created the journal {}", made.display())),
        "{stderr}"
    );
    let again = flowbox(&["run", &one, "--db", made.to_str().unwrap()]);
    assert!(!String::from_utf8_lossy(&again.stderr).contains("created the journal"));
}

/// Another application's SQLite file is refused in one line before flowbox writes anything:
/// it keeps its journal mode and every byte.
#[test]
fn another_applications_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE runs (x); CREATE TABLE notes (y); INSERT INTO notes VALUES (1);",
        )
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    let one = write_file(&dir, "one.py", "return 1\n");
    for args in [
        vec!["run", &one, "--db", path.to_str().unwrap()],
        vec!["threads", "--db", path.to_str().unwrap()],
        vec!["resume", "t", "--db", path.to_str().unwrap()],
    ] {
        let output = flowbox(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let error: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with("thread "))
            .collect();
        assert_eq!(
            error,
            [format!(
                "error: {} is not a flowbox journal (it holds the tables notes, runs); it was \
                 left untouched",
                path.display()
            )],
            "{args:?}"
        );
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let mode: String = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
}

/// A journal this process may not write — the file, its `-wal` or `-shm`, or the directory it
/// would be created in — is refused before the run, naming that file and the operating
/// system's reason, with the other unusable journals (exit 2). (Run as an unprivileged user
/// when the tests run as root, for whom permissions do not bind.)
#[cfg(target_os = "linux")]
#[test]
fn a_journal_that_cannot_be_written_is_named_with_its_reason() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let one = write_file(&dir, "one.py", "return 1\n");
    let writable = dir.path().join("open");
    std::fs::create_dir(&writable).unwrap();
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o777)).unwrap();
    let db = writable.join("journal.db");
    let run = |db: &Path| {
        let as_user = unprivileged();
        let mut command = match &as_user {
            Some(setpriv) => {
                let mut command = Command::new(setpriv[0]);
                command
                    .args(&setpriv[1..])
                    .arg(env!("CARGO_BIN_EXE_flowbox"));
                command
            }
            None => Command::new(env!("CARGO_BIN_EXE_flowbox")),
        };
        command
            .args(["run", &one, "--db", db.to_str().unwrap()])
            .current_dir(workspace_root())
            .env("FLOWBOX_CACHE_DIR", cache_dir())
            .run_to_end()
    };
    // Made by the user who will run, then made read-only piece by piece.
    let output = run(&db);
    assert_exit(&output, 0);
    // The run left its log beside the database (made here if a checkpoint emptied it away).
    let wal = writable.join("journal.db-wal");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&wal)
        .unwrap();
    std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o666)).unwrap();
    for file in [&db, &wal] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o444)).unwrap();
        let output = run(&db);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "cannot use {} as a journal: it cannot be written: Permission denied",
                file.display()
            )),
            "{stderr}"
        );
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o555)).unwrap();
    let output = run(&writable.join("new.db"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot use {} as a journal: the directory cannot be written",
            writable.display()
        )) && stderr.contains("Permission denied"),
        "{stderr}"
    );
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o777)).unwrap();
}

/// The command prefix that runs a program as an unprivileged user, when this test runs as root
/// (for whom file permissions do not bind); `None` otherwise.
#[cfg(target_os = "linux")]
fn unprivileged() -> Option<[&'static str; 5]> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let root = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0");
    root.then_some([
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
    ])
}

#[test]
fn a_journal_of_the_previous_format_resumes_and_shows() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let dump =
        std::fs::read_to_string(workspace_root().join("host/store/tests/fixtures/journal-v2.sql"))
            .unwrap();
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(&dump)
        .unwrap();
    let db = db.to_str().unwrap();
    // The thread read notes/plan.txt before it was interrupted; that read is journaled, so
    // what the file says now never reaches the script.
    let notes = dir.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("plan.txt"), "changed since").unwrap();
    // Only the leaf the journal lost may reach the backend; any other prompt fails.
    let log = dir.path().join("calls.jsonl");
    let backend = scripted_backend(
        &dir,
        "backend.json",
        json!({
            "call_log": log,
            "rules": [{"prompt": "^summarise approve / ship on friday$", "text": "all good",
                       "tokens": {"input": 30, "output": 5}}]
        }),
    );
    let resumed = flowbox(&[
        "resume",
        "old-interrupted",
        "--db",
        db,
        "--backend",
        &backend,
        "--allow-read",
        notes.to_str().unwrap(),
        "--json",
    ]);
    assert_exit(&resumed, 0);
    let resumed = stdout_json(&resumed);
    assert_eq!(
        resumed["result"].to_string(),
        r#"{"verdict":{"verdict":"approve","n":1180591620717411303425},"failure":"provider unavailable","summary":"all good","n":1180591620717411303424}"#
    );
    assert_eq!(resumed["summary"]["leaves"], 3);
    assert_eq!(resumed["summary"]["tools_called"], 1);
    let calls = calls_by_prompt(&log);
    assert_eq!(
        calls.into_iter().collect::<Vec<_>>(),
        [("summarise approve / ship on friday".to_owned(), 1)]
    );
    let shown = stdout_json(&flowbox(&["show", "old-interrupted", "--db", db, "--json"]));
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["entries"].as_array().unwrap().len(), 4);
    assert_eq!(shown["outcome"]["result"], resumed["result"]);

    // The finished thread shows as it ended, and resuming it prints its recorded outcome.
    let shown = flowbox(&["show", "old-finished", "--db", db]);
    assert_eq!(shown.status.code(), Some(0));
    let text = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(text.contains("status   succeeded"), "{text}");
    assert!(text.contains("greet"), "{text}");
    assert!(text.contains("5e-324"), "{text}");
    let shown = stdout_json(&flowbox(&["show", "old-finished", "--db", db, "--json"]));
    assert_eq!(
        shown["outcome"]["result"].to_string(),
        r#"{"reply":"[fake greet] hello from an old journal","x":5e-324}"#
    );
    assert_eq!(shown["header"]["args"].to_string(), r#"{"x":5e-324}"#);
    assert!(shown["header"].get("seed").is_none(), "{shown}");
    let again = stdout_json(&flowbox(&["resume", "old-finished", "--db", db, "--json"]));
    assert_eq!(again["ok"], true);
    assert_eq!(again["result"], shown["outcome"]["result"]);
    assert_eq!(again["summary"]["logs"], json!(["greeted"]));
    let workflows = flowbox(&["workflows", "--conversation", "conv-old", "--db", db]);
    assert_eq!(workflows.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&workflows.stdout).contains("old-finished"),
        "{}",
        String::from_utf8_lossy(&workflows.stdout)
    );
}
