//! `flowbox show ID`: one thread's header, journal and outcome.

use clap::Args;
use flowbox::store::SqliteStore;
use flowbox::store::view::{self, ThreadRecord};

use crate::Failure;
use crate::options::{JournalOptions, load_thread, no_thread};

/// Arguments of `flowbox show`.
#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The thread to show.
    thread: String,
    /// Print one JSON object: {"header", "name", "status", "entries", "outcome"} (with
    /// --follow, the events as JSON Lines).
    #[arg(long)]
    json: bool,
    /// Print the thread's events from its journal as they arrive (from another process
    /// running it, too), and exit when its run ends, with 0 if it succeeded, else 1.
    #[arg(long)]
    follow: bool,
    #[command(flatten)]
    journal: JournalOptions,
}

pub(crate) async fn show(args: ShowArgs) -> Result<u8, Failure> {
    let path = args.journal.path().map_err(Failure::input)?;
    let store = SqliteStore::open_read_only(&path).map_err(|e| no_thread(&args.thread, e))?;
    if args.follow {
        // Named like a missing thread, before waiting on it.
        load_thread(&store, &args.thread).await?;
        return crate::follow::follow(store, &args.thread, args.json).await;
    }
    let run = load_thread(&store, &args.thread).await?;
    if args.json {
        out!(
            "{}",
            serde_json::to_string(&ThreadRecord::from(&run)).expect("threads serialise")
        );
        return Ok(0);
    }
    for line in view::lines(&run) {
        out!("{line}");
    }
    Ok(0)
}
