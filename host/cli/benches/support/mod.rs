//! What the CLI's benchmarks share: the workspace, medians, and `flowbox` as a child process.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

pub(crate) fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The median, in milliseconds.
pub(crate) fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e3
}

/// The `flowbox` binary as a command, journaling to `db`, on the compiled guest the
/// workspace's tests and benchmarks share.
pub(crate) fn flowbox(db: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flowbox"));
    command
        .env("FLOWBOX_DB", db)
        .env("FLOWBOX_CACHE_DIR", root().join("target/flowbox-cache"));
    command
}
