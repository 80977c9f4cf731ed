//! Events in the journal: a run's history written as it happens, read back and followed from
//! another connection (as another process would), and continued by a resumed run.

use std::sync::Arc;
use std::time::Duration;

use flowbox::events::history::Follower;
use flowbox::store::{CheckpointStore, SqliteStore};
use flowbox::{Event, EventKind, RunRequest, Runtime};
use flowbox_tests::{CountingBackend, root};

fn runtime(delay: Duration, store: Arc<dyn CheckpointStore>) -> Runtime {
    Runtime::builder()
        .shared_backend(Arc::new(CountingBackend::new(delay)))
        .shared_store(store)
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .expect("the guest loads")
}

const FAN_OUT: &str = r#"
meta = {"name": "fan", "description": "d", "phases": [{"title": "review"}]}
async def main():
    phase("review")
    log("three reviewers")
    return await parallel([lambda i=i: agent(f"review {i}", label=f"r{i}") for i in range(3)])
"#;

#[tokio::test]
async fn a_run_journals_its_events_as_they_happen_and_another_reader_follows_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let rt = runtime(Duration::from_millis(600), store);
    let mut published = rt.subscribe_lossless();
    let run = tokio::spawn({
        let rt = rt.clone();
        async move {
            rt.run_request(RunRequest::new(FAN_OUT).thread_id("fan"))
                .await
        }
    });
    // Another connection, read-only, stands for another process.
    let reader: Arc<dyn CheckpointStore> = loop {
        match SqliteStore::open_read_only(&path) {
            Ok(reader) if reader.status("fan").await.unwrap().is_some() => break Arc::new(reader),
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    let mut follower = Follower::new(reader.clone(), "fan", 0).with_poll(Duration::from_millis(10));
    let mut followed: Vec<Event> = Vec::new();
    let mut started_while_running = 0;
    while let Some(batch) = follower.next().await.unwrap() {
        for event in batch {
            if matches!(event.kind, EventKind::LeafStarted { .. }) && !run.is_finished() {
                started_while_running += 1;
            }
            followed.push(event);
        }
    }
    assert_eq!(
        started_while_running, 3,
        "the leaves were seen starting while they ran"
    );
    let outcome = run.await.unwrap();
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    let seqs: Vec<u64> = followed.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=followed.len() as u64).collect::<Vec<_>>());
    // The history is exactly what the run published.
    let published: Vec<Event> = std::iter::from_fn(|| published.try_recv()).collect();
    assert_eq!(followed, published);
    let kinds: Vec<&str> = followed.iter().map(|e| e.kind.name()).collect();
    assert_eq!(kinds[..3], ["run_started", "phase", "log"]);
    assert_eq!(kinds.last(), Some(&"run_finished"));
    // Read again from a sequence number; a finished thread's follower ends at once.
    let tail = flowbox::events::history::read(reader.as_ref(), "fan", 3, 2)
        .await
        .unwrap();
    assert_eq!(tail, followed[3..5]);
    let mut again = Follower::new(reader.clone(), "fan", followed.len() as u64);
    assert!(again.next().await.unwrap().is_none());
    let mut missing = Follower::new(reader, "nope", 0);
    assert!(missing.next().await.is_err());
}

#[tokio::test]
async fn a_resumed_thread_continues_its_history_and_marks_replayed_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let rt = runtime(Duration::from_millis(100), store.clone());
    let script =
        "out = []\nfor i in range(6):\n    out.append(await agent(f'step {i}'))\nreturn out";
    let interrupted = tokio::time::timeout(
        Duration::from_millis(400),
        rt.run_request(RunRequest::new(script).thread_id("again")),
    )
    .await;
    assert!(interrupted.is_err(), "the run should still have been going");
    // Let the history writer catch up with what the dropped run published.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = store.last_event_seq("again").await.unwrap();
    assert!(before > 0);
    let outcome = rt.resume("again", None).await;
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    let events = flowbox::events::history::read(store.as_ref(), "again", 0, 10_000)
        .await
        .unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert!(events.len() as u64 > before);
    let starts = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::RunStarted { .. }))
        .count();
    assert_eq!(starts, 2, "both runs are in the one history");
    let replayed = events[before as usize..]
        .iter()
        .filter(|e| matches!(e.kind, EventKind::LeafFinished { replayed: true, .. }))
        .count();
    assert!(
        replayed >= 1,
        "the resumed run marks the leaves it replayed"
    );
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::RunFinished { ok: true, .. }
    ));
}
