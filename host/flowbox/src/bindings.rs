//! The generated bindings for `wit/flowbox.wit`, and nothing else. The WIT is the repository's
//! top-level `wit/`, which the crate's `wit` links to so that its package carries it
//! (`components/README.md`).
//!
//! `await-next` (it waits for leaves and the journal), `started` (it records the thread's
//! name), and `log` and `phase` (they wait while a lossless event subscriber is full) are async
//! on the host; every other import returns at once.
//! All imports are trappable so a breached limit can end the run with a typed error.

wasmtime::component::bindgen!({
    world: "workflow",
    path: "wit",
    imports: {
        "flowbox:workflow/host.await-next": async | trappable,
        "flowbox:workflow/host.started": async | trappable,
        "flowbox:workflow/host.log": async | trappable,
        "flowbox:workflow/host.phase": async | trappable,
        default: trappable,
    },
    exports: { default: async },
});

pub(crate) use self::flowbox::workflow::host;
