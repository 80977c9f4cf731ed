//! Journals in one SQLite file: the embedded default.
//!
//! WAL mode lets readers work while one writer appends, in this process or another; a busy
//! timeout makes concurrent writers take turns instead of failing. Each batch of completions is
//! one transaction. With [`Durability::Process`] (the default, `synchronous=NORMAL`) a commit
//! survives the process being killed at any instant; with [`Durability::PowerLoss`]
//! (`synchronous=FULL`) it also survives the machine losing power, at the price of an fsync per
//! batch. The log is checkpointed into the database by a thread of the store's own once it is
//! long, never inside a writer's commit (see `checkpoints.rs`): no append waits on a
//! checkpoint's fsyncs, and a short log is not started over (an fsync) at every run. Closing
//! the store leaves a short log beside the database for the next process to read back rather
//! than fsync it at exit. A damaged file or one from a newer flowbox is refused with a clear
//! error and left untouched, so nothing already journaled is lost; so is another application's
//! database, before anything is written to it. Only [`SqliteStore::open`] creates a journal:
//! reading commands open it with [`SqliteStore::open_read_only`], resuming ones with
//! [`SqliteStore::open_existing`]. A run's claim on a thread is an OS lock on a lease file in a
//! directory beside the database (`journal.db.leases/`), released when the run ends or its
//! process dies.
//!
//! The files: this one opens a journal and runs each operation on its connection;
//! `schema.rs` migrates the file, `reads.rs` and `writes.rs` hold the SQL (rows to records and
//! back with `records.rs`), `leases.rs` the claims, `checkpoints.rs` the log's checkpoints,
//! `error.rs` the mapping of SQLite's errors.

mod checkpoints;
mod error;
mod leases;
mod reads;
mod records;
mod schema;
#[cfg(test)]
mod tests;
mod writes;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::{
    CheckpointStore, Claim, Entry, Listing, ReplySample, StoreError, StoredEvent, StoredThread,
    ThreadEnd, ThreadHeader, ThreadOverview, WorkflowRecord,
};
use checkpoints::Checkpointer;
use error::classify;
use leases::Leases;

/// How long a writer waits by default for another to finish before reporting the file as
/// locked.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The statements the connection keeps prepared: more than the store has (~25).
const STATEMENT_CACHE: usize = 64;

/// How durable a committed batch is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// Survives the process being killed (`synchronous=NORMAL` in WAL mode). The default.
    #[default]
    Process,
    /// Also survives power loss or an OS crash (`synchronous=FULL`): one fsync per batch.
    PowerLoss,
}

/// A [`CheckpointStore`] in a SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    path: PathBuf,
    /// The lease files of claimed threads.
    leases: Leases,
    connection: Arc<Mutex<Connection>>,
    /// Checkpoints the log in the background: none for a read-only store.
    checkpoints: Option<Arc<Checkpointer>>,
    durability: Durability,
    busy_timeout: Duration,
}

/// What opening a journal may do to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Create it (and its directory) if missing, and write to it: a run.
    Create,
    /// Write to it, but only if it exists: a resume.
    Existing,
    /// Only read it, and only if it exists: listing and showing threads.
    ReadOnly,
}

impl SqliteStore {
    /// Opens (or creates) the journal at `path` with [`Durability::Process`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, Durability::default())
    }

    /// Opens (or creates) the journal at `path`, migrating an older format.
    pub fn open_with(path: impl AsRef<Path>, durability: Durability) -> Result<Self, StoreError> {
        Self::open_as(path.as_ref(), durability, Access::Create)
    }

    /// Opens the journal at `path` to write to it, migrating an older format, but never
    /// creates one: a missing file is [`StoreError::Missing`].
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_as(path.as_ref(), Durability::default(), Access::Existing)
    }

    /// Opens the journal at `path` only to read it: nothing is created, migrated or written
    /// (every writing operation fails), and a missing file is [`StoreError::Missing`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_as(path.as_ref(), Durability::default(), Access::ReadOnly)
    }

    /// Opens the journal: checks the file is one flowbox can use and is flowbox's before
    /// anything is written to it, then (unless read-only) enters WAL mode and migrates.
    fn open_as(path: &Path, durability: Durability, access: Access) -> Result<Self, StoreError> {
        let path = path.to_owned();
        let exists = schema::check_file(&path, access != Access::ReadOnly)?;
        let mut flags = OpenFlags::SQLITE_OPEN_NO_MUTEX;
        match (exists, access) {
            (false, Access::Create) => {
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent).map_err(|e| StoreError::Unusable {
                        path: parent.to_owned(),
                        reason: format!("cannot create the directory: {e}"),
                    })?;
                }
                flags |= OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
            }
            (false, _) => return Err(StoreError::Missing { path }),
            (true, Access::ReadOnly) => flags |= OpenFlags::SQLITE_OPEN_READ_ONLY,
            (true, _) => flags |= OpenFlags::SQLITE_OPEN_READ_WRITE,
        }
        let connection =
            Connection::open_with_flags(&path, flags).map_err(|e| classify(&path, e))?;
        connection
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| classify(&path, e))?;
        // Room for every statement the store runs, so that none is evicted and parsed again.
        connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let found = schema::recognise(&path, &connection)?;
        let mut checkpoints = None;
        if access == Access::ReadOnly {
            if found == schema::Found::Empty {
                return Err(StoreError::Foreign {
                    path,
                    detail: "it is an empty database".into(),
                });
            }
        } else {
            let synchronous = match durability {
                Durability::Process => "NORMAL",
                Durability::PowerLoss => "FULL",
            };
            schema::enter_wal_mode(&path, &connection, BUSY_TIMEOUT)?;
            connection
                .execute_batch(&format!(
                    "PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON;"
                ))
                .map_err(|e| classify(&path, e))?;
            schema::migrate(&path, &connection)?;
            checkpoints = Some(Arc::new(Checkpointer::start(&path, &connection)?));
        }
        Ok(Self {
            leases: Leases::beside(&path)?,
            path,
            connection: Arc::new(Mutex::new(connection)),
            checkpoints,
            durability,
            busy_timeout: BUSY_TIMEOUT,
        })
    }

    /// Waits at most `timeout` (default 10 s) for another process's write before failing
    /// with [`StoreError::Locked`].
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Whether a run — in this process or another — holds the claim on `thread_id` right now
    /// (see [`CheckpointStore::claim`]): a thread that is running, as opposed to one whose run
    /// stopped without an end (resume it). Writes nothing, so it works read-only.
    pub fn is_claimed(&self, thread_id: &str) -> bool {
        self.leases.held(thread_id)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `action` on the connection. Without fsyncs a journal write is a few microseconds
    /// of page-cache I/O, cheaper done in place than handed to a blocking thread (a hand-off
    /// costs ~100 µs here) — but only when nothing has to wait: if the connection is in use
    /// or another process holds the file, or every write fsyncs, the call moves to a blocking
    /// thread, so an async worker never stalls on the journal.
    async fn with<T: Send + 'static>(
        &self,
        action: impl Fn(&mut Connection, &Path) -> Result<T, StoreError> + Send + Sync + 'static,
    ) -> Result<T, StoreError> {
        if self.durability == Durability::Process
            && let Ok(mut connection) = self.connection.try_lock()
        {
            // A failed transaction rolls back, so a busy attempt is safe to make again below.
            let attempt = connection
                .busy_timeout(Duration::ZERO)
                .map_err(|e| classify(&self.path, e))
                .and_then(|()| action(&mut connection, &self.path));
            if !matches!(attempt, Err(StoreError::Locked { .. })) {
                return attempt;
            }
        }
        let connection = Arc::clone(&self.connection);
        let path = self.path.clone();
        let timeout = self.busy_timeout;
        tokio::task::spawn_blocking(move || {
            let mut connection = connection.lock().unwrap_or_else(|p| p.into_inner());
            connection
                .busy_timeout(timeout)
                .map_err(|e| classify(&path, e))?;
            action(&mut connection, &path).map_err(|error| match error {
                StoreError::Locked { path, .. } => StoreError::Locked {
                    path,
                    waited_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                },
                other => other,
            })
        })
        .await
        .map_err(|e| StoreError::Io(format!("the journal task failed: {e}")))?
    }

    /// Runs a writing `action` (see [`Self::with`]); once it has committed a log long enough,
    /// the log is checkpointed soon after, in the background.
    async fn write<T: Send + 'static>(
        &self,
        action: impl Fn(&mut Connection, &Path) -> Result<T, StoreError> + Send + Sync + 'static,
    ) -> Result<T, StoreError> {
        let (written, frames) = self
            .with(move |connection, path| {
                let written = action(connection, path);
                // Taken whether or not the action failed: the next action on this thread
                // must not see this one's commit.
                let frames = checkpoints::log_frames();
                written.map(|written| (written, frames))
            })
            .await?;
        if let Some(checkpoints) = &self.checkpoints {
            checkpoints.wrote(frames);
        }
        Ok(written)
    }
}

#[async_trait::async_trait]
impl CheckpointStore for SqliteStore {
    /// A claim is an OS lock on a lease file beside the database, so it holds between
    /// processes and ends with the process that holds it, however that process ends. The file
    /// records the holder's process id for the error a second claimant sees.
    async fn claim(&self, thread_id: &str) -> Result<Claim, StoreError> {
        self.leases.claim(thread_id)
    }

    async fn begin(&self, header: &ThreadHeader) -> Result<(), StoreError> {
        let header = header.clone();
        self.write(move |connection, path| writes::begin(connection, path, &header))
            .await
    }

    async fn set_name(&self, thread_id: &str, name: &str) -> Result<(), StoreError> {
        let (thread_id, name) = (thread_id.to_owned(), name.to_owned());
        self.write(move |connection, path| writes::set_name(connection, path, &thread_id, &name))
            .await
    }

    async fn append(&self, thread_id: &str, entries: &[Entry]) -> Result<(), StoreError> {
        let (thread_id, entries) = (thread_id.to_owned(), entries.to_vec());
        self.write(move |connection, path| writes::append(connection, path, &thread_id, &entries))
            .await
    }

    async fn finish(&self, thread_id: &str, end: &ThreadEnd) -> Result<(), StoreError> {
        self.finish_with_events(thread_id, &[], end).await
    }

    /// One transaction: the history and the end it leads to are written together.
    async fn finish_with_events(
        &self,
        thread_id: &str,
        events: &[StoredEvent],
        end: &ThreadEnd,
    ) -> Result<(), StoreError> {
        let (id, events, end) = (thread_id.to_owned(), events.to_vec(), end.clone());
        self.write(move |connection, path| {
            writes::finish_with_events(connection, path, &id, &events, &end)
        })
        .await?;
        self.leases.remove(thread_id);
        Ok(())
    }

    async fn load(&self, thread_id: &str) -> Result<Option<StoredThread>, StoreError> {
        let thread_id = thread_id.to_owned();
        let leases = self.leases.clone();
        self.with(move |connection, path| {
            reads::load(connection, path, &thread_id, || leases.held(&thread_id))
        })
        .await
    }

    async fn list(&self) -> Result<Listing, StoreError> {
        let leases = self.leases.clone();
        self.with(move |connection, path| {
            let claimed = |thread_id: &str| leases.held(thread_id);
            reads::list(connection, path, claimed, crate::now_unix_ms())
        })
        .await
    }

    async fn overview(&self, thread_id: &str) -> Result<Option<ThreadOverview>, StoreError> {
        let thread_id = thread_id.to_owned();
        let leases = self.leases.clone();
        self.with(move |connection, path| {
            let claimed = |thread_id: &str| leases.held(thread_id);
            reads::overview(connection, path, &thread_id, claimed, crate::now_unix_ms())
        })
        .await
    }

    async fn entry(&self, thread_id: &str, handle: u64) -> Result<Option<Entry>, StoreError> {
        let thread_id = thread_id.to_owned();
        self.with(move |connection, path| reads::entry(connection, path, &thread_id, handle))
            .await
    }

    async fn record_workflow(&self, record: &WorkflowRecord) -> Result<(), StoreError> {
        let record = record.clone();
        self.write(move |connection, path| writes::record_workflow(connection, path, &record))
            .await
    }

    async fn workflows(
        &self,
        conversation_id: Option<&str>,
    ) -> Result<Vec<WorkflowRecord>, StoreError> {
        let conversation_id = conversation_id.map(str::to_owned);
        self.with(move |connection, path| {
            reads::workflows(connection, path, conversation_id.as_deref())
        })
        .await
    }

    async fn recent_replies(&self, limit: usize) -> Result<Vec<ReplySample>, StoreError> {
        self.with(move |connection, path| reads::recent_replies(connection, path, limit))
            .await
    }

    fn keeps_events(&self) -> bool {
        true
    }

    async fn append_events(
        &self,
        thread_id: &str,
        events: &[StoredEvent],
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let (thread_id, events) = (thread_id.to_owned(), events.to_vec());
        self.write(move |connection, path| {
            writes::append_events(connection, path, &thread_id, &events)
        })
        .await
    }

    async fn events(
        &self,
        thread_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let thread_id = thread_id.to_owned();
        self.with(move |connection, path| reads::events(connection, path, &thread_id, after, limit))
            .await
    }

    async fn call_events(
        &self,
        thread_id: &str,
        call_id: u64,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let thread_id = thread_id.to_owned();
        self.with(move |connection, path| {
            reads::call_events(connection, path, &thread_id, call_id, after, limit)
        })
        .await
    }

    async fn status(&self, thread_id: &str) -> Result<Option<crate::ThreadStatus>, StoreError> {
        let thread_id = thread_id.to_owned();
        let leases = self.leases.clone();
        self.with(move |connection, path| {
            let stored = records::thread_status(connection, path, &thread_id)?;
            Ok(stored.map(|stored| stored.status(|| leases.held(&thread_id))))
        })
        .await
    }

    async fn last_event_seq(&self, thread_id: &str) -> Result<u64, StoreError> {
        let thread_id = thread_id.to_owned();
        self.with(move |connection, path| records::last_event_seq(connection, path, &thread_id))
            .await
    }
}
