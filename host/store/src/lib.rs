//! The checkpoint journal of flowbox runs.
//!
//! A run is a thread: a header (the script, its args, the virtual start time and the limits),
//! then every completed leaf or tool call in the order the guest received it, then its end.
//! The runtime appends each batch of completions *before* the guest sees it (write-ahead), so a
//! run killed at any moment resumes from its journal without calling a finished leaf again.
//!
//! [`CheckpointStore`] is the interface; [`MemoryStore`] keeps journals in memory (tests) and
//! [`SqliteStore`] in one SQLite file, the embedded default. This crate knows nothing of
//! wasmtime or of the guest.

#![warn(missing_docs)]

mod memory;
mod sqlite;
mod time;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use memory::MemoryStore;
pub use sqlite::{Durability, SqliteStore};
pub use time::UtcTime;

/// The journal format this build writes. A journal with a higher version is refused.
pub const SCHEMA_VERSION: u32 = 2;

/// What a thread is, fixed when it starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunHeader {
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
    /// The seed of the guest's random source.
    pub seed: String,
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

/// Which kind of call a journal entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// A leaf agent.
    Agent,
    /// A host tool called by the script.
    Tool,
}

impl CallKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Tool => "tool",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "agent" => Some(Self::Agent),
            "tool" => Some(Self::Tool),
            _ => None,
        }
    }
}

/// Why a call failed, as the script saw it. Journals store it by its kebab-case name (the
/// WIT `error-kind`'s); a name this build does not know is a damaged journal. Exhaustive on
/// purpose: a new kind must be converted wherever kinds are, or nothing compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallErrorKind {
    /// The leaf agent failed (`AgentError`).
    AgentFailed,
    /// The token budget was spent before the leaf could start (`BudgetExceeded`).
    BudgetExceeded,
    /// The run already started as many leaves as it may (`AgentCapExceeded`).
    AgentCapExceeded,
    /// A host tool failed or its arguments were rejected (`ToolError`).
    ToolFailed,
    /// The request itself is malformed (`ValueError`).
    InvalidRequest,
    /// The run already made as many tool calls as it may (`ToolCapExceeded`).
    ToolCapExceeded,
}

impl std::fmt::Display for CallErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::AgentFailed => "agent-failed",
            Self::BudgetExceeded => "budget-exceeded",
            Self::AgentCapExceeded => "agent-cap-exceeded",
            Self::ToolFailed => "tool-failed",
            Self::InvalidRequest => "invalid-request",
            Self::ToolCapExceeded => "tool-cap-exceeded",
        })
    }
}

/// How a journaled call ended, exactly as the guest received it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum EntryOutcome {
    /// The reply, as JSON text.
    Ok {
        /// The reply's JSON text.
        value: String,
    },
    /// The failure the script saw.
    Err {
        /// Why it failed.
        kind: CallErrorKind,
        /// The message.
        message: String,
        /// Whether the script was told the call may succeed if made again (journals written
        /// before this was recorded read as `false`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        retryable: bool,
        /// The backend's word for the failure, as the script saw it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<String>,
    },
}

/// One completed call, in the order the guest received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Position among the thread's completions, from 0, without gaps.
    pub seq: u64,
    /// Which `await-next` delivered it, from 0: completions delivered together share a batch.
    pub batch: u64,
    /// The call's handle in the run.
    pub handle: u64,
    /// Agent or tool.
    pub kind: CallKind,
    /// SHA-256 of the request's canonical JSON, hex: what replay compares.
    pub fingerprint: String,
    /// The request, for `flowbox show` and leaf reuse.
    pub request: Value,
    /// How it ended.
    pub outcome: EntryOutcome,
    /// Input tokens it used.
    pub input_tokens: u64,
    /// Output tokens it used.
    pub output_tokens: u64,
    /// How long the backend took, in milliseconds.
    pub duration_ms: u64,
}

/// Where a thread stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Started and not finished: running now, or interrupted (resume it).
    Running,
    /// Finished with a result.
    Succeeded,
    /// Finished with an error.
    Failed,
}

impl RunStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "running" => Some(Self::Running),
            "succeeded" => Some(Self::Succeeded),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// How a thread ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    /// Succeeded or failed.
    pub status: RunStatus,
    /// The outcome object (`{"ok", "result", "error", "summary"}`).
    pub outcome: Value,
    /// When it ended, in milliseconds since the Unix epoch.
    pub finished_unix_ms: u64,
}

/// Everything journaled about one thread.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRun {
    /// The header.
    pub header: RunHeader,
    /// `meta.name`, once the script reported it.
    pub name: Option<String>,
    /// The completions, in delivery order.
    pub entries: Vec<Entry>,
    /// The end, when the thread finished.
    pub end: Option<RunEnd>,
}

impl StoredRun {
    /// Where the thread stands.
    pub fn status(&self) -> RunStatus {
        self.end
            .as_ref()
            .map_or(RunStatus::Running, |end| end.status)
    }
}

/// One line of `flowbox threads`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunListing {
    /// The thread id.
    pub thread_id: String,
    /// `meta.name`, when known.
    pub name: Option<String>,
    /// Where it stands.
    pub status: RunStatus,
    /// Journaled leaf completions.
    pub leaves: u64,
    /// Tokens of the journaled completions.
    pub tokens: u64,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
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

/// Why the journal could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The file is not a flowbox journal, or it is damaged.
    #[error("{path} is not a readable flowbox journal (corrupted or not a database): {detail}")]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        detail: String,
    },
    /// The journal was written by a newer flowbox.
    #[error(
        "{path} was written by a newer flowbox (journal format {found}; this build reads up to \
         {supported}); upgrade flowbox to open it"
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// The journal's format version.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// Another process held the database for longer than the busy timeout.
    #[error("{path} is locked by another process (waited {waited_ms} ms); try again")]
    Locked {
        /// The database file.
        path: PathBuf,
        /// How long flowbox waited.
        waited_ms: u64,
    },
    /// A thread with this id already exists.
    #[error("thread {0} already exists; resume it or choose another id")]
    ThreadExists(String),
    /// No thread has this id.
    #[error("no thread {0} in the journal")]
    UnknownThread(String),
    /// The thread already ended; its journal takes no more entries (another process may have
    /// finished it).
    #[error("thread {0} has already finished; its journal is closed")]
    Finished(String),
    /// An append does not continue the thread's journal (a second writer, or a bug).
    #[error("journal of thread {thread_id} expected entry {expected} next, got {got}")]
    OutOfOrder {
        /// The thread.
        thread_id: String,
        /// The next sequence number the journal expects.
        expected: u64,
        /// The one that was offered.
        got: u64,
    },
    /// Another run holds the thread right now (see [`CheckpointStore::claim`]).
    #[error(
        "thread {thread_id} is being run by {holder} right now; wait for that run to end, \
         then resume the thread"
    )]
    InUse {
        /// The thread.
        thread_id: String,
        /// Who holds it, as far as the store can tell ("process 1234", "another run").
        holder: String,
    },
    /// Reading or writing failed for another reason.
    #[error("journal I/O failed: {0}")]
    Io(String),
}

/// A run's exclusive hold on a thread, from [`CheckpointStore::claim`]. Dropping it lets go;
/// so does the death of the process that holds it.
#[must_use = "the thread is released as soon as the claim is dropped"]
pub struct Claim {
    _hold: Box<dyn std::any::Any + Send + Sync>,
}

impl Claim {
    /// A claim that lasts as long as `hold` (whose `Drop` releases the thread).
    pub fn new(hold: impl std::any::Any + Send + Sync) -> Self {
        Self {
            _hold: Box::new(hold),
        }
    }
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Claim")
    }
}

/// Where flowbox keeps its journals.
///
/// Implementations must be safe to share between many concurrent runs. Every method that
/// writes returns only once the write is as durable as the implementation promises.
#[async_trait::async_trait]
pub trait CheckpointStore: Send + Sync + std::fmt::Debug {
    /// Takes `thread_id` for one run until the returned [`Claim`] is dropped, so that two runs
    /// — in this process or another — never drive one thread at once (both would call the
    /// backends for its unfinished leaves). Fails with [`StoreError::InUse`] while another
    /// claim is held. The thread need not exist yet.
    async fn claim(&self, thread_id: &str) -> Result<Claim, StoreError>;

    /// Starts a thread; fails with [`StoreError::ThreadExists`] if the id is taken.
    async fn begin(&self, header: &RunHeader) -> Result<(), StoreError>;

    /// Records the script's `meta.name` once the guest reported it.
    async fn set_name(&self, thread_id: &str, name: &str) -> Result<(), StoreError>;

    /// Appends one batch of completions, atomically, in order. `entries[0].seq` must be the
    /// number of entries already journaled for the thread, and the thread must not have
    /// finished ([`StoreError::Finished`]).
    async fn append(&self, thread_id: &str, entries: &[Entry]) -> Result<(), StoreError>;

    /// Records how the thread ended; a thread ends once ([`StoreError::Finished`]).
    async fn finish(&self, thread_id: &str, end: &RunEnd) -> Result<(), StoreError>;

    /// Everything journaled about a thread, or `None`.
    async fn load(&self, thread_id: &str) -> Result<Option<StoredRun>, StoreError>;

    /// Every thread, newest first.
    async fn list(&self) -> Result<Vec<RunListing>, StoreError>;

    /// Records a workflow run a root agent started.
    async fn record_workflow(&self, record: &WorkflowRecord) -> Result<(), StoreError>;

    /// The workflow runs of one conversation, or of all conversations, oldest first.
    async fn workflows(
        &self,
        conversation_id: Option<&str>,
    ) -> Result<Vec<WorkflowRecord>, StoreError>;
}

#[cfg(test)]
pub(crate) mod contract {
    //! The behaviour every `CheckpointStore` must have, run against each implementation.

    use serde_json::json;

    use super::*;

    pub fn header(thread_id: &str) -> RunHeader {
        RunHeader {
            thread_id: thread_id.into(),
            script: "return 1".into(),
            script_sha256: "s".repeat(64),
            args: json!({"a": 1}),
            args_sha256: "a".repeat(64),
            start_unix_nanos: 1_700_000_000_000_000_000,
            seed: thread_id.into(),
            limits: json!({"fuel": 5}),
            guard: true,
            created_unix_ms: 1_700_000_000_000,
        }
    }

    pub fn entry(seq: u64, batch: u64) -> Entry {
        Entry {
            seq,
            batch,
            handle: seq + 1,
            kind: CallKind::Agent,
            fingerprint: format!("{seq:064x}"),
            request: json!({"prompt": format!("p{seq}")}),
            outcome: if seq % 3 == 2 {
                EntryOutcome::Err {
                    kind: CallErrorKind::AgentFailed,
                    message: "boom".into(),
                    retryable: false,
                    cause: None,
                }
            } else {
                EntryOutcome::Ok {
                    value: format!("\"reply {seq}\""),
                }
            },
            input_tokens: 10,
            output_tokens: 5,
            duration_ms: 3,
        }
    }

    pub async fn round_trip(store: &dyn CheckpointStore) {
        store.begin(&header("t1")).await.unwrap();
        assert!(matches!(
            store.begin(&header("t1")).await,
            Err(StoreError::ThreadExists(_))
        ));
        store.set_name("t1", "review").await.unwrap();
        store
            .append("t1", &[entry(0, 0), entry(1, 0)])
            .await
            .unwrap();
        store.append("t1", &[entry(2, 1)]).await.unwrap();
        let err = store.append("t1", &[entry(5, 2)]).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::OutOfOrder {
                    expected: 3,
                    got: 5,
                    ..
                }
            ),
            "{err}"
        );
        let run = store.load("t1").await.unwrap().unwrap();
        assert_eq!(run.header, header("t1"));
        assert_eq!(run.name.as_deref(), Some("review"));
        assert_eq!(run.entries, vec![entry(0, 0), entry(1, 0), entry(2, 1)]);
        assert_eq!(run.status(), RunStatus::Running);

        let end = RunEnd {
            status: RunStatus::Succeeded,
            outcome: json!({"ok": true, "result": 1}),
            finished_unix_ms: 1_700_000_000_500,
        };
        store.finish("t1", &end).await.unwrap();
        assert_eq!(
            store.load("t1").await.unwrap().unwrap().end,
            Some(end.clone())
        );
        assert!(matches!(
            store.append("t1", &[entry(3, 2)]).await,
            Err(StoreError::Finished(_))
        ));
        assert!(matches!(
            store.finish("t1", &end).await,
            Err(StoreError::Finished(_))
        ));
        assert!(matches!(
            store.finish("nope", &end).await,
            Err(StoreError::UnknownThread(_))
        ));
        assert!(store.load("nope").await.unwrap().is_none());
        assert!(matches!(
            store.append("nope", &[entry(0, 0)]).await,
            Err(StoreError::UnknownThread(_))
        ));

        for (conversation, thread, ok) in
            [("c1", "w1", true), ("c2", "w2", false), ("c1", "w3", true)]
        {
            let record = WorkflowRecord {
                conversation_id: conversation.into(),
                thread_id: thread.into(),
                name: Some("review".into()),
                leaves: 4,
                tokens: 100,
                ok,
                recorded_unix_ms: 1_700_000_000_000,
            };
            store.record_workflow(&record).await.unwrap();
        }
        let c1 = store.workflows(Some("c1")).await.unwrap();
        assert_eq!(
            c1.iter().map(|r| r.thread_id.as_str()).collect::<Vec<_>>(),
            ["w1", "w3"]
        );
        let all = store.workflows(None).await.unwrap();
        assert_eq!(
            WorkflowTotals::of(&all),
            WorkflowTotals {
                runs: 3,
                failed: 1,
                leaves: 12,
                tokens: 300
            }
        );

        let mut later = header("t2");
        later.created_unix_ms += 10;
        store.begin(&later).await.unwrap();
        let listing = store.list().await.unwrap();
        assert_eq!(listing.len(), 2);
        assert_eq!(listing[0].thread_id, "t2");
        assert_eq!(
            listing[1],
            RunListing {
                thread_id: "t1".into(),
                name: Some("review".into()),
                status: RunStatus::Succeeded,
                leaves: 3,
                tokens: 45,
                created_unix_ms: 1_700_000_000_000,
            }
        );
    }

    pub async fn claims_are_exclusive(store: &dyn CheckpointStore) {
        let first = store.claim("c1").await.unwrap();
        let err = store.claim("c1").await.unwrap_err();
        assert!(matches!(&err, StoreError::InUse { thread_id, .. } if thread_id == "c1"));
        assert!(
            err.to_string().contains("wait for that run to end"),
            "{err}"
        );
        // Other threads are not held up, and a thread that does not exist yet can be claimed.
        let other = store.claim("c2").await.unwrap();
        drop(first);
        let again = store.claim("c1").await.unwrap();
        drop((again, other));
        // Finishing a thread while it is claimed is the normal end of a run.
        store.begin(&header("c3")).await.unwrap();
        let held = store.claim("c3").await.unwrap();
        let end = RunEnd {
            status: RunStatus::Succeeded,
            outcome: json!({"ok": true}),
            finished_unix_ms: 1,
        };
        store.finish("c3", &end).await.unwrap();
        drop(held);
        let _after = store.claim("c3").await.unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records as the journal holds them, as JSON text: read back, they write the same text.
    fn round_trips<T: Serialize + serde::de::DeserializeOwned>(text: &str) -> T {
        let value: T = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&value).unwrap(), text);
        value
    }

    #[test]
    fn records_keep_their_numbers_and_key_order() {
        let args = r#"{"zeta":1180591620717411303424,"r":0.21599615170364495,"tiny":5e-324,"nz":-0.0,"a":-36893488147419103232}"#;
        let header: RunHeader = round_trips(&format!(
            r#"{{"thread_id":"t","script":"return args","script_sha256":"s","args":{args},"args_sha256":"a","start_unix_nanos":18446744073709551615,"seed":"t","limits":{{"fuel":20000000000,"timeout":600.0}},"guard":true,"created_unix_ms":1}}"#
        ));
        assert_eq!(header.args.to_string(), args);
        assert_eq!(header.start_unix_nanos, u64::MAX);
        // A journal written before numbers were kept exactly, keys sorted, opens as it was.
        round_trips::<RunHeader>(
            r#"{"thread_id":"t","script":"return args","script_sha256":"s","args":{"id":1.2345678901234568e+22,"r":0.21599615170364497},"args_sha256":"a","start_unix_nanos":1,"seed":"t","limits":{},"guard":true,"created_unix_ms":1}"#,
        );
        let entry: Entry = round_trips(&format!(
            r#"{{"seq":0,"batch":0,"handle":1,"kind":"tool","fingerprint":"f","request":{{"kind":"tool","name":"echo","arguments":{args}}},"outcome":{{"status":"ok","value":"{{\"n\":1180591620717411303425}}"}},"input_tokens":0,"output_tokens":0,"duration_ms":3}}"#
        ));
        assert_eq!(entry.request["arguments"].to_string(), args);
        // The outcome is tagged by its status, and carries the reply as the text it was.
        let failed: EntryOutcome =
            round_trips(r#"{"status":"err","kind":"tool-failed","message":"no"}"#);
        assert!(matches!(failed, EntryOutcome::Err { .. }));
        let end: RunEnd = round_trips(&format!(
            r#"{{"status":"succeeded","outcome":{{"ok":true,"result":{args}}},"finished_unix_ms":2}}"#
        ));
        assert_eq!(end.outcome["result"].to_string(), args);
    }
}
