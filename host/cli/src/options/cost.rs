//! The cost flags: the price table leaves are costed at, and the default profile of leaves in
//! wide fan-outs.

use std::path::PathBuf;

use clap::Args;
use flowbox::plan::{FanoutProfile, PriceTable};

/// The cost flags.
#[derive(Debug, Args)]
pub(crate) struct CostOptions {
    /// A price table (JSON: {"written": "YYYY-MM-DD", "models": {MODEL: {"input": USD,
    /// "output": USD, "cached_input"?: USD}}}, dollars per million tokens; see
    /// examples/prices.json): plans show dollars, and --budget-usd and --gate-usd need it.
    /// Every model the backend flags name must have a price.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Leaves inside a `parallel`/`pipeline` group wider than --fanout-width run on this
    /// profile (a --profile name) unless they name their model.
    #[arg(long, value_name = "PROFILE")]
    pub fanout_profile: Option<String>,
    /// The widest group whose leaves keep the default model under --fanout-profile.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 8,
        requires = "fanout_profile"
    )]
    pub fanout_width: u32,
}

impl CostOptions {
    /// The price table, when one was given.
    pub(crate) fn prices(&self) -> anyhow::Result<Option<PriceTable>> {
        Ok(match &self.prices {
            Some(path) => Some(PriceTable::load(path)?),
            None => None,
        })
    }

    /// The fan-out profile, when one was given.
    pub(crate) fn fanout(&self) -> Option<FanoutProfile> {
        self.fanout_profile.as_ref().map(|profile| FanoutProfile {
            profile: profile.clone(),
            wider_than: self.fanout_width,
        })
    }
}
