//! Files the runtime keeps for later processes (the compiled guest, the pages its runs touch),
//! written whole or not at all.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` in `dir` under a temporary name and renames it, so that a reader
/// never sees half a file; synced to disk before the rename when `sync`.
pub(crate) fn write_whole(
    dir: &Path,
    path: &Path,
    bytes: &[u8],
    sync: bool,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // A unique temporary name per writer: several processes may fill the cache at once.
    let mut temp = tempfile::NamedTempFile::new_in(dir)?;
    temp.write_all(bytes)?;
    if sync {
        temp.as_file().sync_all()?;
    }
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
