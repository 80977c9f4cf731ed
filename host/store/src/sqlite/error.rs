//! SQLite's errors as the store's, and the error for a record that does not decode.

use std::path::Path;

use rusqlite::ErrorCode;

use crate::{JournalRecord, StoreError};

/// Maps SQLite's errors to ours: busy is a lock, a malformed file is corruption.
pub(super) fn classify(path: &Path, error: rusqlite::Error) -> StoreError {
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Locked {
            path: path.to_owned(),
            waited_ms: 0,
        },
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Corrupt {
            path: path.to_owned(),
            detail: error.to_string(),
        },
        Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen) => super::schema::unwritable(path, error),
        // SQLite's message without the statement it was running.
        _ => match error {
            rusqlite::Error::SqlInputError { msg, .. } => {
                StoreError::Io(format!("{}: {msg}", path.display()))
            }
            error => StoreError::Io(format!("{}: {error}", path.display())),
        },
    }
}

/// A record of `thread_id` that does not decode.
pub(super) fn corrupt(
    path: &Path,
    thread_id: &str,
    record: JournalRecord,
    detail: impl std::fmt::Display,
) -> StoreError {
    StoreError::CorruptRecord {
        path: path.to_owned(),
        thread_id: thread_id.to_owned(),
        record,
        detail: detail.to_string(),
    }
}
