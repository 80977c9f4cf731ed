//! `flowbox threads`: the journaled runs, newest first.

use clap::Args;
use flowbox::store::{CheckpointStore, Listing, ThreadSummary, UtcTime};

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

/// Lists every thread that reads; a damaged one is named on stderr, and makes the exit code 1
/// once the others are listed.
pub(crate) async fn threads(args: ThreadsArgs) -> Result<u8, Failure> {
    let listing = match args.journal.read_only()? {
        Some(store) => store.list().await.map_err(Failure::journal)?,
        None => Listing::default(),
    };
    let code = match listing.damaged.len() {
        0 => 0,
        _ => 1,
    };
    for damaged in &listing.damaged {
        err!("error: {}", terminal_safe(&damaged.to_string()));
    }
    let listing = listing.threads;
    if args.json {
        out!(
            "{}",
            serde_json::to_string(&listing).expect("listings serialise")
        );
        return Ok(code);
    }
    for line in table(&listing) {
        out!("{line}");
    }
    Ok(code)
}

/// The threads as `flowbox threads` prints them: a header line, then one line per thread.
pub(crate) fn table(threads: &[ThreadSummary]) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<32} {:<24} {:<10} {:>7} {:>9}  started",
        "thread", "name", "status", "leaves", "tokens"
    )];
    for run in threads {
        lines.push(format!(
            "{:<32} {:<24} {:<10} {:>7} {:>9}  {}",
            run.thread_id,
            terminal_safe(run.name.as_deref().unwrap_or("-")),
            run.status,
            run.leaves,
            run.tokens,
            UtcTime::from_unix_millis(run.created_unix_ms)
        ));
    }
    lines
}
