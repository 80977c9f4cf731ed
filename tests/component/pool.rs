//! The warm pool: every pooled instance serves one run, runs from it are isolated from each
//! other and use exactly the fuel a fresh instance does, and the pool stays within its bound.

use std::sync::Arc;
use std::time::Duration;

use flowbox::backends::FakeBackend;
use flowbox::store::{CheckpointStore, MemoryStore};
use flowbox::{LeafBackend, Limits, RunError, RunRequest, Runtime, WarmPoolStats};
use flowbox_tests::{PanickingBackend, root};
use serde_json::json;

fn pooled(instances: usize, backend: Arc<dyn LeafBackend>) -> Runtime {
    let mut builder = Runtime::builder()
        .shared_backend(backend)
        .cache_dir(root().join("target").join("flowbox-cache"));
    if instances > 0 {
        builder = builder.warm_pool(instances);
    }
    builder.build().expect("the guest loads")
}

fn journaled(instances: usize, backend: Arc<dyn LeafBackend>, store: Arc<MemoryStore>) -> Runtime {
    let mut builder = Runtime::builder()
        .shared_backend(backend)
        .shared_store(store)
        .cache_dir(root().join("target").join("flowbox-cache"));
    if instances > 0 {
        builder = builder.warm_pool(instances);
    }
    builder.build().expect("the guest loads")
}

/// Waits until the pool holds `ready` instances; a liveness bound only, never a timing claim.
async fn filled(runtime: &Runtime, ready: usize) -> WarmPoolStats {
    filled_until(runtime, ready, |_| true).await
}

/// Waits until the pool holds `ready` instances and its figures pass `done`; a liveness bound
/// only, never a timing claim.
async fn filled_until(
    runtime: &Runtime,
    ready: usize,
    done: impl Fn(&WarmPoolStats) -> bool,
) -> WarmPoolStats {
    for _ in 0..12_000 {
        let stats = runtime.warm_pool().expect("a pooled runtime");
        assert!(stats.ready <= stats.capacity, "{stats:?}");
        assert!(stats.prefaulted_bytes <= stats.memory_bytes, "{stats:?}");
        if stats.ready >= ready && done(&stats) {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the pool never held {ready} instances as expected: {:?}",
        runtime.warm_pool()
    );
}

/// On Linux, the ready instances pre-faulted: with the pages runs have written (~1 MiB for a
/// trivial script), or whole when another test's instance was instantiated at the same moment.
fn prefaulted(stats: &WarmPoolStats) -> bool {
    if cfg!(target_os = "linux") {
        stats.prefaulted_bytes >= stats.ready as u64 * (512 << 10)
    } else {
        stats.prefaulted_bytes == 0
    }
}

#[tokio::test]
async fn a_runtime_has_no_pool_unless_asked() {
    let rt = pooled(0, Arc::new(FakeBackend::new()));
    assert_eq!(rt.warm_pool(), None);
}

#[tokio::test]
async fn pooled_runs_do_not_see_each_others_state() {
    let rt = pooled(2, Arc::new(FakeBackend::new()));
    // Without the guard a script may write the interpreter's own globals: the next run, from
    // another pooled instance, must not see them.
    let leak = "import builtins, sys\nbuiltins.leaked = 1\nsys.modules['leaked'] = 2\nreturn 1\n";
    let look =
        "import builtins, sys\nreturn [hasattr(builtins, 'leaked'), 'leaked' in sys.modules]\n";
    let unguarded = |script| RunRequest::new(script).guard(false);
    filled(&rt, 2).await;
    let first = rt.run_request(unguarded(leak)).await;
    assert_eq!(first.result.unwrap(), json!(1));
    filled(&rt, 2).await;
    let second = rt.run_request(unguarded(look)).await;
    assert_eq!(second.result.unwrap(), json!([false, false]));
    let stats = rt.warm_pool().unwrap();
    assert_eq!((stats.hits, stats.misses), (2, 0), "{stats:?}");
}

#[tokio::test]
async fn the_snapshots_objects_are_immortal_in_every_instance_and_a_runs_own_are_not() {
    // The snapshot's objects (a builtin, a preloaded module, its function, the module table)
    // are immortal in the memory image every instance starts from, fresh or pooled; what a run
    // makes is not.
    let script = "import json, sys\n\
        mine = [1, 2]\n\
        return [sys._is_immortal(o) for o in (len, json, json.dumps, sys.modules, mine, {})]\n";
    let expected = json!([true, true, true, true, false, false]);
    let fresh = pooled(0, Arc::new(FakeBackend::new()));
    let rt = pooled(1, Arc::new(FakeBackend::new()));
    filled(&rt, 1).await;
    for runtime in [&fresh, &rt] {
        let outcome = runtime
            .run_request(RunRequest::new(script).guard(false))
            .await;
        assert_eq!(outcome.result.unwrap(), expected);
    }
    assert_eq!(rt.warm_pool().unwrap().hits, 1);
}

#[tokio::test]
async fn the_pool_holds_at_most_its_capacity_and_reports_its_memory() {
    let rt = pooled(3, Arc::new(FakeBackend::new()));
    let full = filled(&rt, 3).await;
    assert_eq!(full.capacity, 3);
    // Each instance holds the guest's linear memory (~12 MiB after instantiation); before a
    // run has shown which pages runs write, none of it is pre-faulted unless another test's
    // instance was instantiated at the same moment (then it is whole).
    assert!(full.memory_bytes >= 3 * (8 << 20), "{full:?}");
    for round in 0..5 {
        let result = rt.run(&format!("return {round}"), json!({})).await.result;
        assert_eq!(result.unwrap(), json!(round));
        assert!(rt.warm_pool().unwrap().ready <= 3);
    }
    let refilled = filled(&rt, 3).await;
    assert_eq!(refilled.ready, 3);
    assert_eq!(refilled.memory_bytes, full.memory_bytes);
    assert_eq!(refilled.hits + refilled.misses, 5, "{refilled:?}");
    // Once a run has taught the pool, (on Linux) every ready instance is pre-faulted.
    taught(&rt).await;
    let taught = filled_until(&rt, 3, prefaulted).await;
    assert_eq!(taught.memory_bytes, full.memory_bytes);
}

#[tokio::test]
async fn a_pool_that_sat_full_long_enough_to_sleep_still_refills_after_a_run() {
    let rt = pooled(1, Arc::new(FakeBackend::new()));
    // The first run teaches the pool which pages to pre-fault, which wakes the refill thread
    // to pre-fault the instance waiting: `taught` returns once it has.
    taught(&rt).await;
    for round in 0..2 {
        // Past the second the refill thread goes on looking for room before it sleeps until
        // an instance is taken.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let result = rt.run(&format!("return {round}"), json!({})).await.result;
        assert_eq!(result.unwrap(), json!(round));
        // Refilled, and pre-faulted by what the runs taught it.
        filled_until(&rt, 1, prefaulted).await;
    }
}

#[tokio::test]
async fn a_pooled_run_that_breaks_a_limit_does_not_poison_the_next() {
    let rt = pooled(1, Arc::new(FakeBackend::new()));
    let hostile = [
        (
            "while True:\n    pass\nreturn 1\n",
            Limits::default().with_fuel(100_000_000),
        ),
        (
            "x = []\nwhile True:\n    x.append('a' * 10000)\nreturn 1\n",
            Limits::default().with_memory_bytes(48 << 20),
        ),
    ];
    for (script, limits) in hostile {
        filled(&rt, 1).await;
        let outcome = rt.run_request(RunRequest::new(script).limits(limits)).await;
        assert!(
            matches!(
                outcome.result,
                Err(RunError::OutOfFuel { .. } | RunError::OutOfMemory { .. })
            ),
            "{:?}",
            outcome.result
        );
        filled(&rt, 1).await;
        let good = rt.run("return await agent('after')", json!({})).await;
        assert!(good.result.is_ok(), "{:?}", good.result);
    }
    let stats = rt.warm_pool().unwrap();
    assert_eq!((stats.hits, stats.misses), (4, 0), "{stats:?}");
}

#[tokio::test]
async fn limits_below_what_instantiation_takes_are_reported_as_without_a_pool() {
    let pooled_rt = pooled(1, Arc::new(FakeBackend::new()));
    let fresh_rt = pooled(0, Arc::new(FakeBackend::new()));
    filled(&pooled_rt, 1).await;
    for limits in [
        Limits::default().with_fuel(1),
        Limits::default().with_memory_bytes(1 << 20),
    ] {
        let request = RunRequest::new("return 1").limits(limits);
        let with_pool = pooled_rt.run_request(request.clone()).await;
        let without = fresh_rt.run_request(request).await;
        assert_eq!(
            format!("{:?}", with_pool.result),
            format!("{:?}", without.result)
        );
        assert_eq!(with_pool.summary.fuel_used, without.summary.fuel_used);
    }
    assert_eq!(pooled_rt.warm_pool().unwrap().hits, 0);
}

/// Sequential leaves, time and randomness: two live runs of one thread see the same
/// completions in the same batches, so fuel compares across runtimes too.
const SEQUENTIAL: &str = r#"
import random, time
xs = [random.random() for _ in range(3)]
t0 = time.monotonic()
time.sleep(5)
reviews = [await agent(f"r{i}") for i in range(5)]
return {"xs": xs, "slept": time.monotonic() - t0, "reviews": reviews}
"#;

/// Runs from a pool until one has shown it what to pre-fault and (on Linux) the instance it has
/// ready is pre-faulted. A run teaches the pool only from an instance it could tell apart from
/// one another test instantiated at the same moment, hence the loop (a liveness bound only).
/// Returns the pool's hits so far.
async fn taught(runtime: &Runtime) -> u64 {
    for _ in 0..100 {
        filled(runtime, 1).await;
        let first = runtime.run("return 0", json!({})).await;
        assert_eq!(first.result.unwrap(), json!(0));
        for _ in 0..50 {
            let stats = filled(runtime, 1).await;
            if prefaulted(&stats) {
                return stats.hits;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    panic!("no run taught the pool: {:?}", runtime.warm_pool());
}

/// The instances these runs start from are pre-faulted (on Linux): pre-faulting changes no
/// byte of an instance's memory, so not its fuel either.
#[tokio::test]
async fn a_pooled_run_and_its_replay_use_exactly_the_fuel_of_a_fresh_run() {
    let recorded = Arc::new(MemoryStore::new());
    let live = journaled(1, Arc::new(FakeBackend::new()), recorded.clone());
    let hits = taught(&live).await;
    let first = live
        .run_request(RunRequest::new(SEQUENTIAL).thread_id("pooled"))
        .await;
    assert_eq!(live.warm_pool().unwrap().hits, hits + 1);
    let first_result = first.result.clone().unwrap();

    let fresh = journaled(
        0,
        Arc::new(FakeBackend::new()),
        Arc::new(MemoryStore::new()),
    );
    let unpooled = fresh
        .run_request(RunRequest::new(SEQUENTIAL).thread_id("pooled"))
        .await;
    assert_eq!(unpooled.result.unwrap(), first_result);
    assert_eq!(unpooled.summary.fuel_used, first.summary.fuel_used);

    // The journal without its end: a run cut off just before it returned, replayed from a
    // pooled instance against a backend that must not be called.
    let run = recorded.load("pooled").await.unwrap().unwrap();
    let copy = Arc::new(MemoryStore::new());
    copy.begin(&run.header).await.unwrap();
    copy.append("pooled", &run.entries).await.unwrap();
    let replay = journaled(1, Arc::new(PanickingBackend::always()), copy);
    let hits = taught(&replay).await;
    let again = replay.resume("pooled", None).await;
    assert_eq!(replay.warm_pool().unwrap().hits, hits + 1);
    assert_eq!(again.result.unwrap(), first_result);
    assert_eq!(again.summary.fuel_used, first.summary.fuel_used);
}

/// A run reseeds `random` only when its script can draw from the shared generator: one that
/// reaches it only through `statistics` draws the thread's own numbers, from a pooled
/// instance as from a fresh one, and one that cannot reach it uses the same fuel either way.
#[tokio::test]
async fn a_script_draws_its_threads_numbers_whether_or_not_it_names_random() {
    let pooled_rt = pooled(1, Arc::new(FakeBackend::new()));
    let fresh_rt = pooled(0, Arc::new(FakeBackend::new()));
    let samples = "from statistics import NormalDist\nreturn NormalDist().samples(3)";
    let plain = "return await agent('x')";
    for script in [samples, plain] {
        taught(&pooled_rt).await;
        let request = RunRequest::new(script).thread_id("numbers");
        let from_pool = pooled_rt.run_request(request.clone()).await;
        let fresh = fresh_rt.run_request(request).await;
        assert_eq!(from_pool.result.clone().unwrap(), fresh.result.unwrap());
        assert_eq!(
            from_pool.summary.fuel_used, fresh.summary.fuel_used,
            "{script}"
        );
    }
    let drawn = |thread: &'static str| {
        let request = RunRequest::new(samples).thread_id(thread);
        let runtime = &fresh_rt;
        async move { runtime.run_request(request).await.result.unwrap() }
    };
    assert_eq!(drawn("numbers").await, drawn("numbers").await);
    assert_ne!(drawn("numbers").await, drawn("other-numbers").await);
}

/// What the rule above rests on: of the contract's modules, only `random` and `statistics`
/// hold the shared generator (the module, the instance or one of its bound methods), in the
/// guest's own standard library. A module added to the contract that does fails here.
#[tokio::test]
async fn only_random_and_statistics_of_the_contracts_modules_hold_the_shared_generator() {
    let path = root().join("host/flowbox/contract/script.json");
    let contract: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the contract")).unwrap();
    let script = r#"
import random, sys
def holds(value):
    return (
        value is random or value is random._inst
        or getattr(value, "__self__", None) is random._inst
    )
holders = set()
for name in args["modules"]:
    __import__(name)
    for key, module in list(sys.modules.items()):
        if key == name or key.startswith(name + "."):
            if any(holds(value) for value in vars(module).values()):
                holders.add(name)
return sorted(holders)
"#;
    let request = RunRequest::new(script)
        .guard(false)
        .args(json!({"modules": contract["modules"]}));
    let holders = pooled(0, Arc::new(FakeBackend::new()))
        .run_request(request)
        .await
        .result
        .unwrap();
    assert_eq!(holders, json!(["random", "statistics"]));
}

/// The floor the bench measures start-up against instantiates a real guest, and leaves the
/// runtime as it was.
#[tokio::test]
async fn the_instance_floor_instantiates_a_guest_and_changes_nothing() {
    let runtime = flowbox_tests::runtime();
    let floor = runtime.instance_floor().await.unwrap();
    assert!(floor > Duration::ZERO);
    let outcome = runtime.run("return 1", json!({})).await;
    assert_eq!(outcome.result.unwrap(), json!(1));
    assert_eq!(outcome.summary.leaves, 0);
}
