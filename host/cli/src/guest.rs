//! The guest, loaded on a thread of its own from the moment the process starts, while the
//! command parses its flags, starts tokio, reads its script and opens its journal: loading it
//! (wasmtime reading the compiled guest's metadata from the cache) is most of what building a
//! runtime costs, and the larger part of a one-shot `flowbox run` before the script starts.

use std::ffi::OsString;
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use flowbox::{Guest, RuntimeBuilder};

/// The subcommands that build a runtime (`run --restate` does not, and is left out).
const RUNNING: [&str; 9] = [
    "run", "resume", "ask", "plan", "check", "guidance", "serve", "mcp", "worker",
];

static LOADING: Mutex<Option<JoinHandle<Option<Guest>>>> = Mutex::new(None);
static LOADED: OnceLock<Option<Guest>> = OnceLock::new();

/// Starts loading the guest when the command line (`args`, the program's name first) names
/// a subcommand that builds a runtime.
pub(crate) fn load_ahead(args: impl Iterator<Item = OsString>) {
    if !builds_a_runtime(args) {
        return;
    }
    let thread = std::thread::Builder::new()
        .name("flowbox-load".into())
        .spawn(|| Guest::load().ok());
    if let Ok(thread) = thread {
        *LOADING.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
    }
}

/// Whether the command line names a subcommand that builds a runtime: a guess from the raw
/// arguments, before they are parsed, where a wrong one (`flowbox run --help`) only costs the
/// loading thread its work.
fn builds_a_runtime(mut args: impl Iterator<Item = OsString>) -> bool {
    let Some(command) = args.nth(1) else {
        return false;
    };
    let on_restate = |arg: OsString| {
        arg.to_str()
            .is_some_and(|arg| arg == "--restate" || arg.starts_with("--restate="))
    };
    RUNNING.iter().any(|name| command == *name) && !(command == "run" && args.any(on_restate))
}

/// `builder` on the guest loaded ahead, once it has loaded; as it is when none was started or
/// loading it failed, so the runtime loads its own and reports why it cannot.
pub(crate) fn given_to(builder: RuntimeBuilder) -> RuntimeBuilder {
    let loaded = LOADED.get_or_init(|| {
        let thread = LOADING.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        thread.join().ok().flatten()
    });
    match loaded {
        Some(guest) => builder.guest(guest.clone()),
        None => builder,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builds(line: &str) -> bool {
        builds_a_runtime(line.split(' ').map(OsString::from))
    }

    #[test]
    fn the_subcommands_that_run_scripts_here_load_the_guest_ahead() {
        for line in [
            "flowbox run a.py",
            "flowbox check a.py",
            "flowbox mcp",
            "flowbox worker",
        ] {
            assert!(builds(line), "{line}");
        }
        for line in [
            "flowbox",
            "flowbox threads",
            "flowbox show t",
            "flowbox run --restate http://127.0.0.1:8080 a.py",
            "flowbox run a.py --restate=http://127.0.0.1:8080",
        ] {
            assert!(!builds(line), "{line}");
        }
    }
}
