//! The guest, loaded on the main thread from the moment the process starts, while the command
//! runs on a thread of its own, parsing its flags, starting tokio, reading its script and
//! opening its journal: loading the guest (wasmtime reading the compiled guest's metadata from
//! the cache) is most of what building a runtime costs, and the larger part of a one-shot
//! `flowbox run` before the script starts. The loading stays on the thread that is already
//! running: a thread just made often waits for a core for as long as the one that made it keeps
//! busy (up to ~1 ms in this VM), and the command has work to do before it needs the guest.

use std::ffi::OsString;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use flowbox::{Guest, RuntimeBuilder};

/// The subcommands that build a runtime (`run --restate` does not, and is left out).
const RUNNING: [&str; 9] = [
    "run", "resume", "ask", "plan", "check", "guidance", "serve", "mcp", "worker",
];

/// The stack of the thread the command runs on: the main thread's usual one.
const COMMAND_STACK: usize = 8 << 20;

/// Whether the main thread is loading the guest.
static LOADING: AtomicBool = AtomicBool::new(false);
/// What the main thread loaded, once it has (`None` when loading failed).
static LOADED: OnceLock<Option<Guest>> = OnceLock::new();

/// Runs `command`, which ends the process: on a thread of its own while this one loads the
/// guest, when the command line (`args`, the program's name first) names a subcommand that
/// builds a runtime; on this thread alone otherwise, or when no thread can be made.
pub(crate) fn loaded_while(args: impl Iterator<Item = OsString>, command: fn() -> !) -> ! {
    if !builds_a_runtime(args) {
        command();
    }
    LOADING.store(true, Ordering::Release);
    let running = std::thread::Builder::new()
        .name("flowbox-command".into())
        .stack_size(COMMAND_STACK)
        .spawn(move || -> () { command() });
    let Ok(running) = running else {
        LOADING.store(false, Ordering::Release);
        command();
    };
    // A guest that fails to load, or a panic while loading, leaves the runtime to load its own
    // and report why it cannot.
    let _ = LOADED.set(
        std::panic::catch_unwind(Guest::load)
            .ok()
            .and_then(Result::ok),
    );
    // The command ends the process; a panic in it ends it here.
    match running.join() {
        Ok(()) => std::process::exit(0),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Whether the command line names a subcommand that builds a runtime: a guess from the raw
/// arguments, before they are parsed. A wrong one (`flowbox run --help`) costs no wait: the
/// command prints the help and ends the process while the guest loads.
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

/// `builder` on the guest the main thread loaded, once it has; as it is when none was loaded
/// or loading it failed, so the runtime loads its own and reports why it cannot.
pub(crate) fn given_to(builder: RuntimeBuilder) -> RuntimeBuilder {
    let loaded = if LOADING.load(Ordering::Acquire) {
        LOADED.wait()
    } else {
        LOADED.get().unwrap_or(&None)
    };
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
