//! The runtime the flags describe: its backend and tools, limits, prices, fan-out profile and
//! journal, for every subcommand that runs scripts.

use std::sync::Arc;

use flowbox::Runtime;

use super::{Backends, JournalOptions, RunOptions};
use crate::Failure;

/// A runtime with the backend and limits the flags name, journaling to `journal` if given.
pub(crate) fn build_runtime(
    options: &RunOptions,
    journal: Option<Journal<'_>>,
) -> Result<Runtime, Failure> {
    build_runtime_with(options, journal, |_| Ok(()))?
        .build()
        .map_err(Failure::setup)
}

/// The builder of [`build_runtime`], for a command that adds to it, with the backends the
/// flags name changed by `adjust` (`mcp --leaves sampling` puts its own leaf backend in).
pub(crate) fn build_runtime_with(
    options: &RunOptions,
    journal: Option<Journal<'_>>,
    adjust: impl FnOnce(&mut Backends) -> anyhow::Result<()>,
) -> Result<flowbox::RuntimeBuilder, Failure> {
    let limits = options.limits().map_err(Failure::input)?;
    let mut backends = options.backends().map_err(Failure::input)?;
    adjust(&mut backends).map_err(Failure::input)?;
    if backends.prices.is_none() {
        let dollar_flags = [
            ("--budget-usd", limits.budget_usd),
            ("--gate-usd", limits.gate_usd),
        ];
        if let Some((flag, _)) = dollar_flags.iter().find(|(_, usd)| usd.is_some()) {
            return Err(Failure::input(anyhow::anyhow!(
                "{flag} needs --prices FILE: dollars are counted at a price table's prices"
            )));
        }
    }
    runtime_builder(limits, &backends, journal)
}

/// Which journal a runtime writes to, and whether it may create it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Journal<'a> {
    /// A run's: created if new.
    Create(&'a JournalOptions),
    /// A resume's, of this thread: it must exist.
    Existing(&'a JournalOptions, &'a str),
    /// A plan's: only read, and only if it exists (a plan learns reply lengths from it).
    Read(&'a JournalOptions),
}

/// A runtime with these limits, the leaf backend and code-callable tools of `backends`, and
/// `journal`, opened only once the flags are known to be good.
pub(crate) fn runtime_for(
    limits: flowbox::Limits,
    backends: &Backends,
    journal: Option<Journal<'_>>,
) -> Result<Runtime, Failure> {
    runtime_builder(limits, backends, journal)?
        .build()
        .map_err(Failure::setup)
}

/// The builder of [`runtime_for`], for a command that adds to it (`mcp`'s warm pool).
pub(crate) fn runtime_builder(
    limits: flowbox::Limits,
    backends: &Backends,
    journal: Option<Journal<'_>>,
) -> Result<flowbox::RuntimeBuilder, Failure> {
    let mut builder = Runtime::builder()
        .shared_backend(Arc::clone(&backends.leaf))
        .code_tools(backends.tools.clone())
        .limits(limits);
    if let Some(prices) = &backends.prices {
        builder = builder.prices(prices.clone());
    }
    if let Some(fanout) = &backends.fanout {
        builder = builder.fanout_profile(fanout.clone());
    }
    match journal {
        Some(Journal::Create(journal)) => builder = builder.store(journal.create()?),
        Some(Journal::Existing(journal, thread)) => {
            builder = builder.store(journal.existing(thread)?);
        }
        Some(Journal::Read(journal)) => {
            if let Some(store) = journal.read_only()? {
                builder = builder.store(store);
            }
        }
        None => {}
    }
    // Last, so the journal opened while the guest was still loading.
    Ok(crate::guest::given_to(builder))
}
