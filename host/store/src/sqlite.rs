//! Journals in one SQLite file: the embedded default.
//!
//! WAL mode lets readers work while one writer appends, in this process or another; a busy
//! timeout makes concurrent writers take turns instead of failing. Each batch of completions is
//! one transaction. With [`Durability::Process`] (the default, `synchronous=NORMAL`) a commit
//! survives the process being killed at any instant; with [`Durability::PowerLoss`]
//! (`synchronous=FULL`) it also survives the machine losing power, at the price of an fsync per
//! batch. A damaged file or one from a newer flowbox is refused with a clear error and left
//! untouched, so nothing already journaled is lost. A run's claim on a thread is an OS lock on
//! a lease file in a directory beside the database (`journal.db.leases/`), released when the
//! run ends or its process dies.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, params};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{
    CallKind, CheckpointStore, Claim, Entry, EntryOutcome, RunEnd, RunHeader, RunListing,
    RunStatus, SCHEMA_VERSION, StoreError, StoredRun, WorkflowRecord,
};

/// How long a writer waits by default for another to finish before reporting the file as
/// locked.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// Where the lease files of claimed threads live: beside the database as it resolves, so
    /// every path to one file (a symlink, `./`) shares them.
    leases: PathBuf,
    connection: Arc<Mutex<Connection>>,
    durability: Durability,
    busy_timeout: Duration,
}

/// The schema, one migration per version; `migrations[i]` takes a journal from version `i` to
/// `i + 1`. Never edit a released migration: add the next one.
const MIGRATIONS: &[&str] = &[
    // 0 → 1: threads, their completions, and their ends.
    "CREATE TABLE runs (
        thread_id TEXT PRIMARY KEY,
        header TEXT NOT NULL,
        name TEXT,
        status TEXT NOT NULL,
        outcome TEXT,
        created_unix_ms INTEGER NOT NULL,
        finished_unix_ms INTEGER
    );
    CREATE TABLE entries (
        thread_id TEXT NOT NULL REFERENCES runs(thread_id),
        seq INTEGER NOT NULL,
        batch INTEGER NOT NULL,
        handle INTEGER NOT NULL,
        kind TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        request TEXT NOT NULL,
        outcome TEXT NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        PRIMARY KEY (thread_id, seq)
    );
    CREATE INDEX runs_by_age ON runs (created_unix_ms DESC);",
    // 1 → 2: the workflow runs root agents started, by conversation.
    "CREATE TABLE workflows (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        name TEXT,
        leaves INTEGER NOT NULL,
        tokens INTEGER NOT NULL,
        ok INTEGER NOT NULL,
        recorded_unix_ms INTEGER NOT NULL
    );
    CREATE INDEX workflows_by_conversation ON workflows (conversation_id, id);",
];

impl SqliteStore {
    /// Opens (or creates) the journal at `path` with [`Durability::Process`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, Durability::default())
    }

    /// Opens (or creates) the journal at `path`, migrating an older format.
    pub fn open_with(path: impl AsRef<Path>, durability: Durability) -> Result<Self, StoreError> {
        let path = path.as_ref().to_owned();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| StoreError::Io(format!("cannot create {}: {e}", parent.display())))?;
        }
        let connection = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| classify(&path, e))?;
        connection
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| classify(&path, e))?;
        let synchronous = match durability {
            Durability::Process => "NORMAL",
            Durability::PowerLoss => "FULL",
        };
        enter_wal_mode(&path, &connection)?;
        connection
            .execute_batch(&format!(
                "PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON;"
            ))
            .map_err(|e| classify(&path, e))?;
        migrate(&path, &connection)?;
        let mut leases = path
            .canonicalize()
            .map_err(|e| StoreError::Io(format!("{}: {e}", path.display())))?
            .into_os_string();
        leases.push(".leases");
        Ok(Self {
            leases: leases.into(),
            path,
            connection: Arc::new(Mutex::new(connection)),
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

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file whose lock is the claim on `thread_id`: in a directory beside the database
    /// (`journal.db.leases/`), named by a hash of the id so that any id makes a safe name.
    fn lease_path(&self, thread_id: &str) -> PathBuf {
        let digest = Sha256::digest(thread_id.as_bytes());
        let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.leases.join(name)
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
}

/// Who holds a lease, from the process id its holder wrote.
fn lease_holder(file: &mut File) -> String {
    let mut pid = String::new();
    match file.read_to_string(&mut pid) {
        Ok(_) if !pid.trim().is_empty() => format!("process {}", pid.trim()),
        _ => "another process".into(),
    }
}

/// Switches a new file to WAL mode (a no-op for one already in it). The switch needs the file
/// to itself, and SQLite reports a concurrent opener doing the same as busy without waiting,
/// so wait here, as the busy timeout would.
fn enter_wal_mode(path: &Path, connection: &Connection) -> Result<(), StoreError> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match connection.query_row("PRAGMA journal_mode = WAL", [], |row| {
            row.get::<_, String>(0)
        }) {
            Ok(_) => return Ok(()),
            Err(error) => match classify(path, error) {
                StoreError::Locked { .. } if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                other => return Err(other),
            },
        }
    }
}

fn migrate(path: &Path, connection: &Connection) -> Result<(), StoreError> {
    let version: u32 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|e| classify(path, e))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: path.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    if version > 0 && version < SCHEMA_VERSION {
        // An existing journal about to be migrated: make sure it is sound first. (Checking on
        // every open would read the whole file; damage elsewhere surfaces as `Corrupt` on use.)
        let check: String = connection
            .query_row("PRAGMA quick_check", [], |row| row.get(0))
            .map_err(|e| classify(path, e))?;
        if check != "ok" {
            return Err(StoreError::Corrupt {
                path: path.to_owned(),
                detail: check,
            });
        }
    }
    for (from, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let to = from + 1;
        // Another process may be opening the same new file: take the write lock, then look
        // again, so that each step runs exactly once.
        connection
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| classify(path, e))?;
        let step = connection
            .query_row("PRAGMA user_version", [], |row| row.get::<_, u32>(0))
            .and_then(|now| {
                if now as usize >= to {
                    return Ok(());
                }
                connection.execute_batch(&format!("{migration}; PRAGMA user_version = {to};"))
            })
            .and_then(|()| connection.execute_batch("COMMIT"));
        if let Err(error) = step {
            // Nothing of the step stays; the error is what the caller needs to see.
            let _ = connection.execute_batch("ROLLBACK");
            return Err(classify(path, error));
        }
    }
    Ok(())
}

/// Maps SQLite's errors to ours: busy is a lock, a malformed file is corruption.
fn classify(path: &Path, error: rusqlite::Error) -> StoreError {
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Locked {
            path: path.to_owned(),
            waited_ms: 0,
        },
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Corrupt {
            path: path.to_owned(),
            detail: error.to_string(),
        },
        _ => StoreError::Io(format!("{}: {error}", path.display())),
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("journal values serialise")
}

fn from_json<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        path: path.to_owned(),
        detail: format!("a journal record is not valid: {e}"),
    })
}

/// Where a thread stands: `None` when there is no such thread.
fn thread_status(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
) -> Result<Option<RunStatus>, StoreError> {
    let status: Option<String> = connection
        .prepare_cached("SELECT status FROM runs WHERE thread_id = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([thread_id], |row| row.get(0))
                .optional()
        })
        .map_err(|e| classify(path, e))?;
    status
        .map(|status| {
            RunStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
                path: path.to_owned(),
                detail: format!("unknown run status {status:?}"),
            })
        })
        .transpose()
}

/// Fails unless the thread exists and has not finished.
fn check_running(connection: &Connection, path: &Path, thread_id: &str) -> Result<(), StoreError> {
    match thread_status(connection, path, thread_id)? {
        None => Err(StoreError::UnknownThread(thread_id.to_owned())),
        Some(RunStatus::Running) => Ok(()),
        Some(_) => Err(StoreError::Finished(thread_id.to_owned())),
    }
}

#[async_trait::async_trait]
impl CheckpointStore for SqliteStore {
    /// A claim is an OS lock on a lease file beside the database, so it holds between
    /// processes and ends with the process that holds it, however that process ends. The file
    /// records the holder's process id for the error a second claimant sees.
    async fn claim(&self, thread_id: &str) -> Result<Claim, StoreError> {
        let path = self.lease_path(thread_id);
        let io = |e: std::io::Error| StoreError::Io(format!("lease {}: {e}", path.display()));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {
                file.set_len(0).map_err(io)?;
                file.rewind().map_err(io)?;
                write!(file, "{}", std::process::id()).map_err(io)?;
                Ok(Claim::new(file))
            }
            Err(TryLockError::WouldBlock) => Err(StoreError::InUse {
                thread_id: thread_id.to_owned(),
                holder: lease_holder(&mut file),
            }),
            Err(TryLockError::Error(e)) => Err(io(e)),
        }
    }

    async fn begin(&self, header: &RunHeader) -> Result<(), StoreError> {
        let header = header.clone();
        self.with(move |connection, path| {
            let inserted = connection
                .execute(
                    "INSERT OR IGNORE INTO runs (thread_id, header, status, created_unix_ms)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![
                        header.thread_id,
                        to_json(&header),
                        RunStatus::Running.as_str(),
                        header.created_unix_ms as i64
                    ],
                )
                .map_err(|e| classify(path, e))?;
            if inserted == 0 {
                return Err(StoreError::ThreadExists(header.thread_id.clone()));
            }
            Ok(())
        })
        .await
    }

    async fn set_name(&self, thread_id: &str, name: &str) -> Result<(), StoreError> {
        let (thread_id, name) = (thread_id.to_owned(), name.to_owned());
        self.with(move |connection, path| {
            let updated = connection
                .execute(
                    "UPDATE runs SET name = ?2 WHERE thread_id = ?1",
                    params![thread_id, name],
                )
                .map_err(|e| classify(path, e))?;
            if updated == 0 {
                return Err(StoreError::UnknownThread(thread_id.clone()));
            }
            Ok(())
        })
        .await
    }

    async fn append(&self, thread_id: &str, entries: &[Entry]) -> Result<(), StoreError> {
        let (thread_id, entries) = (thread_id.to_owned(), entries.to_vec());
        self.with(move |connection, path| {
            let transaction = connection
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| classify(path, e))?;
            check_running(&transaction, path, &thread_id)?;
            // The primary key's index answers MAX in one lookup.
            let next: u64 = transaction
                .prepare_cached("SELECT MAX(seq) FROM entries WHERE thread_id = ?1")
                .and_then(|mut statement| {
                    statement.query_row([&thread_id], |row| row.get::<_, Option<i64>>(0))
                })
                .map_err(|e| classify(path, e))?
                .map_or(0, |last| last as u64 + 1);
            {
                let mut insert = transaction
                    .prepare_cached(
                        "INSERT INTO entries (thread_id, seq, batch, handle, kind, fingerprint,
                            request, outcome, input_tokens, output_tokens, duration_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                    )
                    .map_err(|e| classify(path, e))?;
                for (offset, entry) in entries.iter().enumerate() {
                    let expected = next + offset as u64;
                    if entry.seq != expected {
                        return Err(StoreError::OutOfOrder {
                            thread_id: thread_id.clone(),
                            expected,
                            got: entry.seq,
                        });
                    }
                    insert
                        .execute(params![
                            thread_id,
                            entry.seq as i64,
                            entry.batch as i64,
                            entry.handle as i64,
                            entry.kind.as_str(),
                            entry.fingerprint,
                            to_json(&entry.request),
                            to_json(&entry.outcome),
                            entry.input_tokens as i64,
                            entry.output_tokens as i64,
                            entry.duration_ms as i64,
                        ])
                        .map_err(|e| classify(path, e))?;
                }
            }
            transaction.commit().map_err(|e| classify(path, e))
        })
        .await
    }

    async fn finish(&self, thread_id: &str, end: &RunEnd) -> Result<(), StoreError> {
        let lease = self.lease_path(thread_id);
        let (thread_id, end) = (thread_id.to_owned(), end.clone());
        self.with(move |connection, path| {
            let transaction = connection
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| classify(path, e))?;
            check_running(&transaction, path, &thread_id)?;
            transaction
                .execute(
                    "UPDATE runs SET status = ?2, outcome = ?3, finished_unix_ms = ?4
                     WHERE thread_id = ?1",
                    params![
                        thread_id,
                        end.status.as_str(),
                        to_json(&end.outcome),
                        end.finished_unix_ms as i64
                    ],
                )
                .map_err(|e| classify(path, e))?;
            transaction.commit().map_err(|e| classify(path, e))
        })
        .await?;
        // A finished thread is never claimed to run again; whoever opened its lease before
        // this finds the thread finished.
        let _ = std::fs::remove_file(lease);
        Ok(())
    }

    async fn load(&self, thread_id: &str) -> Result<Option<StoredRun>, StoreError> {
        let thread_id = thread_id.to_owned();
        self.with(move |connection, path| {
            let row = connection
                .query_row(
                    "SELECT header, name, status, outcome, finished_unix_ms FROM runs
                     WHERE thread_id = ?1",
                    [&thread_id],
                    |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, Option<String>>(1)?,
                            row.get::<_, String>(2)?,
                            row.get::<_, Option<String>>(3)?,
                            row.get::<_, Option<i64>>(4)?,
                        ))
                    },
                )
                .optional()
                .map_err(|e| classify(path, e))?;
            let Some((header, name, status, outcome, finished)) = row else {
                return Ok(None);
            };
            let header: RunHeader = from_json(path, &header)?;
            let status = RunStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
                path: path.to_owned(),
                detail: format!("unknown run status {status:?}"),
            })?;
            let end = match (status, outcome) {
                (RunStatus::Running, _) => None,
                (status, Some(outcome)) => Some(RunEnd {
                    status,
                    outcome: from_json::<Value>(path, &outcome)?,
                    finished_unix_ms: finished.unwrap_or(0) as u64,
                }),
                (_, None) => {
                    return Err(StoreError::Corrupt {
                        path: path.to_owned(),
                        detail: format!("thread {thread_id} ended without an outcome"),
                    });
                }
            };
            let mut statement = connection
                .prepare_cached(
                    "SELECT seq, batch, handle, kind, fingerprint, request, outcome,
                        input_tokens, output_tokens, duration_ms
                     FROM entries WHERE thread_id = ?1 ORDER BY seq",
                )
                .map_err(|e| classify(path, e))?;
            let rows = statement
                .query_map([&thread_id], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, String>(3)?,
                        row.get::<_, String>(4)?,
                        row.get::<_, String>(5)?,
                        row.get::<_, String>(6)?,
                        row.get::<_, i64>(7)?,
                        row.get::<_, i64>(8)?,
                        row.get::<_, i64>(9)?,
                    ))
                })
                .map_err(|e| classify(path, e))?;
            let mut entries = Vec::new();
            for row in rows {
                let (seq, batch, handle, kind, fingerprint, request, outcome, input, output, ms) =
                    row.map_err(|e| classify(path, e))?;
                entries.push(Entry {
                    seq: seq as u64,
                    batch: batch as u64,
                    handle: handle as u64,
                    kind: CallKind::parse(&kind).ok_or_else(|| StoreError::Corrupt {
                        path: path.to_owned(),
                        detail: format!("unknown call kind {kind:?}"),
                    })?,
                    fingerprint,
                    request: from_json(path, &request)?,
                    outcome: from_json::<EntryOutcome>(path, &outcome)?,
                    input_tokens: input as u64,
                    output_tokens: output as u64,
                    duration_ms: ms as u64,
                });
            }
            Ok(Some(StoredRun {
                header,
                name,
                entries,
                end,
            }))
        })
        .await
    }

    async fn list(&self) -> Result<Vec<RunListing>, StoreError> {
        self.with(|connection, path| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT r.thread_id, r.name, r.status, r.created_unix_ms,
                        COALESCE(SUM(e.kind = 'agent'), 0),
                        COALESCE(SUM(e.input_tokens + e.output_tokens), 0)
                     FROM runs r LEFT JOIN entries e ON e.thread_id = r.thread_id
                     GROUP BY r.thread_id
                     ORDER BY r.created_unix_ms DESC, r.thread_id DESC",
                )
                .map_err(|e| classify(path, e))?;
            let rows = statement
                .query_map([], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Option<String>>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, i64>(3)?,
                        row.get::<_, i64>(4)?,
                        row.get::<_, i64>(5)?,
                    ))
                })
                .map_err(|e| classify(path, e))?;
            let mut listing = Vec::new();
            for row in rows {
                let (thread_id, name, status, created, leaves, tokens) =
                    row.map_err(|e| classify(path, e))?;
                listing.push(RunListing {
                    thread_id,
                    name,
                    status: RunStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
                        path: path.to_owned(),
                        detail: format!("unknown run status {status:?}"),
                    })?,
                    leaves: leaves as u64,
                    tokens: tokens as u64,
                    created_unix_ms: created as u64,
                });
            }
            Ok(listing)
        })
        .await
    }

    async fn record_workflow(&self, record: &WorkflowRecord) -> Result<(), StoreError> {
        let record = record.clone();
        self.with(move |connection, path| {
            connection
                .execute(
                    "INSERT INTO workflows (conversation_id, thread_id, name, leaves, tokens, ok,
                        recorded_unix_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        record.conversation_id,
                        record.thread_id,
                        record.name,
                        record.leaves as i64,
                        record.tokens as i64,
                        record.ok,
                        record.recorded_unix_ms as i64
                    ],
                )
                .map_err(|e| classify(path, e))?;
            Ok(())
        })
        .await
    }

    async fn workflows(
        &self,
        conversation_id: Option<&str>,
    ) -> Result<Vec<WorkflowRecord>, StoreError> {
        let conversation_id = conversation_id.map(str::to_owned);
        self.with(move |connection, path| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT conversation_id, thread_id, name, leaves, tokens, ok, recorded_unix_ms
                     FROM workflows WHERE ?1 IS NULL OR conversation_id = ?1 ORDER BY id",
                )
                .map_err(|e| classify(path, e))?;
            let rows = statement
                .query_map([&conversation_id], |row| {
                    Ok(WorkflowRecord {
                        conversation_id: row.get(0)?,
                        thread_id: row.get(1)?,
                        name: row.get(2)?,
                        leaves: row.get::<_, i64>(3)? as u64,
                        tokens: row.get::<_, i64>(4)? as u64,
                        ok: row.get(5)?,
                        recorded_unix_ms: row.get::<_, i64>(6)? as u64,
                    })
                })
                .map_err(|e| classify(path, e))?;
            rows.collect::<Result<Vec<_>, _>>()
                .map_err(|e| classify(path, e))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{entry, header};

    #[tokio::test]
    async fn keeps_the_store_contract() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
        crate::contract::round_trip(&store).await;
        crate::contract::claims_are_exclusive(&store).await;
    }

    #[tokio::test]
    async fn a_claim_holds_across_stores_on_one_file_and_ends_with_the_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        // Two stores on one file stand for two processes: each has its own lock on the lease,
        // even when one reaches the file through a symlink.
        let one = SqliteStore::open(&path).unwrap();
        #[cfg(unix)]
        let two = {
            let link = dir.path().join("link.db");
            std::os::unix::fs::symlink(&path, &link).unwrap();
            SqliteStore::open(&link).unwrap()
        };
        #[cfg(not(unix))]
        let two = SqliteStore::open(&path).unwrap();
        one.begin(&header("t")).await.unwrap();
        let held = one.claim("t").await.unwrap();
        let err = two.claim("t").await.unwrap_err();
        let holder = format!("process {}", std::process::id());
        assert!(
            matches!(&err, StoreError::InUse { holder: h, .. } if *h == holder),
            "{err}"
        );
        let lease = one.lease_path("t");
        assert!(lease.exists());
        let end = RunEnd {
            status: RunStatus::Failed,
            outcome: serde_json::json!({"ok": false}),
            finished_unix_ms: 1,
        };
        one.finish("t", &end).await.unwrap();
        drop(held);
        // A finished thread never runs again, so its lease file is gone.
        assert!(!lease.exists());
        drop(two.claim("t").await.unwrap());
        // Thread ids such as `..` name a lease inside the lease directory, never beside it.
        let odd = one.lease_path("..");
        assert_eq!(odd.parent(), lease.parent());
        drop(one.claim("..").await.unwrap());
    }

    #[tokio::test]
    async fn journals_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/journal.db");
        {
            let store = SqliteStore::open_with(&path, Durability::PowerLoss).unwrap();
            store.begin(&header("t")).await.unwrap();
            store.append("t", &[entry(0, 0)]).await.unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store.load("t").await.unwrap().unwrap().entries,
            vec![entry(0, 0)]
        );
    }

    #[tokio::test]
    async fn call_error_kinds_are_stored_by_name_and_an_unknown_one_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
        store.begin(&header("t")).await.unwrap();
        // Entry 2 of the contract's entries is a failed call.
        store
            .append("t", &[entry(0, 0), entry(1, 0), entry(2, 0)])
            .await
            .unwrap();
        let stored: String = {
            let connection = store.connection.lock().unwrap();
            connection
                .query_row("SELECT outcome FROM entries WHERE seq = 2", [], |row| {
                    row.get(0)
                })
                .unwrap()
        };
        assert_eq!(
            stored,
            r#"{"status":"err","kind":"agent-failed","message":"boom"}"#
        );
        {
            let connection = store.connection.lock().unwrap();
            connection
                .execute(
                    "UPDATE entries SET outcome = ?1 WHERE seq = 2",
                    [r#"{"status":"err","kind":"made-up","message":"boom"}"#],
                )
                .unwrap();
        }
        let err = store.load("t").await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("made-up"), "{err}");
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_database_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        let garbage = b"this is not sqlite, just bytes that look nothing like a header".repeat(100);
        std::fs::write(&path, &garbage).unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(
            err.to_string().contains("not a readable flowbox journal"),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), garbage);
    }

    #[tokio::test]
    async fn a_truncated_journal_is_refused_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        {
            let store = SqliteStore::open(&path).unwrap();
            store.begin(&header("t")).await.unwrap();
            let many: Vec<Entry> = (0..400).map(|seq| entry(seq, 0)).collect();
            store.append("t", &many).await.unwrap();
            // Fold the WAL into the main file so truncating it loses pages.
            let connection = store.connection.lock().unwrap();
            connection
                .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                .unwrap();
        }
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let opened = SqliteStore::open(&path);
        let err = match opened {
            Err(err) => err,
            Ok(store) => store.load("t").await.unwrap_err(),
        };
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    }

    #[tokio::test]
    async fn an_older_journal_is_migrated_with_its_threads_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        // A journal as the first release wrote it: only the first migration applied.
        {
            let connection = Connection::open(&path).unwrap();
            connection
                .execute_batch(&format!("{}; PRAGMA user_version = 1;", MIGRATIONS[0]))
                .unwrap();
            connection
                .execute(
                    "INSERT INTO runs (thread_id, header, status, created_unix_ms)
                     VALUES ('old', ?1, 'running', 5)",
                    [to_json(&header("old"))],
                )
                .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store.load("old").await.unwrap().unwrap().header,
            header("old")
        );
        store
            .record_workflow(&WorkflowRecord {
                conversation_id: "c".into(),
                thread_id: "old".into(),
                name: None,
                leaves: 1,
                tokens: 2,
                ok: true,
                recorded_unix_ms: 3,
            })
            .await
            .unwrap();
        assert_eq!(store.workflows(Some("c")).await.unwrap().len(), 1);
        let version: u32 = Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    #[tokio::test]
    async fn a_journal_from_a_newer_flowbox_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        SqliteStore::open(&path).unwrap();
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA user_version = 99;")
            .unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::TooNew {
                    found: 99,
                    supported: SCHEMA_VERSION,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_locked_journal_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        let store = SqliteStore::open(&path).unwrap();
        store.begin(&header("t")).await.unwrap();
        let holder = Connection::open(&path).unwrap();
        holder.execute_batch("BEGIN EXCLUSIVE;").unwrap();
        // Shorten the wait for the test; the error is the same after the real timeout.
        let store = store.with_busy_timeout(Duration::from_millis(50));
        let err = store.append("t", &[entry(0, 0)]).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Locked { waited_ms: 50, .. }),
            "{err}"
        );
        holder.execute_batch("ROLLBACK;").unwrap();
        store.append("t", &[entry(0, 0)]).await.unwrap();
    }

    #[test]
    fn many_openers_of_one_new_file_create_it_once() {
        let dir = tempfile::tempdir().unwrap();
        for round in 0..20 {
            let path = dir.path().join(format!("journal-{round}.db"));
            let start = Arc::new(std::sync::Barrier::new(6));
            let openers: Vec<_> = (0..6)
                .map(|_| {
                    let (path, start) = (path.clone(), Arc::clone(&start));
                    std::thread::spawn(move || {
                        start.wait();
                        SqliteStore::open(&path).map(|_| ())
                    })
                })
                .collect();
            for opener in openers {
                opener.join().unwrap().unwrap();
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_hundred_runs_write_concurrently_without_losing_entries() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("journal.db")).unwrap();
        let mut tasks = Vec::new();
        for run in 0..100 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let id = format!("run-{run}");
                store.begin(&header(&id)).await.unwrap();
                for batch in 0..10 {
                    let entries = [entry(batch * 2, batch), entry(batch * 2 + 1, batch)];
                    store.append(&id, &entries).await.unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        for run in 0..100 {
            let loaded = store.load(&format!("run-{run}")).await.unwrap().unwrap();
            let expected: Vec<Entry> = (0..20).map(|seq| entry(seq, seq / 2)).collect();
            assert_eq!(loaded.entries, expected);
        }
        assert_eq!(store.list().await.unwrap().len(), 100);
    }

    /// Writes one thread into the journal named by `FLOWBOX_STORE_CHILD` (`path|thread`); run
    /// as a child process by `two_processes_share_one_journal`, and a no-op otherwise.
    #[tokio::test]
    #[ignore = "run as a child process by two_processes_share_one_journal"]
    async fn child_writer() {
        let Ok(spec) = std::env::var("FLOWBOX_STORE_CHILD") else {
            return;
        };
        let (path, thread) = spec.split_once('|').expect("path|thread");
        let store = SqliteStore::open(path).unwrap();
        store.begin(&header(thread)).await.unwrap();
        for seq in 0..200 {
            store.append(thread, &[entry(seq, seq)]).await.unwrap();
        }
    }

    #[tokio::test]
    async fn two_processes_share_one_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        SqliteStore::open(&path).unwrap();
        let children: Vec<_> = ["a", "b"]
            .iter()
            .map(|thread| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "--exact",
                        "sqlite::tests::child_writer",
                        "--ignored",
                        "--quiet",
                    ])
                    .env(
                        "FLOWBOX_STORE_CHILD",
                        format!("{}|{thread}", path.display()),
                    )
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
        let store = SqliteStore::open(&path).unwrap();
        for thread in ["a", "b"] {
            let loaded = store.load(thread).await.unwrap().unwrap();
            let expected: Vec<Entry> = (0..200).map(|seq| entry(seq, seq)).collect();
            assert_eq!(loaded.entries, expected);
        }
    }
}
