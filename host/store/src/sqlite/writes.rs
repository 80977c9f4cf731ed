//! The journal's writes, one function per store operation, each in one transaction; every
//! statement, `BEGIN IMMEDIATE` and `COMMIT` included, comes from the statement cache, as each
//! is asked for in every run.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use super::error::classify;
use crate::{Entry, StoreError, StoredEvent, ThreadEnd, ThreadHeader, WorkflowRecord};

use super::records::{Stored, last_event_seq, status, thread_status, to_json};

/// A write transaction (`BEGIN IMMEDIATE`) whose `BEGIN` and `COMMIT` come from the statement
/// cache: asked for every append, they are not parsed again each time. Rolled back unless
/// committed, as a failed step or a panic leaves it.
struct Immediate<'c> {
    connection: &'c Connection,
    path: &'c Path,
    open: bool,
}

impl<'c> Immediate<'c> {
    fn begin(connection: &'c Connection, path: &'c Path) -> Result<Self, StoreError> {
        run_cached(connection, path, "BEGIN IMMEDIATE")?;
        Ok(Self {
            connection,
            path,
            open: true,
        })
    }

    fn commit(mut self) -> Result<(), StoreError> {
        run_cached(self.connection, self.path, "COMMIT")?;
        self.open = false;
        Ok(())
    }
}

impl std::ops::Deref for Immediate<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.connection
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        // A commit that failed may have ended the transaction already.
        if self.open && !self.connection.is_autocommit() {
            let _ = self.connection.execute_batch("ROLLBACK");
        }
    }
}

/// `sql` run with `params` through the statement cache, so that a write asked for in every
/// run is not parsed again each time; the rows it changed.
fn execute_cached(
    connection: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    connection.prepare_cached(sql)?.execute(params)
}

fn run_cached(connection: &Connection, path: &Path, sql: &str) -> Result<(), StoreError> {
    execute_cached(connection, sql, [])
        .map(drop)
        .map_err(|e| classify(path, e))
}

/// Fails unless the thread exists and has not finished.
fn check_running(connection: &Connection, path: &Path, thread_id: &str) -> Result<(), StoreError> {
    running(thread_id, thread_status(connection, path, thread_id)?)
}

/// Fails unless a thread of this status exists (`None`: there is no such thread) and has not
/// finished.
fn running(thread_id: &str, status: Option<Stored>) -> Result<(), StoreError> {
    match status {
        None => Err(StoreError::UnknownThread(thread_id.to_owned())),
        Some(Stored::Unfinished) => Ok(()),
        Some(_) => Err(StoreError::Finished(thread_id.to_owned())),
    }
}

/// The sequence number the thread's next entry must have; fails unless the thread exists and
/// has not finished. One statement, as it is asked before every append.
fn next_seq(connection: &Connection, path: &Path, thread_id: &str) -> Result<u64, StoreError> {
    // The primary key answers MAX in one lookup.
    let found: Option<(String, Option<i64>)> = connection
        .prepare_cached(
            "SELECT status, (SELECT MAX(seq) FROM entries WHERE thread_id = ?1)
             FROM runs WHERE thread_id = ?1",
        )
        .and_then(|mut statement| {
            statement
                .query_row([thread_id], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(|e| classify(path, e))?;
    let (text, last) = found.unzip();
    running(
        thread_id,
        text.map(|text| status(path, thread_id, &text))
            .transpose()?,
    )?;
    Ok(last.flatten().map_or(0, |last| last as u64 + 1))
}

pub(super) fn begin(
    connection: &Connection,
    path: &Path,
    header: &ThreadHeader,
) -> Result<(), StoreError> {
    let inserted = execute_cached(
        connection,
        "INSERT OR IGNORE INTO runs (thread_id, header, status, created_unix_ms)
             VALUES (?1, ?2, ?3, ?4)",
        params![
            header.thread_id,
            to_json(header),
            Stored::Unfinished.as_str(),
            header.created_unix_ms as i64
        ],
    )
    .map_err(|e| classify(path, e))?;
    if inserted == 0 {
        return Err(StoreError::ThreadExists(header.thread_id.clone()));
    }
    Ok(())
}

pub(super) fn set_name(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
    name: &str,
) -> Result<(), StoreError> {
    let updated = execute_cached(
        connection,
        "UPDATE runs SET name = ?2 WHERE thread_id = ?1",
        params![thread_id, name],
    )
    .map_err(|e| classify(path, e))?;
    if updated == 0 {
        return Err(StoreError::UnknownThread(thread_id.to_owned()));
    }
    Ok(())
}

/// Appends one batch in one transaction.
pub(super) fn append(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
    entries: &[Entry],
) -> Result<(), StoreError> {
    let transaction = Immediate::begin(connection, path)?;
    let next = next_seq(&transaction, path, thread_id)?;
    {
        let mut insert = transaction
            .prepare_cached(
                "INSERT INTO entries (thread_id, seq, batch, handle, kind, fingerprint,
                    request, outcome, input_tokens, output_tokens, duration_ms,
                    estimated_tokens)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )
            .map_err(|e| classify(path, e))?;
        StoreError::check_sequence(thread_id, next, entries.iter().map(|entry| entry.seq))?;
        for entry in entries {
            insert
                .execute(params![
                    thread_id,
                    entry.seq as i64,
                    entry.batch as i64,
                    entry.handle as i64,
                    entry.kind().as_str(),
                    entry.fingerprint,
                    to_json(&entry.request),
                    to_json(&entry.outcome),
                    entry.input_tokens as i64,
                    entry.output_tokens as i64,
                    entry.duration_ms as i64,
                    entry.estimated_tokens as i64,
                ])
                .map_err(|e| classify(path, e))?;
        }
    }
    transaction.commit()
}

/// Appends the thread's last events and records its end in one transaction.
pub(super) fn finish_with_events(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
    events: &[StoredEvent],
    end: &ThreadEnd,
) -> Result<(), StoreError> {
    let transaction = Immediate::begin(connection, path)?;
    check_running(&transaction, path, thread_id)?;
    if !events.is_empty() {
        insert_events(&transaction, path, thread_id, events)?;
    }
    execute_cached(
        &transaction,
        "UPDATE runs SET status = ?2, outcome = ?3, finished_unix_ms = ?4
             WHERE thread_id = ?1",
        params![
            thread_id,
            Stored::of_end(end).as_str(),
            to_json(&end.outcome),
            end.finished_unix_ms as i64
        ],
    )
    .map_err(|e| classify(path, e))?;
    transaction.commit()
}

pub(super) fn record_workflow(
    connection: &Connection,
    path: &Path,
    record: &WorkflowRecord,
) -> Result<(), StoreError> {
    execute_cached(
        connection,
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
}

/// Appends a batch of events in one transaction.
pub(super) fn append_events(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
    events: &[StoredEvent],
) -> Result<(), StoreError> {
    let transaction = Immediate::begin(connection, path)?;
    if thread_status(&transaction, path, thread_id)?.is_none() {
        return Err(StoreError::UnknownThread(thread_id.to_owned()));
    }
    insert_events(&transaction, path, thread_id, events)?;
    transaction.commit()
}

/// Inserts `events` after the thread's last one, within a transaction; fails unless the first
/// is numbered one past it and the rest follow without a gap.
fn insert_events(
    transaction: &Connection,
    path: &Path,
    thread_id: &str,
    events: &[StoredEvent],
) -> Result<(), StoreError> {
    let next = last_event_seq(transaction, path, thread_id)? + 1;
    let mut insert = transaction
        .prepare_cached("INSERT INTO events (thread_id, seq, kind, event) VALUES (?1, ?2, ?3, ?4)")
        .map_err(|e| classify(path, e))?;
    StoreError::check_sequence(thread_id, next, events.iter().map(|event| event.seq))?;
    for event in events {
        insert
            .execute(params![
                thread_id,
                event.seq as i64,
                event.kind,
                event.event
            ])
            .map_err(|e| classify(path, e))?;
    }
    Ok(())
}
