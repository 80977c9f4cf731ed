//! Integration tests through the real guest component: one test binary, so the compiled
//! component is loaded once per process.

mod builtins;
mod clocks;
mod durable;
mod events;
mod faults;
mod guest;
mod history;
mod json_fidelity;
mod limits;
mod orchestrator;
mod patterns;
mod plan;
mod pool;
mod primitives;
mod tools;
mod walks;
