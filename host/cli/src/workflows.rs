//! `flowbox workflows`: the workflow runs root agents started (`flowbox ask`, or an embedder's
//! `run_workflow` tool), per conversation or in total.

use clap::Args;
use flowbox::store::{CheckpointStore, UtcTime, WorkflowTotals};
use serde_json::json;

use crate::Failure;
use crate::options::JournalOptions;
use flowbox::store::view::terminal_safe;

/// Arguments of `flowbox workflows`.
#[derive(Debug, Args)]
pub(crate) struct WorkflowsArgs {
    /// Only this conversation's runs [default: every conversation's].
    #[arg(long, value_name = "ID")]
    conversation: Option<String>,
    /// Print one JSON object: {"workflows": [...], "totals": {...}}.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    journal: JournalOptions,
}

pub(crate) async fn workflows(args: WorkflowsArgs) -> Result<u8, Failure> {
    let records = match args.journal.read_only()? {
        Some(store) => store
            .workflows(args.conversation.as_deref())
            .await
            .map_err(Failure::journal)?,
        None => Vec::new(),
    };
    let totals = WorkflowTotals::of(&records);
    if args.json {
        out!("{}", json!({"workflows": records, "totals": totals}));
        return Ok(0);
    }
    out!(
        "{:<32} {:<44} {:<20} {:<6} {:>7} {:>9}  recorded",
        "conversation",
        "thread",
        "name",
        "ok",
        "leaves",
        "tokens"
    );
    for record in &records {
        out!(
            "{:<32} {:<44} {:<20} {:<6} {:>7} {:>9}  {}",
            terminal_safe(&record.conversation_id),
            record.thread_id,
            terminal_safe(record.name.as_deref().unwrap_or("-")),
            if record.ok { "yes" } else { "no" },
            record.leaves,
            record.tokens,
            UtcTime::from_unix_millis(record.recorded_unix_ms)
        );
    }
    out!(
        "{} runs ({} failed) · {} leaves · {} tokens",
        totals.runs,
        totals.failed,
        totals.leaves,
        totals.tokens
    );
    Ok(0)
}
