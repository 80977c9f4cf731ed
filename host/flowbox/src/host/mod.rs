//! The interfaces of the guest's world that the host implements itself, one file each:
//! `flowbox:workflow/host` ([`workflow`]), what a running script asks of the host, and
//! `wasi:clocks/monotonic-clock` ([`monotonic_clock`]), over the run's virtual time. Their
//! generated bindings are in `bindings`; the rest of WASI is wasmtime-wasi's, configured per run
//! in `instance::context`.

pub(crate) mod monotonic_clock;
pub(crate) mod workflow;
