//! The journal's schema: opening a file in WAL mode and migrating it, one step per format
//! version, to the one this build writes ([`SCHEMA_VERSION`]).

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use super::error::{beside, classify, writable};
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
    // 3 → 4: each thread's history of events, numbered by the thread's own sequence.
    "CREATE TABLE events (
        thread_id TEXT NOT NULL REFERENCES runs(thread_id),
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        event TEXT NOT NULL,
        PRIMARY KEY (thread_id, seq)
    ) WITHOUT ROWID;",
    // 4 → 5: how many of each completion's tokens are estimates rather than reported counts.
    "ALTER TABLE entries ADD COLUMN estimated_tokens INTEGER NOT NULL DEFAULT 0;",
    // 5 → 6: completions kept in their primary key's order, without a rowid, so that appending
    // one writes one b-tree instead of the table and its key's index.
    "CREATE TABLE entries_by_key (
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
        estimated_tokens INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (thread_id, seq)
    ) WITHOUT ROWID;
    INSERT INTO entries_by_key (thread_id, seq, batch, handle, kind, fingerprint, request,
        outcome, input_tokens, output_tokens, duration_ms, estimated_tokens)
        SELECT thread_id, seq, batch, handle, kind, fingerprint, request, outcome,
            input_tokens, output_tokens, duration_ms, estimated_tokens FROM entries;
    DROP TABLE entries;
    ALTER TABLE entries_by_key RENAME TO entries;",
];

/// What a file opened as a journal holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// Nothing: a new (or empty) database, which a run makes a journal.
    Empty,
    /// A flowbox journal this build reads.
    Journal,
}

/// Looks at the path before SQLite opens it, and says whether it exists. Anything but a
/// regular file is refused (a directory, `/dev/null`, a pipe), and so, when the journal is to
/// be written, is a file — the database or the `-wal` and `-shm` files SQLite keeps beside it
/// — that this process cannot write.
pub(super) fn check_file(path: &Path, writing: bool) -> Result<bool, StoreError> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(error) => {
            return Err(StoreError::Unusable {
                path: path.to_owned(),
                reason: error.to_string(),
            });
        }
    };
    if !metadata.is_file() {
        return Err(StoreError::Unusable {
            path: path.to_owned(),
            reason: "it is not a regular file".into(),
        });
    }
    if writing {
        for file in [path.to_owned(), beside(path, "-wal"), beside(path, "-shm")] {
            if file.exists() {
                writable(&file)?;
            }
        }
    }
    Ok(true)
}

/// Tells a flowbox journal from a new database and from another application's, by reading
/// only: nothing is written to a file that is not flowbox's.
pub(super) fn recognise(path: &Path, connection: &Connection) -> Result<Found, StoreError> {
    // One statement, so the tables and the version are of one state of the file even while
    // another process migrates it.
    let rows: Vec<(u32, Option<String>)> = connection
        .prepare(
            "SELECT v.user_version, t.name FROM pragma_user_version v
             LEFT JOIN sqlite_master t ON t.type = 'table' AND t.name NOT LIKE 'sqlite_%'
             ORDER BY t.name",
        )
        .and_then(|mut statement| {
            statement
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()
        })
        .map_err(|e| classify(path, e))?;
    let version = rows.first().map_or(0, |(version, _)| *version);
    let tables: Vec<String> = rows.into_iter().filter_map(|(_, table)| table).collect();
    if tables.is_empty() && version == 0 {
        return Ok(Found::Empty);
    }
    let ours = ["runs", "entries"]
        .iter()
        .all(|table| tables.iter().any(|t| t == table));
    if !ours || version == 0 {
        let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
        let more = tables.len().saturating_sub(shown.len());
        let detail = match (shown.is_empty(), more) {
            (true, _) => format!("it is an SQLite database with user_version {version}"),
            (false, 0) => format!("it holds the tables {}", shown.join(", ")),
            (false, more) => format!("it holds the tables {} and {more} more", shown.join(", ")),
        };
        return Err(StoreError::Foreign {
            path: path.to_owned(),
            detail,
        });
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: path.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(Found::Journal)
}

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
