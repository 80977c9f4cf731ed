//! What the journal says of a thread: its header, its end, everything stored about it, and
//! the typed view every listing and display renders — [`ThreadStatus`] and [`ThreadSummary`] —
//! plus the workflow records of a root agent's conversations.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{CallKind, Entry, RecordedOutcome, StoreError};

/// What a thread is, fixed when it starts. (Journals before format 3 also hold a `seed`,
/// always the thread id, which is what seeds the guest's random source; it is ignored.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadHeader {
    /// The thread id.
    pub thread_id: String,
    /// The script source.
    pub script: String,
    /// SHA-256 of the script, hex.
    pub script_sha256: String,
    /// The args.
    pub args: Value,
    /// SHA-256 of the args' canonical JSON, hex.
    pub args_sha256: String,
    /// The guest's virtual wall-clock start, in nanoseconds since the Unix epoch.
    pub start_unix_nanos: u64,
    /// The limits the run started with, as JSON.
    pub limits: Value,
    /// Whether the in-guest guard was on.
    #[serde(default = "guard_on")]
    pub guard: bool,
    /// When the thread was created, in milliseconds since the Unix epoch (real time).
    pub created_unix_ms: u64,
}

/// Journals written before the guard was recorded ran with it on.
fn guard_on() -> bool {
    true
}

/// Where a thread stands: the one vocabulary of every listing and display (`flowbox threads`,
/// `show`, the web view, MCP's `list_threads` and `show_thread`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    /// Not finished, and a run holds it now (in this process or another).
    Running,
    /// Not finished, and no run holds it: its run stopped without an end (a killed process, a
    /// machinery failure). `flowbox resume` continues it.
    Resumable,
    /// Finished with a result.
    Succeeded,
    /// Finished with an error.
    Failed,
}

impl ThreadStatus {
    /// The status of a thread not finished: running while a run holds its claim, else
    /// resumable.
    pub fn unfinished(claimed: bool) -> Self {
        if claimed {
            Self::Running
        } else {
            Self::Resumable
        }
    }

    /// Whether the thread has ended (succeeded or failed).
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }

    /// The snake_case name, as serialised and displayed.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Resumable => "resumable",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }
}

impl std::fmt::Display for ThreadStatus {
    /// The name, padded as the format asks (`{:<10}` in a table).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// How a thread ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadEnd {
    /// Its result or error, and its summary.
    pub outcome: RecordedOutcome,
    /// When it ended, in milliseconds since the Unix epoch.
    pub finished_unix_ms: u64,
}

impl ThreadEnd {
    /// Succeeded or failed, as the outcome says.
    pub fn status(&self) -> ThreadStatus {
        match self.outcome.result {
            Ok(_) => ThreadStatus::Succeeded,
            Err(_) => ThreadStatus::Failed,
        }
    }
}

/// Everything journaled about one thread, as [`CheckpointStore::load`] read it.
///
/// [`CheckpointStore::load`]: crate::CheckpointStore::load
#[derive(Debug, Clone, PartialEq)]
pub struct StoredThread {
    /// The header.
    pub header: ThreadHeader,
    /// `meta.name`, once the script reported it.
    pub name: Option<String>,
    /// Where it stood when it was read: as its end says when it has one, else running or
    /// resumable as a run held it or not.
    pub status: ThreadStatus,
    /// The completions, in delivery order.
    pub entries: Vec<Entry>,
    /// The end, when the thread finished.
    pub end: Option<ThreadEnd>,
}

/// One thread without its completions, as [`CheckpointStore::overview`] reads it: what a page
/// about the thread shows without reading every prompt and reply.
///
/// [`CheckpointStore::overview`]: crate::CheckpointStore::overview
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadOverview {
    /// The header.
    pub header: ThreadHeader,
    /// The thread as listings show it: its name, status, counts and times.
    pub summary: ThreadSummary,
    /// The end, when the thread finished.
    pub end: Option<ThreadEnd>,
}

/// A thread as listings show it: `flowbox threads` (a line, or `--json`), the web view's runs
/// page and its API, MCP's `list_threads`. [`CheckpointStore::list`] computes it without reading
/// the threads' completions one by one; [`ThreadSummary::of`] from a thread already read.
///
/// [`CheckpointStore::list`]: crate::CheckpointStore::list
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadSummary {
    /// The thread id.
    pub thread_id: String,
    /// `meta.name`, when known.
    pub name: Option<String>,
    /// Where it stands.
    pub status: ThreadStatus,
    /// Journaled leaf completions.
    pub leaves: u64,
    /// Tokens of the journaled completions.
    pub tokens: u64,
    /// What its leaves cost in dollars at the prices it ran with, once it finished, when every
    /// leaf was priced; else `null`.
    pub cost_usd: Option<f64>,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// When it ended, in milliseconds since the Unix epoch; `null` until then.
    pub finished_unix_ms: Option<u64>,
    /// How long it ran: its run's own duration once it finished, else the time since it was
    /// created, in milliseconds.
    pub duration_ms: u64,
}

impl ThreadSummary {
    /// The summary of a thread already read, at `now_unix_ms` (for the duration of an
    /// unfinished one).
    pub fn of(thread: &StoredThread, now_unix_ms: u64) -> Self {
        let created = thread.header.created_unix_ms;
        let end = thread.end.as_ref();
        Self {
            thread_id: thread.header.thread_id.clone(),
            name: thread.name.clone(),
            status: thread.status,
            leaves: thread
                .entries
                .iter()
                .filter(|entry| entry.kind() == CallKind::Agent)
                .count() as u64,
            tokens: thread
                .entries
                .iter()
                .map(|entry| entry.input_tokens + entry.output_tokens)
                .sum(),
            cost_usd: end.and_then(|end| end.outcome.summary.cost_usd),
            created_unix_ms: created,
            finished_unix_ms: end.map(|end| end.finished_unix_ms),
            duration_ms: match end {
                Some(end) => end.outcome.summary.duration_ms,
                None => now_unix_ms.saturating_sub(created),
            },
        }
    }
}

/// Every thread of a journal, as [`CheckpointStore::list`](crate::CheckpointStore::list) reads them: the ones that read,
/// newest first, and an error naming each one that does not (its status, time or counts are
/// damaged), so that one damaged thread hides no other.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// The threads that read.
    pub threads: Vec<ThreadSummary>,
    /// One [`StoreError::CorruptRecord`] per thread that does not.
    pub damaged: Vec<StoreError>,
}

/// A workflow run a root agent started within a conversation (its `run_workflow` call).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowRecord {
    /// The conversation the root agent was in.
    pub conversation_id: String,
    /// The workflow's thread id.
    pub thread_id: String,
    /// `meta.name`, when the script had one.
    pub name: Option<String>,
    /// Leaf agents the run started.
    pub leaves: u64,
    /// Tokens the run spent.
    pub tokens: u64,
    /// Whether it produced a result.
    pub ok: bool,
    /// When it was recorded, in milliseconds since the Unix epoch.
    pub recorded_unix_ms: u64,
}

/// Workflow runs added up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowTotals {
    /// Runs.
    pub runs: u64,
    /// Runs that failed.
    pub failed: u64,
    /// Leaf agents they started.
    pub leaves: u64,
    /// Tokens they spent.
    pub tokens: u64,
}

impl WorkflowTotals {
    /// The totals of `records`.
    pub fn of(records: &[WorkflowRecord]) -> Self {
        records.iter().fold(Self::default(), |total, record| Self {
            runs: total.runs + 1,
            failed: total.failed + u64::from(!record.ok),
            leaves: total.leaves + record.leaves,
            tokens: total.tokens + record.tokens,
        })
    }
}
