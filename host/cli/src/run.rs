//! `flowbox run SCRIPT`: run a workflow and print its result (or one JSON object).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use flowbox::RunRequest;

use crate::options::{
    Journal, JournalOptions, RunOptions, TraceOptions, build_runtime_with, flush_traces, read_args,
};
use crate::progress::with_progress;
use crate::report::report;
use crate::{Failure, events};

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
    #[command(flatten)]
    trace: TraceOptions,
}

pub(crate) async fn run(args: RunArgs) -> Result<u8, Failure> {
    let script = std::fs::read_to_string(&args.script)
        .with_context(|| format!("cannot read {}", args.script.display()))
        .map_err(Failure::input)?;
    let script_args =
        read_args(args.args.as_deref(), args.args_file.as_deref()).map_err(Failure::input)?;
    if args.restate.is_some() && args.trace.given() {
        return Err(Failure::input(anyhow::anyhow!(
            "--otlp-endpoint and --otlp-contents are for runs on this machine: a run on Restate \
             is traced by the worker that drives it (flowbox worker --otlp-endpoint URL)"
        )));
    }
    if let Some(ingress) = &args.restate {
        let thread = args.thread.unwrap_or_else(RunRequest::new_thread_id);
        let mut request = RunRequest::new(script).args(script_args).thread_id(thread);
        if args.options.sets_limits() {
            request = request.limits(args.options.limits().map_err(Failure::input)?);
        }
        return crate::restate::run(ingress, request, args.json, args.events.as_ref()).await;
    }
    let journal = (!args.no_journal).then_some(&args.journal);
    let runtime = build_runtime_with(&args.options, journal.map(Journal::Create), |_| Ok(()))?
        .otlp(args.trace.otlp()?)
        .build()
        .map_err(Failure::setup)?;
    // A thread named on the command line may be one to resume; one drawn here is new.
    let (thread_id, starts) = match args.thread.clone() {
        Some(thread_id) => (thread_id, false),
        None => (RunRequest::new_thread_id(), true),
    };
    if journal.is_some() && !args.json {
        err!("thread {thread_id}");
        err!("follow it with `flowbox show {thread_id} --follow`, or see it in `flowbox serve`");
    }
    let request = RunRequest::new(script).args(script_args);
    let mut request = if starts {
        request.start_thread(thread_id)
    } else {
        request.thread_id(thread_id)
    };
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
    flush_traces(&runtime);
    report(outcome, args.json)
}
