//! `flowbox guidance`: prints the guidance a root model gets on this host — what `ask` appends
//! to its root agent's system prompt — for the backend, tool and limit flags given, so an
//! operator sees exactly which profiles, templates, tools and limits a model is told of.

use clap::Args;
use flowbox::orchestrator::Guidance;

use crate::Failure;
use crate::options::RunOptions;
use crate::options::runtime_for;

/// Arguments of `flowbox guidance`.
#[derive(Debug, Args)]
pub(crate) struct GuidanceArgs {
    /// Leave the pattern library out.
    #[arg(long)]
    no_patterns: bool,
    #[command(flatten)]
    options: RunOptions,
}

pub(crate) async fn guidance(args: GuidanceArgs) -> Result<u8, Failure> {
    let limits = args.options.limits().map_err(Failure::input)?;
    let backends = args.options.backends().map_err(Failure::input)?;
    let runtime = runtime_for(limits, &backends, None)?;
    let guidance = if args.no_patterns {
        Guidance::without_patterns(&runtime)
    } else {
        Guidance::new(&runtime)
    };
    out!("{}", guidance.text());
    Ok(0)
}
