//! `flowbox plan SCRIPT`: what a run would do and cost, from a projection against placeholder
//! leaves, its expected output learnt from the journal's replies; nothing but read-only tools
//! is called and nothing is journaled.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use flowbox::RunRequest;
use flowbox::plan::{Plan, PlanGroup};

use crate::Failure;
use crate::options::{Journal, JournalOptions, RunOptions};
use crate::options::{build_runtime, read_args};

/// What the estimates are, for the reader of a plan.
const ESTIMATES: &str = "\
Estimates: input tokens are each leaf's first turn (system prompt, prompt, tool definitions,
schema), counted with the model's public tokenizer (o200k_base, cl100k_base) where there is one,
else approximated at one token per 3 bytes. Expected output (~) is the median reply of leaves
like it in the journal (same profile and schema shape, else agent type or label), else 300
tokens, never above the ceiling: the figure to show a person. Ceilings (<=) are the output limit
or the longest reply the schema allows, so their dollars are an upper bound for one turn per leaf
(tool turns, repairs and tool results come on top; cached input is not discounted); gates and
dollar budgets use them. Leaf replies and the results of tools that are not read-only were
placeholders (read-only tools ran for real): control flow that depends on them followed one
path.";

/// Arguments of `flowbox plan`.
#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// The workflow script.
    script: PathBuf,
    /// The script's `args`, as JSON [default: {}].
    #[arg(long, value_name = "JSON", conflicts_with = "args_file")]
    args: Option<String>,
    /// Read the script's `args` from a JSON file.
    #[arg(long, value_name = "FILE")]
    args_file: Option<PathBuf>,
    /// Print exactly one JSON object: {"ok": true, "plan"} (or the usual error object).
    #[arg(long)]
    pub(crate) json: bool,
    /// Read no journal: every leaf's expected output is the default.
    #[arg(long)]
    no_journal: bool,
    #[command(flatten)]
    journal: JournalOptions,
    #[command(flatten)]
    options: RunOptions,
}

pub(crate) async fn plan(args: PlanArgs) -> Result<u8, Failure> {
    let script = std::fs::read_to_string(&args.script)
        .with_context(|| format!("cannot read {}", args.script.display()))
        .map_err(Failure::input)?;
    let script_args =
        read_args(args.args.as_deref(), args.args_file.as_deref()).map_err(Failure::input)?;
    let journal = (!args.no_journal).then_some(Journal::Read(&args.journal));
    let runtime = build_runtime(&args.options, journal)?;
    let limits = args.options.limits().map_err(Failure::input)?;
    let request = RunRequest::new(script).args(script_args).limits(limits);
    let plan = runtime.plan(request).await.map_err(Failure::run)?;
    if args.json {
        out!("{}", serde_json::json!({"ok": true, "plan": plan}));
    } else {
        out!("{}", render(&plan));
    }
    Ok(0)
}

/// A plan as text for a person.
pub(crate) fn render(plan: &Plan) -> String {
    let mut text = String::new();
    let mut line = |s: String| {
        text.push_str(&s);
        text.push('\n');
    };
    let name = plan.name.as_deref().unwrap_or("the script");
    line(format!(
        "plan of {name}: {} leaves, {} tool calls; widest fan-out {} ({} waves at concurrency {})",
        plan.leaves, plan.tool_calls, plan.widest_fanout, plan.waves, plan.max_concurrency
    ));
    let cost = match (&plan.expected_usd, &plan.usd, &plan.prices_written) {
        (Some(expected), Some(usd), Some(written)) => {
            format!("expected ~${expected:.4}, at most ${usd:.4} (prices written {written})")
        }
        (_, _, Some(written)) => {
            format!("unknown: a model has no price (prices written {written})")
        }
        _ => "unknown: no price table (--prices)".to_owned(),
    };
    line(format!(
        "tokens: ~{} input, ~{} output expected (at most {}); cost: {cost}",
        plan.input_tokens, plan.expected_output_tokens, plan.max_output_tokens
    ));
    line(format!(
        "expected output: from the journal's replies for {} leaves, the default for {}",
        plan.expected_from_history, plan.expected_from_default
    ));
    line(String::new());
    line(table_header("phase"));
    for phase in &plan.phases {
        line(table_row(&phase.name, phase));
    }
    line(String::new());
    line(table_header("profile (model, tokenizer)"));
    for profile in &plan.profiles {
        let name = format!(
            "{} ({}, {})",
            profile.name,
            profile.model.as_deref().unwrap_or("?"),
            profile.tokenizer.unwrap_or("?")
        );
        line(table_row(&name, profile));
    }
    line(String::new());
    line(format!("leaf tools: {}", list(&plan.leaf_tools)));
    line(format!("script tools: {}", list(&plan.script_tools)));
    if !plan.reply_dependent.is_empty() {
        let constructs: Vec<String> = plan
            .reply_dependent
            .iter()
            .map(|d| {
                let trips = if d.loop_trip_count {
                    " (trip count depends on a reply)"
                } else {
                    ""
                };
                format!("line {} {}{trips}", d.line, d.construct)
            })
            .collect();
        line(format!("reply-dependent: {}", constructs.join("; ")));
    }
    if !plan.warnings.is_empty() {
        line("warnings:".to_owned());
        for warning in &plan.warnings {
            let kind = serde_json::to_value(warning.kind).unwrap_or_default();
            line(format!(
                "  - {}: {}",
                kind.as_str().unwrap_or("?"),
                warning.message
            ));
        }
    }
    line(String::new());
    text.push_str(ESTIMATES);
    text
}

fn table_header(first: &str) -> String {
    format!(
        "{first:<40} {:>6} {:>7} {:>5} {:>9} {:>8} {:>9} {:>8} {:>8}  {}",
        "leaves",
        "fan-out",
        "waves",
        "input",
        "output~",
        "output<=",
        "usd~",
        "usd<=",
        "placeholders led to"
    )
}

fn table_row(name: &str, group: &PlanGroup) -> String {
    let dollars = |usd: Option<f64>| usd.map_or("?".to_owned(), |usd| format!("{usd:.4}"));
    // The leaves a reply-dependent branch holds, and the lines of its constructs.
    let led = if group.placeholder_path_leaves == 0 {
        "-".to_owned()
    } else {
        let lines: Vec<String> = group
            .placeholder_path_lines
            .iter()
            .map(u32::to_string)
            .collect();
        format!(
            "{} (line {})",
            group.placeholder_path_leaves,
            lines.join(", ")
        )
    };
    format!(
        "{name:<40} {:>6} {:>7} {:>5} {:>9} {:>8} {:>9} {:>8} {:>8}  {led}",
        group.leaves,
        group.widest_fanout,
        group.waves,
        group.input_tokens,
        group.expected_output_tokens,
        group.max_output_tokens,
        dollars(group.expected_usd),
        dollars(group.usd)
    )
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
