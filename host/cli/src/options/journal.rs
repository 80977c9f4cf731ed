//! The journal flag: where the checkpoint journal lives.

use std::path::{Path, PathBuf};

use clap::Args;
use flowbox::store::{CheckpointStore, SqliteStore, StoredRun};

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

    /// Opens (or creates) the journal.
    pub(crate) fn open(&self) -> anyhow::Result<SqliteStore> {
        let path = self.path()?;
        Ok(SqliteStore::open(&path)?)
    }
}

/// A journaled thread, or an input error saying there is none.
pub(crate) async fn load_thread(
    store: &dyn CheckpointStore,
    thread: &str,
) -> Result<StoredRun, Failure> {
    store
        .load(thread)
        .await
        .map_err(|e| Failure::input(anyhow::Error::new(e)))?
        .ok_or_else(|| Failure::input(anyhow::anyhow!("no thread {thread} in the journal")))
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
