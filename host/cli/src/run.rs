//! `flowbox run SCRIPT`: run a workflow and print its result (or one JSON object).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use flowbox::{RunRequest, Runtime};
use serde_json::Value;

use crate::options::RunOptions;
use crate::{Failure, progress};

/// Arguments of `flowbox run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The workflow script.
    script: PathBuf,
    /// The script's `args`, as JSON [default: {}].
    #[arg(long, value_name = "JSON", conflicts_with = "args_file")]
    args: Option<String>,
    /// Read the script's `args` from a JSON file.
    #[arg(long, value_name = "FILE")]
    args_file: Option<PathBuf>,
    /// Print exactly one JSON object: {"ok", "result", "error", "summary"}.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    options: RunOptions,
}

pub(crate) async fn run(args: RunArgs) -> Result<u8, Failure> {
    let script = std::fs::read_to_string(&args.script)
        .with_context(|| format!("cannot read {}", args.script.display()))
        .map_err(Failure::input)?;
    let script_args = read_args(&args).map_err(Failure::input)?;
    let limits = args.options.limits().map_err(Failure::input)?;
    let backend = args.options.backend().map_err(Failure::input)?;
    let runtime = Runtime::builder()
        .shared_backend(backend)
        .limits(limits)
        .build()
        .map_err(Failure::setup)?;

    let display = std::io::stderr()
        .is_terminal()
        .then(|| progress::spawn(runtime.subscribe()));
    let outcome = runtime
        .run_request(RunRequest::new(script).args(script_args))
        .await;
    if let Some(display) = display {
        display.finish().await;
    }

    if args.json {
        println!("{}", outcome.to_json());
        return Ok(match &outcome.result {
            Ok(_) => 0,
            Err(error) => u8::try_from(error.exit_code()).unwrap_or(1),
        });
    }
    let summary = &outcome.summary;
    match outcome.result {
        Ok(result) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&result).expect("JSON values serialise")
            );
            if std::io::stderr().is_terminal() {
                eprintln!(
                    "thread {} · {} leaves · {} tokens · {} fuel · {} ms",
                    summary.thread_id,
                    summary.agents_spawned,
                    summary.tokens_spent,
                    summary.fuel_used,
                    summary.duration_ms
                );
            }
            Ok(0)
        }
        Err(error) => Err(Failure::run(error)),
    }
}

fn read_args(args: &RunArgs) -> anyhow::Result<Value> {
    let text = match (&args.args, &args.args_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read args file {}", path.display()))?,
        (None, None) => return Ok(Value::Object(serde_json::Map::new())),
    };
    serde_json::from_str(&text).context("--args is not valid JSON")
}
