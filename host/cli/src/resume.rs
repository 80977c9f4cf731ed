//! `flowbox resume ID`: finish an interrupted thread from its journal, or print a finished
//! thread's recorded outcome.

use clap::Args;

use crate::Failure;
use crate::options::{
    Journal, JournalOptions, RunOptions, TraceOptions, build_runtime_with, flush_traces,
    load_thread,
};
use crate::progress::with_progress;
use crate::report::report;

/// Arguments of `flowbox resume`.
#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    /// The thread to resume.
    thread: String,
    /// Print exactly one JSON object: {"ok", "result", "error", "summary"}.
    #[arg(long)]
    pub(crate) json: bool,
    /// Backend and limits; limits not given on the command line are the thread's own.
    #[command(flatten)]
    options: RunOptions,
    #[command(flatten)]
    journal: JournalOptions,
    #[command(flatten)]
    trace: TraceOptions,
}

pub(crate) async fn resume(args: ResumeArgs) -> Result<u8, Failure> {
    let runtime = build_runtime_with(
        &args.options,
        Some(Journal::Existing(&args.journal, &args.thread)),
        |_| Ok(()),
    )?
    .otlp(args.trace.otlp()?)
    .build()
    .map_err(Failure::setup)?;
    // Flags adjust the thread's own limits; without flags the runtime applies them as they are.
    let limits = match runtime.store() {
        Some(store) if args.options.sets_limits() => {
            let run = load_thread(store.as_ref(), &args.thread).await?;
            let recorded = serde_json::from_value(run.header.limits)
                .map_err(|e| Failure::input(anyhow::anyhow!("unreadable thread limits: {e}")))?;
            Some(args.options.limits_over(recorded).map_err(Failure::input)?)
        }
        _ => None,
    };
    let outcome = with_progress(&runtime, runtime.resume(&args.thread, limits)).await;
    flush_traces(&runtime);
    report(outcome, args.json)
}
