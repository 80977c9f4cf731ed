//! `make bench`: the added cost of running a workflow through `flowbox mcp` over stdio (the
//! real binary, a JSON-RPC `tools/call` per run, its answer read back) against running it on the
//! library directly, written to `target/bench/mcp.json` and printed as a table.
//!
//! Both sides use the fake backend (zero latency), the warm pool of 2 the server keeps, and an
//! SQLite journal, so the difference is what the protocol adds: framing, rmcp's dispatch, the
//! `run_workflow` answer (summary, text rendering) and the pipes. A `ping` round trip, timed
//! the same way, shows how much of that is the pipes and the two processes waking each other.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use flowbox::backends::FakeBackend;
use flowbox::store::SqliteStore;
use flowbox::{RunRequest, Runtime};
use serde_json::{Value, json};
use support::{flowbox, median, root};

const TRIVIAL: &str = "return 1";
/// The pause before each measured run: longer than a pool takes to refill one instance.
const SETTLE: Duration = Duration::from_millis(15);
const FANOUT: &str = "\
results = await parallel([lambda i=i: agent(f'item {i}') for i in range(100)])
return len(results)";

/// `flowbox mcp` as a child process, initialized, answering one `tools/call` at a time.
struct Server {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl Server {
    fn start(dir: &Path) -> Self {
        let mut child = flowbox(&dir.join("mcp.db"))
            .args(["mcp", "--backend", "fake"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("flowbox mcp starts");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut server = Self {
            child,
            stdin,
            stdout,
            next_id: 1,
        };
        server.exchange(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}}),
        );
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, message: &Value) {
        // The whole line in one write, as clients' transports send it: `writeln!` on the
        // unbuffered pipe writes each piece of the JSON with a system call of its own.
        let line = format!("{message}\n");
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).unwrap();
    }

    fn exchange(&mut self, message: &Value) -> Value {
        self.send(message);
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "flowbox mcp ended"
            );
            let answer: Value = serde_json::from_str(&line).unwrap();
            if answer.get("id").is_some() {
                return answer;
            }
        }
    }

    /// A request of `method` with `params`, and its answer, timed from the request's line to
    /// the answer's.
    fn timed(&mut self, method: &str, params: Value) -> (Value, Duration) {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let started = Instant::now();
        let answer = self.exchange(&request);
        (answer, started.elapsed())
    }

    /// One `run_workflow` call, timed.
    fn run(&mut self, script: &str) -> Duration {
        let (answer, elapsed) = self.timed(
            "tools/call",
            json!({"name": "run_workflow", "arguments": {"script": script}}),
        );
        assert_eq!(
            answer["result"]["structuredContent"]["ok"], true,
            "{answer}"
        );
        elapsed
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// The median of `runs` round trips of MCP's `ping` (a request the server answers without
/// doing anything), each after the same pause as a run: what crossing the two pipes and waking
/// the two processes costs, the floor of what the server can add to a run.
fn ping(runs: usize, server: &mut Server) -> f64 {
    let mut times = Vec::with_capacity(runs);
    for i in 0..runs + 5 {
        std::thread::sleep(SETTLE);
        let (answer, elapsed) = server.timed("ping", json!({}));
        assert!(answer.get("result").is_some(), "{answer}");
        if i >= 5 {
            times.push(elapsed);
        }
    }
    median(times)
}

/// Medians of `runs` runs of `script` on the library and through the server, interleaved so
/// both see the same load on the machine.
fn compare(
    script: &str,
    runs: usize,
    rt: &tokio::runtime::Runtime,
    runtime: &Runtime,
    server: &mut Server,
) -> (f64, f64) {
    let mut library = Vec::with_capacity(runs);
    let mut mcp = Vec::with_capacity(runs);
    for i in 0..runs + 5 {
        // Each pool refills between runs (instantiating, pre-faulting) on its own thread; let
        // the other side's refill finish first, so neither run shares the cores with it.
        std::thread::sleep(SETTLE);
        let started = Instant::now();
        let outcome = rt.block_on(runtime.run_request(RunRequest::new(script)));
        let elapsed = started.elapsed();
        assert!(outcome.result.is_ok(), "{:?}", outcome.result);
        std::thread::sleep(SETTLE);
        let through = server.run(script);
        if i >= 5 {
            library.push(elapsed);
            mcp.push(through);
        }
    }
    (median(library), median(mcp))
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = rt.block_on(async {
        Runtime::builder()
            .backend(FakeBackend::new())
            .store(SqliteStore::open(dir.path().join("library.db")).unwrap())
            .cache_dir(root().join("target/flowbox-cache"))
            .warm_pool(2)
            .build()
            .expect("the runtime builds")
    });
    let mut server = Server::start(dir.path());
    let trivial = compare(TRIVIAL, 200, &rt, &runtime, &mut server);
    let fanout = compare(FANOUT, 100, &rt, &runtime, &mut server);
    let ping = ping(200, &mut server);
    drop(server);
    let results = json!({
        "mcp_trivial_library_ms": trivial.0,
        "mcp_trivial_stdio_ms": trivial.1,
        "mcp_trivial_added_ms": trivial.1 - trivial.0,
        "mcp_ping_ms": ping,
        "mcp_fanout_100_library_ms": fanout.0,
        "mcp_fanout_100_stdio_ms": fanout.1,
        "mcp_fanout_100_added_pct": (fanout.1 / fanout.0 - 1.0) * 100.0,
    });
    let out = root().join("target/bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("mcp.json"),
        serde_json::to_string_pretty(&results).unwrap() + "\n",
    )
    .expect("mcp.json is writable");
    println!(
        "{:<44} {:>10} {:>10} {:>12}",
        "flowbox mcp over stdio", "library", "mcp", "added"
    );
    println!(
        "{:<44} {:>7.2} ms {:>7.2} ms {:>9.2} ms   target ≤ 0.3 ms",
        "trivial run (`return 1`)",
        trivial.0,
        trivial.1,
        trivial.1 - trivial.0
    );
    println!(
        "{:<44} {:>10} {:>7.2} ms   the least a call adds",
        "`ping` round trip", "", ping
    );
    println!(
        "{:<44} {:>7.2} ms {:>7.2} ms {:>10.1} %   target ≤ 10 %",
        "`parallel` of 100 leaves",
        fanout.0,
        fanout.1,
        (fanout.1 / fanout.0 - 1.0) * 100.0
    );
}
