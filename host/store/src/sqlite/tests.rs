//! The SQLite store's own tests: the contract, claims across stores, durability, migration,
//! damaged and foreign files, locks and concurrent writers.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use super::schema::MIGRATIONS;
use super::*;
use crate::contract::{entry, header, outcome};
use crate::{
    Entry, ErrorInfo, JournalRecord, RunErrorKind, SCHEMA_VERSION, StoreError, ThreadStatus,
    WorkflowRecord,
};

#[tokio::test]
async fn keeps_the_store_contract() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
    crate::contract::round_trip(&store).await;
    crate::contract::claims_are_exclusive(&store).await;
    crate::contract::events_round_trip(&store).await;
    crate::contract::finishing_writes_the_last_events_with_the_end(&store).await;
    let fresh = SqliteStore::open(dir.path().join("replies.db")).unwrap();
    crate::contract::recent_replies_are_the_newest_successful_leaves(&fresh).await;
}

/// Whether `err` refuses a claim because this process holds the thread.
fn in_use_by_this_process(err: &StoreError) -> bool {
    let this = format!("process {}", std::process::id());
    matches!(err, StoreError::InUse { holder, .. } if *holder == this)
}

/// A claim writes its process id over the lease without truncating it first (see `leases`):
/// what an earlier claim left after it never reaches the error a second claimant gets.
#[tokio::test]
async fn a_claim_names_its_process_over_what_an_earlier_claim_left() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let one = SqliteStore::open(&path).unwrap();
    let two = SqliteStore::open(&path).unwrap();
    one.begin(&header("t")).await.unwrap();
    let lease = one.leases.path("t");
    std::fs::create_dir_all(lease.parent().unwrap()).unwrap();
    std::fs::write(&lease, "4294967295 and more an earlier claim left").unwrap();
    let _held = one.claim("t").await.unwrap();
    let err = two.claim("t").await.unwrap_err();
    assert!(in_use_by_this_process(&err), "{err}");
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
    assert!(in_use_by_this_process(&err), "{err}");
    let lease = one.leases.path("t");
    assert!(lease.exists());
    let end = ThreadEnd {
        outcome: outcome(Err(ErrorInfo {
            kind: RunErrorKind::Uncaught,
            message: "no".into(),
            line: None,
            exception: None,
        })),
        finished_unix_ms: 1,
    };
    assert_eq!(end.status(), ThreadStatus::Failed);
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

/// No commit checkpoints the log itself (that would fsync inside an append): the store's own
/// thread copies it into the database soon after.
#[tokio::test]
async fn the_log_is_checkpointed_in_the_background_and_never_by_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let store = SqliteStore::open(&path).unwrap();
    let own_checkpoints: i64 = store
        .connection
        .lock()
        .unwrap()
        .pragma_query_value(None, "wal_autocheckpoint", |row| row.get(0))
        .unwrap();
    assert_eq!(own_checkpoints, 0, "the writer never checkpoints");
    // The database file grows only when a checkpoint copies the log into it.
    let size = || std::fs::metadata(&path).unwrap().len();
    let before = size();
    store.begin(&header("t")).await.unwrap();
    // A log past `CHECKPOINT_FRAMES` (~300 bytes an entry, 4096 a frame).
    let entries: Vec<Entry> = (0..4000).map(|seq| entry(seq, seq / 100)).collect();
    for batch in entries.chunks(100) {
        store.append("t", batch).await.unwrap();
    }
    let waited = std::time::Instant::now();
    while size() <= before {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the log was not checkpointed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    {
        let reader = SqliteStore::open_read_only(&path).unwrap();
        assert!(reader.checkpoints.is_none(), "a reader never checkpoints");
        assert_eq!(reader.load("t").await.unwrap().unwrap().entries, entries);
    }
    drop(store);
    let reopened = SqliteStore::open_read_only(&path).unwrap();
    assert_eq!(reopened.load("t").await.unwrap().unwrap().entries, entries);
}

/// A short log is left to grow: checkpointed after each burst of writes, it would start over at
/// the next commit, which fsyncs the log's new header there, at the start of the next run.
#[tokio::test]
async fn a_short_log_is_not_checkpointed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let store = SqliteStore::open(&path).unwrap();
    let size = || std::fs::metadata(&path).unwrap().len();
    let before = size();
    store.begin(&header("t")).await.unwrap();
    store
        .append("t", &[entry(0, 0), entry(1, 0)])
        .await
        .unwrap();
    tokio::time::sleep(checkpoints::SETTLE * 5).await;
    assert_eq!(size(), before, "the short log was checkpointed");
    assert_eq!(
        store.load("t").await.unwrap().unwrap().entries,
        vec![entry(0, 0), entry(1, 0)]
    );
}

/// Closing the store leaves a short log where it is, without a checkpoint (which would fsync
/// at the end of every process), and the next store reads it back; a log past the limit is
/// checkpointed as the store closes, so the next open never reads back more than that.
#[tokio::test]
async fn closing_leaves_a_short_log_and_checkpoints_a_long_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let log = dir.path().join("journal.db-wal");
    // The threads the database file alone holds, as a copy of it without its log shows (none
    // while even the tables are only in the log).
    let threads_in_file = || {
        let copy = dir.path().join("copy.db");
        std::fs::copy(&path, &copy).unwrap();
        let count: i64 = Connection::open(&copy)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM runs", [], |row| row.get(0))
            .unwrap_or(0);
        std::fs::remove_file(&copy).unwrap();
        count
    };
    let store = SqliteStore::open(&path).unwrap();
    store.begin(&header("short")).await.unwrap();
    store.append("short", &[entry(0, 0)]).await.unwrap();
    drop(store);
    assert!(log.exists(), "the log is left in place");
    let reopened = SqliteStore::open(&path).unwrap();
    let thread = reopened.load("short").await.unwrap().unwrap();
    assert_eq!(thread.entries, vec![entry(0, 0)]);
    drop(reopened);

    // A log past the limit, written by another connection that never checkpoints, and a store
    // that only opens and closes the journal.
    {
        let writer = Connection::open(&path).unwrap();
        checkpoints::never_checkpoints(&writer).unwrap();
        let filler = "x".repeat(4000);
        for n in 0..400 {
            writer
                .execute(
                    "INSERT INTO runs (thread_id, header, status, created_unix_ms)
                     VALUES (?1, ?2, 'unfinished', 0)",
                    rusqlite::params![format!("long-{n}"), filler],
                )
                .unwrap();
        }
    }
    let long = std::fs::metadata(&log).unwrap().len();
    assert!(long > checkpoints::LOG_LIMIT, "{long}");
    let in_file = threads_in_file();
    assert!(in_file < 401, "{in_file}");
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(
        threads_in_file(),
        401,
        "the long log was checkpointed on close"
    );
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 0, "and emptied");
    let reopened = SqliteStore::open(&path).unwrap();
    reopened.begin(&header("after")).await.unwrap();
    let listing = reopened.list().await.unwrap();
    assert_eq!(listing.threads.len() + listing.damaged.len(), 402);
}

/// Once a checkpoint has copied a long log whole, the next commit starts the log over and trims
/// its file back to the limit (`journal_size_limit`), so the file's length, which closing the
/// store looks at, is not that of a log long since copied.
#[tokio::test]
async fn a_log_that_starts_over_is_trimmed_to_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let log = dir.path().join("journal.db-wal");
    let store = SqliteStore::open(&path).unwrap();
    store.begin(&header("t")).await.unwrap();
    {
        let writer = store.connection.lock().unwrap();
        let filler = "x".repeat(4000);
        for n in 0..400 {
            writer
                .execute(
                    "INSERT INTO runs (thread_id, header, status, created_unix_ms)
                     VALUES (?1, ?2, 'unfinished', 0)",
                    rusqlite::params![format!("long-{n}"), filler],
                )
                .unwrap();
        }
    }
    let long = std::fs::metadata(&log).unwrap().len();
    assert!(long > checkpoints::LOG_LIMIT, "{long}");
    let (frames, copied): (i64, i64) = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            Ok((row.get(1)?, row.get(2)?))
        })
        .unwrap();
    assert_eq!(frames, copied, "the checkpoint copied the whole log");
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        long,
        "a copy trims nothing"
    );
    store.append("t", &[entry(0, 0)]).await.unwrap();
    let trimmed = std::fs::metadata(&log).unwrap().len();
    assert!(trimmed <= checkpoints::LOG_LIMIT, "{trimmed} of {long}");
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
        // A reply the guest could not be handed as the live run handed it: not JSON, or a
        // number it would read as infinity.
        ("outcome", r#"{"status":"ok","value":"[1"}"#),
        ("outcome", r#"{"status":"ok","value":"{\"n\": 1e999}"}"#),
        // A count no run could have written.
        ("input_tokens", "-5"),
        ("duration_ms", "-1"),
    ] {
        damaged_entry(column, value);
        let err = store.load("t").await.unwrap_err();
        assert!(
            matches!(&err, StoreError::CorruptRecord { record, .. } if *record == entry_record),
            "{column} = {value}: {err}"
        );
        assert!(err.to_string().contains("call 2"), "{err}");
        // Read alone, it is as damaged; its neighbour is not.
        let alone = store.entry("t", 2).await.unwrap_err();
        assert_eq!(alone.to_string(), err.to_string());
        assert_eq!(store.entry("t", 1).await.unwrap(), Some(entry(0, 0)));
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
    let end = ThreadEnd {
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
        // The thread without its completions is as damaged.
        let overview = store.overview("t").await.unwrap_err();
        assert!(
            matches!(&overview, StoreError::CorruptRecord { thread_id, record: r, .. }
                if thread_id == "t" && *r == record),
            "{column} = {value:?}: {overview}"
        );
        rewrite_run(&store, column, before.as_deref());
        assert_eq!(
            store.load("t").await.unwrap().unwrap().end,
            Some(end.clone())
        );
    }
}

/// One thread that does not read hides no other from the listing: the others are listed, and
/// it is named with what is damaged — its status, or counts no run writes.
#[tokio::test]
async fn a_damaged_thread_is_named_in_the_listing_and_the_others_listed() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
    for thread in ["t", "u"] {
        store.begin(&header(thread)).await.unwrap();
        store.append(thread, &[entry(0, 0)]).await.unwrap();
    }
    let listed = |listing: &Listing| {
        let threads: Vec<&str> = listing
            .threads
            .iter()
            .map(|t| t.thread_id.as_str())
            .collect();
        let damaged: Vec<(String, JournalRecord)> = listing
            .damaged
            .iter()
            .map(|error| match error {
                StoreError::CorruptRecord {
                    thread_id, record, ..
                } => (thread_id.clone(), *record),
                other => panic!("not a damaged record: {other}"),
            })
            .collect();
        (threads.join(","), damaged)
    };
    assert_eq!(
        listed(&store.list().await.unwrap()),
        ("u,t".to_owned(), vec![])
    );
    let sql = |statement: &str| {
        store
            .connection
            .lock()
            .unwrap()
            .execute(statement, [])
            .unwrap()
    };
    for (damage, repair, record, detail) in [
        (
            "UPDATE runs SET status = 'paused' WHERE thread_id = 't'",
            "UPDATE runs SET status = 'running' WHERE thread_id = 't'",
            JournalRecord::End,
            "unknown run status \"paused\"",
        ),
        (
            "UPDATE runs SET created_unix_ms = -3 WHERE thread_id = 't'",
            "UPDATE runs SET created_unix_ms = 1700000000000 WHERE thread_id = 't'",
            JournalRecord::Header,
            "its creation time is -3",
        ),
        (
            "UPDATE entries SET output_tokens = -5 WHERE thread_id = 't'",
            "UPDATE entries SET output_tokens = 20 WHERE thread_id = 't'",
            JournalRecord::Counters,
            "an entry's token count is -5",
        ),
        (
            "UPDATE entries SET output_tokens = 9223372036854775807 WHERE thread_id = 't'",
            "UPDATE entries SET output_tokens = 20 WHERE thread_id = 't'",
            JournalRecord::Counters,
            "its token counts add up to",
        ),
    ] {
        sql(damage);
        let listing = store.list().await.unwrap();
        assert_eq!(
            listed(&listing),
            ("u".to_owned(), vec![("t".to_owned(), record)]),
            "{damage}"
        );
        let message = listing.damaged[0].to_string();
        assert!(message.contains(detail), "{damage}: {message}");
        // Alone, the thread is as damaged as in the listing.
        let alone = store.overview("t").await.unwrap_err().to_string();
        assert_eq!(alone, message, "{damage}");
        sql(repair);
        assert!(store.list().await.unwrap().damaged.is_empty(), "{repair}");
    }
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

/// Whether the journal at `path` keeps its completions without a rowid (format 6).
fn entries_without_rowid(path: &Path) -> bool {
    Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT wr FROM pragma_table_list WHERE name = 'entries'",
            [],
            |row| row.get(0),
        )
        .unwrap()
}

#[tokio::test]
async fn completions_are_kept_without_a_rowid_in_new_and_migrated_journals() {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new.db");
    SqliteStore::open(&new).unwrap();
    assert!(entries_without_rowid(&new));

    // A journal of format 5, with a thread and its completions, as that format wrote them.
    let old = dir.path().join("old.db");
    let entries = [entry(0, 0), entry(1, 1), entry(2, 1)];
    {
        let connection = Connection::open(&old).unwrap();
        connection
            .execute_batch(&format!(
                "{}; PRAGMA user_version = 5;",
                MIGRATIONS[..5].join(";")
            ))
            .unwrap();
        connection
            .execute(
                "INSERT INTO runs (thread_id, header, status, created_unix_ms)
                 VALUES ('old', ?1, 'running', 5)",
                [serde_json::to_string(&header("old")).unwrap()],
            )
            .unwrap();
        for e in &entries {
            connection
                .execute(
                    "INSERT INTO entries (thread_id, seq, batch, handle, kind, fingerprint,
                        request, outcome, input_tokens, output_tokens, duration_ms,
                        estimated_tokens)
                     VALUES ('old', ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                    rusqlite::params![
                        e.seq as i64,
                        e.batch as i64,
                        e.handle as i64,
                        e.kind().as_str(),
                        e.fingerprint,
                        serde_json::to_string(&e.request).unwrap(),
                        serde_json::to_string(&e.outcome).unwrap(),
                        e.input_tokens as i64,
                        e.output_tokens as i64,
                        e.duration_ms as i64,
                        e.estimated_tokens as i64,
                    ],
                )
                .unwrap();
        }
    }
    assert!(!entries_without_rowid(&old));
    let store = SqliteStore::open(&old).unwrap();
    assert!(entries_without_rowid(&old));
    assert_eq!(store.load("old").await.unwrap().unwrap().entries, entries);
    // The migrated thread takes the next completion, and only the next.
    assert!(matches!(
        store.append("old", &[entry(4, 2)]).await,
        Err(StoreError::OutOfOrder {
            expected: 3,
            got: 4,
            ..
        })
    ));
    store.append("old", &[entry(3, 2)]).await.unwrap();
    assert_eq!(store.load("old").await.unwrap().unwrap().entries.len(), 4);
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

/// Another application's database is recognised by reading only: it is refused in one line
/// naming what it holds, and not a byte of it changes — it stays in its own journal mode.
#[test]
fn another_applications_database_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    for (tables, detail) in [
        (
            "CREATE TABLE runs (x); CREATE TABLE notes (y); INSERT INTO notes VALUES (1);",
            "it holds the tables notes, runs",
        ),
        (
            "CREATE TABLE runs (x); CREATE TABLE entries (y);",
            "it holds the tables entries, runs",
        ),
        (
            "PRAGMA user_version = 7;",
            "it is an SQLite database with user_version 7",
        ),
    ] {
        let path = dir.path().join("other.db");
        let _ = std::fs::remove_file(&path);
        Connection::open(&path)
            .unwrap()
            .execute_batch(tables)
            .unwrap();
        let before = std::fs::read(&path).unwrap();
        for open in [
            SqliteStore::open,
            SqliteStore::open_existing,
            SqliteStore::open_read_only,
        ] {
            let err = open(&path).unwrap_err();
            assert!(matches!(err, StoreError::Foreign { .. }), "{err}");
            let message = err.to_string();
            assert!(message.contains(detail), "{message}");
            assert!(!message.contains('\n'), "one line: {message}");
        }
        assert_eq!(std::fs::read(&path).unwrap(), before, "{tables}");
        let mode: String = Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "delete", "{tables}");
        assert!(!dir.path().join("other.db-wal").exists());
    }
}

/// Only a run creates a journal: reading and resuming a missing one is an error that creates
/// neither the file nor its directory, and what is not a regular file is refused as such.
#[tokio::test]
async fn only_a_run_creates_a_journal_and_only_regular_files_are_journals() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing/dir/journal.db");
    for open in [SqliteStore::open_existing, SqliteStore::open_read_only] {
        let err = open(&missing).unwrap_err();
        assert!(matches!(err, StoreError::Missing { .. }), "{err}");
    }
    assert!(!dir.path().join("missing").exists());
    for path in [dir.path(), Path::new("/dev/null")] {
        for open in [
            SqliteStore::open,
            SqliteStore::open_existing,
            SqliteStore::open_read_only,
        ] {
            let err = open(path).unwrap_err();
            assert!(
                matches!(&err, StoreError::Unusable { reason, .. }
                    if reason == "it is not a regular file"),
                "{err}"
            );
        }
    }
    assert!(!Path::new("/dev/null-journal").exists());
    assert!(!Path::new("/dev/null-wal").exists());
    // A run's journal, read back without being written to; a write through it fails.
    let path = dir.path().join("journal.db");
    SqliteStore::open(&path)
        .unwrap()
        .begin(&header("t"))
        .await
        .unwrap();
    let reader = SqliteStore::open_read_only(&path).unwrap();
    assert!(reader.load("t").await.unwrap().is_some());
    assert!(reader.begin(&header("u")).await.is_err());
    assert!(
        SqliteStore::open_existing(&path)
            .unwrap()
            .load("t")
            .await
            .unwrap()
            .is_some()
    );
    // An empty file is not a journal to read, though a run may make it one.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let err = SqliteStore::open_read_only(&empty).unwrap_err();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err}");
    SqliteStore::open(&empty).unwrap();
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
    assert_eq!(store.list().await.unwrap().threads.len(), 100);
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

#[tokio::test]
async fn a_reader_tells_a_claimed_thread_from_a_stopped_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let writer = SqliteStore::open(&path).unwrap();
    writer.begin(&header("t")).await.unwrap();
    let reader = SqliteStore::open_read_only(&path).unwrap();
    assert!(!reader.is_claimed("t"), "never claimed");
    let held = writer.claim("t").await.unwrap();
    assert!(reader.is_claimed("t"));
    // Looking does not get in the way of a second claimant's answer.
    assert!(matches!(
        writer.claim("t").await,
        Err(StoreError::InUse { .. })
    ));
    drop(held);
    assert!(!reader.is_claimed("t"), "its run stopped: resumable");
    let _again = writer.claim("t").await.unwrap();
}

#[tokio::test]
async fn the_reply_sample_leaves_out_rows_that_are_not_json_and_names_a_bad_count() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
    store.begin(&header("t")).await.unwrap();
    store
        .append("t", &[entry(0, 0), entry(1, 0)])
        .await
        .unwrap();
    let sql = |statement: &str| {
        store
            .connection
            .lock()
            .unwrap()
            .execute(statement, [])
            .unwrap()
    };
    let labels = |replies: Vec<crate::ReplySample>| -> Vec<Option<String>> {
        replies.into_iter().map(|reply| reply.label).collect()
    };
    assert_eq!(
        labels(store.recent_replies(10).await.unwrap()),
        [Some("leaf 0".to_owned()), Some("leaf 1".to_owned())]
    );
    sql("UPDATE entries SET request = '{\"kind\": \"agent\", ' WHERE seq = 0");
    sql("UPDATE entries SET outcome = 'not json' WHERE seq = 1");
    assert!(store.recent_replies(10).await.unwrap().is_empty());
    sql("UPDATE entries SET outcome = '{\"status\":\"ok\",\"value\":\"1\"}', output_tokens = -5");
    let error = store.recent_replies(10).await.unwrap_err();
    assert!(
        matches!(
            &error,
            StoreError::CorruptRecord { thread_id, record: JournalRecord::Entry { seq: 1, call: 2 }, detail, .. }
                if thread_id == "t" && detail == "its output token count is -5"
        ),
        "{error}"
    );
}
