//! SQLite's errors as the store's — a file it cannot open or write named with the operating
//! system's reason, found by trying — and the error for a record that does not decode.

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
        Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen) => unwritable(path, error),
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

/// `path` with `suffix` appended to its file name, as SQLite names its side files.
pub(super) fn beside(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

/// Fails with the operating system's reason unless this process can write `file` (opened
/// for writing, not changed).
pub(super) fn writable(file: &Path) -> Result<(), StoreError> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .map(drop)
        .map_err(|error| StoreError::Unusable {
            path: file.to_owned(),
            reason: format!("it cannot be written: {error}"),
        })
}

/// The error for a database SQLite could not open or write (its own message is only
/// "unable to open database file" or "attempt to write a readonly database"): the file or
/// directory at fault, with the operating system's reason, found by trying to write them.
pub(super) fn unwritable(path: &Path, error: rusqlite::Error) -> StoreError {
    let existing = [path.to_owned(), beside(path, "-wal"), beside(path, "-shm")];
    for file in existing.iter().filter(|file| file.exists()) {
        if let Err(unusable) = writable(file) {
            return unusable;
        }
    }
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => Path::new(".").to_owned(),
    };
    let probe = dir.join(format!(".flowbox-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            StoreError::Unusable {
                path: path.to_owned(),
                reason: error.to_string(),
            }
        }
        Err(reason) => StoreError::Unusable {
            path: dir,
            reason: format!(
                "the directory cannot be written (SQLite keeps files beside the journal): \
                 {reason}"
            ),
        },
    }
}
