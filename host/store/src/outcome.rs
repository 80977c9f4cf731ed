//! How a run ended, in the words the journal, the runtime and its callers share: the kind and
//! class of a run error, the error as data ([`ErrorInfo`]), the run's [`Summary`], and a
//! finished thread's [`RecordedOutcome`]. The `flowbox` crate re-exports them; what a kind
//! means for a run (`RunError::kind`) is defined there.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The four classes of run errors, which decide what a caller does about one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunErrorClass {
    /// The input was refused before anything ran: fix it and run again.
    Rejected,
    /// A resource limit was breached: fuel, memory, time, stack, output or result size.
    Limit,
    /// The script ran and failed: an uncaught exception or a result that is not JSON.
    Script,
    /// flowbox's own machinery failed (the journal, a divergence, the guest or the host):
    /// not the script's fault, and the thread stays open to resume once it is fixed.
    Machinery,
}

/// The kind of a run error: its stable name in JSON output, events and the journal.
/// Exhaustive on purpose, as [`CallErrorKind`](crate::CallErrorKind) is: a journal may hold any
/// kind, so a new one must be handled wherever kinds are (the run's error, its class, the
/// orchestrator's hints), or nothing compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunErrorKind {
    /// `RunError::ScriptTooLarge`.
    ScriptTooLarge,
    /// `RunError::InvalidArgs`.
    InvalidArgs,
    /// `RunError::InvalidThreadId`.
    InvalidThreadId,
    /// `RunError::InvalidLimits`.
    InvalidLimits,
    /// The script does not parse.
    Syntax,
    /// `meta` is invalid or misplaced.
    InvalidMeta,
    /// The guard refused a construct.
    Forbidden,
    /// No entry point.
    NoEntryPoint,
    /// An exception the script did not catch.
    Uncaught,
    /// The return value is not JSON.
    InvalidResult,
    /// `RunError::OutOfFuel`.
    OutOfFuel,
    /// `RunError::OutOfMemory`.
    OutOfMemory,
    /// `RunError::MemoryCapTooSmall`.
    MemoryCapTooSmall,
    /// `RunError::Timeout`.
    Timeout,
    /// `RunError::StackOverflow`.
    StackOverflow,
    /// `RunError::OutputTooLarge`.
    OutputTooLarge,
    /// `RunError::ResultTooLarge`.
    ResultTooLarge,
    /// `RunError::Divergence`.
    Divergence,
    /// `RunError::Journal`.
    JournalFailure,
    /// `RunError::UnknownThread`.
    UnknownThread,
    /// `RunError::ThreadInUse`.
    ThreadInUse,
    /// `RunError::GateRefused`: the plan passed the pre-launch gate; nothing ran.
    GateRefused,
    /// `RunError::Guest`.
    GuestFailure,
    /// `RunError::Host`.
    HostFailure,
}

impl RunErrorKind {
    /// The class this kind belongs to.
    pub fn class(self) -> RunErrorClass {
        use RunErrorClass::{Limit, Machinery, Rejected, Script};
        match self {
            Self::ScriptTooLarge
            | Self::InvalidArgs
            | Self::InvalidThreadId
            | Self::InvalidLimits
            | Self::Syntax
            | Self::InvalidMeta
            | Self::Forbidden
            | Self::NoEntryPoint
            | Self::UnknownThread
            | Self::ThreadInUse
            | Self::GateRefused
            | Self::MemoryCapTooSmall => Rejected,
            Self::OutOfFuel
            | Self::OutOfMemory
            | Self::Timeout
            | Self::StackOverflow
            | Self::OutputTooLarge
            | Self::ResultTooLarge => Limit,
            Self::Uncaught | Self::InvalidResult => Script,
            Self::Divergence | Self::JournalFailure | Self::GuestFailure | Self::HostFailure => {
                Machinery
            }
        }
    }

    /// Whether an error of this kind, once the run has started, is its thread's outcome. The
    /// script's result or error is (a breached limit and a refused script included); a
    /// failure of the machinery is not, nor is a cap too small to start the interpreter (run
    /// it again with a larger one), nor limits out of range, nor a thread that is missing or
    /// held elsewhere, nor a run the pre-launch gate refused (nothing of it ran).
    pub fn ends_thread(self) -> bool {
        match self.class() {
            RunErrorClass::Machinery => false,
            RunErrorClass::Limit | RunErrorClass::Script => true,
            RunErrorClass::Rejected => !matches!(
                self,
                Self::MemoryCapTooSmall
                    | Self::UnknownThread
                    | Self::ThreadInUse
                    | Self::InvalidThreadId
                    | Self::InvalidLimits
                    | Self::GateRefused
            ),
        }
    }

    /// The snake_case name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ScriptTooLarge => "script_too_large",
            Self::InvalidArgs => "invalid_args",
            Self::InvalidThreadId => "invalid_thread_id",
            Self::InvalidLimits => "invalid_limits",
            Self::Syntax => "syntax",
            Self::InvalidMeta => "invalid_meta",
            Self::Forbidden => "forbidden",
            Self::NoEntryPoint => "no_entry_point",
            Self::Uncaught => "uncaught",
            Self::InvalidResult => "invalid_result",
            Self::OutOfFuel => "out_of_fuel",
            Self::OutOfMemory => "out_of_memory",
            Self::MemoryCapTooSmall => "memory_cap_too_small",
            Self::Timeout => "timeout",
            Self::StackOverflow => "stack_overflow",
            Self::OutputTooLarge => "output_too_large",
            Self::ResultTooLarge => "result_too_large",
            Self::Divergence => "divergence",
            Self::JournalFailure => "journal_failure",
            Self::UnknownThread => "unknown_thread",
            Self::ThreadInUse => "thread_in_use",
            Self::GateRefused => "gate_refused",
            Self::GuestFailure => "guest_failure",
            Self::HostFailure => "host_failure",
        }
    }
}

impl std::fmt::Display for RunErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run error as data: what the CLI's `--json` prints and what events carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// The error's kind, such as `uncaught` or `out_of_fuel`.
    pub kind: RunErrorKind,
    /// The message.
    pub message: String,
    /// The script line, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The Python exception type of an uncaught exception.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<String>,
}

/// A compact account of a run, successful or not.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Summary {
    /// The run's thread id.
    pub thread_id: String,
    /// `meta.name`, when the script has a meta.
    pub name: Option<String>,
    /// Leaf agents the run started. (Written `agents_spawned` by builds before the summary
    /// named it as everything else does; a record that says so still reads.)
    #[serde(alias = "agents_spawned")]
    pub leaves: u32,
    /// Host tools the script called with `call_tool` (journals from before tools record none).
    #[serde(default)]
    pub tools_called: u32,
    /// Tokens used by the leaves whose results the script received (input + output).
    pub tokens_spent: u64,
    /// Of which input tokens.
    pub input_tokens: u64,
    /// Of which output tokens.
    pub output_tokens: u64,
    /// Of which estimates (one token per three bytes of text) rather than counts the model
    /// reported: the leaves whose backend reports no usage, such as `flowbox mcp --leaves
    /// sampling` on a client that sends none. Written only when there are some.
    #[serde(default, skip_serializing_if = "is_zero_tokens")]
    pub estimated_tokens: u64,
    /// The phases the script entered, in order.
    pub phases: Vec<String>,
    /// The script's `log`/`print` lines, in order.
    pub logs: Vec<String>,
    /// The `parallel` branches and `pipeline` items that raised and so became `None`, in the
    /// order they failed: the first [`Summary::MAX_FAILED_BRANCHES`] of them. Always written,
    /// empty when none failed, so a reader never has to know that a missing list means an
    /// empty one; a record from before it existed reads as empty.
    #[serde(default)]
    pub failed_branches: Vec<BranchFailure>,
    /// How many branches and items failed in all, those past the kept ones included; written
    /// only when some did.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_branch_count: u32,
    /// What the run did that is allowed but probably a mistake, such as entering a phase
    /// that `meta` does not declare (the first 20). Always written, as `failed_branches` is.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Fuel the run consumed; the same script with the same leaf results always uses the same.
    pub fuel_used: u64,
    /// Wall-clock duration in milliseconds.
    pub duration_ms: u64,
    /// Dollars the leaves whose results the script received cost, at the runtime's prices:
    /// written only when every leaf was priced. (A record from a build before costs were
    /// summed has none; one that still says `ok` beside its outcome reads as it is.)
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_f64"
    )]
    pub cost_usd: Option<f64>,
}

/// An optional float, read through serde_json's `Number`. An event's kind is flattened into it,
/// so serde buffers the event's fields before reading them, and with `arbitrary_precision` a
/// buffered number reads back only as a `Number`, not as an `f64`: a summary or a leaf's cost
/// inside a journaled event would not read at all.
pub fn optional_f64<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<f64>, D::Error> {
    Ok(Option::<serde_json::Number>::deserialize(deserializer)?.and_then(|n| n.as_f64()))
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

fn is_zero_tokens(count: &u64) -> bool {
    *count == 0
}

/// A `parallel` branch or `pipeline` item that raised, which its group turned into `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchFailure {
    /// The primitive whose branch it was.
    pub group: GroupKind,
    /// The branch's (or item's) index in the group's input, from 0.
    pub index: u32,
    /// For a pipeline item, the stage that raised, from 1.
    pub stage: Option<u32>,
    /// The Python exception type, such as `AgentError` or `TypeError`.
    pub exception: String,
    /// The exception's message.
    pub message: String,
    /// The script line it was raised at; else the line of the branch's function, or of the
    /// `parallel`/`pipeline` call.
    pub line: Option<u32>,
}

/// The primitive a [`BranchFailure`] happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    /// `parallel(items)`.
    Parallel,
    /// `pipeline(items, *stages)`.
    Pipeline,
}

impl Summary {
    /// The most [`BranchFailure`]s a summary keeps; [`Summary::failed_branch_count`] counts
    /// the rest.
    pub const MAX_FAILED_BRANCHES: usize = 100;

    /// The summary of a run of `thread_id` that has done nothing yet.
    pub fn new(thread_id: impl Into<String>) -> Self {
        Self {
            thread_id: thread_id.into(),
            ..Self::default()
        }
    }
}

/// How a finished thread ended, as its journal keeps it and `flowbox run --json` prints it: one
/// object `{"ok", "result", "error", "summary"}`, with `result` `null` on failure and `error`
/// `null` on success. A record whose `ok` contradicts its `result` and `error` does not decode.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedOutcome {
    /// The script's result, or the error the run ended with.
    pub result: Result<Value, ErrorInfo>,
    /// What the run did.
    pub summary: Summary,
}

/// [`RecordedOutcome`] as written.
#[derive(Serialize)]
struct OutcomeOut<'a> {
    ok: bool,
    result: Option<&'a Value>,
    error: Option<&'a ErrorInfo>,
    summary: &'a Summary,
}

/// [`RecordedOutcome`] as read: plain fields, so numbers in the result keep their text.
#[derive(Deserialize)]
struct OutcomeIn {
    ok: bool,
    result: Value,
    error: Option<ErrorInfo>,
    summary: Summary,
}

impl Serialize for RecordedOutcome {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        OutcomeOut {
            ok: self.result.is_ok(),
            result: self.result.as_ref().ok(),
            error: self.result.as_ref().err(),
            summary: &self.summary,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RecordedOutcome {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let record = OutcomeIn::deserialize(deserializer)?;
        let result = match (record.ok, record.error) {
            (true, None) => Ok(record.result),
            (false, Some(error)) if record.result.is_null() => Err(error),
            (false, Some(_)) => return Err(D::Error::custom("a failed outcome with a result")),
            (true, Some(_)) => return Err(D::Error::custom("a successful outcome with an error")),
            (false, None) => return Err(D::Error::custom("a failed outcome without an error")),
        };
        Ok(Self {
            result,
            summary: record.summary,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialise_as_their_snake_case_names() {
        for kind in [
            RunErrorKind::ScriptTooLarge,
            RunErrorKind::NoEntryPoint,
            RunErrorKind::OutOfFuel,
            RunErrorKind::JournalFailure,
            RunErrorKind::ThreadInUse,
            RunErrorKind::GateRefused,
        ] {
            let text = serde_json::to_string(&kind).unwrap();
            assert_eq!(text, format!("\"{}\"", kind.as_str()));
            assert_eq!(serde_json::from_str::<RunErrorKind>(&text).unwrap(), kind);
        }
        assert!(serde_json::from_str::<RunErrorKind>("\"no_such_kind\"").is_err());
    }

    #[test]
    fn a_summary_always_has_its_failed_branches_and_warnings_and_reads_older_ones() {
        let mut summary = Summary::new("t");
        summary.failed_branches.push(BranchFailure {
            group: GroupKind::Pipeline,
            index: 2,
            stage: Some(1),
            exception: "TypeError".into(),
            message: "unsupported operand".into(),
            line: Some(7),
        });
        summary.failed_branch_count = 1;
        summary.warnings.push("phase \"x\" is not in meta".into());
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(
            json["failed_branches"],
            serde_json::json!([{"group": "pipeline", "index": 2, "stage": 1,
                "exception": "TypeError", "message": "unsupported operand", "line": 7}])
        );
        assert_eq!(serde_json::from_value::<Summary>(json).unwrap(), summary);
        // A summary with none of them still has both lists, empty; the count is left out.
        let mut plain = serde_json::to_value(Summary::new("t")).unwrap();
        assert_eq!(plain["failed_branches"], serde_json::json!([]));
        assert_eq!(plain["warnings"], serde_json::json!([]));
        assert!(plain.get("failed_branch_count").is_none());
        // One journaled before they existed, without them, reads as one with none.
        for field in ["failed_branches", "warnings"] {
            plain.as_object_mut().unwrap().remove(field);
        }
        assert_eq!(
            serde_json::from_value::<Summary>(plain).unwrap(),
            Summary::new("t")
        );
    }

    #[test]
    fn an_outcome_whose_ok_contradicts_it_does_not_decode() {
        let summary = serde_json::to_string(&Summary::new("t")).unwrap();
        for (ok, result, error) in [
            ("true", "1", r#"{"kind":"uncaught","message":"no"}"#),
            ("false", "1", r#"{"kind":"uncaught","message":"no"}"#),
            ("false", "null", "null"),
        ] {
            let text =
                format!(r#"{{"ok":{ok},"result":{result},"error":{error},"summary":{summary}}}"#);
            assert!(
                serde_json::from_str::<RecordedOutcome>(&text).is_err(),
                "{text}"
            );
        }
    }
}
