//! The SQLite store's own tests: the contract, claims across stores, durability, migration,
//! damaged and foreign files, locks and concurrent writers.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use super::schema::MIGRATIONS;
use super::*;
use crate::contract::{entry, header, outcome};
use crate::{
    Entry, ErrorInfo, JournalRecord, RunErrorKind, RunStatus, SCHEMA_VERSION, StoreError,
    WorkflowRecord,
};

#[tokio::test]
async fn keeps_the_store_contract() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
    crate::contract::round_trip(&store).await;
    crate::contract::claims_are_exclusive(&store).await;
}

#[tokio::test]
async fn a_claim_holds_across_stores_on_one_file_and_ends_with_the_thread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    // Two stores on one file stand for two processes: each has its own lock on the lease,
    // even when one reaches the file through a symlink.
    let one = SqliteStore::open(&path).unwrap();
    #[cfg(unix)]
    let two = {
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        SqliteStore::open(&link).unwrap()
    };
    #[cfg(not(unix))]
    let two = SqliteStore::open(&path).unwrap();
    one.begin(&header("t")).await.unwrap();
    let held = one.claim("t").await.unwrap();
    let err = two.claim("t").await.unwrap_err();
    let holder = format!("process {}", std::process::id());
    assert!(
        matches!(&err, StoreError::InUse { holder: h, .. } if *h == holder),
        "{err}"
    );
    let lease = one.leases.path("t");
    assert!(lease.exists());
    let end = RunEnd {
        outcome: outcome(Err(ErrorInfo {
            kind: RunErrorKind::Uncaught,
            message: "no".into(),
            line: None,
            exception: None,
        })),
        finished_unix_ms: 1,
    };
    assert_eq!(end.status(), RunStatus::Failed);
    one.finish("t", &end).await.unwrap();
    drop(held);
    // A finished thread never runs again, so its lease file is gone.
    assert!(!lease.exists());
    drop(two.claim("t").await.unwrap());
    // Thread ids such as `..` name a lease inside the lease directory, never beside it.
    let odd = one.leases.path("..");
    assert_eq!(odd.parent(), lease.parent());
    drop(one.claim("..").await.unwrap());
}

#[tokio::test]
async fn journals_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/journal.db");
    {
        let store = SqliteStore::open_with(&path, Durability::PowerLoss).unwrap();
        store.begin(&header("t")).await.unwrap();
        store.append("t", &[entry(0, 0)]).await.unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.load("t").await.unwrap().unwrap().entries,
        vec![entry(0, 0)]
    );
}

#[tokio::test]
async fn call_error_kinds_are_stored_by_name_and_an_unknown_one_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
    store.begin(&header("t")).await.unwrap();
    // Entry 2 of the contract's entries is a failed call.
    store
        .append("t", &[entry(0, 0), entry(1, 0), entry(2, 0)])
        .await
        .unwrap();
    let stored: String = {
        let connection = store.connection.lock().unwrap();
        connection
            .query_row("SELECT outcome FROM entries WHERE seq = 2", [], |row| {
                row.get(0)
            })
            .unwrap()
    };
    assert_eq!(
        stored,
        r#"{"status":"err","kind":"agent-failed","message":"boom"}"#
    );
    {
        let connection = store.connection.lock().unwrap();
        connection
            .execute(
                "UPDATE entries SET outcome = ?1 WHERE seq = 2",
                [r#"{"status":"err","kind":"made-up","message":"boom"}"#],
            )
            .unwrap();
    }
    let err = store.load("t").await.unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::CorruptRecord {
                thread_id,
                record: JournalRecord::Entry { seq: 2, call: 3 },
                ..
            } if thread_id == "t"
        ),
        "{err}"
    );
    assert!(err.to_string().contains("made-up"), "{err}");
}

/// Rewrites one column of the `runs` row of thread `t` with raw SQL.
fn rewrite_run(store: &SqliteStore, column: &str, value: Option<&str>) {
    let connection = store.connection.lock().unwrap();
    connection
        .execute(
            &format!("UPDATE runs SET {column} = ?1 WHERE thread_id = 't'"),
            [value],
        )
        .unwrap();
}

#[tokio::test]
async fn a_record_that_does_not_decode_is_a_damaged_record_of_its_thread() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
    store.begin(&header("t")).await.unwrap();
    store
        .append("t", &[entry(0, 0), entry(1, 0)])
        .await
        .unwrap();
    let damaged_entry = |column: &str, value: &str| {
        let connection = store.connection.lock().unwrap();
        connection
            .execute(
                &format!("UPDATE entries SET {column} = ?1 WHERE seq = 1"),
                [value],
            )
            .unwrap();
    };
    let entry_record = JournalRecord::Entry { seq: 1, call: 2 };
    // A request that is not one, or of another kind than its entry's, names its call.
    for (column, value) in [
        (
            "request",
            r#"{"kind":"agent","prompt":"x","temperature":2}"#,
        ),
        ("request", r#"{"kind":"tool","name":"echo","arguments":{}}"#),
        ("outcome", r#"{"status":"ok"}"#),
    ] {
        damaged_entry(column, value);
        let err = store.load("t").await.unwrap_err();
        assert!(
            matches!(&err, StoreError::CorruptRecord { record, .. } if *record == entry_record),
            "{column} = {value}: {err}"
        );
        assert!(err.to_string().contains("call 2"), "{err}");
        store
            .connection
            .lock()
            .unwrap()
            .execute("DELETE FROM entries WHERE seq = 1", [])
            .unwrap();
        store.append("t", &[entry(1, 0)]).await.unwrap();
        assert_eq!(
            store.load("t").await.unwrap().unwrap().entries[1],
            entry(1, 0)
        );
    }
    // A header, or an end, that does not decode — or contradicts the status — names neither
    // an entry nor a default.
    let end = RunEnd {
        outcome: outcome(Ok(serde_json::json!(1))),
        finished_unix_ms: 5,
    };
    store.finish("t", &end).await.unwrap();
    for (column, value, record) in [
        ("outcome", Some(r#"{"ok":true}"#), JournalRecord::End),
        ("outcome", None, JournalRecord::End),
        ("finished_unix_ms", None, JournalRecord::End),
        ("status", Some("failed"), JournalRecord::End),
        ("status", Some("paused"), JournalRecord::End),
        (
            "header",
            Some(r#"{"thread_id":"t"}"#),
            JournalRecord::Header,
        ),
    ] {
        let before: Option<String> = store
            .connection
            .lock()
            .unwrap()
            .query_row(
                &format!("SELECT CAST({column} AS TEXT) FROM runs WHERE thread_id = 't'"),
                [],
                |row| row.get(0),
            )
            .unwrap();
        rewrite_run(&store, column, value);
        let err = store.load("t").await.unwrap_err();
        assert!(
            matches!(&err, StoreError::CorruptRecord { thread_id, record: r, .. }
                if thread_id == "t" && *r == record),
            "{column} = {value:?}: {err}"
        );
        rewrite_run(&store, column, before.as_deref());
        assert_eq!(
            store.load("t").await.unwrap().unwrap().end,
            Some(end.clone())
        );
    }
    rewrite_run(&store, "status", Some("paused"));
    assert!(matches!(
        store.list().await.unwrap_err(),
        StoreError::CorruptRecord {
            record: JournalRecord::End,
            ..
        }
    ));
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let garbage = b"this is not sqlite, just bytes that look nothing like a header".repeat(100);
    std::fs::write(&path, &garbage).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string().contains("not a readable flowbox journal"),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), garbage);
}

#[tokio::test]
async fn a_truncated_journal_is_refused_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        store.begin(&header("t")).await.unwrap();
        let many: Vec<Entry> = (0..400).map(|seq| entry(seq, 0)).collect();
        store.append("t", &many).await.unwrap();
        // Fold the WAL into the main file so truncating it loses pages.
        let connection = store.connection.lock().unwrap();
        connection
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let opened = SqliteStore::open(&path);
    let err = match opened {
        Err(err) => err,
        Ok(store) => store.load("t").await.unwrap_err(),
    };
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
}

#[tokio::test]
async fn an_older_journal_is_migrated_with_its_threads_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    // A journal as the first release wrote it: only the first migration applied.
    {
        let connection = Connection::open(&path).unwrap();
        connection
            .execute_batch(&format!("{}; PRAGMA user_version = 1;", MIGRATIONS[0]))
            .unwrap();
        connection
            .execute(
                "INSERT INTO runs (thread_id, header, status, created_unix_ms)
                 VALUES ('old', ?1, 'running', 5)",
                [serde_json::to_string(&header("old")).unwrap()],
            )
            .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.load("old").await.unwrap().unwrap().header,
        header("old")
    );
    store
        .record_workflow(&WorkflowRecord {
            conversation_id: "c".into(),
            thread_id: "old".into(),
            name: None,
            leaves: 1,
            tokens: 2,
            ok: true,
            recorded_unix_ms: 3,
        })
        .await
        .unwrap();
    assert_eq!(store.workflows(Some("c")).await.unwrap().len(), 1);
    let version: u32 = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}

#[tokio::test]
async fn a_journal_from_a_newer_flowbox_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    SqliteStore::open(&path).unwrap();
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 99;")
        .unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::TooNew {
                found: 99,
                supported: SCHEMA_VERSION,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_locked_journal_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let store = SqliteStore::open(&path).unwrap();
    store.begin(&header("t")).await.unwrap();
    let holder = Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE;").unwrap();
    // Shorten the wait for the test; the error is the same after the real timeout.
    let store = store.with_busy_timeout(Duration::from_millis(50));
    let err = store.append("t", &[entry(0, 0)]).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Locked { waited_ms: 50, .. }),
        "{err}"
    );
    holder.execute_batch("ROLLBACK;").unwrap();
    store.append("t", &[entry(0, 0)]).await.unwrap();
}

#[test]
fn many_openers_of_one_new_file_create_it_once() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..20 {
        let path = dir.path().join(format!("journal-{round}.db"));
        let start = Arc::new(std::sync::Barrier::new(6));
        let openers: Vec<_> = (0..6)
            .map(|_| {
                let (path, start) = (path.clone(), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    SqliteStore::open(&path).map(|_| ())
                })
            })
            .collect();
        for opener in openers {
            opener.join().unwrap().unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_runs_write_concurrently_without_losing_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
    let mut tasks = Vec::new();
    for run in 0..100 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("run-{run}");
            store.begin(&header(&id)).await.unwrap();
            for batch in 0..10 {
                let entries = [entry(batch * 2, batch), entry(batch * 2 + 1, batch)];
                store.append(&id, &entries).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for run in 0..100 {
        let loaded = store.load(&format!("run-{run}")).await.unwrap().unwrap();
        let expected: Vec<Entry> = (0..20).map(|seq| entry(seq, seq / 2)).collect();
        assert_eq!(loaded.entries, expected);
    }
    assert_eq!(store.list().await.unwrap().len(), 100);
}

/// Writes one thread into the journal named by `FLOWBOX_STORE_CHILD` (`path|thread`); run
/// as a child process by `two_processes_share_one_journal`, and a no-op otherwise.
#[tokio::test]
#[ignore = "run as a child process by two_processes_share_one_journal"]
async fn child_writer() {
    let Ok(spec) = std::env::var("FLOWBOX_STORE_CHILD") else {
        return;
    };
    let (path, thread) = spec.split_once('|').expect("path|thread");
    let store = SqliteStore::open(path).unwrap();
    store.begin(&header(thread)).await.unwrap();
    for seq in 0..200 {
        store.append(thread, &[entry(seq, seq)]).await.unwrap();
    }
}

#[tokio::test]
async fn two_processes_share_one_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    SqliteStore::open(&path).unwrap();
    let children: Vec<_> = ["a", "b"]
        .iter()
        .map(|thread| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "sqlite::tests::child_writer",
                    "--ignored",
                    "--quiet",
                ])
                .env(
                    "FLOWBOX_STORE_CHILD",
                    format!("{}|{thread}", path.display()),
                )
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let store = SqliteStore::open(&path).unwrap();
    for thread in ["a", "b"] {
        let loaded = store.load(thread).await.unwrap().unwrap();
        let expected: Vec<Entry> = (0..200).map(|seq| entry(seq, seq)).collect();
        assert_eq!(loaded.entries, expected);
    }
}
