//! The on-disk cache of the precompiled guest.
//!
//! The key is the guest's SHA-256 plus wasmtime's compatibility hash of the engine
//! configuration (fuel and epoch instrumentation change the code), so a stale artifact is never
//! loaded. Files are written to a temporary name and renamed, so a crash mid-write leaves no
//! half file behind; an unreadable cache falls back to compiling. Beside each compiled guest,
//! under the same key, the pages a fresh run of it touched (see `instance::fresh`).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

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
        return Component::new(engine, wasm);
    };
    let path = dir.join(artifact_name(engine, wasm_sha256));
    if path.is_file() {
        // A file from an older or damaged write fails to load; recompiling replaces it.
        if let Ok(component) = deserialize(engine, &path) {
            return Ok(component);
        }
    }
    let artifact = engine.precompile_component(wasm)?;
    // The cache is an optimisation: when it cannot be written, run from memory.
    let _ = crate::files::write_whole(dir, &path, &artifact, true);
    deserialize_bytes(engine, &artifact)
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
