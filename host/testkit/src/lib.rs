//! Test helpers shared by flowbox's crates, so that each test file states only what it tests.
//!
//! - [`server`]: a loopback HTTP/1.1 server that records every request and answers from a
//!   scripted queue or a function, with the failures a provider or network produces, and the
//!   bodies of both provider protocols ([`Protocol`]: OpenAI Chat Completions, Anthropic
//!   Messages).
//! - [`backends`]: leaf backends that count their calls and what runs at once, or panic.
//! - [`tools`]: a host tool backed by a function.
//! - [`restate`]: a Restate server on loopback, killed with the test.
//! - [`events`]: the one check that a run's events are whole and in order.

#![warn(missing_docs)]

pub mod backends;
pub mod events;
pub mod restate;
pub mod server;
pub mod tools;

pub use backends::{CountingBackend, PanickingBackend};
pub use server::{Protocol, Recorded, Reply, TestServer};
pub use tools::FnTool;
