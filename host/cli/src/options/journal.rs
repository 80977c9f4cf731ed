//! The journal flag: where the checkpoint journal lives.

use std::path::{Path, PathBuf};

use clap::Args;
use flowbox::store::{CheckpointStore, SqliteStore, StoreError, StoredThread};

use crate::Failure;

/// Where the journal lives.
#[derive(Debug, Args)]
pub(crate) struct JournalOptions {
    /// The journal database [default: $FLOWBOX_DB, else the per-user data directory, such as
    /// ~/.local/share/flowbox/journal.db].
    #[arg(long, value_name = "PATH", env = "FLOWBOX_DB")]
    pub db: Option<PathBuf>,
}

impl JournalOptions {
    /// The journal's path.
    pub(crate) fn path(&self) -> anyhow::Result<PathBuf> {
        match &self.db {
            Some(path) => Ok(path.clone()),
            None => default_db_path().ok_or_else(|| {
                anyhow::anyhow!(
                    "no per-user data directory is known; pass --db PATH or set FLOWBOX_DB"
                )
            }),
        }
    }

    /// Opens the journal for a run, creating it (and saying where on stderr) if it is new.
    /// Only runs create journals.
    pub(crate) fn create(&self) -> Result<SqliteStore, Failure> {
        let path = self.path().map_err(Failure::input)?;
        let new = !path.exists();
        let store = SqliteStore::open(&path).map_err(Failure::journal)?;
        if new {
            err!("created the journal {}", path.display());
        }
        Ok(store)
    }

    /// Opens an existing journal to write to `thread` in it (a resume); never creates one.
    pub(crate) fn existing(&self, thread: &str) -> Result<SqliteStore, Failure> {
        let path = self.path().map_err(Failure::input)?;
        SqliteStore::open_existing(&path).map_err(|error| no_thread(thread, error))
    }

    /// Opens an existing journal only to read it; never creates or changes anything. `None`
    /// when there is no journal yet (said on stderr), which lists as no threads.
    pub(crate) fn read_only(&self) -> Result<Option<SqliteStore>, Failure> {
        let path = self.path().map_err(Failure::input)?;
        match SqliteStore::open_read_only(&path) {
            Ok(store) => Ok(Some(store)),
            Err(StoreError::Missing { .. }) => {
                err!(
                    "no journal at {} yet: nothing has run with it",
                    path.display()
                );
                Ok(None)
            }
            Err(error) => Err(Failure::journal(error)),
        }
    }
}

/// The failure of opening a journal to find `thread` in it: a missing journal has no thread.
pub(crate) fn no_thread(thread: &str, error: StoreError) -> Failure {
    match error {
        StoreError::Missing { .. } => {
            Failure::unknown_thread(anyhow::anyhow!("no thread {thread}: {error}"))
        }
        error => Failure::journal(error),
    }
}

/// A journaled thread, or an `unknown_thread` failure saying there is none.
pub(crate) async fn load_thread(
    store: &dyn CheckpointStore,
    thread: &str,
) -> Result<StoredThread, Failure> {
    store
        .load(thread)
        .await
        .map_err(|e| Failure::input(anyhow::Error::new(e)))?
        .ok_or_else(|| {
            Failure::unknown_thread(anyhow::anyhow!("no thread {thread} in the journal"))
        })
}

/// `$XDG_DATA_HOME/flowbox/journal.db`, else `~/.local/share/flowbox/journal.db`
/// (`%LOCALAPPDATA%\flowbox\journal.db` on Windows).
fn default_db_path() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let dir = var("XDG_DATA_HOME")
        .or_else(|| var("LOCALAPPDATA"))
        .or_else(|| var("HOME").map(|home| Path::new(&home).join(".local").join("share")))?;
    Some(dir.join("flowbox").join("journal.db"))
}
