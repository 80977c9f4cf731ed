//! `flowbox show ID`: one thread's header, journal and outcome.

use clap::Args;
use flowbox::store::{CallRequest, EntryOutcome, SqliteStore, UtcTime};
use serde_json::json;

use crate::Failure;
use crate::options::{JournalOptions, load_thread, no_thread};
use crate::text::{preview, terminal_safe};

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
        let out = json!({
            "header": run.header,
            "name": run.name,
            "status": run.status(),
            "entries": run.entries,
            "outcome": run.end.as_ref().map(|end| &end.outcome),
        });
        out!("{out}");
        return Ok(0);
    }
    let header = &run.header;
    out!("thread   {}", header.thread_id);
    out!(
        "name     {}",
        terminal_safe(run.name.as_deref().unwrap_or("-"))
    );
    out!("status   {}", crate::threads::status_word(run.status()));
    out!(
        "started  {}",
        UtcTime::from_unix_millis(header.created_unix_ms)
    );
    out!(
        "script   {} bytes, sha256 {}",
        header.script.len(),
        &header.script_sha256[..16]
    );
    out!("args     {}", header.args);
    out!("journal  {} completions", run.entries.len());
    for entry in &run.entries {
        let (status, detail) = match &entry.outcome {
            EntryOutcome::Ok { value } => ("ok", value.clone()),
            EntryOutcome::Err { kind, message, .. } => ("error", format!("{kind}: {message}")),
        };
        let what = match &entry.request {
            CallRequest::Tool(tool) => format!("tool {}({})", tool.name, tool.arguments),
            CallRequest::Agent(agent) => match &agent.label {
                Some(label) => label.clone(),
                None => agent.prompt.to_string(),
            },
        };
        out!(
            "  #{:<4} batch {:<4} call {:<5} {:<6} {:>6} tok  {}  -> {}",
            entry.seq,
            entry.batch,
            entry.handle,
            status,
            entry.input_tokens + entry.output_tokens,
            preview(&what, 40),
            preview(&detail, 60)
        );
    }
    match &run.end {
        Some(end) => out!(
            "outcome  {}",
            terminal_safe(&serde_json::to_string_pretty(&end.outcome).expect("outcomes serialise"))
        ),
        None => out!(
            "outcome  (not finished: `flowbox resume {}` continues it)",
            header.thread_id
        ),
    }
    Ok(0)
}
