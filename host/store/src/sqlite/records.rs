//! The journal's rows as records and back: JSON columns decoded into their types (a column
//! that does not is a [`StoreError::CorruptRecord`] naming the thread), a thread's stored
//! status, counts, and what an older format lacks.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::{classify, corrupt};
use crate::{JournalRecord, StoreError, ThreadEnd, ThreadStatus};

pub(super) fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("journal records serialise")
}

/// A JSON column of `thread_id`'s `record`, decoded into its type.
pub(super) fn decode<T: DeserializeOwned>(
    path: &Path,
    thread_id: &str,
    record: JournalRecord,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(path, thread_id, record, e))
}

/// A thread's status as its row keeps it: finished or not; whether a run holds an unfinished
/// one is the leases' to say (see [`Stored::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stored {
    /// `running` in the row: not finished.
    Unfinished,
    /// `succeeded`.
    Succeeded,
    /// `failed`.
    Failed,
}

impl Stored {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Unfinished => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    pub(super) fn of_end(end: &ThreadEnd) -> Self {
        match end.outcome.result {
            Ok(_) => Self::Succeeded,
            Err(_) => Self::Failed,
        }
    }

    /// Where the thread stands, `claimed` saying whether a run holds it.
    pub(super) fn status(self, claimed: impl FnOnce() -> bool) -> ThreadStatus {
        match self {
            Self::Unfinished => ThreadStatus::unfinished(claimed()),
            Self::Succeeded => ThreadStatus::Succeeded,
            Self::Failed => ThreadStatus::Failed,
        }
    }
}

pub(super) fn status(path: &Path, thread_id: &str, text: &str) -> Result<Stored, StoreError> {
    match text {
        "running" => Ok(Stored::Unfinished),
        "succeeded" => Ok(Stored::Succeeded),
        "failed" => Ok(Stored::Failed),
        _ => Err(corrupt(
            path,
            thread_id,
            JournalRecord::End,
            format!("unknown run status {text:?}"),
        )),
    }
}

/// A count or position read from an integer column, which a damaged journal may hold negative.
pub(super) fn count(
    path: &Path,
    thread_id: &str,
    record: JournalRecord,
    what: &str,
    value: i64,
) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| corrupt(path, thread_id, record, format!("{what} is {value}")))
}

/// Where a thread stands: `None` when there is no such thread.
pub(super) fn thread_status(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
) -> Result<Option<Stored>, StoreError> {
    let text: Option<String> = connection
        .prepare_cached("SELECT status FROM runs WHERE thread_id = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([thread_id], |row| row.get(0))
                .optional()
        })
        .map_err(|e| classify(path, e))?;
    text.map(|text| status(path, thread_id, &text)).transpose()
}

/// Whether the journal has a history of events: one of an older format opened read-only
/// (and so not migrated) has none.
pub(super) fn has_events(connection: &Connection, path: &Path) -> Result<bool, StoreError> {
    connection
        .prepare_cached("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'")
        .and_then(|mut statement| statement.exists([]))
        .map_err(|e| classify(path, e))
}

/// Whether the journal's entries say how many of their tokens are estimates: one of a format
/// before 5 opened read-only (and so not migrated) does not.
pub(super) fn has_estimates(connection: &Connection, path: &Path) -> Result<bool, StoreError> {
    connection
        .prepare_cached(
            "SELECT 1 FROM pragma_table_info('entries') WHERE name = 'estimated_tokens'",
        )
        .and_then(|mut statement| statement.exists([]))
        .map_err(|e| classify(path, e))
}

/// The last event's sequence number of a thread, 0 for none.
pub(super) fn last_event_seq(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
) -> Result<u64, StoreError> {
    if !has_events(connection, path)? {
        return Ok(0);
    }
    let last: Option<i64> = connection
        .prepare_cached("SELECT MAX(seq) FROM events WHERE thread_id = ?1")
        .and_then(|mut statement| statement.query_row([thread_id], |row| row.get(0)))
        .map_err(|e| classify(path, e))?;
    last.map_or(Ok(0), |last| {
        count(
            path,
            thread_id,
            JournalRecord::Counters,
            "an event's sequence number",
            last,
        )
    })
}
