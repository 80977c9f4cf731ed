//! `flowbox show ID`: one thread's header, journal and outcome.

use clap::Args;
use flowbox::store::{CallRequest, EntryOutcome, SqliteStore, StoredThread, ThreadStatus, UtcTime};
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
        out!("{}", to_json(&run));
        return Ok(0);
    }
    for line in lines(&run) {
        out!("{line}");
    }
    Ok(0)
}

/// The thread as `flowbox show --json` prints it: {"header", "name", "status", "entries",
/// "outcome"}.
pub(crate) fn to_json(run: &StoredThread) -> serde_json::Value {
    json!({
        "header": run.header,
        "name": run.name,
        "status": run.status,
        "entries": run.entries,
        "outcome": run.end.as_ref().map(|end| &end.outcome),
    })
}

/// The thread as `flowbox show` prints it, line by line.
pub(crate) fn lines(run: &StoredThread) -> Vec<String> {
    let mut lines = Vec::new();
    macro_rules! push {
        ($($arg:tt)*) => {
            lines.push(format!($($arg)*))
        };
    }
    let header = &run.header;
    push!("thread   {}", header.thread_id);
    push!(
        "name     {}",
        terminal_safe(run.name.as_deref().unwrap_or("-"))
    );
    push!("status   {}", run.status);
    push!(
        "started  {}",
        UtcTime::from_unix_millis(header.created_unix_ms)
    );
    push!(
        "script   {} bytes, sha256 {}",
        header.script.len(),
        &header.script_sha256[..16]
    );
    push!("args     {}", header.args);
    push!("journal  {} completions", run.entries.len());
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
        // `~` marks a count with estimates in it (a client that reported no usage).
        let tokens = entry.input_tokens + entry.output_tokens;
        let tokens = match entry.estimated_tokens {
            0 => tokens.to_string(),
            _ => format!("~{tokens}"),
        };
        push!(
            "  #{:<4} batch {:<4} call {:<5} {:<6} {:>6} tok  {}  -> {}",
            entry.seq,
            entry.batch,
            entry.handle,
            status,
            tokens,
            preview(&what, 40),
            preview(&detail, 60)
        );
    }
    match &run.end {
        Some(end) => push!(
            "outcome  {}",
            terminal_safe(&serde_json::to_string_pretty(&end.outcome).expect("outcomes serialise"))
        ),
        None if run.status == ThreadStatus::Running => {
            push!("outcome  (not finished: a run is driving it now)");
        }
        None => push!(
            "outcome  (not finished: `flowbox resume {}` continues it)",
            header.thread_id
        ),
    }
    lines
}
