//! Why the journal could not be read or written ([`StoreError`]), and which record of a thread
//! was at fault ([`JournalRecord`]).

use std::path::PathBuf;

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
    /// Another run holds the thread right now (see [`CheckpointStore::claim`](crate::CheckpointStore::claim)).
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

impl StoreError {
    /// Fails with [`StoreError::OutOfOrder`] unless `seqs` number on from `next` without a gap.
    pub(crate) fn check_sequence(
        thread_id: &str,
        next: u64,
        seqs: impl IntoIterator<Item = u64>,
    ) -> Result<(), StoreError> {
        for (expected, got) in (next..).zip(seqs) {
            if got != expected {
                return Err(StoreError::OutOfOrder {
                    thread_id: thread_id.to_owned(),
                    expected,
                    got,
                });
            }
        }
        Ok(())
    }
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
