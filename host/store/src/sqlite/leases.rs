//! Claims on threads: an OS lock on a lease file in a directory beside the database
//! (`journal.db.leases/`), so a claim holds between processes and ends with the process that
//! holds it, however that process ends.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{Claim, StoreError};

/// The width of the process id a claim writes, padded with spaces: any `u32` fits.
const PID_WIDTH: usize = 10;

/// The lease files of one journal.
#[derive(Debug, Clone)]
pub(super) struct Leases {
    /// Beside the database as it resolves, so every path to one file (a symlink, `./`) shares
    /// them.
    dir: PathBuf,
}

impl Leases {
    /// The leases of the journal at `database` (which must exist).
    pub(super) fn beside(database: &Path) -> Result<Self, StoreError> {
        let mut dir = database
            .canonicalize()
            .map_err(|e| StoreError::Io(format!("{}: {e}", database.display())))?
            .into_os_string();
        dir.push(".leases");
        Ok(Self { dir: dir.into() })
    }

    /// The file whose lock is the claim on `thread_id`, named by a hash of the id so that any
    /// id makes a safe name.
    pub(super) fn path(&self, thread_id: &str) -> PathBuf {
        let digest = Sha256::digest(thread_id.as_bytes());
        self.dir.join(crate::hex(&digest[..16]))
    }

    /// Locks the lease of `thread_id`, writing this process's id into it for the error a
    /// second claimant sees.
    pub(super) fn claim(&self, thread_id: &str) -> Result<Claim, StoreError> {
        let path = self.path(thread_id);
        let io = |e: std::io::Error| StoreError::Io(format!("lease {}: {e}", path.display()));
        let open = || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
        };
        // The directory is made by the first claim, not looked for by every one.
        let mut file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&self.dir).map_err(io)?;
                open()
            }
            opened => opened,
        }
        .map_err(io)?;
        // A reader asking whether the thread is claimed ([`Self::held`]) holds a shared lock
        // for an instant: wait that out rather than call the thread in use.
        let mut attempt = file.try_lock();
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(50);
        while matches!(attempt, Err(TryLockError::WouldBlock))
            && std::time::Instant::now() < deadline
            && !self.held_exclusively(&path)
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
            attempt = file.try_lock();
        }
        match attempt {
            Ok(()) => {
                // Over what an earlier claim wrote, at a width any process id fits, rather
                // than into a file truncated first: ext4 starts writing a file truncated to
                // nothing back to disk as it is closed, which the run would wait for.
                let pid = format!("{:<PID_WIDTH$}", std::process::id());
                file.write_all(pid.as_bytes()).map_err(io)?;
                Ok(Claim::new(file))
            }
            Err(TryLockError::WouldBlock) => Err(StoreError::InUse {
                thread_id: thread_id.to_owned(),
                holder: holder(&mut file),
            }),
            Err(TryLockError::Error(e)) => Err(io(e)),
        }
    }

    /// Whether a run holds the claim on `thread_id` right now, found without writing anything:
    /// a shared lock on its lease, taken and let go at once, fails while a run holds it.
    pub(super) fn held(&self, thread_id: &str) -> bool {
        let path = self.path(thread_id);
        let Ok(file) = File::open(&path) else {
            return false;
        };
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                false
            }
            Err(TryLockError::WouldBlock) => true,
            Err(TryLockError::Error(_)) => false,
        }
    }

    /// Whether the lease at `path` is held by a claim (exclusively), not just glanced at by a
    /// reader: a second exclusive claimant need not wait then.
    fn held_exclusively(&self, path: &Path) -> bool {
        File::open(path).is_ok_and(|file| match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                false
            }
            Err(_) => true,
        })
    }

    /// Removes the lease of a thread that finished: it is never claimed to run again, and
    /// whoever opened the lease before this finds the thread finished.
    pub(super) fn remove(&self, thread_id: &str) {
        let _ = std::fs::remove_file(self.path(thread_id));
    }
}

/// Who holds a lease, from the process id its holder wrote.
fn holder(file: &mut File) -> String {
    let mut text = String::new();
    // The first word: a claim writes over an earlier one's without truncating the file.
    match file
        .read_to_string(&mut text)
        .map(|_| text.split_whitespace().next())
    {
        Ok(Some(pid)) => format!("process {pid}"),
        _ => "another process".into(),
    }
}
