//! `make bench-restate`: one leaf, a 16-leaf and a 256-leaf fan-out, end to end through a real
//! Restate server (submit to the ingress, attach to the outcome) against the same scripts on
//! the local engine, in one run; the added cost per leaf and the server's resident memory.
//! Leaves answer at once (the fake backend), so the figures are the engines' own overhead.
//! Writes `target/bench/restate.json` and prints a table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowbox::backends::FakeBackend;
use flowbox::tools::ToolSet;
use flowbox::{Limits, RunRequest, Runtime};
use flowbox_restate::{Client, Services, Worker, WorkflowInput};
use flowbox_testkit::restate::{RestateServer, workspace_root};
use serde_json::{Value, json};

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1000.0
}

fn fan_out(leaves: usize) -> String {
    if leaves == 1 {
        return "return await agent('hello')".into();
    }
    format!(
        "replies = await parallel([lambda i=i: agent(f'item {{i}}') for i in range({leaves})])\n\
         return len(replies)"
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let server = RestateServer::start(dir.path());
    let ingress = Client::new(&server.ingress).unwrap();
    let admin = Client::new(&server.admin).unwrap();

    let runtime = Runtime::builder()
        .backend(FakeBackend::new())
        .cache_dir(workspace_root().join("target/flowbox-cache"))
        .warm_pool(2)
        .build()
        .expect("the guest loads");
    let worker = Worker {
        runtime: runtime.clone(),
        backend: Arc::new(FakeBackend::new()),
        tools: ToolSet::new(),
        services: Services::All,
        identity_keys: Vec::new(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!(
        "http://{}/{}",
        listener.local_addr().unwrap(),
        worker.version()
    );
    tokio::spawn(flowbox_restate::serve(
        listener,
        worker.endpoint(),
        std::future::pending(),
    ));
    let started = Instant::now();
    while admin.register(&uri).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "Restate never came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut rows = Vec::new();
    let mut thread = 0u64;
    // The default limits (at most 16 leaves in flight), then 256 in flight: a fan-out of 256
    // at 16 runs in 16 waves, each as long as one leaf's round trip through Restate.
    let wide = Limits::default().with_max_concurrency(256);
    for (leaves, iterations, limits) in [
        (1usize, 40usize, None),
        (16, 25, None),
        (256, 8, None),
        (256, 8, Some(wide)),
    ] {
        let script = fan_out(leaves);
        let mut local = Vec::new();
        let mut remote = Vec::new();
        for n in 0..iterations + 3 {
            thread += 1;
            let id = format!("bench-{}-{thread}", std::process::id());
            let at = Instant::now();
            let mut request = RunRequest::new(script.clone()).thread_id(format!("local-{id}"));
            if let Some(limits) = &limits {
                request = request.limits(limits.clone());
            }
            let outcome = runtime.run_request(request).await;
            let local_time = at.elapsed();
            assert!(outcome.result.is_ok(), "{:?}", outcome.result);
            let input = WorkflowInput {
                script: script.clone(),
                args: json!({}),
                limits: limits.clone(),
                guard: true,
            };
            let at = Instant::now();
            ingress.submit(&id, &input).await.expect("submitted");
            let outcome = ingress.attach(&id).await.expect("attached").expect("known");
            let remote_time = at.elapsed();
            assert_eq!(outcome["ok"], Value::Bool(true), "{outcome}");
            // The first runs warm up the caches, the pool and the connections.
            if n >= 3 {
                local.push(local_time);
                remote.push(remote_time);
            }
        }
        let (local, remote) = (median(local), median(remote));
        rows.push(json!({
            "leaves": leaves,
            "max_concurrency": limits.as_ref().map_or(Limits::default().max_concurrency, |l| l.max_concurrency),
            "runs": iterations,
            "local_ms": (local * 1000.0).round() / 1000.0,
            "restate_ms": (remote * 1000.0).round() / 1000.0,
            "added_ms_per_leaf": (((remote - local) / leaves as f64) * 1000.0).round() / 1000.0,
        }));
    }
    let report = json!({
        "benchmark": "restate",
        "restate_server": "1.7.12",
        "server_rss_mib": (rss_mib(server.pid().expect("the server runs")) * 10.0).round() / 10.0,
        "targets_ms": {"one_leaf": 20, "fanout_16": 60, "per_leaf_at_256": 2},
        "workloads": rows,
    });
    let out = workspace_root().join("target/bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("restate.json"), format!("{report:#}\n")).unwrap();
    println!(
        "{:>7} {:>12} {:>10} {:>12} {:>16}",
        "leaves", "concurrency", "local ms", "restate ms", "added ms/leaf"
    );
    for row in report["workloads"].as_array().unwrap() {
        println!(
            "{:>7} {:>12} {:>10} {:>12} {:>16}",
            row["leaves"],
            row["max_concurrency"],
            row["local_ms"],
            row["restate_ms"],
            row["added_ms_per_leaf"]
        );
    }
    println!("server RSS: {} MiB", report["server_rss_mib"]);
    println!("written to target/bench/restate.json");
}
