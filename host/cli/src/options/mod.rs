//! Flags shared by the subcommands: the backend and its tools ([`backend`]), the limits
//! ([`limits`]), and the journal ([`journal`]).

mod backend;
mod journal;
mod limits;

use clap::Args;
use flowbox::Limits;

pub(crate) use backend::{BackendOptions, Backends};
pub(crate) use journal::{JournalOptions, load_thread, no_thread};
pub(crate) use limits::LimitOptions;

/// The flags of a subcommand that runs scripts: the backend flags, then the limit flags.
#[derive(Debug, Args)]
pub(crate) struct RunOptions {
    #[command(flatten)]
    pub backend: BackendOptions,
    #[command(flatten)]
    pub limits: LimitOptions,
}

impl RunOptions {
    /// Whether any limit was given on the command line.
    pub(crate) fn sets_limits(&self) -> bool {
        self.limits.sets_limits()
    }

    /// The limits: defaults, then the `--limits` file, then the flags.
    pub(crate) fn limits(&self) -> anyhow::Result<Limits> {
        self.limits.limits()
    }

    /// The limits: `base` (or the `--limits` file), then the flags.
    pub(crate) fn limits_over(&self, base: Limits) -> anyhow::Result<Limits> {
        self.limits.limits_over(base)
    }

    /// The backend and tools the flags name.
    pub(crate) fn backends(&self) -> anyhow::Result<Backends> {
        self.backend.backends()
    }
}
