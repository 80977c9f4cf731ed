//! The guest, loaded on a thread of its own from the moment the process starts, while the
//! command parses its flags, starts tokio, reads its script and opens its journal: loading it
//! (wasmtime reading the compiled guest's metadata from the cache) is most of what building a
//! runtime costs, and the larger part of a one-shot `flowbox run` before the script starts.

use std::ffi::OsString;
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use flowbox::Guest;

/// The subcommands that build a runtime (`run --restate` does not, and is left out).
const RUNNING: [&str; 9] = [
    "run", "resume", "ask", "plan", "check", "guidance", "serve", "mcp", "worker",
];

static LOADING: Mutex<Option<JoinHandle<Option<Guest>>>> = Mutex::new(None);
static LOADED: OnceLock<Option<Guest>> = OnceLock::new();

/// Starts loading the guest when the command line (`args`, the program's name first) names
/// a subcommand that builds a runtime. A guess from the raw arguments, before they are
/// parsed: a wrong one (`flowbox run --help`) only costs the loading thread its work.
pub(crate) fn load_ahead(mut args: impl Iterator<Item = OsString>) {
    let Some(command) = args.nth(1) else {
        return;
    };
    let runs_here = RUNNING.iter().any(|name| command == *name)
        && !(command == "run" && args.any(|arg| arg == "--restate"));
    if !runs_here {
        return;
    }
    let thread = std::thread::Builder::new()
        .name("flowbox-load".into())
        .spawn(|| Guest::load().ok());
    if let Ok(thread) = thread {
        *LOADING.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
    }
}

/// The guest loaded ahead, waiting for it; `None` when none was started or loading it failed,
/// so the runtime loads its own and reports why it cannot.
pub(crate) fn loaded() -> Option<Guest> {
    LOADED
        .get_or_init(|| {
            let thread = LOADING.lock().unwrap_or_else(|e| e.into_inner()).take()?;
            thread.join().ok().flatten()
        })
        .clone()
}
