//! The `flowbox` binary end to end, in one test binary: a module per subcommand or concern, and
//! `support` for what several of them use.
//!
//! Tests run in parallel threads of this one process, so none changes the process's environment
//! or current directory (each child process gets its own); each writes in a temporary directory
//! of its own, or in the process's journal under a thread id of its own; and tests that must not
//! overlap hold a lock of their module's (`restate`: one cluster at a time).

mod support;

mod ask;
mod backends;
mod check;
mod doors;
mod events;
mod exit_codes;
mod follow;
mod guidance;
mod journal;
mod json;
mod limits;
mod mcp;
mod otlp;
mod output;
mod plan;
mod restate;
mod resume;
mod run;
mod secrets;
mod serve;
mod show;
mod threads;
