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
//!
//! Every record is a serde type, read and written only through it: a call's [`CallRequest`]
//! and [`EntryOutcome`], a finished thread's [`RecordedOutcome`] with its [`Summary`] and
//! [`ErrorInfo`]. The run's vocabulary that the journal holds (the run-error kinds, the
//! summary) is defined here, below the runtime, which re-exports it. A record that does not
//! decode is [`StoreError::CorruptRecord`], never a default.

#![warn(missing_docs)]

mod call;
mod events;
mod memory;
mod outcome;
mod sqlite;
mod time;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use call::{
    AgentRequest, CallErrorKind, CallKind, CallRequest, Entry, EntryOutcome, ToolRequest,
    unrepresentable_number,
};
pub use events::StoredEvent;
pub use memory::MemoryStore;
pub use outcome::{
    BranchFailure, ErrorInfo, GroupKind, RecordedOutcome, RunErrorClass, RunErrorKind, Summary,
};
pub use sqlite::{Durability, SqliteStore};
pub use time::UtcTime;

/// The journal format this build writes. A journal with a higher version is refused; older
/// ones are migrated when opened (format 3 writes headers without a seed, which format 2
/// required, so a build that reads up to 2 must refuse it rather than call it damaged; format
/// 4 adds the threads' events; format 5 says how many of each completion's tokens are
/// estimates; format 6 keeps completions without a rowid, in their key's order, so that an
/// append writes one b-tree instead of two). A journal of an older format opened read-only is
/// read as it is: it has no events, and its token counts read as reported.
pub const SCHEMA_VERSION: u32 = 6;

/// What a thread is, fixed when it starts. (Journals before format 3 also hold a `seed`,
/// always the thread id, which is what seeds the guest's random source; it is ignored.)
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
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
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
    /// Its result or error, and its summary.
    pub outcome: RecordedOutcome,
    /// When it ended, in milliseconds since the Unix epoch.
    pub finished_unix_ms: u64,
}

impl RunEnd {
    /// Succeeded or failed, as the outcome says.
    pub fn status(&self) -> RunStatus {
        match self.outcome.result {
            Ok(_) => RunStatus::Succeeded,
            Err(_) => RunStatus::Failed,
        }
    }
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
        self.end.as_ref().map_or(RunStatus::Running, RunEnd::status)
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

/// Every thread of a journal, as [`CheckpointStore::list`] reads them: the ones that read,
/// newest first, and an error naming each one that does not (its status, time or counts are
/// damaged), so that one damaged thread hides no other.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// The threads that read.
    pub threads: Vec<RunListing>,
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

/// Why the journal could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// One record of a thread does not decode into its type: the journal is damaged (or was
    /// edited by hand). Nothing is read past it, and nothing stands in for it.
    #[error("{path}: the {record} of thread {thread_id} is damaged: {detail}")]
    CorruptRecord {
        /// The database file.
        path: PathBuf,
        /// The thread.
        thread_id: String,
        /// Which of its records.
        record: JournalRecord,
        /// What does not decode.
        detail: String,
    },
    /// There is no journal at this path, and the operation does not create one (only a run
    /// does).
    #[error("there is no journal at {path}: nothing has run with it yet (a run creates it)")]
    Missing {
        /// The database file.
        path: PathBuf,
    },
    /// The file is an SQLite database of another application; nothing was written to it.
    #[error("{path} is not a flowbox journal ({detail}); it was left untouched")]
    Foreign {
        /// The database file.
        path: PathBuf,
        /// What it holds instead.
        detail: String,
    },
    /// The file cannot serve as a journal: it is not a regular file, or it (or a file SQLite
    /// keeps beside it, `-wal` and `-shm`) or its directory cannot be written.
    #[error("cannot use {path} as a journal: {reason}")]
    Unusable {
        /// The file at fault.
        path: PathBuf,
        /// Why, with the operating system's word for it.
        reason: String,
    },
    /// The file is not a readable database, or it is damaged.
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

/// Which record of a thread's journal, for [`StoreError::CorruptRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JournalRecord {
    /// Its header (script, args, start, limits).
    Header,
    /// Its status and recorded outcome.
    End,
    /// Its counts and positions (leaves, tokens, sequence numbers) as a whole.
    Counters,
    /// A workflow record of a root agent's conversation that names it.
    Workflow,
    /// One event of its history.
    Event {
        /// The event's sequence number.
        seq: u64,
    },
    /// One journaled call.
    Entry {
        /// The entry's position in the thread.
        seq: u64,
        /// The call's handle.
        call: u64,
    },
}

impl std::fmt::Display for JournalRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Header => f.write_str("header"),
            Self::End => f.write_str("recorded outcome"),
            Self::Counters => f.write_str("counters"),
            Self::Workflow => f.write_str("workflow record"),
            Self::Event { seq } => write!(f, "event {seq}"),
            Self::Entry { seq, call } => write!(f, "journal entry {seq} (call {call})"),
        }
    }
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

    /// Every thread, newest first; a damaged one is named, not fatal to the others.
    async fn list(&self) -> Result<Listing, StoreError>;

    /// Records a workflow run a root agent started.
    async fn record_workflow(&self, record: &WorkflowRecord) -> Result<(), StoreError>;

    /// The workflow runs of one conversation, or of all conversations, oldest first.
    async fn workflows(
        &self,
        conversation_id: Option<&str>,
    ) -> Result<Vec<WorkflowRecord>, StoreError>;

    /// Whether the store keeps threads' histories of events: a run builds none for a store
    /// that does not (the default).
    fn keeps_events(&self) -> bool {
        false
    }

    /// Appends events to the thread's history, atomically, in order: `events[0].seq` must be
    /// one past the last one journaled ([`StoreError::OutOfOrder`]). A finished thread still
    /// takes events (its run's last ones are written after its end). A store that keeps no
    /// history ignores them, which is the default.
    async fn append_events(
        &self,
        thread_id: &str,
        events: &[StoredEvent],
    ) -> Result<(), StoreError> {
        let _ = (thread_id, events);
        Ok(())
    }

    /// At most `limit` of the thread's events with a sequence number above `after`, in order;
    /// none for a thread without history (or a store that keeps none, the default).
    async fn events(
        &self,
        thread_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let _ = (thread_id, after, limit);
        Ok(Vec::new())
    }

    /// Where a thread stands, or `None` when there is no such thread: [`Self::load`] without
    /// reading its records (the default reads them).
    async fn status(&self, thread_id: &str) -> Result<Option<RunStatus>, StoreError> {
        Ok(self.load(thread_id).await?.map(|run| run.status()))
    }

    /// The sequence number of the thread's last journaled event, 0 when it has none.
    async fn last_event_seq(&self, thread_id: &str) -> Result<u64, StoreError> {
        let _ = thread_id;
        Ok(0)
    }
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
            fingerprint: format!("{seq:064x}"),
            request: CallRequest::Agent(AgentRequest {
                prompt: json!(format!("p{seq}")),
                schema: (seq % 2 == 1).then(|| json!({"type": "string"})),
                agent_type: None,
                label: Some(format!("leaf {seq}")),
                instruction: None,
                model: None,
                tools: Some(vec![]),
                instance_id: None,
            }),
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
            // Odd entries' counts are estimates, so every store keeps both kinds.
            estimated_tokens: if seq % 2 == 1 { 15 } else { 0 },
            duration_ms: 3,
        }
    }

    pub fn outcome(result: Result<Value, ErrorInfo>) -> RecordedOutcome {
        let mut summary = Summary::new("t");
        summary.ok = result.is_ok();
        summary.agents_spawned = 3;
        RecordedOutcome { result, summary }
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
            outcome: outcome(Ok(json!(1))),
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
        assert!(listing.damaged.is_empty());
        let listing = listing.threads;
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

    pub fn event(seq: u64) -> StoredEvent {
        StoredEvent {
            seq,
            kind: "log".into(),
            event: format!(r#"{{"thread_id":"e1","seq":{seq},"type":"log","message":"n {seq}"}}"#),
        }
    }

    pub async fn events_round_trip(store: &dyn CheckpointStore) {
        assert!(matches!(
            store.append_events("e1", &[event(1)]).await,
            Err(StoreError::UnknownThread(_))
        ));
        store.begin(&header("e1")).await.unwrap();
        store.begin(&header("e2")).await.unwrap();
        assert_eq!(store.last_event_seq("e1").await.unwrap(), 0);
        assert_eq!(store.status("e1").await.unwrap(), Some(RunStatus::Running));
        assert_eq!(store.status("nope").await.unwrap(), None);
        store
            .append_events("e1", &[event(1), event(2)])
            .await
            .unwrap();
        store.append_events("e1", &[]).await.unwrap();
        store.append_events("e1", &[event(3)]).await.unwrap();
        let err = store.append_events("e1", &[event(5)]).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::OutOfOrder {
                    expected: 4,
                    got: 5,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(store.last_event_seq("e1").await.unwrap(), 3);
        assert_eq!(
            store.events("e1", 0, 100).await.unwrap(),
            vec![event(1), event(2), event(3)]
        );
        assert_eq!(store.events("e1", 1, 1).await.unwrap(), vec![event(2)]);
        assert!(store.events("e1", 3, 10).await.unwrap().is_empty());
        assert!(store.events("e2", 0, 10).await.unwrap().is_empty());
        assert!(store.events("nope", 0, 10).await.unwrap().is_empty());
        // A finished thread still takes its run's last events.
        let end = RunEnd {
            outcome: outcome(Ok(json!(1))),
            finished_unix_ms: 1,
        };
        store.finish("e1", &end).await.unwrap();
        store.append_events("e1", &[event(4)]).await.unwrap();
        assert_eq!(
            store.status("e1").await.unwrap(),
            Some(RunStatus::Succeeded)
        );
        assert_eq!(store.last_event_seq("e1").await.unwrap(), 4);
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
            outcome: outcome(Ok(json!(true))),
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
            r#"{{"thread_id":"t","script":"return args","script_sha256":"s","args":{args},"args_sha256":"a","start_unix_nanos":18446744073709551615,"limits":{{"fuel":20000000000,"timeout":600.0}},"guard":true,"created_unix_ms":1}}"#
        ));
        assert_eq!(header.args.to_string(), args);
        assert_eq!(header.start_unix_nanos, u64::MAX);
        // A journal written before numbers were kept exactly, keys sorted, opens as it was; its
        // seed (nothing reads it: the thread id seeds the guest) is not written again.
        let old = r#"{"thread_id":"t","script":"return args","script_sha256":"s","args":{"id":1.2345678901234568e+22,"r":0.21599615170364497},"args_sha256":"a","start_unix_nanos":1,"seed":"t","limits":{},"guard":true,"created_unix_ms":1}"#;
        let header: RunHeader = serde_json::from_str(old).unwrap();
        assert_eq!(
            serde_json::to_string(&header).unwrap(),
            old.replace(r#""seed":"t","#, "")
        );
        // Requests are tagged by their kind, first, with every option written.
        let request: CallRequest = round_trips(&format!(
            r#"{{"kind":"agent","prompt":{{"task":"x","args":{args}}},"schema":{{"const":1180591620717411303424,"maximum":0.1}},"agent_type":null,"label":"l","instruction":null,"model":"fast","tools":[],"instance_id":null}}"#
        ));
        let CallRequest::Agent(agent) = &request else {
            panic!("{request:?}");
        };
        assert_eq!(agent.prompt["args"].to_string(), args);
        assert_eq!(agent.schema.as_ref().unwrap()["maximum"].to_string(), "0.1");
        let entry: Entry = round_trips(&format!(
            r#"{{"seq":0,"batch":0,"handle":1,"fingerprint":"f","request":{{"kind":"tool","name":"echo","arguments":{args}}},"outcome":{{"status":"ok","value":"{{\"n\":1180591620717411303425}}"}},"input_tokens":0,"output_tokens":0,"duration_ms":3}}"#
        ));
        let CallRequest::Tool(tool) = &entry.request else {
            panic!("{entry:?}");
        };
        assert_eq!(tool.arguments.to_string(), args);
        assert_eq!(entry.kind(), CallKind::Tool);
        // A request of an unknown kind, or with a field its kind does not have, is not one.
        for damaged in [
            r#"{"kind":"robot","name":"echo","arguments":{}}"#,
            r#"{"kind":"tool","name":"echo","arguments":{},"prompt":"x"}"#,
            r#"{"kind":"agent","schema":null}"#,
            r#"{"name":"echo","arguments":{}}"#,
        ] {
            assert!(
                serde_json::from_str::<CallRequest>(damaged).is_err(),
                "{damaged}"
            );
        }
        // The outcome is tagged by its status, and carries the reply as the text it was.
        let failed: EntryOutcome =
            round_trips(r#"{"status":"err","kind":"tool-failed","message":"no"}"#);
        assert!(matches!(failed, EntryOutcome::Err { .. }));
        let summary = r#"{"thread_id":"t","name":"n","agents_spawned":1,"tools_called":2,"tokens_spent":3,"input_tokens":2,"output_tokens":1,"phases":["p"],"logs":["l"],"fuel_used":18446744073709551615,"duration_ms":4,"ok":true}"#;
        let end: RunEnd = round_trips(&format!(
            r#"{{"outcome":{{"ok":true,"result":{args},"error":null,"summary":{summary}}},"finished_unix_ms":2}}"#
        ));
        assert_eq!(end.outcome.result.as_ref().unwrap().to_string(), args);
        assert_eq!(end.outcome.summary.fuel_used, u64::MAX);
        assert_eq!(end.status(), RunStatus::Succeeded);
        let failed: RecordedOutcome = round_trips(&format!(
            r#"{{"ok":false,"result":null,"error":{{"kind":"uncaught","message":"no","line":3,"exception":"ValueError"}},"summary":{}}}"#,
            summary.replace(r#""ok":true"#, r#""ok":false"#)
        ));
        let error = failed.result.unwrap_err();
        assert_eq!((error.kind, error.line), (RunErrorKind::Uncaught, Some(3)));
        // A summary from before tools were counted reads as calling none.
        let old = summary.replace(r#""tools_called":2,"#, "");
        assert_eq!(
            serde_json::from_str::<Summary>(&old).unwrap().tools_called,
            0
        );
    }
}
