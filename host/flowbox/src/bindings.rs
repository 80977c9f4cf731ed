//! The generated bindings for `wit/flowbox.wit`, and nothing else.
//!
//! Only `await-next` is async on the host (it waits for leaves); every other import returns at
//! once. All imports are trappable so a breached limit can end the run with a typed error.

wasmtime::component::bindgen!({
    world: "workflow",
    path: "../../wit",
    imports: {
        "flowbox:workflow/host.await-next": async | trappable,
        default: trappable,
    },
    exports: { default: async },
});

pub(crate) use self::flowbox::workflow::host;
