//! Loading the [`Guest`]: the engine's configuration, the compiled guest from the disk cache
//! (or compiled and cached), and the linker that puts the host's interfaces under it.

use std::path::PathBuf;
use std::sync::Mutex;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine};

use super::{GUEST_COMPONENT, GUEST_SHA256, SetupError, cache};
use crate::Guest;
use crate::bindings::{Workflow, WorkflowPre};
use crate::instance::context::RunCtx;
use crate::instance::fresh::FreshPrefault;
use crate::instance::guest::WeakGuest;

/// The guest's wasm stack. Recursion through the interpreter's C code (a deeply nested
/// expression, `map` calling a Python function calling `map`, ...) needs far more than
/// wasmtime's 512 KiB default before Python's own recursion limit can speak.
const MAX_WASM_STACK: usize = 4 << 20;
/// The fiber stack a run executes on: the wasm stack plus room for host calls.
const ASYNC_STACK: usize = MAX_WASM_STACK + (2 << 20);

/// Where a guest is loaded from.
#[derive(Debug)]
pub(crate) enum CacheDir {
    /// [`cache::default_dir`].
    Default,
    At(PathBuf),
    /// Nowhere: compiled in memory.
    Disabled,
}

impl CacheDir {
    /// The directory itself, if there is one: the default one as the environment names it.
    fn resolved(self) -> Option<PathBuf> {
        match self {
            CacheDir::Default => cache::default_dir(),
            CacheDir::At(dir) => Some(dir),
            CacheDir::Disabled => None,
        }
    }
}

impl Guest {
    /// Loads the guest from the default cache directory (`$FLOWBOX_CACHE_DIR`, else the
    /// user's cache directory: `$XDG_CACHE_HOME/flowbox` or `~/.cache/flowbox`), compiling
    /// and caching it on a miss.
    pub fn load() -> Result<Guest, SetupError> {
        Self::load_from(CacheDir::Default)
    }

    /// Loads the guest from the cache in `dir`, compiling and caching it there on a miss.
    pub fn load_cached_in(dir: impl Into<PathBuf>) -> Result<Guest, SetupError> {
        Self::load_from(CacheDir::At(dir.into()))
    }

    /// The guest in the cache `cache_dir` names as a runtime built in this process without a
    /// guest of its own loaded it, while any runtime or run still holds it; else loaded anew
    /// (and kept for the next such runtime while it is held). A guest compiled in memory is
    /// never shared.
    pub(crate) fn shared_from(cache_dir: CacheDir) -> Result<Guest, SetupError> {
        /// The guests runtimes loaded, by cache directory, not kept loaded by this list.
        static LOADED: Mutex<Vec<(PathBuf, WeakGuest)>> = Mutex::new(Vec::new());
        let Some(dir) = cache_dir.resolved() else {
            return Self::load_from(CacheDir::Disabled);
        };
        let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
        loaded.retain(|(_, guest)| guest.upgrade().is_some());
        if let Some(guest) = loaded
            .iter()
            .find(|(at, _)| *at == dir)
            .and_then(|(_, guest)| guest.upgrade())
        {
            return Ok(guest);
        }
        // Loaded under the lock: a runtime built meanwhile waits for this load rather than
        // make one of its own.
        let guest = Self::load_from(CacheDir::At(dir.clone()))?;
        loaded.push((dir, guest.downgrade()));
        Ok(guest)
    }

    pub(crate) fn load_from(cache_dir: CacheDir) -> Result<Guest, SetupError> {
        if GUEST_COMPONENT.is_empty() {
            return Err(SetupError::GuestMissing);
        }
        let wasmtime_error = |e: wasmtime::Error| SetupError::Wasmtime(e.into_boxed_dyn_error());
        let mut config = Config::new();
        config
            .consume_fuel(true)
            .memory_init_cow(true)
            .wasm_component_model(true)
            .max_wasm_stack(MAX_WASM_STACK)
            .async_stack_size(ASYNC_STACK);
        let engine = Engine::new(&config).map_err(wasmtime_error)?;

        let cache_dir = cache_dir.resolved();
        let component =
            cache::load_component(&engine, GUEST_COMPONENT, GUEST_SHA256, cache_dir.as_deref())
                .map_err(wasmtime_error)?;
        let fresh = FreshPrefault::kept_in(
            cache_dir
                .as_deref()
                .map(|dir| cache::pages_path(&engine, GUEST_SHA256, dir)),
        );

        let mut linker = Linker::<RunCtx>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(wasmtime_error)?;
        // Clock subscriptions wait in virtual time, not on a real timer.
        crate::host::monotonic_clock::add_to_linker(&mut linker).map_err(wasmtime_error)?;
        Workflow::add_to_linker::<_, HasSelf<_>>(&mut linker, |ctx| ctx).map_err(wasmtime_error)?;
        let pre = linker
            .instantiate_pre(&component)
            .and_then(WorkflowPre::new)
            .map_err(wasmtime_error)?;
        Ok(Guest::new(engine, pre, fresh))
    }
}
