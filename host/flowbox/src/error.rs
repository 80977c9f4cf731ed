//! The errors a run can end with, and the one place wasmtime's errors are classified.
//!
//! A script can catch what it may handle (a failed leaf, an exhausted budget) as a Python
//! exception; everything here ends the run. Every error has a [`RunErrorKind`] (its stable
//! snake_case name) and each kind one [`RunErrorClass`], matched exhaustively: a new variant
//! nobody classified does not compile. The kinds, their classes and [`ErrorInfo`] are the
//! journal's vocabulary too, so they are defined in the store crate and re-exported here.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use flowbox_store::StoreError;
pub use flowbox_store::{ErrorInfo, RunErrorClass, RunErrorKind};

use crate::bindings;

/// Why a run did not produce a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The script is larger than [`crate::Limits::max_script_bytes`].
    #[error("the script is {size} bytes; the limit is {limit} bytes")]
    ScriptTooLarge {
        /// The script's size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// The thread id is not usable (empty, too long, or with characters outside
    /// letters, digits and `-_.:`).
    #[error("invalid thread id {0}")]
    InvalidThreadId(String),
    /// The args are not a JSON value within [`crate::Limits::max_message_bytes`].
    #[error("invalid args: {0}")]
    InvalidArgs(String),
    /// A limit is outside its range ([`crate::Limits::check`]); nothing ran.
    #[error(transparent)]
    InvalidLimits(#[from] crate::InvalidLimit),
    /// The script was rejected before it ran: it does not parse, its `meta` is invalid, the
    /// guard refused a construct, or it has no entry point.
    #[error("{0}")]
    Rejected(ScriptError),
    /// The script ran and failed: an uncaught exception or a result that is not JSON.
    #[error("{0}")]
    Script(ScriptError),
    /// The run used all its fuel (CPU).
    #[error("the script used all of its {limit} units of fuel (CPU limit)")]
    OutOfFuel {
        /// The fuel limit.
        limit: u64,
    },
    /// The run needed more memory than its cap.
    #[error("the script ran out of memory (limit {limit_bytes} bytes){}", detail(.line))]
    OutOfMemory {
        /// The memory cap in bytes.
        limit_bytes: u64,
        /// The script line, when the guest could tell.
        line: Option<u32>,
    },
    /// The memory cap is below what the interpreter needs to start, so nothing ran.
    #[error(
        "the memory cap of {limit_bytes} bytes is below the {needed_bytes} bytes the \
         interpreter starts with; raise it"
    )]
    MemoryCapTooSmall {
        /// The memory cap in bytes.
        limit_bytes: u64,
        /// The guest's initial linear memory in bytes.
        needed_bytes: u64,
    },
    /// The run passed its wall-clock deadline; leaves still in flight were cancelled.
    #[error("the run did not finish within {after:?} (wall-time limit)")]
    Timeout {
        /// The deadline.
        after: Duration,
    },
    /// The guest exhausted its native stack (recursion too deep for the interpreter itself).
    #[error(
        "the script exhausted the interpreter's stack (recursion too deep, or a value nested too deeply)"
    )]
    StackOverflow,
    /// The script wrote more `log`/`print` output than allowed.
    #[error("the script wrote more than {limit} bytes of output")]
    OutputTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The result JSON is larger than allowed.
    #[error("the result is {size} bytes; the limit is {limit} bytes")]
    ResultTooLarge {
        /// The result's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A resumed run did not match its journal: the script or args changed, or the script
    /// asked for something other than what the journal recorded at that point.
    #[error("the run diverged from its journal: {0}")]
    Divergence(String),
    /// The checkpoint journal could not be read or written, or holds what it cannot.
    #[error("the journal failed: {0}")]
    Journal(#[source] JournalError),
    /// No thread has this id in the journal.
    #[error("no thread {0} in the journal")]
    UnknownThread(String),
    /// Another run — in this process or another — is driving the thread right now; nothing
    /// was run.
    #[error("{0}")]
    ThreadInUse(String),
    /// The pre-launch gate ([`crate::Limits::gate_leaves`], [`crate::Limits::gate_usd`])
    /// refused the run: its plan starts more leaves or may cost more than the gate admits.
    /// Nothing was journaled and no leaf ran; the refusal carries the plan.
    #[error("the pre-launch gate refused the run before any leaf started: {}", .0.reason)]
    GateRefused(Box<crate::plan::GateRefusal>),
    /// The thread had already finished with this error; it was not run again.
    #[error("{}{}", .0.message, detail(&.0.line))]
    Recorded(ErrorInfo),
    /// The guest broke the protocol or crashed (a flowbox bug, not the script's fault).
    #[error("the guest failed: {0}")]
    Guest(String),
    /// The host could not set up or run the guest.
    #[error("flowbox could not run the guest: {0}")]
    Host(String),
}

fn detail(line: &Option<u32>) -> String {
    line.map(|l| format!(" (line {l})")).unwrap_or_default()
}

/// Why the journal failed a run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// What was asked needs a journal and the runtime has none.
    #[error("{0} needs a journal; configure a store")]
    NotConfigured(&'static str),
    /// A thread's journal holds something this build cannot read back.
    #[error("thread {thread_id}'s journal is damaged: {detail}")]
    Corrupt {
        /// The thread.
        thread_id: String,
        /// What could not be read.
        detail: String,
    },
}

impl RunError {
    /// This error's kind (its stable name).
    pub fn kind(&self) -> RunErrorKind {
        match self {
            Self::ScriptTooLarge { .. } => RunErrorKind::ScriptTooLarge,
            Self::InvalidArgs(_) => RunErrorKind::InvalidArgs,
            Self::InvalidLimits(_) => RunErrorKind::InvalidLimits,
            Self::InvalidThreadId(_) => RunErrorKind::InvalidThreadId,
            Self::Rejected(e) | Self::Script(e) => e.kind.run_error_kind(),
            Self::OutOfFuel { .. } => RunErrorKind::OutOfFuel,
            Self::OutOfMemory { .. } => RunErrorKind::OutOfMemory,
            Self::MemoryCapTooSmall { .. } => RunErrorKind::MemoryCapTooSmall,
            Self::Timeout { .. } => RunErrorKind::Timeout,
            Self::StackOverflow => RunErrorKind::StackOverflow,
            Self::OutputTooLarge { .. } => RunErrorKind::OutputTooLarge,
            Self::ResultTooLarge { .. } => RunErrorKind::ResultTooLarge,
            Self::Divergence(_) => RunErrorKind::Divergence,
            Self::Journal(_) => RunErrorKind::JournalFailure,
            Self::UnknownThread(_) => RunErrorKind::UnknownThread,
            Self::ThreadInUse(_) => RunErrorKind::ThreadInUse,
            Self::GateRefused(_) => RunErrorKind::GateRefused,
            Self::Recorded(info) => info.kind,
            Self::Guest(_) => RunErrorKind::GuestFailure,
            Self::Host(_) => RunErrorKind::HostFailure,
        }
    }

    /// This error's class: rejected input, a breached limit, a failed script, or the
    /// machinery.
    pub fn class(&self) -> RunErrorClass {
        self.kind().class()
    }

    /// The script line the error points at, when known.
    pub fn line(&self) -> Option<u32> {
        match self {
            Self::Rejected(e) | Self::Script(e) => e.line,
            Self::OutOfMemory { line, .. } => *line,
            Self::Recorded(info) => info.line,
            _ => None,
        }
    }

    /// Whether a resource limit was breached (fuel, memory, time, stack, sizes).
    pub fn is_limit(&self) -> bool {
        self.class() == RunErrorClass::Limit
    }
}

/// A script error reported by the guest, with the script's own line numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}{}", detail(.line))]
pub struct ScriptError {
    /// What went wrong.
    pub kind: ScriptErrorKind,
    /// A message for the script's author.
    pub message: String,
    /// The script line, when known.
    pub line: Option<u32>,
    /// The Python exception type of an uncaught exception, such as `AgentError`.
    pub exception: Option<String>,
}

/// Classes of script errors (mirrors the WIT `script-error-kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ScriptErrorKind {
    /// The source does not parse.
    Syntax,
    /// `meta` is invalid or misplaced.
    InvalidMeta,
    /// The guard rejected a construct.
    Forbidden,
    /// No `async def main()` and no top-level `return`.
    NoEntryPoint,
    /// An exception the script did not catch.
    Uncaught,
    /// The return value is not JSON.
    InvalidResult,
}

impl ScriptErrorKind {
    /// The run error kind of the same name.
    pub fn run_error_kind(self) -> RunErrorKind {
        match self {
            Self::Syntax => RunErrorKind::Syntax,
            Self::InvalidMeta => RunErrorKind::InvalidMeta,
            Self::Forbidden => RunErrorKind::Forbidden,
            Self::NoEntryPoint => RunErrorKind::NoEntryPoint,
            Self::Uncaught => RunErrorKind::Uncaught,
            Self::InvalidResult => RunErrorKind::InvalidResult,
        }
    }

    /// Whether this error is found before the script starts running.
    pub fn is_before_running(self) -> bool {
        self.run_error_kind().class() == RunErrorClass::Rejected
    }
}

/// The longest script error message kept; the rest is cut with a marker.
const MAX_ERROR_MESSAGE_BYTES: usize = 16 << 10;
/// The longest exception class name kept.
pub(crate) const MAX_EXCEPTION_NAME_BYTES: usize = 200;

/// A run error as data: what the CLI's `--json` prints, events carry and the journal records.
impl From<&crate::RunError> for ErrorInfo {
    fn from(error: &crate::RunError) -> Self {
        if let crate::RunError::Recorded(info) = error {
            return info.clone();
        }
        let exception = match error {
            crate::RunError::Script(e) | crate::RunError::Rejected(e) => e.exception.clone(),
            _ => None,
        };
        let message = match error {
            // The line is its own field; keep the message free of it.
            crate::RunError::Script(e) | crate::RunError::Rejected(e) => e.message.clone(),
            other => other.to_string(),
        };
        Self {
            kind: error.kind(),
            message,
            line: error.line(),
            exception,
        }
    }
}

/// Turns the guest's script error into a run error. `memory_denied` says whether the memory
/// cap refused a growth during the run: once memory has run out, the interpreter's own
/// reports are not to be trusted (an allocation that failed deep in CPython can surface as a
/// `SystemError`, or as a `TypeError` about a half-freed object), so any uncaught error is
/// reported as running out of memory, at the line the guest gave.
pub(crate) fn from_guest(
    error: bindings::ScriptError,
    memory_limit: u64,
    memory_denied: bool,
) -> RunError {
    use bindings::ScriptErrorKind as K;
    let out_of_memory = RunError::OutOfMemory {
        limit_bytes: memory_limit,
        line: error.line,
    };
    let kind = match error.kind {
        K::Syntax => ScriptErrorKind::Syntax,
        K::InvalidMeta => ScriptErrorKind::InvalidMeta,
        K::Forbidden => ScriptErrorKind::Forbidden,
        K::NoEntryPoint => ScriptErrorKind::NoEntryPoint,
        K::Uncaught if memory_denied => return out_of_memory,
        K::Uncaught => ScriptErrorKind::Uncaught,
        K::InvalidResult => ScriptErrorKind::InvalidResult,
        K::OutOfMemory => return out_of_memory,
    };
    // A script chooses its exceptions' text: keep what reaches logs, events, the journal and
    // a root model's context to a readable size.
    let script_error = ScriptError {
        kind,
        message: crate::text::clip(error.message, MAX_ERROR_MESSAGE_BYTES),
        line: error.line,
        exception: error
            .exception
            .map(|name| crate::text::clip(name, MAX_EXCEPTION_NAME_BYTES)),
    };
    if kind.is_before_running() {
        RunError::Rejected(script_error)
    } else {
        RunError::Script(script_error)
    }
}

/// What the run knew when wasmtime returned an error, for classifying it.
pub(crate) struct TrapContext {
    pub fuel_limit: u64,
    pub memory_limit: u64,
    pub memory_denied: bool,
    /// The initial memory the guest asked for, when the cap refused it.
    pub memory_refused_at_start: Option<usize>,
    pub guest_stderr: String,
}

/// The one function that maps wasmtime's errors (traps, fuel, host-raised run errors) to a
/// [`RunError`].
pub(crate) fn classify(error: wasmtime::Error, context: &TrapContext) -> RunError {
    if let Some(run_error) = error.downcast_ref::<RunError>() {
        return run_error.clone();
    }
    if let Some(needed) = context.memory_refused_at_start {
        return RunError::MemoryCapTooSmall {
            limit_bytes: context.memory_limit,
            needed_bytes: needed as u64,
        };
    }
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => RunError::OutOfFuel {
            limit: context.fuel_limit,
        },
        Some(wasmtime::Trap::StackOverflow) => RunError::StackOverflow,
        // The interpreter aborts when an allocation it cannot recover from fails.
        Some(_) if context.memory_denied => RunError::OutOfMemory {
            limit_bytes: context.memory_limit,
            line: None,
        },
        _ => {
            let mut message = format!("{error:#}");
            let stderr = context.guest_stderr.trim();
            if !stderr.is_empty() {
                message.push_str("\nguest stderr:\n");
                message.push_str(stderr);
            }
            RunError::Guest(message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_fall_in_their_documented_classes() {
        let rejected = RunError::Rejected(ScriptError {
            kind: ScriptErrorKind::Syntax,
            message: "bad".into(),
            line: Some(3),
            exception: None,
        });
        assert_eq!(rejected.class(), RunErrorClass::Rejected);
        assert_eq!(rejected.line(), Some(3));
        assert_eq!(rejected.kind(), RunErrorKind::Syntax);
        assert_eq!(
            RunError::ScriptTooLarge { size: 2, limit: 1 }.class(),
            RunErrorClass::Rejected
        );
        assert_eq!(
            RunError::OutOfFuel { limit: 1 }.class(),
            RunErrorClass::Limit
        );
        assert!(RunError::StackOverflow.is_limit());
        assert_eq!(
            RunError::Guest("x".into()).class(),
            RunErrorClass::Machinery
        );
        // A refused script is its thread's outcome; a cap too small to start is not.
        assert!(rejected.kind().ends_thread());
        assert!(!RunErrorKind::MemoryCapTooSmall.ends_thread());
        assert!(!RunErrorKind::Divergence.ends_thread());
    }

    #[test]
    fn an_uncaught_error_after_memory_ran_out_is_out_of_memory() {
        let guest_error = |kind| bindings::ScriptError {
            kind,
            message: "unsupported operand type(s) for +=: '' and 'str'".into(),
            line: Some(4),
            exception: Some("TypeError".into()),
        };
        let uncaught = || guest_error(bindings::ScriptErrorKind::Uncaught);
        assert_eq!(
            from_guest(uncaught(), 20, true),
            RunError::OutOfMemory {
                limit_bytes: 20,
                line: Some(4)
            }
        );
        assert_eq!(
            from_guest(uncaught(), 20, false).kind(),
            RunErrorKind::Uncaught
        );
        // A result that is not JSON is the script's, whatever happened to memory.
        let invalid = guest_error(bindings::ScriptErrorKind::InvalidResult);
        assert_eq!(
            from_guest(invalid, 20, true).kind(),
            RunErrorKind::InvalidResult
        );
    }

    fn context() -> TrapContext {
        TrapContext {
            fuel_limit: 10,
            memory_limit: 20,
            memory_denied: false,
            memory_refused_at_start: None,
            guest_stderr: "boom".into(),
        }
    }

    #[test]
    fn traps_are_classified() {
        let ctx = context();
        let fuel = classify(wasmtime::Error::new(wasmtime::Trap::OutOfFuel), &ctx);
        assert_eq!(fuel, RunError::OutOfFuel { limit: 10 });
        let crash = classify(
            wasmtime::Error::new(wasmtime::Trap::UnreachableCodeReached),
            &ctx,
        );
        assert!(
            matches!(&crash, RunError::Guest(m) if m.contains("boom")),
            "{crash:?}"
        );
        let denied = TrapContext {
            memory_denied: true,
            ..context()
        };
        let memory = classify(
            wasmtime::Error::new(wasmtime::Trap::UnreachableCodeReached),
            &denied,
        );
        assert!(matches!(
            memory,
            RunError::OutOfMemory {
                limit_bytes: 20,
                ..
            }
        ));
        let raised = classify(
            wasmtime::Error::new(RunError::OutputTooLarge { limit: 5 }),
            &ctx,
        );
        assert_eq!(raised, RunError::OutputTooLarge { limit: 5 });
    }
}
