//! `flowbox threads`: the journaled runs, newest first.

use clap::Args;
use flowbox::store::view::{self, terminal_safe};
use flowbox::store::{CheckpointStore, Listing};

use crate::Failure;
use crate::options::JournalOptions;

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
    for line in view::table(&listing) {
        out!("{line}");
    }
    Ok(code)
}
