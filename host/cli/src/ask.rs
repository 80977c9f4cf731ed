//! `flowbox ask "question"`: a root agent that answers directly or writes and runs workflows
//! with `run_workflow` — the whole product in one command.

use std::path::PathBuf;

use clap::Args;
use flowbox::orchestrator::Orchestrator;
use flowbox::store::WorkflowTotals;
use serde_json::json;

use crate::options::{
    Journal, JournalOptions, RunOptions, TraceOptions, flush_traces, runtime_builder,
};
use crate::progress::with_progress;
use crate::{Failure, FailureKind, events};
use flowbox::store::view::terminal_safe;

/// Arguments of `flowbox ask`.
#[derive(Debug, Args)]
pub(crate) struct AskArgs {
    /// The question or task.
    question: String,
    /// Record workflow runs under this conversation id [default: a new one].
    #[arg(long, value_name = "ID")]
    conversation: Option<String>,
    /// Leave the workflow guidance out of the root agent's system prompt.
    #[arg(long)]
    no_guidance: bool,
    /// Print one JSON object: {"answer", "conversation_id", "workflows", "usage", "turns"}.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write every event of the workflows as JSON Lines to FILE, or to stdout with `-`. None
    /// is lost: a slow reader makes the scripts' `log` calls wait (never their leaves).
    #[arg(long, value_name = "FILE|-")]
    events: Option<PathBuf>,
    /// Do not journal the workflows.
    #[arg(long)]
    no_journal: bool,
    #[command(flatten)]
    options: RunOptions,
    #[command(flatten)]
    journal: JournalOptions,
    #[command(flatten)]
    trace: TraceOptions,
}

pub(crate) async fn ask(args: AskArgs) -> Result<u8, Failure> {
    let limits = args.options.limits().map_err(Failure::input)?;
    let backends = args.options.backends().map_err(Failure::input)?;
    let journal = (!args.no_journal).then_some(&args.journal);
    let runtime = runtime_builder(limits, &backends, journal.map(Journal::Create))?
        .otlp(args.trace.otlp()?)
        .build()
        .map_err(Failure::setup)?;
    let mut builder =
        Orchestrator::builder(runtime, backends.root, backends.root_model_id).tools(backends.tools);
    if args.no_guidance {
        builder = builder.guidance(None);
    }
    if let Some(tokens) = args.options.backend.max_output_tokens {
        builder = builder.max_tokens(tokens);
    }
    let orchestrator = builder.build();
    let conversation = args
        .conversation
        .clone()
        .unwrap_or_else(flowbox::RunRequest::new_thread_id);
    if journal.is_some() && !args.json {
        err!(
            "conversation {conversation}: see its workflows live in `flowbox serve`, or list them with `flowbox workflows --conversation {conversation}`"
        );
    }
    let log = match &args.events {
        Some(target) => Some(
            events::spawn(
                target,
                orchestrator.runtime().subscribe_lossless(),
                args.json,
            )
            .map_err(Failure::input)?,
        ),
        None => None,
    };
    let answer = with_progress(
        orchestrator.runtime(),
        orchestrator.ask_in(&conversation, &args.question),
    )
    .await;
    if let Some(log) = log {
        log.finish().await.map_err(Failure::output)?;
    }
    flush_traces(orchestrator.runtime());
    let answer = answer.map_err(|e| Failure {
        code: 1,
        kind: FailureKind::RootAgent,
        error: anyhow::Error::new(e).context("the root agent failed"),
    })?;
    if args.json {
        out!(
            "{}",
            json!({
                "answer": answer.text,
                "conversation_id": answer.conversation_id,
                "workflows": answer.workflows,
                "usage": answer.usage,
                "turns": answer.turns,
            })
        );
        return Ok(0);
    }
    out!("{}", terminal_safe(&answer.text));
    let totals = match orchestrator.runtime().store() {
        Some(store) => WorkflowTotals::of(
            &store
                .workflows(Some(&conversation))
                .await
                .map_err(|e| Failure::input(anyhow::Error::new(e)))?,
        ),
        None => WorkflowTotals::of(&answer.workflows),
    };
    err!(
        "conversation {} · {} workflows ({} failed) · {} leaves · {} workflow tokens · {} root tokens",
        conversation,
        totals.runs,
        totals.failed,
        totals.leaves,
        totals.tokens,
        answer.usage.total()
    );
    Ok(0)
}
