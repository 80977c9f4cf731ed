//! Flags shared by the subcommands: the backend and its tools ([`backend`]), the limits
//! ([`limits`]), prices and the fan-out profile ([`cost`]), the journal ([`journal`]), and a
//! network door's ([`door`]).

mod backend;
mod cost;
mod door;
mod journal;
mod limits;
mod runtime;
mod trace;

use anyhow::Context;
use clap::Args;
use flowbox::Limits;
use serde_json::Value;

pub(crate) use backend::{BackendOptions, Backends};
pub(crate) use door::{DoorOptions, door_failure};
pub(crate) use journal::{JournalOptions, load_thread, no_thread};
pub(crate) use limits::LimitOptions;
pub(crate) use runtime::{
    Journal, build_runtime, build_runtime_with, runtime_builder, runtime_for,
};
pub(crate) use trace::{TraceOptions, flush_traces};

/// The flags of a subcommand that runs scripts: the backend flags, the cost flags, then the
/// limit flags.
#[derive(Debug, Args)]
pub(crate) struct RunOptions {
    #[command(flatten)]
    pub backend: BackendOptions,
    #[command(flatten)]
    pub cost: cost::CostOptions,
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

    /// The backend and tools the flags name, with the price table (which must price every
    /// model the flags name) and the fan-out profile (which must be a `--profile`).
    pub(crate) fn backends(&self) -> anyhow::Result<Backends> {
        let mut backends = self.backend.backends()?;
        let prices = self.cost.prices()?;
        if let Some(prices) = &prices {
            for (model, used_by) in self.backend.models()? {
                prices
                    .price(&model)
                    .with_context(|| format!("{used_by} runs on {model:?}"))?;
            }
        }
        let fanout = self.cost.fanout();
        if let Some(fanout) = &fanout
            && !self.backend.names_profile(&fanout.profile)?
        {
            anyhow::bail!(
                "--fanout-profile {0} is not a profile: give it with --profile {0}=MODEL or in \
                 --profiles",
                fanout.profile
            );
        }
        backends.prices = prices;
        backends.fanout = fanout;
        Ok(backends)
    }
}

/// The script's `args`: `text` (`--args`), else the JSON file (`--args-file`), else `{}`.
pub(crate) fn read_args(
    text: Option<&str>,
    file: Option<&std::path::Path>,
) -> anyhow::Result<Value> {
    let text = match (text, file) {
        (Some(text), _) => text.to_owned(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read args file {}", path.display()))?,
        (None, None) => return Ok(Value::Object(serde_json::Map::new())),
    };
    serde_json::from_str(&text).context("--args is not valid JSON")
}
