//! Events in the journal: a run's history written as it happens, read back and followed from
//! another connection (as another process would), and continued by a resumed run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowbox::events::history::Follower;
use flowbox::store::{
    CheckpointStore, Claim, Entry, Listing, SqliteStore, StoreError, StoredEvent, StoredThread,
    ThreadEnd, ThreadHeader, ThreadStatus, WorkflowRecord,
};
use flowbox::{Event, EventKind, RunErrorKind, RunRequest, Runtime};
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

/// An SQLite journal that lists the writes it is asked for (`append_events` and
/// `finish_with_events` with the kinds of their events), and fails every end when told to.
#[derive(Debug)]
struct Watched {
    inner: SqliteStore,
    writes: Mutex<Vec<String>>,
    fail_ends: bool,
}

impl Watched {
    fn new(path: &std::path::Path, fail_ends: bool) -> Self {
        Self {
            inner: SqliteStore::open(path).unwrap(),
            writes: Mutex::new(Vec::new()),
            fail_ends,
        }
    }

    fn note(&self, what: &str, events: &[StoredEvent]) {
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        let mut writes = self.writes.lock().unwrap();
        writes.push(format!("{what} {}", kinds.join(",")));
    }

    fn writes(&self) -> Vec<String> {
        self.writes.lock().unwrap().clone()
    }
}

#[flowbox::async_trait]
impl CheckpointStore for Watched {
    async fn claim(&self, thread_id: &str) -> Result<Claim, StoreError> {
        self.inner.claim(thread_id).await
    }
    async fn begin(&self, header: &ThreadHeader) -> Result<(), StoreError> {
        self.inner.begin(header).await
    }
    async fn set_name(&self, thread_id: &str, name: &str) -> Result<(), StoreError> {
        self.inner.set_name(thread_id, name).await
    }
    async fn append(&self, thread_id: &str, entries: &[Entry]) -> Result<(), StoreError> {
        self.inner.append(thread_id, entries).await
    }
    async fn finish(&self, thread_id: &str, end: &ThreadEnd) -> Result<(), StoreError> {
        self.finish_with_events(thread_id, &[], end).await
    }
    async fn finish_with_events(
        &self,
        thread_id: &str,
        events: &[StoredEvent],
        end: &ThreadEnd,
    ) -> Result<(), StoreError> {
        self.note("finish", events);
        if self.fail_ends {
            return Err(StoreError::Io("the disk is full".into()));
        }
        self.inner.finish_with_events(thread_id, events, end).await
    }
    async fn load(&self, thread_id: &str) -> Result<Option<StoredThread>, StoreError> {
        self.inner.load(thread_id).await
    }
    async fn status(&self, thread_id: &str) -> Result<Option<ThreadStatus>, StoreError> {
        self.inner.status(thread_id).await
    }
    async fn list(&self) -> Result<Listing, StoreError> {
        self.inner.list().await
    }
    async fn record_workflow(&self, record: &WorkflowRecord) -> Result<(), StoreError> {
        self.inner.record_workflow(record).await
    }
    async fn workflows(
        &self,
        conversation: Option<&str>,
    ) -> Result<Vec<WorkflowRecord>, StoreError> {
        self.inner.workflows(conversation).await
    }
    fn keeps_events(&self) -> bool {
        true
    }
    async fn append_events(
        &self,
        thread_id: &str,
        events: &[StoredEvent],
    ) -> Result<(), StoreError> {
        self.note("append", events);
        self.inner.append_events(thread_id, events).await
    }
    async fn events(
        &self,
        thread_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.inner.events(thread_id, after, limit).await
    }
    async fn last_event_seq(&self, thread_id: &str) -> Result<u64, StoreError> {
        self.inner.last_event_seq(thread_id).await
    }
}

/// Runs `script` as thread `thread_id` on `store`, and returns the outcome with the events a
/// lossless subscriber got and, for its `run_finished`, whether the thread was journaled as
/// finished when the subscriber had it.
async fn watched_run(
    store: Arc<Watched>,
    script: &str,
    thread_id: &str,
) -> (flowbox::RunOutcome, Vec<Event>, bool) {
    let rt = runtime(Duration::from_millis(5), store.clone());
    let mut published = rt.subscribe_lossless();
    let watcher = tokio::spawn({
        let store = store.clone();
        let thread_id = thread_id.to_owned();
        async move {
            let mut events = Vec::new();
            while let Some(event) = published.recv().await {
                let last = matches!(event.kind, EventKind::RunFinished { .. });
                events.push(event);
                if last {
                    let status = store.status(&thread_id).await.unwrap();
                    return (events, status.is_some_and(|s| s.is_finished()));
                }
            }
            (events, false)
        }
    });
    let outcome = rt
        .run_request(RunRequest::new(script).thread_id(thread_id))
        .await;
    let (events, finished_when_seen) = watcher.await.unwrap();
    (outcome, events, finished_when_seen)
}

#[tokio::test]
async fn a_run_journals_its_end_and_last_event_in_one_write_and_publishes_that_event_after() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Watched::new(&dir.path().join("journal.db"), false));
    let (outcome, published, finished_when_seen) =
        watched_run(store.clone(), FAN_OUT, "one-write").await;
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    assert!(
        finished_when_seen,
        "whoever sees `run_finished` finds the end journaled"
    );
    let writes = store.writes();
    let last = writes.last().unwrap();
    assert!(
        last.starts_with("finish ") && last.ends_with(",run_finished"),
        "the end and the last events are the last write: {writes:?}"
    );
    assert_eq!(
        writes.iter().filter(|w| w.contains("run_finished")).count(),
        1
    );
    // The journal holds exactly what was published, numbered without holes.
    let journaled =
        flowbox::events::history::read(store.as_ref() as &dyn CheckpointStore, "one-write", 0, 100)
            .await
            .unwrap();
    assert_eq!(journaled, published);
    let seqs: Vec<u64> = journaled.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=journaled.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_run_whose_end_cannot_be_journaled_publishes_that_as_its_last_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Watched::new(&dir.path().join("journal.db"), true));
    let (outcome, published, finished_when_seen) =
        watched_run(store.clone(), FAN_OUT, "no-end").await;
    let error = outcome.result.unwrap_err();
    assert_eq!(error.kind(), RunErrorKind::JournalFailure, "{error}");
    assert!(!finished_when_seen);
    let Some(EventKind::RunFinished { ok, error, .. }) = published.last().map(|e| &e.kind) else {
        panic!("the last event published is the run's end: {published:?}");
    };
    assert!(!ok);
    let error = error.as_ref().unwrap();
    assert_eq!(error.kind, RunErrorKind::JournalFailure);
    assert!(
        error.message.contains("the disk is full"),
        "{}",
        error.message
    );
    // The events the end could not take are written after it, the last one saying so, under
    // the number it was published with.
    let writes = store.writes();
    assert!(
        writes.last().unwrap().starts_with("append ")
            && writes.last().unwrap().ends_with(",run_finished"),
        "{writes:?}"
    );
    let journaled =
        flowbox::events::history::read(store.as_ref() as &dyn CheckpointStore, "no-end", 0, 100)
            .await
            .unwrap();
    assert_eq!(journaled, published);
}
