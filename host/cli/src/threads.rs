//! `flowbox threads`: the journaled runs, newest first.

use clap::Args;
use flowbox::store::{CheckpointStore, RunStatus, UtcTime};

use crate::Failure;
use crate::options::JournalOptions;
use crate::text::terminal_safe;

/// Arguments of `flowbox threads`.
#[derive(Debug, Args)]
pub(crate) struct ThreadsArgs {
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    journal: JournalOptions,
}

pub(crate) async fn threads(args: ThreadsArgs) -> Result<u8, Failure> {
    let store = args.journal.open().map_err(Failure::input)?;
    let listing = store
        .list()
        .await
        .map_err(|e| Failure::input(anyhow::Error::new(e)))?;
    if args.json {
        out!(
            "{}",
            serde_json::to_string(&listing).expect("listings serialise")
        );
        return Ok(0);
    }
    out!(
        "{:<32} {:<24} {:<10} {:>7} {:>9}  started",
        "thread",
        "name",
        "status",
        "leaves",
        "tokens"
    );
    for run in listing {
        out!(
            "{:<32} {:<24} {:<10} {:>7} {:>9}  {}",
            run.thread_id,
            terminal_safe(run.name.as_deref().unwrap_or("-")),
            status_word(run.status),
            run.leaves,
            run.tokens,
            UtcTime::from_unix_millis(run.created_unix_ms)
        );
    }
    Ok(0)
}

/// How `threads` and `show` name a thread's status.
pub(crate) fn status_word(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Running => "running",
        RunStatus::Succeeded => "ok",
        RunStatus::Failed => "failed",
    }
}
