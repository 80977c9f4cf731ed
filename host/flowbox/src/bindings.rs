//! The generated bindings for this crate's `wit/flowbox.wit`, and nothing else. The WIT lives
//! inside the crate so its package carries it.
//!
//! Only `await-next` (it waits for leaves and the journal) and `started` (it records the
//! thread's name) are async on the host; every other import returns at once.
//! All imports are trappable so a breached limit can end the run with a typed error.

wasmtime::component::bindgen!({
    world: "workflow",
    path: "wit",
    imports: {
        "flowbox:workflow/host.await-next": async | trappable,
        "flowbox:workflow/host.started": async | trappable,
        default: trappable,
    },
    exports: { default: async },
});

pub(crate) use self::flowbox::workflow::host;
