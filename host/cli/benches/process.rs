//! `make bench`: a whole `flowbox run` process of `return 1` on the fake backend, the way a
//! user or an agent host starts it, timed from spawn to exit, with the SQLite journal and with
//! `--no-journal`; beside it `flowbox --version`, the least a process of this binary costs
//! (starting it, clap, exiting). The three are interleaved so all see the same load on the
//! machine; medians are written to `target/bench/process.json` and printed as a table.

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{flowbox, median, root};

const RUNS: usize = 150;
/// Runs first, not counted: the page cache and the cached guest's pages settle.
const WARM_UP: usize = 5;

/// One process of `flowbox` with `args`, timed from spawn to exit; it must succeed.
fn timed(args: &[&str], dir: &Path) -> Duration {
    let started = Instant::now();
    let status = flowbox(&dir.join("process.db"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("flowbox starts");
    let elapsed = started.elapsed();
    assert!(status.success(), "flowbox {args:?} failed: {status}");
    elapsed
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("trivial.py");
    std::fs::write(&script, "return 1\n").unwrap();
    let script = script.to_str().expect("a UTF-8 temporary path");
    let kinds: [&[&str]; 3] = [
        &["--version"],
        &["run", "--no-journal", script],
        &["run", script],
    ];
    let mut samples: [Vec<Duration>; 3] = Default::default();
    for i in 0..WARM_UP + RUNS {
        for (kind, args) in kinds.iter().enumerate() {
            let elapsed = timed(args, dir.path());
            if i >= WARM_UP {
                samples[kind].push(elapsed);
            }
        }
    }
    let [version, no_journal, journal] = samples.map(median);
    let results = json!({
        "process_version_ms": version,
        "process_run_no_journal_ms": no_journal,
        "process_run_journal_ms": journal,
    });
    let out = root().join("target/bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("process.json"),
        serde_json::to_string_pretty(&results).unwrap() + "\n",
    )
    .expect("process.json is writable");
    println!("{:<48} {:>10}", "a whole `flowbox` process", "median");
    println!(
        "{:<48} {:>7.2} ms   the least a process costs",
        "`flowbox --version`", version
    );
    println!(
        "{:<48} {:>7.2} ms   target ≤ 5 ms",
        "`flowbox run --no-journal` of `return 1`", no_journal
    );
    println!(
        "{:<48} {:>7.2} ms   target ≤ 10 ms",
        "`flowbox run` of `return 1` (SQLite journal)", journal
    );
}
