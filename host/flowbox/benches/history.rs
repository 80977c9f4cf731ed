//! `make bench` (history): what journaling a run's events adds per leaf — the same SQLite
//! journal with its history on and off, for sequential leaves and a 1000-leaf fan-out —
//! written to `target/bench/history.json` and printed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowbox::backends::FakeBackend;
use flowbox::store::{
    CheckpointStore, Claim, Entry, Listing, SqliteStore, StoreError, StoredThread, ThreadEnd,
    ThreadHeader, ThreadStatus, WorkflowRecord,
};
use flowbox::{RunRequest, Runtime};
use serde_json::{Value, json};

const PARALLEL: &str = "\
results = await parallel([lambda i=i: agent(f'item {i}') for i in range(args['n'])])
return len(results)";
const SEQUENTIAL: &str = "\
n = 0
for i in range(args['n']):
    await agent(f'step {i}')
    n += 1
return n";

/// The same journal without a history: everything passes through but events.
#[derive(Debug)]
struct NoHistory(SqliteStore);

#[flowbox::async_trait]
impl CheckpointStore for NoHistory {
    async fn claim(&self, thread_id: &str) -> Result<Claim, StoreError> {
        self.0.claim(thread_id).await
    }
    async fn begin(&self, header: &ThreadHeader) -> Result<(), StoreError> {
        self.0.begin(header).await
    }
    async fn set_name(&self, thread_id: &str, name: &str) -> Result<(), StoreError> {
        self.0.set_name(thread_id, name).await
    }
    async fn append(&self, thread_id: &str, entries: &[Entry]) -> Result<(), StoreError> {
        self.0.append(thread_id, entries).await
    }
    async fn finish(&self, thread_id: &str, end: &ThreadEnd) -> Result<(), StoreError> {
        self.0.finish(thread_id, end).await
    }
    async fn load(&self, thread_id: &str) -> Result<Option<StoredThread>, StoreError> {
        self.0.load(thread_id).await
    }
    async fn status(&self, thread_id: &str) -> Result<Option<ThreadStatus>, StoreError> {
        self.0.status(thread_id).await
    }
    async fn list(&self) -> Result<Listing, StoreError> {
        self.0.list().await
    }
    async fn record_workflow(&self, record: &WorkflowRecord) -> Result<(), StoreError> {
        self.0.record_workflow(record).await
    }
    async fn workflows(
        &self,
        conversation: Option<&str>,
    ) -> Result<Vec<WorkflowRecord>, StoreError> {
        self.0.workflows(conversation).await
    }
}

fn runtime(store: Arc<dyn CheckpointStore>) -> Runtime {
    Runtime::builder()
        .shared_backend(Arc::new(FakeBackend::new()))
        .shared_store(store)
        .cache_dir(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/flowbox-cache"),
        )
        .build()
        .expect("the guest loads")
}

/// Median run times of `script` on each runtime, runs alternating between them.
async fn medians(runtimes: &[&Runtime], script: &str, args: Value, runs: usize) -> Vec<Duration> {
    let mut times = vec![Vec::new(); runtimes.len()];
    for _ in 0..runs {
        for (n, runtime) in runtimes.iter().enumerate() {
            let start = Instant::now();
            let outcome = runtime
                .run_request(RunRequest::new(script).args(args.clone()))
                .await;
            times[n].push(start.elapsed());
            assert!(outcome.result.is_ok(), "{:?}", outcome.result);
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect()
}

fn per_leaf_us(on: Duration, off: Duration, leaves: f64) -> f64 {
    ((on.as_secs_f64() - off.as_secs_f64()) / leaves * 1e6 * 10.0).round() / 10.0
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

fn main() {
    let tokio = tokio::runtime::Runtime::new().expect("a tokio runtime");
    tokio.block_on(async {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let on = runtime(Arc::new(
            SqliteStore::open(dir.path().join("on.db")).expect("a journal"),
        ));
        let off = runtime(Arc::new(NoHistory(
            SqliteStore::open(dir.path().join("off.db")).expect("a journal"),
        )));
        // Warm both up (the guest's compiled code, SQLite's pages).
        medians(&[&on, &off], PARALLEL, json!({"n": 100}), 2).await;
        let seq = medians(&[&on, &off], SEQUENTIAL, json!({"n": 200}), 21).await;
        let fan = medians(&[&on, &off], PARALLEL, json!({"n": 1000}), 11).await;
        let events_on_disk: u64 = {
            let store = SqliteStore::open_read_only(dir.path().join("on.db")).expect("a journal");
            let listing = store.list().await.expect("a listing");
            let last = &listing.threads[0].thread_id;
            store.last_event_seq(last).await.expect("a history")
        };
        let results = json!({
            "sequential_200_events_on_ms": ms(seq[0]),
            "sequential_200_events_off_ms": ms(seq[1]),
            "per_leaf_us_sequential": per_leaf_us(seq[0], seq[1], 200.0),
            "parallel_1000_events_on_ms": ms(fan[0]),
            "parallel_1000_events_off_ms": ms(fan[1]),
            "per_leaf_us_parallel": per_leaf_us(fan[0], fan[1], 1000.0),
            "events_per_1000_leaf_run": events_on_disk,
            "targets": { "per_leaf_us_parallel": 10.0 },
        });
        let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
        std::fs::create_dir_all(&out).expect("target/bench is writable");
        std::fs::write(out.join("history.json"), format!("{results:#}\n")).expect("writable");
        println!("{results:#}");
    });
}
