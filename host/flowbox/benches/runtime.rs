//! `make bench`: what a run and a leaf cost, written to `target/bench/results.json` and
//! printed as a table.
//!
//! Timings are medians over repeated runs in one process, on a zero-latency fake backend unless
//! stated, so they measure flowbox's own overhead. Planning a 1000-leaf fan-out is set against
//! running it on the fake backend. Compare figures from one run with each other;
//! absolute numbers move with the machine's load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowbox::backends::{AgentBackend, AgentConfig, CheckedBackend, FakeBackend, ScriptedBackend};
use flowbox::http::{OpenAiChat, RetryPolicy};
use flowbox::plan::PriceTable;
use flowbox::store::{CheckpointStore, Durability, MemoryStore, SqliteStore};
use flowbox::tools::ToolSet;
use flowbox::trace::Otlp;
use flowbox::{Limits, RunRequest, Runtime};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const TRIVIAL: &str = "return 1";
const ONE_LEAF: &str = "return await agent('hello')";
const PARALLEL: &str = "\
results = await parallel([lambda i=i: agent(f'item {i}') for i in range(args['n'])])
return len(results)";
const SEQUENTIAL: &str = "\
n = 0
for i in range(args['n']):
    await agent(f'step {i}')
    n += 1
return n";
const PIPELINE: &str = "\
async def draft(item):
    return await agent(f'draft {item}')
async def review(prev, item):
    return await agent(f'review {item}')
async def polish(prev, item, index):
    return await agent(f'polish {index}')
results = await pipeline(list(range(args['n'])), draft, review, polish)
return len(results)";

struct Stats {
    median: Duration,
    p90: Duration,
    iterations: usize,
}

impl Stats {
    /// The median and 90th percentile of some timings.
    fn of(mut times: Vec<Duration>) -> Stats {
        times.sort();
        Stats {
            median: times[times.len() / 2],
            p90: times[times.len() * 9 / 10],
            iterations: times.len(),
        }
    }

    fn json(&self) -> Value {
        json!({
            "median_ms": ms(self.median),
            "p90_ms": ms(self.p90),
            "iterations": self.iterations,
        })
    }
}

fn ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e3
}

fn cache_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/flowbox-cache")
}

fn runtime(backend: Arc<dyn flowbox::LeafBackend>, limits: Limits) -> Runtime {
    journaled(backend, limits, None)
}

fn journaled(
    backend: Arc<dyn flowbox::LeafBackend>,
    limits: Limits,
    store: Option<Arc<dyn CheckpointStore>>,
) -> Runtime {
    let mut builder = Runtime::builder()
        .shared_backend(backend)
        .limits(limits)
        .cache_dir(cache_dir());
    if let Some(store) = store {
        builder = builder.shared_store(store);
    }
    builder.build().expect("the guest loads")
}

/// A backend that fails every call: a resumed run must take everything from its journal.
#[derive(Debug)]
struct NoCalls;

#[async_trait::async_trait]
impl flowbox::LeafBackend for NoCalls {
    async fn call(
        &self,
        _: &flowbox::LeafRequest,
    ) -> Result<flowbox::LeafReply, flowbox::BackendError> {
        Err(flowbox::BackendError::terminal(
            "a resumed run called the backend",
        ))
    }
}

/// Runs `script` `iterations` times (after two warm-up runs) and returns the timings.
async fn measure(runtime: &Runtime, script: &str, args: Value, iterations: usize) -> Stats {
    for _ in 0..2 {
        run_ok(runtime, script, args.clone()).await;
    }
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        run_ok(runtime, script, args.clone()).await;
        times.push(start.elapsed());
    }
    Stats::of(times)
}

/// A trivial run from the warm pool, `iterations` times: before each (untimed) the pool is
/// refilled, so every timed run finds an instance ready, as a request to an idle server does.
async fn measure_pooled(runtime: &Runtime, iterations: usize) -> Stats {
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations + 2 {
        loop {
            let pool = runtime.warm_pool().expect("a pooled runtime");
            if pool.ready == pool.capacity {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let start = Instant::now();
        run_ok(runtime, TRIVIAL, json!({})).await;
        times.push(start.elapsed());
    }
    Stats::of(times.split_off(2))
}

/// The floor: what a fresh instance costs wasmtime itself (`Runtime::instance_floor`),
/// `iterations` times after two warm-ups.
async fn measure_floor(runtime: &Runtime, iterations: usize) -> Stats {
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations + 2 {
        times.push(
            runtime
                .instance_floor()
                .await
                .expect("the guest instantiates"),
        );
    }
    Stats::of(times.split_off(2))
}

/// `figure` as a multiple of the floor, to one decimal.
fn over_floor(figure: Duration, floor: &Stats) -> f64 {
    (figure.as_secs_f64() / floor.median.as_secs_f64() * 10.0).round() / 10.0
}

/// The peer's figures for the same workloads (`benches/peer/`), or why there are none.
fn peer_figures() -> Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peer/run.sh");
    let output = match std::process::Command::new(&script).output() {
        Ok(output) => output,
        Err(error) => return json!({"error": format!("cannot run {}: {error}", script.display())}),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    match stdout.lines().last().map(serde_json::from_str::<Value>) {
        Some(Ok(figures)) if output.status.success() => figures,
        _ => json!({"error": format!(
            "the peer benchmark failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )}),
    }
}

/// flowbox's median over the peer's, to three places, when the peer has the figure.
fn ratio(flowbox: Duration, peer: &Value) -> Value {
    match peer["median_ms"].as_f64() {
        Some(peer) if peer > 0.0 => json!((ms(flowbox) / peer * 1000.0).round() / 1000.0),
        _ => Value::Null,
    }
}

/// Like `measure`, for several runtimes at once, alternating between them on every iteration so
/// that the machine's load drifts over all of them alike; for comparing them with each other.
async fn measure_alternating(
    runtimes: &[&Runtime],
    script: &str,
    args: Value,
    iterations: usize,
) -> Vec<Stats> {
    for runtime in runtimes {
        run_ok(runtime, script, args.clone()).await;
    }
    let mut times = vec![Vec::with_capacity(iterations); runtimes.len()];
    for _ in 0..iterations {
        for (runtime, times) in runtimes.iter().zip(&mut times) {
            let start = Instant::now();
            run_ok(runtime, script, args.clone()).await;
            times.push(start.elapsed());
        }
    }
    times.into_iter().map(Stats::of).collect()
}

/// Plans and runs `script` `iterations` times each, alternating (after a warm-up of both):
/// the plan's timings, then the run's.
async fn measure_plan_and_run(
    runtime: &Runtime,
    script: &str,
    args: Value,
    iterations: usize,
) -> (Stats, Stats) {
    let plan = || runtime.plan(RunRequest::new(script).args(args.clone()));
    plan().await.expect("the benchmark script plans");
    run_ok(runtime, script, args.clone()).await;
    let (mut plans, mut runs) = (Vec::new(), Vec::new());
    for _ in 0..iterations {
        let start = Instant::now();
        let planned = plan().await.expect("the benchmark script plans");
        plans.push(start.elapsed());
        assert_eq!(planned.leaves, 1000);
        let start = Instant::now();
        run_ok(runtime, script, args.clone()).await;
        runs.push(start.elapsed());
    }
    (Stats::of(plans), Stats::of(runs))
}

/// Runs `script`, which must succeed, and returns the fuel it used. Unlike a timing, fuel does
/// not move with the machine's load, unless the load changes how the host batches the leaves'
/// completions.
async fn run_ok(runtime: &Runtime, script: &str, args: Value) -> u64 {
    let outcome = runtime
        .run_request(RunRequest::new(script).args(args))
        .await;
    if let Err(e) = outcome.result {
        panic!("benchmark script failed: {e}");
    }
    outcome.summary.fuel_used
}

/// The fuel each further leaf of `script` adds: its run with `n` items less its run with none
/// (which parses, checks and compiles the same script), over its `leaves`.
async fn fuel_per_leaf(runtime: &Runtime, script: &str, n: u64, leaves: u64) -> f64 {
    let with = run_ok(runtime, script, json!({ "n": n })).await;
    let without = run_ok(runtime, script, json!({ "n": 0 })).await;
    (with.saturating_sub(without) as f64 / leaves as f64).round()
}

/// Fuel in thousands, to one decimal: `417.7 k` (results.json has every unit).
fn kilo(fuel: f64) -> String {
    format!("{:.1} k", fuel / 1000.0)
}

/// Peak resident memory of this process in bytes, after resetting the peak (Linux).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn rss_field(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// This process's proportional and private memory now (Linux `smaps_rollup`), in bytes. RSS
/// counts a page of the guest's memory image once for every run that maps it, though the page
/// cache holds it once; PSS shares each such page out among its mappers.
fn pss_and_private() -> Option<(u64, u64)> {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = rollup.lines().find(|l| l.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    Some((
        field("Pss:")?,
        field("Private_Clean:")? + field("Private_Dirty:")?,
    ))
}

/// A loopback server answering every Chat Completions request at once, with keep-alive, so the
/// HTTP leaf benchmark measures flowbox's agent loop and HTTP client, not a model.
async fn chat_completions_server() -> String {
    let body = json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1}
    })
    .to_string();
    format!("{}/v1", loopback_server("application/json", &body).await)
}

/// A loopback server answering every request at once with `body`, with keep-alive: a model for
/// the HTTP leaves, a collector taking every trace export (an empty protobuf message is OTLP's
/// full success).
async fn loopback_server(content_type: &str, body: &str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let response = response.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut reader = BufReader::new(read);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        match reader.read_line(&mut line).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(value) =
                            line.to_ascii_lowercase().strip_prefix("content-length:")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).await.is_err()
                        || write.write_all(response.as_bytes()).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// Resumes a journaled 1000-leaf thread whose run was cut off just before it returned: the
/// whole journal is replayed (no backend call) and the thread finishes. Each iteration resumes
/// a fresh copy of the interrupted journal.
async fn resume_benchmark(
    live: &Runtime,
    recorded: &Arc<dyn CheckpointStore>,
    dir: &std::path::Path,
) -> Stats {
    let outcome = live
        .run_request(
            RunRequest::new(PARALLEL)
                .args(json!({"n": 1000}))
                .thread_id("resume-me"),
        )
        .await;
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    let run = recorded
        .load("resume-me")
        .await
        .expect("readable")
        .expect("journaled");
    let mut times = Vec::new();
    for iteration in 0..10 {
        let copy =
            SqliteStore::open(dir.join(format!("resume-{iteration}.db"))).expect("a journal");
        copy.begin(&run.header).await.expect("a new thread");
        copy.append("resume-me", &run.entries)
            .await
            .expect("appended");
        let replay = journaled(Arc::new(NoCalls), Limits::default(), Some(Arc::new(copy)));
        let start = Instant::now();
        let resumed = replay.resume("resume-me", None).await;
        times.push(start.elapsed());
        assert_eq!(resumed.result.expect("the replay succeeds"), json!(1000));
    }
    Stats::of(times)
}

/// The environment variable that makes this benchmark measure one part and print it as JSON.
const PART: &str = "FLOWBOX_BENCH_PART";
/// The part that is 100 runs in flight.
const IN_FLIGHT: &str = "in_flight";

/// Runs this benchmark again to measure `part` alone, in a process of its own; its JSON.
fn in_own_process(part: &str) -> Value {
    let exe = std::env::current_exe().expect("the benchmark knows its own path");
    let output = std::process::Command::new(exe)
        .env(PART, part)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("the benchmark runs again");
    assert!(output.status.success(), "measuring {part} failed");
    serde_json::from_slice(&output.stdout).expect("the part prints JSON")
}

/// 100 runs in flight at once, each with 10 leaves of 20 ms: peak resident memory, and peak
/// proportional and private memory, against what the process held before they started.
async fn runs_in_flight() -> Value {
    let concurrent = runtime(
        Arc::new(
            ScriptedBackend::from_json(r#"{"latency_ms": 20, "fallback": "fake"}"#)
                .expect("valid config"),
        ),
        Limits::default(),
    );
    run_ok(&concurrent, PARALLEL, json!({"n": 10})).await;
    let baseline_rss = rss_field("VmRSS:").unwrap_or(0);
    reset_peak_rss();
    // Peak PSS and private memory, sampled while the runs are in flight.
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = Arc::clone(&sampling);
        tokio::spawn(async move {
            let mut peak = (0, 0);
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some((pss, private)) = pss_and_private() {
                    peak = (peak.0.max(pss), peak.1.max(private));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak
        })
    };
    let start = Instant::now();
    let runs: Vec<_> = (0..100)
        .map(|_| {
            let runtime = concurrent.clone();
            tokio::spawn(async move { run_ok(&runtime, PARALLEL, json!({"n": 10})).await })
        })
        .collect();
    for run in runs {
        run.await.expect("the run task completes");
    }
    let concurrent_wall = start.elapsed();
    let peak_rss = rss_field("VmHWM:").unwrap_or(0);
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let (peak_pss, peak_private) = sampler.await.expect("the memory sampler completes");
    json!({
        "wall_ms": ms(concurrent_wall),
        "baseline_rss_mib": baseline_rss / (1 << 20),
        "peak_rss_mib": peak_rss / (1 << 20),
        "peak_pss_mib": peak_pss / (1 << 20),
        "peak_private_mib": peak_private / (1 << 20),
    })
}

fn main() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    if std::env::var(PART).as_deref() == Ok(IN_FLIGHT) {
        let figures = tokio.block_on(runs_in_flight());
        println!("{figures}");
        return;
    }
    tokio.block_on(async_main());
}

async fn async_main() {
    // The first runtime built by a binary just linked takes ~4× longer (13–14 ms against
    // ~3 ms in its later processes), paging in code from a file the linker has just written:
    // one is built and dropped first, so the figure is a build of a warmed process (~2.5 ms).
    // What a whole process pays is the process benchmark's.
    drop(runtime(Arc::new(FakeBackend::new()), Limits::default()));
    let build_start = Instant::now();
    let fake = runtime(Arc::new(FakeBackend::new()), Limits::default());
    let build = build_start.elapsed();

    let floor = measure_floor(&fake, 200).await;
    let trivial = measure(&fake, TRIVIAL, json!({}), 200).await;
    // The warm pool: what a full pool of 4 adds to resident memory before its first run (so
    // before anything is pre-faulted), then trivial runs from it, then how much of its
    // instances' memory is pre-faulted with the pages those runs touched.
    let rss_without_pool = rss_field("VmRSS:").unwrap_or(0);
    let pooled = Runtime::builder()
        .backend(FakeBackend::new())
        .cache_dir(cache_dir())
        .warm_pool(4)
        .build()
        .expect("the guest loads");
    let full = async || {
        while pooled
            .warm_pool()
            .is_some_and(|pool| pool.ready < pool.capacity)
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    full().await;
    let pool_rss = rss_field("VmRSS:")
        .unwrap_or(0)
        .saturating_sub(rss_without_pool);
    let trivial_pooled = measure_pooled(&pooled, 200).await;
    full().await;
    let pool_stats = pooled.warm_pool().expect("a pooled runtime");
    // The fuel of a trivial run, fresh and from the pool (which must be the same), and what
    // each leaf of a fan-out and of a pipeline adds to a run's fuel.
    let fuel_pooled = run_ok(&pooled, TRIVIAL, json!({})).await;
    drop(pooled);
    let fuel_fresh = run_ok(&fake, TRIVIAL, json!({})).await;
    let fuel_per_leaf_parallel = fuel_per_leaf(&fake, PARALLEL, 1000, 1000).await;
    let fuel_per_leaf_pipeline = fuel_per_leaf(&fake, PIPELINE, 100, 300).await;
    let one_leaf = measure(&fake, ONE_LEAF, json!({}), 200).await;
    let parallel_100 = measure(&fake, PARALLEL, json!({"n": 100}), 50).await;
    let parallel_1000 = measure(&fake, PARALLEL, json!({"n": 1000}), 15).await;
    let pipeline_100 = measure(&fake, PIPELINE, json!({"n": 100}), 30).await;
    // The same scripts with no items: what they cost beyond a trivial run before any leaf
    // (parsing, checking and compiling a longer script), which a leaf's share leaves out.
    let parallel_0 = measure(&fake, PARALLEL, json!({"n": 0}), 50).await;
    let pipeline_0 = measure(&fake, PIPELINE, json!({"n": 0}), 50).await;

    // Planning a 1000-leaf fan-out against running it on the fake backend: with the fake's own
    // estimates (the approximation), and as leaves on gpt-4o (its o200k_base tokenizer, the
    // agent's system prompt counted, priced).
    let (plan_1000, run_1000) = measure_plan_and_run(&fake, PARALLEL, json!({"n": 1000}), 15).await;
    let priced = {
        let config = AgentConfig {
            model: "gpt-4o".into(),
            ..AgentConfig::default()
        };
        let leaves = CheckedBackend::new(Arc::new(FakeBackend::new()), config, ToolSet::new());
        let prices = PriceTable::load(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/prices.json"),
        )
        .expect("the example price table");
        Runtime::builder()
            .backend(leaves)
            .prices(prices)
            .cache_dir(cache_dir())
            .build()
            .expect("the guest loads")
    };
    let (plan_1000_o200k, run_1000_o200k) =
        measure_plan_and_run(&priced, PARALLEL, json!({"n": 1000}), 15).await;
    let plan_ratio = |plan: &Stats, run: &Stats| {
        (plan.median.as_secs_f64() / run.median.as_secs_f64() * 1000.0).round() / 1000.0
    };

    let per_leaf = |stats: &Stats, leaves: f64| {
        (stats.median.as_secs_f64() - trivial.median.as_secs_f64()) / leaves * 1e6
    };
    let per_leaf_100 = per_leaf(&parallel_100, 100.0);
    let per_leaf_1000 = per_leaf(&parallel_1000, 1000.0);
    let per_leaf_pipeline = per_leaf(&pipeline_100, 300.0);
    let beyond_no_items = |stats: &Stats, none: &Stats, leaves: f64| {
        (stats.median.as_secs_f64() - none.median.as_secs_f64()) / leaves * 1e6
    };
    let marginal_1000 = beyond_no_items(&parallel_1000, &parallel_0, 1000.0);
    let marginal_pipeline = beyond_no_items(&pipeline_100, &pipeline_0, 300.0);

    // Makespan: 100 leaves of 50 ms each with 16 slots; ideal is ceil(100/16) × 50 ms.
    let slow = runtime(
        Arc::new(
            ScriptedBackend::from_json(r#"{"latency_ms": 50, "fallback": "fake"}"#)
                .expect("valid config"),
        ),
        Limits::default().with_max_concurrency(16),
    );
    let makespan = measure(&slow, PARALLEL, json!({"n": 100}), 9).await;
    let ideal = Duration::from_millis(100_u64.div_ceil(16) * 50);
    let makespan_ratio = makespan.median.as_secs_f64() / ideal.as_secs_f64();
    // The peer comparison's makespan: 1000 leaves of 10 ms with 16 slots.
    let fast = runtime(
        Arc::new(
            ScriptedBackend::from_json(r#"{"latency_ms": 10, "fallback": "fake"}"#)
                .expect("valid config"),
        ),
        Limits::default().with_max_concurrency(16),
    );
    let makespan_1000 = measure(&fast, PARALLEL, json!({"n": 1000}), 5).await;
    let ideal_1000 = Duration::from_millis(1000_u64.div_ceil(16) * 10);

    // Leaves as real agents over HTTP against a loopback server that answers at once: the
    // cost of the agent loop and the HTTP client per leaf, on top of the fake backend's.
    let url = chat_completions_server().await;
    let chat = OpenAiChat::new(url, None, RetryPolicy::default()).expect("a loopback URL");
    let agents = AgentBackend::new(
        Arc::new(chat),
        AgentConfig {
            model: "loopback".into(),
            ..AgentConfig::default()
        },
        ToolSet::new(),
    );
    let http = runtime(Arc::new(agents), Limits::default());
    let http_100 = measure(&http, PARALLEL, json!({"n": 100}), 30).await;
    let http_per_leaf =
        (http_100.median.as_secs_f64() - parallel_100.median.as_secs_f64()) / 100.0 * 1e6;

    // The journal: the cost per leaf of journaling in memory and in SQLite (durable against a
    // killed process), with one batch per leaf (sequential awaits, the worst case) and with
    // batches of many leaves (a fan-out); then resuming a 1000-leaf thread from SQLite.
    let journal_dir = tempfile::tempdir().expect("a temporary directory");
    let sqlite: Arc<dyn CheckpointStore> =
        Arc::new(SqliteStore::open(journal_dir.path().join("bench.db")).expect("a journal"));
    let memory: Arc<dyn CheckpointStore> = Arc::new(MemoryStore::new());
    let fake_backend: Arc<dyn flowbox::LeafBackend> = Arc::new(FakeBackend::new());
    let in_memory = journaled(fake_backend.clone(), Limits::default(), Some(memory));
    let on_disk = journaled(
        fake_backend.clone(),
        Limits::default(),
        Some(sqlite.clone()),
    );
    let sequential = measure_alternating(
        &[&fake, &in_memory, &on_disk],
        SEQUENTIAL,
        json!({"n": 200}),
        21,
    )
    .await;
    let fan_out = measure_alternating(
        &[&fake, &in_memory, &on_disk],
        PARALLEL,
        json!({"n": 1000}),
        11,
    )
    .await;
    let [plain_sequential, memory_sequential, sqlite_sequential] =
        <[Stats; 3]>::try_from(sequential)
            .ok()
            .expect("three runtimes");
    let [plain_parallel, memory_parallel, sqlite_parallel] = <[Stats; 3]>::try_from(fan_out)
        .ok()
        .expect("three runtimes");
    let journal_cost = |journaled: &Stats, plain: &Stats, leaves: f64| {
        ((journaled.median.as_secs_f64() - plain.median.as_secs_f64()) / leaves * 1e6 * 10.0)
            .round()
            / 10.0
    };
    let resume_1000 = resume_benchmark(&on_disk, &sqlite, journal_dir.path()).await;
    // Traces: the same fan-out with every run exported to a loopback OTLP collector.
    let collector = loopback_server("application/x-protobuf", "").await;
    let traced = Runtime::builder()
        .shared_backend(fake_backend.clone())
        .cache_dir(cache_dir())
        .otlp(Some(Otlp::endpoint(collector)))
        .build()
        .expect("the guest loads");
    let [untraced_1000, traced_1000] = <[Stats; 2]>::try_from(
        measure_alternating(&[&fake, &traced], PARALLEL, json!({"n": 1000}), 15).await,
    )
    .ok()
    .expect("two runtimes");
    traced.flush_traces();
    let trace_stats = traced.traces().expect("traces are on");
    assert_eq!(
        trace_stats.dropped, 0,
        "the loopback collector takes every span"
    );
    let tracing_per_leaf = journal_cost(&traced_1000, &untraced_1000, 1000.0);
    // The stricter setting: every batch fsynced, surviving power loss. Fewer leaves, since
    // each costs a disk flush.
    let fsynced = journaled(
        fake_backend.clone(),
        Limits::default(),
        Some(Arc::new(
            SqliteStore::open_with(
                journal_dir.path().join("power-loss.db"),
                Durability::PowerLoss,
            )
            .expect("a journal"),
        )),
    );
    let power_loss = measure_alternating(&[&fake, &fsynced], SEQUENTIAL, json!({"n": 50}), 9).await;
    let power_loss_per_leaf = journal_cost(&power_loss[1], &power_loss[0], 50.0);

    // 100 runs in flight at once, in a process that has only their runtime, as a server would:
    // this one holds a dozen runtimes by now, each with its own mapping of the compiled guest.
    let in_flight = in_own_process(IN_FLIGHT);
    let peak_rss = in_flight["peak_rss_mib"].as_u64().unwrap_or(0);

    // The peer, in the same run, after flowbox's own figures.
    let peer = tokio::task::spawn_blocking(peer_figures)
        .await
        .expect("the peer benchmark task completes");

    let results = json!({
        "runtime_build_ms": ms(build),
        "floor_fresh_instance": floor.json(),
        "over_floor": {
            "trivial_run": over_floor(trivial.median, &floor),
            "trivial_run_from_pool": over_floor(trivial_pooled.median, &floor),
            "one_leaf": over_floor(one_leaf.median, &floor),
        },
        "trivial_run": trivial.json(),
        "one_leaf": one_leaf.json(),
        "parallel_100": parallel_100.json(),
        "parallel_1000": parallel_1000.json(),
        "pipeline_3x100": pipeline_100.json(),
        "plan_1000": {
            "plan": plan_1000.json(),
            "run_fake": run_1000.json(),
            "ratio": plan_ratio(&plan_1000, &run_1000),
            "plan_gpt_4o_o200k_priced": plan_1000_o200k.json(),
            "run_fake_as_gpt_4o": run_1000_o200k.json(),
            "ratio_gpt_4o": plan_ratio(&plan_1000_o200k, &run_1000_o200k),
        },
        "journal": {
            "sequential_200_no_journal": plain_sequential.json(),
            "sequential_200_memory": memory_sequential.json(),
            "sequential_200_sqlite": sqlite_sequential.json(),
            "parallel_1000_memory": memory_parallel.json(),
            "parallel_1000_sqlite": sqlite_parallel.json(),
            "per_leaf_us_sequential_memory": journal_cost(&memory_sequential, &plain_sequential, 200.0),
            "per_leaf_us_sequential_sqlite": journal_cost(&sqlite_sequential, &plain_sequential, 200.0),
            "parallel_1000_no_journal": plain_parallel.json(),
            "per_leaf_us_parallel_memory": journal_cost(&memory_parallel, &plain_parallel, 1000.0),
            "per_leaf_us_parallel_sqlite": journal_cost(&sqlite_parallel, &plain_parallel, 1000.0),
            "resume_1000_leaves": resume_1000.json(),
            "sequential_50_sqlite_power_loss": power_loss[1].json(),
            "per_leaf_us_sequential_sqlite_power_loss": power_loss_per_leaf,
        },
        "tracing": {
            "parallel_1000_untraced": untraced_1000.json(),
            "parallel_1000_traced": traced_1000.json(),
            "per_leaf_us": tracing_per_leaf,
            "spans_exported": trace_stats.exported,
        },
        "http_leaves_parallel_100": http_100.json(),
        "http_added_overhead_per_leaf_us": (http_per_leaf * 10.0).round() / 10.0,
        "overhead_per_leaf_us": {
            "parallel_100": (per_leaf_100 * 10.0).round() / 10.0,
            "parallel_1000": (per_leaf_1000 * 10.0).round() / 10.0,
            "pipeline_3x100": (per_leaf_pipeline * 10.0).round() / 10.0,
        },
        "overhead_per_leaf_us_beyond_no_items": {
            "parallel_1000": (marginal_1000 * 10.0).round() / 10.0,
            "pipeline_3x100": (marginal_pipeline * 10.0).round() / 10.0,
            "parallel_no_items": parallel_0.json(),
            "pipeline_no_items": pipeline_0.json(),
        },
        "fuel": {
            "trivial_run_fresh": fuel_fresh,
            "trivial_run_from_pool": fuel_pooled,
            "per_leaf_parallel_1000": fuel_per_leaf_parallel,
            "per_leaf_pipeline_3x100": fuel_per_leaf_pipeline,
        },
        "makespan_100x50ms_c16": {
            "median_ms": ms(makespan.median),
            "ideal_ms": ms(ideal),
            "ratio": (makespan_ratio * 1000.0).round() / 1000.0,
        },
        "concurrent_100_runs": in_flight,
        "warm_pool": {
            "trivial_run_cold": trivial.json(),
            "trivial_run_from_pool": trivial_pooled.json(),
            "capacity": pool_stats.capacity,
            "linear_memory_mib_held": pool_stats.memory_bytes / (1 << 20),
            "linear_memory_mib_prefaulted": pool_stats.prefaulted_bytes / (1 << 20),
            "rss_mib_added_by_full_pool_before_a_run": (pool_rss as f64 / f64::from(1 << 20) * 10.0).round() / 10.0,
        },
        "makespan_1000x10ms_c16": {
            "median_ms": ms(makespan_1000.median),
            "ideal_ms": ms(ideal_1000),
            "ratio": (makespan_1000.median.as_secs_f64() / ideal_1000.as_secs_f64() * 1000.0).round() / 1000.0,
        },
        "peer": {
            "pydantic_monty": peer,
            "ratio_flowbox_over_peer": {
                "trivial_cold": ratio(trivial.median, &peer["trivial_cold"]),
                "trivial_warm": ratio(trivial_pooled.median, &peer["trivial_warm"]),
                "parallel_1000": ratio(parallel_1000.median, &peer["parallel_1000"]),
                "pipeline_3x100": ratio(pipeline_100.median, &peer["pipeline_3x100"]),
                "makespan_1000x10ms_c16": ratio(makespan_1000.median, &peer["makespan_1000x10ms_c16"]),
            },
        },
        "targets": {
            "trivial_run_median_ms": 1.0,
            "trivial_run_from_pool_median_ms": 0.1,
            "trivial_run_from_pool_over_peer_warm": 1.0,
            "trivial_run_fuel": 150_000,
            "overhead_per_leaf_us": {"parallel_1000": 10.0, "pipeline_3x100": 15.0},
            "parallel_1000_median_ms": 50.0,
            "makespan_ratio": 1.05,
            "concurrent_100_runs_peak_rss_mib": 600,
            "journal_per_leaf_us": {"sequential_sqlite": 20.0, "parallel_1000_sqlite": 50.0},
            "resume_1000_leaves_ms": 100.0,
            "plan_1000_over_run_1000": 1.0,
        },
    });

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&dir).expect("target/bench is writable");
    let path = dir.join("results.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&results).expect("serialisable") + "\n",
    )
    .expect("results.json is writable");

    println!("{:<40} {:>12} {:>12}", "benchmark", "median", "target");
    let row = |name: &str, value: String, target: &str| {
        println!("{name:<40} {value:>12} {target:>12}");
    };
    row(
        "runtime build (cached guest)",
        format!("{:.1} ms", ms(build)),
        "",
    );
    row(
        "floor: instantiate + a trivial export",
        format!("{:.3} ms", ms(floor.median)),
        "",
    );
    row(
        "trivial run",
        format!(
            "{:.3} ms, ×{} floor",
            ms(trivial.median),
            over_floor(trivial.median, &floor)
        ),
        "≤ 1.0 ms",
    );
    row(
        "trivial run from the warm pool",
        format!(
            "{:.3} ms, ×{} floor",
            ms(trivial_pooled.median),
            over_floor(trivial_pooled.median, &floor)
        ),
        "≤ 0.10 ms",
    );
    row(
        "fuel of a trivial run, fresh / pooled",
        format!("{} / {}", kilo(fuel_fresh as f64), kilo(fuel_pooled as f64)),
        "≤ 150 k",
    );
    row(
        "one leaf",
        format!(
            "{:.3} ms, ×{} floor",
            ms(one_leaf.median),
            over_floor(one_leaf.median, &floor)
        ),
        "",
    );
    row(
        "parallel 100",
        format!("{:.2} ms", ms(parallel_100.median)),
        "",
    );
    row(
        "parallel 1000",
        format!("{:.2} ms", ms(parallel_1000.median)),
        "≤ 50 ms",
    );
    row(
        "pipeline 3 stages × 100",
        format!("{:.2} ms", ms(pipeline_100.median)),
        "",
    );
    row(
        "plan 1000 leaves / run them (fake)",
        format!(
            "{:.2} / {:.2} ms",
            ms(plan_1000.median),
            ms(run_1000.median)
        ),
        "plan ≤ run",
    );
    row(
        "  … as gpt-4o leaves (o200k_base, priced)",
        format!(
            "{:.2} / {:.2} ms",
            ms(plan_1000_o200k.median),
            ms(run_1000_o200k.median)
        ),
        "plan ≤ run",
    );
    row(
        "overhead per leaf (parallel 1000)",
        format!("{per_leaf_1000:.1} µs"),
        "≤ 10 µs",
    );
    row(
        "overhead per leaf (pipeline)",
        format!("{per_leaf_pipeline:.1} µs"),
        "≤ 15 µs",
    );
    row(
        "  … beyond the script with no items",
        format!("{marginal_1000:.1} / {marginal_pipeline:.1} µs"),
        "",
    );
    row(
        "fuel per leaf, parallel 1000 / pipeline",
        format!(
            "{} / {}",
            kilo(fuel_per_leaf_parallel),
            kilo(fuel_per_leaf_pipeline)
        ),
        "",
    );
    row(
        "journal per leaf, sequential (memory)",
        format!(
            "{:.1} µs",
            journal_cost(&memory_sequential, &plain_sequential, 200.0)
        ),
        "",
    );
    row(
        "journal per leaf, sequential (SQLite)",
        format!(
            "{:.1} µs",
            journal_cost(&sqlite_sequential, &plain_sequential, 200.0)
        ),
        "≤ 20 µs",
    );
    row(
        "journal per leaf, sequential (SQLite, fsync)",
        format!("{power_loss_per_leaf:.1} µs"),
        "",
    );
    row(
        "journal per leaf, fan-out of 1000 (SQLite)",
        format!(
            "{:.1} µs",
            journal_cost(&sqlite_parallel, &plain_parallel, 1000.0)
        ),
        "≤ 50 µs",
    );
    row(
        "resume a 1000-leaf thread (SQLite)",
        format!("{:.2} ms", ms(resume_1000.median)),
        "≤ 100 ms",
    );
    row(
        "tracing (OTLP to loopback): added cost per leaf, parallel 1000",
        format!("{tracing_per_leaf:.1} µs"),
        "≤ 5 µs",
    );
    row(
        "parallel 100, HTTP agent leaves (loopback)",
        format!("{:.2} ms", ms(http_100.median)),
        "",
    );
    row(
        "HTTP agent leaf: added cost per leaf",
        format!("{http_per_leaf:.1} µs"),
        "",
    );
    row(
        "makespan 100 × 50 ms, c=16 / ideal",
        format!("{makespan_ratio:.3}"),
        "≤ 1.05",
    );
    row(
        "100 concurrent runs: peak RSS",
        format!(
            "{peak_rss} MiB ({} MiB before)",
            in_flight["baseline_rss_mib"]
        ),
        "≤ 600 MiB",
    );
    row(
        "  … peak PSS / private memory",
        format!(
            "{} MiB / {} MiB",
            in_flight["peak_pss_mib"], in_flight["peak_private_mib"]
        ),
        "",
    );
    row(
        "makespan 1000 × 10 ms, c=16 / ideal",
        format!(
            "{:.3}",
            makespan_1000.median.as_secs_f64() / ideal_1000.as_secs_f64()
        ),
        "≤ 1.05",
    );
    let peer_row = |name: &str, key: &str, flowbox: Duration, target: &str| {
        let figure = &results["peer"]["pydantic_monty"][key];
        let value = match (figure["median_ms"].as_f64(), figure["unsupported"].as_str()) {
            (Some(peer), _) => format!("{peer:.3} ms, ×{:.2}", ms(flowbox) / peer),
            (None, Some(_)) => "unsupported".to_owned(),
            (None, None) => "no figure".to_owned(),
        };
        row(&format!("peer {name} (flowbox/peer)"), value, target);
    };
    peer_row("trivial, cold", "trivial_cold", trivial.median, "");
    peer_row(
        "trivial, warm",
        "trivial_warm",
        trivial_pooled.median,
        "≤ 1.0",
    );
    peer_row("parallel 1000", "parallel_1000", parallel_1000.median, "");
    peer_row(
        "pipeline 3 × 100",
        "pipeline_3x100",
        pipeline_100.median,
        "",
    );
    peer_row(
        "makespan 1000 × 10 ms",
        "makespan_1000x10ms_c16",
        makespan_1000.median,
        "",
    );
    if let Some(error) = results["peer"]["pydantic_monty"]["error"].as_str() {
        println!("peer: {error}");
    }
    println!("results written to {}", path.display());
}
