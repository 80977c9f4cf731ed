//! The journal's schema: opening a file in WAL mode and migrating it, one step per format
//! version, to the one this build writes ([`SCHEMA_VERSION`]).

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use super::error::classify;
use crate::{SCHEMA_VERSION, StoreError};

/// The schema, one migration per version; `migrations[i]` takes a journal from version `i` to
/// `i + 1`. Never edit a released migration: add the next one.
pub(super) const MIGRATIONS: &[&str] = &[
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
    // 2 → 3: no new tables; records change (headers carry no seed), which a build that reads
    // format 2 could not open.
    "",
];

/// Switches a new file to WAL mode (a no-op for one already in it). The switch needs the file
/// to itself, and SQLite reports a concurrent opener doing the same as busy without waiting,
/// so wait here, up to `busy_timeout`, as the busy timeout would.
pub(super) fn enter_wal_mode(
    path: &Path,
    connection: &Connection,
    busy_timeout: Duration,
) -> Result<(), StoreError> {
    let deadline = std::time::Instant::now() + busy_timeout;
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

/// Brings the journal to [`SCHEMA_VERSION`]; refuses a newer one, and checks an older one is
/// sound before changing it.
pub(super) fn migrate(path: &Path, connection: &Connection) -> Result<(), StoreError> {
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
