//! `flowbox check SCRIPT`: validate without running and print the script's meta.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use flowbox::Runtime;
use flowbox::backends::FakeBackend;

use crate::Failure;

/// Arguments of `flowbox check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The workflow script.
    script: PathBuf,
}

pub(crate) async fn check(args: CheckArgs) -> Result<u8, Failure> {
    let script = std::fs::read_to_string(&args.script)
        .with_context(|| format!("cannot read {}", args.script.display()))
        .map_err(Failure::input)?;
    // Checking runs no leaf; the fake backend is there because a runtime needs one.
    let runtime = crate::guest::given_to(Runtime::builder().backend(FakeBackend::new()))
        .build()
        .map_err(Failure::setup)?;
    let meta = runtime.check(&script).await.map_err(Failure::run)?;
    let meta = meta.unwrap_or(serde_json::Value::Null);
    out!(
        "{}",
        serde_json::to_string_pretty(&meta).expect("JSON values serialise")
    );
    Ok(0)
}
