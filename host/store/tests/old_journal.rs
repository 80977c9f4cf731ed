//! A journal written by the previous format (fixtures/journal-v2.sql) opens with this build:
//! migrated, every thread loads into its typed records with its numbers exact, and its
//! interrupted thread takes more entries and an end.

use std::path::Path;

use flowbox_store::{
    CallErrorKind, CallKind, CallRequest, CheckpointStore, EntryOutcome, SCHEMA_VERSION,
    SqliteStore, ThreadStatus,
};

/// The fixture, loaded into a fresh SQLite file at `path`.
fn old_journal(path: &Path) {
    let dump = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/journal-v2.sql"),
    )
    .unwrap();
    rusqlite::Connection::open(path)
        .unwrap()
        .execute_batch(&dump)
        .unwrap();
}

#[tokio::test]
async fn a_journal_of_the_previous_format_opens_with_every_thread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    old_journal(&path);
    let store = SqliteStore::open(&path).unwrap();
    let version: u32 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);

    let listing = store.list().await.unwrap();
    assert!(listing.damaged.is_empty());
    let threads: Vec<_> = listing
        .threads
        .iter()
        .map(|l| (l.thread_id.as_str(), l.status, l.leaves))
        .collect();
    assert_eq!(
        threads,
        [
            ("old-finished", ThreadStatus::Succeeded, 1),
            ("old-interrupted", ThreadStatus::Resumable, 2)
        ]
    );
    for listed in &listing.threads {
        store.load(&listed.thread_id).await.unwrap().unwrap();
    }

    let interrupted = store.load("old-interrupted").await.unwrap().unwrap();
    assert_eq!(interrupted.name.as_deref(), Some("old-journal"));
    assert_eq!(
        interrupted.header.args.to_string(),
        r#"{"n":1180591620717411303424,"x":0.21599615170364495,"nz":-0.0}"#
    );
    assert!(interrupted.end.is_none());
    let [check, explode, tool] = &interrupted.entries[..] else {
        panic!("{:?}", interrupted.entries);
    };
    let CallRequest::Agent(agent) = &check.request else {
        panic!("{check:?}");
    };
    assert_eq!(
        agent.prompt.to_string(),
        r#"{"task":"check","n":1180591620717411303424,"x":0.21599615170364495}"#
    );
    assert_eq!(agent.label.as_deref(), Some("check"));
    assert!(agent.schema.is_some() && agent.tools.is_none());
    assert_eq!(
        check.outcome,
        EntryOutcome::Ok {
            value: r#"{"verdict":"approve","n":1180591620717411303425}"#.into()
        }
    );
    assert_eq!(
        explode.outcome,
        // Journals of the previous format did not record whether a failure was retryable.
        EntryOutcome::Err {
            kind: CallErrorKind::AgentFailed,
            message: "provider unavailable".into(),
            retryable: false,
            cause: None,
        }
    );
    let CallRequest::Tool(read) = &tool.request else {
        panic!("{tool:?}");
    };
    assert_eq!(tool.kind(), CallKind::Tool);
    assert_eq!(
        (read.name.as_str(), read.arguments.to_string()),
        ("read_file", r#"{"path":"notes/plan.txt"}"#.into())
    );

    let finished = store.load("old-finished").await.unwrap().unwrap();
    let end = finished.end.unwrap();
    assert_eq!(end.status(), ThreadStatus::Succeeded);
    assert_eq!(
        end.outcome.result.unwrap().to_string(),
        r#"{"reply":"[fake greet] hello from an old journal","x":5e-324}"#
    );
    assert_eq!(end.outcome.summary.leaves, 1);
    assert_eq!(end.outcome.summary.logs, ["greeted"]);
    // Its counts read as reported: the format did not say which were estimates.
    assert_eq!(end.outcome.summary.estimated_tokens, 0);
    assert!(interrupted.entries.iter().all(|e| e.estimated_tokens == 0));

    let workflows = store.workflows(Some("conv-old")).await.unwrap();
    assert_eq!(workflows.len(), 1);
    assert_eq!(workflows[0].thread_id, "old-finished");

    // The old thread goes on in the new format.
    let mut next = interrupted.entries[2].clone();
    next.estimated_tokens = 4;
    next.seq = 3;
    next.batch = 3;
    next.handle = 4;
    store
        .append("old-interrupted", &[next.clone()])
        .await
        .unwrap();
    assert_eq!(
        store
            .load("old-interrupted")
            .await
            .unwrap()
            .unwrap()
            .entries[3],
        next
    );
}

#[tokio::test]
async fn a_journal_of_the_previous_format_has_no_events_until_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    old_journal(&path);
    // Read-only, it is read as it is: no history, and no error.
    let reader = SqliteStore::open_read_only(&path).unwrap();
    assert!(
        reader
            .events("old-finished", 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(reader.last_event_seq("old-interrupted").await.unwrap(), 0);
    // Nor does it say which of its tokens were estimates: they read as reported.
    let interrupted = reader.load("old-interrupted").await.unwrap().unwrap();
    assert_eq!(interrupted.entries.len(), 3);
    assert!(interrupted.entries.iter().all(|e| e.estimated_tokens == 0));
    // What the web view reads of one thread or one call reads the same way.
    let third = &interrupted.entries[2];
    assert_eq!(
        reader
            .entry("old-interrupted", third.handle)
            .await
            .unwrap()
            .as_ref(),
        Some(third)
    );
    assert!(
        reader
            .call_events("old-interrupted", third.handle, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let overview = reader.overview("old-finished").await.unwrap().unwrap();
    let finished = reader.load("old-finished").await.unwrap().unwrap();
    assert_eq!(
        (overview.header, overview.end),
        (finished.header, finished.end)
    );
    assert_eq!(overview.summary.leaves, 1);
    drop(reader);
    // Migrated, its interrupted thread's resumed run writes a history.
    let store = SqliteStore::open(&path).unwrap();
    let event = flowbox_store::StoredEvent {
        seq: 1,
        kind: "log".into(),
        event: r#"{"thread_id":"old-interrupted","seq":1,"type":"log","message":"again"}"#.into(),
    };
    store
        .append_events("old-interrupted", std::slice::from_ref(&event))
        .await
        .unwrap();
    let reader = SqliteStore::open_read_only(&path).unwrap();
    assert_eq!(
        reader.events("old-interrupted", 0, 10).await.unwrap(),
        [event]
    );
}
