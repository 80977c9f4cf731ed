//! The on-disk cache of the precompiled guest.
//!
//! The key is the guest's SHA-256 plus wasmtime's compatibility hash of the engine
//! configuration (fuel instrumentation changes the code) and the version of what flowbox does
//! to the guest before compiling it (`trim`), so a stale artifact is never loaded. Files are
//! written to a temporary name and renamed, so a crash mid-write leaves no half file behind;
//! an unreadable cache falls back to compiling. Beside each compiled guest, under the same
//! key, the pages a fresh run of it touched (see `instance::fresh`).
//!
//! Every flowbox build compiles a guest of its own (~40 MB), so the directory would grow with
//! each upgrade: a load marks the guest it used (its file's time, at most once a day), and
//! compiling a new one prunes the others, keeping only those used lately (see [`prune`]).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::trim;

/// The default cache directory: `$FLOWBOX_CACHE_DIR`, else `$XDG_CACHE_HOME/flowbox`, else
/// `~/.cache/flowbox` (`%LOCALAPPDATA%\flowbox` on Windows).
pub(crate) fn default_dir() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("FLOWBOX_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("flowbox")))
        .or_else(|| var("LOCALAPPDATA").map(|d| d.join("flowbox")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("flowbox")))
}

/// Loads the compiled guest from `dir`, compiling and storing it on a miss.
pub(crate) fn load_component(
    engine: &Engine,
    wasm: &[u8],
    wasm_sha256: &str,
    dir: Option<&Path>,
) -> wasmtime::Result<Component> {
    let Some(dir) = dir else {
        return Component::new(engine, trim::trimmed(wasm));
    };
    let name = artifact_name(engine, wasm_sha256);
    let path = dir.join(&name);
    if let Ok(metadata) = std::fs::metadata(&path)
        && metadata.is_file()
    {
        // A file from an older or damaged write fails to load; recompiling replaces it.
        if let Ok(component) = deserialize(engine, &path) {
            mark_used(&path, &metadata, SystemTime::now());
            return Ok(component);
        }
    }
    let artifact = engine.precompile_component(&trim::trimmed(wasm))?;
    keep(dir, &name, &artifact);
    deserialize_bytes(engine, &artifact)
}

/// Keeps a newly compiled guest's `artifact` in `dir` as `name`, and prunes the others. The
/// cache is an optimisation: when it cannot be written, the guest runs from memory.
fn keep(dir: &Path, name: &str, artifact: &[u8]) {
    if crate::files::write_whole(dir, &dir.join(name), artifact, true).is_ok() {
        let _ = prune(dir, name, SystemTime::now());
    }
}

/// How long a compiled guest no load has used stays in the cache directory.
const UNUSED_FOR: Duration = Duration::from_secs(14 * 24 * 60 * 60);
/// How many compiled guests besides the new one the cache directory keeps, the most recently
/// used first: enough for a few flowbox builds installed side by side, none of which then
/// compiles its guest again.
const OTHERS_KEPT: usize = 3;
/// How old a guest's time may be before a load marks it used again: one write a day at most.
const MARKED_EVERY: Duration = Duration::from_secs(24 * 60 * 60);
/// A guest marked within this was loaded lately: a load leaves a mark at most
/// [`MARKED_EVERY`] old, so one loaded within the last day is younger than this. Only age
/// removes such a guest, never [`OTHERS_KEPT`], however many builds compiled theirs since.
const LATELY: Duration = Duration::from_secs(2 * 24 * 60 * 60);

/// Marks the compiled guest at `path` (with `metadata`) used at `now`: its modification time,
/// unless it was marked within [`MARKED_EVERY`]. A cache that cannot be written stays as it is.
fn mark_used(path: &Path, metadata: &std::fs::Metadata, now: SystemTime) {
    let marked = metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    if now.duration_since(marked).unwrap_or_default() < MARKED_EVERY {
        return;
    }
    if let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) {
        let _ = file.set_modified(now);
    }
}

/// Removes the compiled guests in `dir` other than `current` (a file name) that no load used
/// for [`UNUSED_FOR`], and those beyond the [`OTHERS_KEPT`] most recently used that were not
/// used [lately](LATELY), each with its pages; and pages whose guest is gone. Only files named
/// as this module names them are touched: the directory may be shared. Returns how many files
/// went.
fn prune(dir: &Path, current: &str, now: SystemTime) -> std::io::Result<usize> {
    let mut guests = Vec::new();
    let mut pages = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let Some((key, extension)) = name.rsplit_once('.') else {
            continue;
        };
        if !is_key(key) || !entry.file_type().is_ok_and(|kind| kind.is_file()) {
            continue;
        }
        let used = entry
            .metadata()
            .and_then(|metadata| metadata.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        match extension {
            "cwasm" if name != current => guests.push((used, key.to_owned())),
            "pages" => pages.push(key.to_owned()),
            _ => {}
        }
    }
    guests.sort_by(|a, b| b.cmp(a));
    let unused_for = |used: SystemTime| now.duration_since(used).unwrap_or_default();
    let mut removed = 0;
    let mut kept = vec![current.trim_end_matches(".cwasm").to_owned()];
    for (n, (used, key)) in guests.into_iter().enumerate() {
        let unused = unused_for(used);
        if unused >= UNUSED_FOR || (n >= OTHERS_KEPT && unused >= LATELY) {
            removed += usize::from(std::fs::remove_file(dir.join(format!("{key}.cwasm"))).is_ok());
        } else {
            kept.push(key);
        }
    }
    for key in pages {
        if !kept.contains(&key) {
            removed += usize::from(std::fs::remove_file(dir.join(format!("{key}.pages"))).is_ok());
        }
    }
    Ok(removed)
}

/// Whether `key` is one [`key`] makes: `guest-`, 16 hex digits (or fewer, of a short hash),
/// `-`, 16 hex digits.
fn is_key(key: &str) -> bool {
    let hex = |part: &str| {
        !part.is_empty() && part.len() <= 16 && part.bytes().all(|b| b.is_ascii_hexdigit())
    };
    key.strip_prefix("guest-")
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(sha, config)| hex(sha) && config.len() == 16 && hex(config))
}

pub(crate) fn artifact_name(engine: &Engine, wasm_sha256: &str) -> String {
    format!("{}.cwasm", key(engine, wasm_sha256))
}

/// Where the pages a fresh run of the guest touched are kept, in `dir`.
pub(crate) fn pages_path(engine: &Engine, wasm_sha256: &str, dir: &Path) -> PathBuf {
    dir.join(format!("{}.pages", key(engine, wasm_sha256)))
}

fn key(engine: &Engine, wasm_sha256: &str) -> String {
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    trim::VERSION.hash(&mut hasher);
    let short = &wasm_sha256[..wasm_sha256.len().min(16)];
    format!("guest-{short}-{:016x}", hasher.finish())
}

#[expect(
    unsafe_code,
    reason = "wasmtime requires unsafe to load precompiled code; the file is ours, written \
              atomically by `store` under a key that includes the engine's compatibility hash"
)]
fn deserialize(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: see the `expect` reason: only artifacts this module wrote are at such paths.
    unsafe { Component::deserialize_file(engine, path) }
}

#[expect(
    unsafe_code,
    reason = "the bytes were produced by `precompile_component` on this engine a moment ago"
)]
fn deserialize_bytes(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: see the `expect` reason.
    unsafe { Component::deserialize(engine, artifact) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(60 * 60);

    fn key(n: u8) -> String {
        format!("guest-{n:016x}-0123456789abcdef")
    }

    /// Writes `name` in `dir`, last modified `ago` before `now`.
    fn file(dir: &Path, name: &str, now: SystemTime, ago: Duration) {
        let path = dir.join(name);
        std::fs::write(&path, name).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_modified(now - ago).unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_new_guest_kept_prunes_those_unused_for_long_and_beyond_the_most_recent_unless_used_lately()
    {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let current = format!("{}.cwasm", key(0));
        file(
            dir.path(),
            &format!("{}.pages", key(0)),
            now,
            Duration::ZERO,
        );
        // Four others used lately: all stay, with their pages, though more than OTHERS_KEPT.
        for n in 1..=4 {
            file(
                dir.path(),
                &format!("{}.cwasm", key(n)),
                now,
                HOUR * u32::from(n),
            );
            file(dir.path(), &format!("{}.pages", key(n)), now, HOUR);
        }
        // One beyond them not used lately, with its pages; one unused for long; pages without
        // their guest; and what is not the cache's own.
        file(dir.path(), &format!("{}.cwasm", key(8)), now, LATELY + HOUR);
        file(dir.path(), &format!("{}.pages", key(8)), now, LATELY + HOUR);
        file(
            dir.path(),
            &format!("{}.cwasm", key(5)),
            now,
            UNUSED_FOR + HOUR,
        );
        file(
            dir.path(),
            &format!("{}.pages", key(6)),
            now,
            Duration::ZERO,
        );
        file(dir.path(), "notes.txt", now, UNUSED_FOR * 2);
        file(dir.path(), "guest-old.cwasm", now, UNUSED_FOR * 2);
        file(dir.path(), ".tmpA1b2C3", now, UNUSED_FOR * 2);
        std::fs::create_dir(dir.path().join(format!("{}.cwasm", key(7)))).unwrap();

        keep(dir.path(), &current, b"the new guest");
        assert_eq!(
            std::fs::read(dir.path().join(&current)).unwrap(),
            b"the new guest"
        );
        let mut expected: Vec<String> = (0..=4)
            .flat_map(|n| [format!("{}.cwasm", key(n)), format!("{}.pages", key(n))])
            .chain([
                format!("{}.cwasm", key(7)),
                ".tmpA1b2C3".into(),
                "guest-old.cwasm".into(),
                "notes.txt".into(),
            ])
            .collect();
        expected.sort();
        assert_eq!(names(dir.path()), expected);
        // Nothing more goes the next time.
        assert_eq!(prune(dir.path(), &current, now).unwrap(), 0);
    }

    #[test]
    fn of_the_guests_not_used_lately_the_most_recently_used_stay() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let day = MARKED_EVERY;
        for (n, ago) in [(1, HOUR), (2, LATELY + day), (3, LATELY + day * 2)] {
            file(dir.path(), &format!("{}.cwasm", key(n)), now, ago);
        }
        file(
            dir.path(),
            &format!("{}.cwasm", key(4)),
            now,
            LATELY + day * 3,
        );
        let current = format!("{}.cwasm", key(0));
        keep(dir.path(), &current, b"the new guest");
        let expected: Vec<String> = (0..=3).map(|n| format!("{}.cwasm", key(n))).collect();
        assert_eq!(names(dir.path()), expected);
    }

    /// See also `runtime::tests::loading_a_guest_marks_it_used`.
    #[test]
    fn a_guest_is_marked_used_at_most_once_a_day() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let modified = |name: &str| {
            std::fs::metadata(dir.path().join(name))
                .unwrap()
                .modified()
                .unwrap()
        };
        for (name, ago) in [("stale", MARKED_EVERY + HOUR), ("lately", HOUR)] {
            file(dir.path(), name, now, ago);
            let path = dir.path().join(name);
            mark_used(&path, &std::fs::metadata(&path).unwrap(), now);
        }
        assert_eq!(modified("stale"), now, "marked used now");
        assert_eq!(modified("lately"), now - HOUR, "left as it was");
    }
}
