//! `flowbox run SCRIPT`: run a workflow and print its result (or one JSON object).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use flowbox::{RunOutcome, RunRequest, Runtime};
use serde_json::Value;

use crate::options::{Backends, JournalOptions, RunOptions};
use crate::{Failure, events, progress};

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
    /// The thread id [default: a new one, printed on stderr]. An id the journal holds
    /// resumes that thread (with the same script and args).
    #[arg(long, value_name = "ID")]
    thread: Option<String>,
    /// Answer byte-identical requests from this earlier thread's results instead of calling
    /// the backend (unlike `resume`, the script may have changed).
    #[arg(long, value_name = "THREAD")]
    reuse_leaves: Option<String>,
    /// Do not journal this run (it cannot be resumed).
    #[arg(long, conflicts_with_all = ["thread", "reuse_leaves"])]
    no_journal: bool,
    /// Print exactly one JSON object: {"ok", "result", "error", "summary"}.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write every event of the run as JSON Lines to FILE, or to stdout with `-`. None is
    /// lost: a slow reader makes the script's `log` calls wait (never its leaves).
    #[arg(long, value_name = "FILE|-")]
    events: Option<PathBuf>,
    /// Run on Restate: submit the run to this ingress URL (served by `flowbox worker`) and wait
    /// for its outcome, which prints as a local run's; `--thread` names the Restate workflow.
    #[arg(long, value_name = "INGRESS_URL", conflicts_with_all = ["reuse_leaves", "no_journal"])]
    restate: Option<String>,
    #[command(flatten)]
    options: RunOptions,
    #[command(flatten)]
    journal: JournalOptions,
}

pub(crate) async fn run(args: RunArgs) -> Result<u8, Failure> {
    let script = std::fs::read_to_string(&args.script)
        .with_context(|| format!("cannot read {}", args.script.display()))
        .map_err(Failure::input)?;
    let script_args =
        read_args(args.args.as_deref(), args.args_file.as_deref()).map_err(Failure::input)?;
    if let Some(ingress) = &args.restate {
        let thread = args.thread.unwrap_or_else(RunRequest::new_thread_id);
        let mut request = RunRequest::new(script).args(script_args).thread_id(thread);
        if args.options.sets_limits() {
            request = request.limits(args.options.limits().map_err(Failure::input)?);
        }
        return crate::restate::run(ingress, request, args.json, args.events.as_ref()).await;
    }
    let journal = (!args.no_journal).then_some(&args.journal);
    let runtime = build_runtime(&args.options, journal.map(Journal::Create))?;
    let thread_id = args
        .thread
        .clone()
        .unwrap_or_else(RunRequest::new_thread_id);
    if journal.is_some() && !args.json {
        err!("thread {thread_id}");
        err!("follow it with `flowbox show {thread_id} --follow`, or see it in `flowbox serve`");
    }
    let mut request = RunRequest::new(script)
        .args(script_args)
        .thread_id(thread_id);
    // Without limit flags, a new thread gets the defaults and an existing one its own.
    if args.options.sets_limits() {
        request = request.limits(args.options.limits().map_err(Failure::input)?);
    }
    if let Some(from) = &args.reuse_leaves {
        request = request.reuse_leaves_from(from);
    }
    let log = match &args.events {
        Some(target) => Some(
            events::spawn(target, runtime.subscribe_lossless(), args.json)
                .map_err(Failure::input)?,
        ),
        None => None,
    };
    let outcome = with_progress(&runtime, runtime.run_request(request)).await;
    if let Some(log) = log {
        log.finish().await.map_err(Failure::output)?;
    }
    report(outcome, args.json)
}

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
        None => {}
    }
    Ok(builder)
}

/// Awaits `work` (runs, or a root agent's turns) with the live progress display of the
/// runtime's runs on stderr when it is a terminal.
pub(crate) async fn with_progress<T>(runtime: &Runtime, work: impl Future<Output = T>) -> T {
    let display = std::io::stderr()
        .is_terminal()
        .then(|| progress::spawn(runtime.subscribe()));
    let outcome = work.await;
    if let Some(display) = display {
        display.finish().await;
    }
    outcome
}

/// Prints an outcome: one JSON object with `json`, else the pretty result (and a summary line
/// on a terminal); returns the exit code.
pub(crate) fn report(outcome: RunOutcome, json: bool) -> Result<u8, Failure> {
    if json {
        out!("{}", outcome.to_json());
        return Ok(match &outcome.result {
            Ok(_) => 0,
            Err(error) => crate::exit_code(error),
        });
    }
    let summary = &outcome.summary;
    match outcome.result {
        Ok(result) => {
            out!(
                "{}",
                serde_json::to_string_pretty(&result).expect("JSON values serialise")
            );
            if std::io::stderr().is_terminal() {
                let estimated = match summary.estimated_tokens {
                    0 => String::new(),
                    n => format!(" ({n} estimated)"),
                };
                err!(
                    "thread {} · {} leaves · {} tokens{estimated} · {} fuel · {} ms",
                    summary.thread_id,
                    summary.leaves,
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
