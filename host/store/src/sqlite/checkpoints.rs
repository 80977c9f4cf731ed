//! Checkpoints of the write-ahead log, off the writers' path.
//!
//! Left to itself, SQLite checkpoints inside the commit that takes the log past 1000 pages: that
//! one commit copies the log into the database and fsyncs both, milliseconds on a virtual disk,
//! and the run waiting on it (a sequential leaf's append) waits that long. Here the writing
//! connection never checkpoints. Once a commit leaves the log [`CHECKPOINT_FRAMES`] long, a
//! thread of the store's own, with a connection of its own, waits [`SETTLE`] for the writes
//! that follow and then checkpoints (`PASSIVE`: it never holds up a reader or a writer), so no
//! append waits on a checkpoint's fsyncs. A commit is as durable as before: in the log, which
//! survives a killed process, whenever it is checkpointed.
//!
//! A shorter log is left as it is. Once a checkpoint has copied the whole log, the next commit
//! starts the log over, and SQLite fsyncs the log's new header inside that commit (so that a
//! power loss cannot mix the new header with the old frames): checkpointed after every burst of
//! writes, a server answering a call every few seconds paid that fsync at the start of every
//! run. Left to grow to [`CHECKPOINT_FRAMES`], the log starts over once per that many frames
//! (a trivial run writes ~8).
//!
//! Closing the store does not checkpoint either, unless the log has grown past [`LOG_LIMIT`]:
//! SQLite's own checkpoint as its last connection closes would fsync the log and the database
//! and delete the log, milliseconds at the end of every `flowbox run`, and the next process
//! would make the log again. The log stays beside the database instead, and the next
//! connection to open it reads it back (SQLite's recovery, which reads the log's frames: kept
//! short by the limit, at which closing checkpoints it, and by `journal_size_limit`, which
//! trims the file once a checkpoint let the log start over).

use std::cell::Cell;
use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::hooks::Wal;
use rusqlite::{Connection, OpenFlags};

use super::error::classify;
use crate::StoreError;

/// How long the checkpointing thread waits after a write before it checkpoints: the writes of
/// that while share one checkpoint, and so its fsyncs.
pub(super) const SETTLE: Duration = Duration::from_millis(100);

/// The length of the log, in frames (pages), from which a commit has the log checkpointed:
/// ~0.5 MiB, half of [`LOG_LIMIT`], so that closing the store seldom finds a log to checkpoint.
pub(super) const CHECKPOINT_FRAMES: u32 = 128;

thread_local! {
    /// The length of the log, in frames, after the last commit the writing connection made on
    /// this thread (see [`log_frames`]).
    static LOG_FRAMES: Cell<Option<u32>> = const { Cell::new(None) };
}

/// The writing connection's hook on each commit: notes the log's length.
fn note_log_frames(_: &Wal, frames: c_int) -> rusqlite::Result<()> {
    LOG_FRAMES.set(u32::try_from(frames).ok());
    Ok(())
}

/// The length of the log, in frames, after the last commit the writing connection made on this
/// thread since this was last asked; None without one.
pub(super) fn log_frames() -> Option<u32> {
    LOG_FRAMES.take()
}

/// The length of the log, in bytes, past which closing the store checkpoints it (256 pages):
/// the most a process opening the journal reads back from it, give or take the writes of the
/// process that closed it last.
pub(super) const LOG_LIMIT: u64 = 1 << 20;

/// The checkpointing thread of one journal; stopped (and its connection closed) when dropped.
#[derive(Debug)]
pub(super) struct Checkpointer {
    state: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct State {
    /// Written to since the last checkpoint began.
    dirty: bool,
    stopping: bool,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Checkpointer {
    /// Opens a second connection to the journal at `path` and starts the thread that
    /// checkpoints through it; turns off `writer`'s own checkpoints, on commit and on close,
    /// and has its commits note the log's length (see [`log_frames`]).
    pub(super) fn start(path: &Path, writer: &Connection) -> Result<Self, StoreError> {
        let connection = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| classify(path, e))?;
        never_checkpoints(&connection).map_err(|e| classify(path, e))?;
        // A checkpoint other than PASSIVE waits for other connections for as long as the busy
        // timeout says (rusqlite's default is 5 s): this one never waits.
        connection
            .busy_timeout(std::time::Duration::ZERO)
            .map_err(|e| classify(path, e))?;
        never_checkpoints(writer).map_err(|e| classify(path, e))?;
        // After `never_checkpoints`: turning SQLite's own checkpoints off replaces the hook.
        writer.wal_hook(Some(note_log_frames));
        writer
            .pragma_update(None, "journal_size_limit", LOG_LIMIT)
            .map_err(|e| classify(path, e))?;
        // Beside the file SQLite opened, which is where it keeps the log (through a symlink,
        // beside the symlink's target).
        let database = connection
            .path()
            .map_or_else(|| path.to_owned(), PathBuf::from);
        let log = super::error::beside(&database, "-wal");
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let thread = std::thread::Builder::new()
            .name("flowbox-checkpoint".into())
            .spawn({
                let state = Arc::clone(&state);
                move || checkpoint_while_open(&connection, &state, &log)
            })
            .map_err(|e| StoreError::Io(format!("cannot start the checkpoint thread: {e}")))?;
        Ok(Self {
            state,
            thread: Some(thread),
        })
    }

    /// A write left the log `frames` long (None: it committed nothing, so the log is as it
    /// was): a checkpoint follows within [`SETTLE`] if that is [`CHECKPOINT_FRAMES`] or more.
    pub(super) fn wrote(&self, frames: Option<u32>) {
        if frames.is_none_or(|frames| frames < CHECKPOINT_FRAMES) {
            return;
        }
        let (state, wake) = &*self.state;
        let mut state = lock(state);
        if !state.dirty {
            state.dirty = true;
            wake.notify_one();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (state, wake) = &*self.state;
        lock(state).stopping = true;
        wake.notify_one();
        if let Some(thread) = self.thread.take() {
            // It ends at once, or after the checkpoint it is in; then its connection is closed.
            let _ = thread.join();
        }
    }
}

/// Turns off `connection`'s checkpoints: in the commit that takes the log past 1000 pages, and
/// as the last connection to the file closes.
pub(super) fn never_checkpoints(connection: &Connection) -> rusqlite::Result<()> {
    connection.pragma_update(None, "wal_autocheckpoint", 0)?;
    connection.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    Ok(())
}

/// The thread: waits for a write that leaves a long log, lets [`SETTLE`] pass, checkpoints;
/// until stopped, when it checkpoints a `log` longer than [`LOG_LIMIT`].
fn checkpoint_while_open(connection: &Connection, state: &(Mutex<State>, Condvar), log: &Path) {
    let (state, wake) = state;
    let mut guard = lock(state);
    loop {
        while !guard.dirty && !guard.stopping {
            guard = wake.wait(guard).unwrap_or_else(|p| p.into_inner());
        }
        if !guard.stopping {
            guard = wake
                .wait_timeout_while(guard, SETTLE, |state| !state.stopping)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if guard.stopping {
            // Emptied, not only copied: the next process's recovery would take the frames of a
            // log it finds for frames still to copy, however many a checkpoint had copied.
            if std::fs::metadata(log).is_ok_and(|log| log.len() > LOG_LIMIT) {
                checkpoint(connection, "TRUNCATE");
            }
            return;
        }
        guard.dirty = false;
        drop(guard);
        checkpoint(connection, "PASSIVE");
        guard = lock(state);
    }
}

/// A checkpoint in `mode`. One that cannot finish (a reader still on old pages, a writer,
/// another process checkpointing; this connection never waits for them) leaves the rest for
/// the next; nothing is lost either way.
fn checkpoint(connection: &Connection, mode: &str) {
    let _ = connection.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |_| Ok(()));
}
