//! A projection's leaves summed into a [`Plan`]: totals, per phase and per profile — the
//! ceiling and the expected cost side by side — with the warnings they call for.

use std::collections::{BTreeMap, BTreeSet};

use flowbox_backends::Usage;

use super::expected::Expected;
use super::{
    FanoutProfile, History, Plan, PlanGroup, PlanWarning, PriceTable, ProjectedLeaf, Projection,
    ReplyDependence, WarningKind, usd,
};
use flowbox_store::ErrorInfo;

use crate::Limits;

/// What a plan needs besides the projection's leaves.
#[derive(Debug)]
pub(crate) struct Context<'a> {
    pub name: Option<String>,
    pub limits: &'a Limits,
    pub prices: Option<&'a PriceTable>,
    pub fanout: Option<&'a FanoutProfile>,
    /// The journal's replies, for the expected output.
    pub history: &'a History,
    /// Why the journal's replies could not be read, when they could not.
    pub history_error: Option<String>,
    pub reply_dependent: Vec<ReplyDependence>,
    pub ended: Option<ErrorInfo>,
    pub fuel_used: u64,
    /// The phases `meta` declares, when it declares them.
    pub declared_phases: Option<Vec<String>>,
    /// The phases the script entered on the placeholders' path.
    pub entered_phases: Vec<String>,
}

/// The profile name of the backend's default model.
const DEFAULT_PROFILE: &str = "default";

/// The phase name of leaves started before any `phase(...)`.
const NO_PHASE: &str = "(no phase)";

impl Plan {
    pub(crate) fn assemble(projection: Projection, context: Context<'_>) -> Plan {
        let concurrency = context.limits.max_concurrency.max(1);
        let prices = context.prices;
        let leaves: Vec<Counted<'_>> = projection
            .leaves
            .iter()
            .map(|leaf| Counted {
                leaf,
                expected: context
                    .history
                    .expect(&leaf.kind, leaf.estimate.max_output_tokens),
            })
            .collect();
        let all = group(String::new(), leaves.iter(), concurrency, prices);

        let mut phase_order: Vec<&str> = Vec::new();
        let mut profile_order: BTreeSet<&str> = BTreeSet::new();
        for Counted { leaf, .. } in &leaves {
            let phase = leaf.phase.as_deref().unwrap_or(NO_PHASE);
            if !phase_order.contains(&phase) {
                phase_order.push(phase);
            }
            profile_order.insert(profile_of(leaf));
        }
        let phases = phase_order
            .iter()
            .map(|&name| {
                let members = leaves
                    .iter()
                    .filter(|counted| counted.leaf.phase.as_deref().unwrap_or(NO_PHASE) == name);
                group(name.to_owned(), members, concurrency, prices)
            })
            .collect();
        let profiles: Vec<PlanGroup> = profile_order
            .iter()
            .map(|&name| {
                let mut members = leaves
                    .iter()
                    .filter(|counted| profile_of(counted.leaf) == name)
                    .peekable();
                let first = members.peek().map(|counted| &counted.leaf.estimate);
                let model = first.map(|e| e.model.clone());
                let tokenizer = first.map(|e| e.tokenizer.name());
                let mut profile = group(name.to_owned(), members, concurrency, prices);
                profile.model = model;
                profile.tokenizer = tokenizer;
                profile
            })
            .collect();

        let warnings = warnings(&projection, &context, &all, &profiles, concurrency);
        Plan {
            name: context.name,
            leaves: all.leaves,
            tool_calls: projection.tool_calls,
            widest_fanout: all.widest_fanout,
            waves: all.waves,
            max_concurrency: concurrency,
            input_tokens: all.input_tokens,
            max_output_tokens: all.max_output_tokens,
            usd: all.usd,
            expected_output_tokens: all.expected_output_tokens,
            expected_usd: all.expected_usd,
            expected_from_history: all.expected_from_history,
            expected_from_default: all.expected_from_default,
            placeholder_path_leaves: all.placeholder_path_leaves,
            prices_written: prices.map(|p| p.written().to_owned()),
            phases,
            profiles,
            leaf_tools: all.tools,
            script_tools: projection.tools.into_iter().collect(),
            reply_dependent: context.reply_dependent,
            warnings,
            ended: context.ended,
            fuel_used: context.fuel_used,
        }
    }
}

fn profile_of(leaf: &ProjectedLeaf) -> &str {
    leaf.estimate.profile.as_deref().unwrap_or(DEFAULT_PROFILE)
}

/// A leaf with its expected output, as the groups count it.
struct Counted<'a> {
    leaf: &'a ProjectedLeaf,
    expected: Expected,
}

/// How many leaves of each round, by round.
fn rounds<'a>(leaves: impl Iterator<Item = &'a ProjectedLeaf>) -> BTreeMap<u32, u32> {
    let mut rounds = BTreeMap::new();
    for leaf in leaves {
        *rounds.entry(leaf.round).or_insert(0) += 1;
    }
    rounds
}

fn group<'a>(
    name: String,
    leaves: impl Iterator<Item = &'a Counted<'a>> + Clone,
    concurrency: usize,
    prices: Option<&PriceTable>,
) -> PlanGroup {
    let per_round = rounds(leaves.clone().map(|counted| counted.leaf));
    let concurrency = u32::try_from(concurrency).unwrap_or(u32::MAX);
    let mut tools = BTreeSet::new();
    let (mut input, mut output, mut expected_output, mut count) = (0u64, 0u64, 0u64, 0u32);
    let mut from_history = 0u32;
    let mut placeholder_leaves = 0u32;
    let mut placeholder_lines = BTreeSet::new();
    let (mut picos, mut expected_picos) = (Some(0u128), Some(0u128));
    for &Counted { leaf, expected } in leaves {
        let estimate = &leaf.estimate;
        count += 1;
        input = input.saturating_add(estimate.input_tokens);
        output = output.saturating_add(estimate.max_output_tokens);
        expected_output = expected_output.saturating_add(expected.output_tokens);
        from_history += u32::from(expected.from_history);
        placeholder_leaves += u32::from(!leaf.placeholder_path.is_empty());
        placeholder_lines.extend(leaf.placeholder_path.iter().copied());
        tools.extend(estimate.tools.iter().cloned());
        let price = prices.and_then(|table| table.price(&estimate.model).ok());
        let likely = Usage {
            output_tokens: expected.output_tokens,
            ..worst_case(estimate)
        };
        picos = picos
            .zip(price)
            .map(|(sum, price)| sum + price.cost(worst_case(estimate)));
        expected_picos = expected_picos
            .zip(price)
            .map(|(sum, price)| sum + price.cost(likely));
    }
    PlanGroup {
        name,
        model: None,
        tokenizer: None,
        leaves: count,
        widest_fanout: per_round.values().copied().max().unwrap_or(0),
        waves: per_round.values().map(|n| n.div_ceil(concurrency)).sum(),
        input_tokens: input,
        max_output_tokens: output,
        usd: picos.map(usd),
        expected_output_tokens: expected_output,
        expected_usd: expected_picos.map(usd),
        expected_from_history: from_history,
        expected_from_default: count - from_history,
        placeholder_path_leaves: placeholder_leaves,
        placeholder_path_lines: placeholder_lines.into_iter().collect(),
        tools: tools.into_iter().collect(),
    }
}

/// The usage a leaf is priced at before it runs: its input estimate and its output ceiling.
pub(crate) fn worst_case(estimate: &flowbox_backends::LeafEstimate) -> Usage {
    Usage {
        input_tokens: estimate.input_tokens,
        output_tokens: estimate.max_output_tokens,
        estimated_tokens: 0,
    }
}

fn warnings(
    projection: &Projection,
    context: &Context<'_>,
    all: &PlanGroup,
    profiles: &[PlanGroup],
    concurrency: usize,
) -> Vec<PlanWarning> {
    let mut warnings = Vec::new();
    let mut warn = |kind, message: String| warnings.push(PlanWarning { kind, message });
    let threshold = context
        .fanout
        .map_or(u32::try_from(concurrency).unwrap_or(u32::MAX), |f| {
            f.wider_than
        });
    let per_round = rounds(projection.leaves.iter());
    let wide: Vec<u32> = per_round
        .iter()
        .filter(|&(_, &n)| n > threshold)
        .map(|(&round, _)| round)
        .collect();
    if !wide.is_empty() {
        warn(
            WarningKind::WideFanout,
            format!(
                "{} fan-out(s) wider than {threshold} leaves, the widest {} ({} wave(s) at \
                 concurrency {concurrency}); preview with fewer items, or use a cheaper profile \
                 for the sweep",
                wide.len(),
                all.widest_fanout,
                all.widest_fanout
                    .div_ceil(u32::try_from(concurrency).unwrap_or(u32::MAX)),
            ),
        );
    }
    if let Some(expensive) = context.prices.and_then(PriceTable::most_expensive) {
        let count = projection
            .leaves
            .iter()
            .filter(|leaf| wide.contains(&leaf.round) && leaf.estimate.model == expensive)
            .count();
        if count > 0 {
            warn(
                WarningKind::ExpensiveFanout,
                format!(
                    "{count} leaves of wide fan-outs run on {expensive}, the most expensive model \
                     in the price table; name a cheaper profile with model=, or set a fan-out \
                     profile"
                ),
            );
        }
    }
    if projection.capped > 0 {
        warn(
            WarningKind::LeafCap,
            format!(
                "the plan hit the leaf cap: {} leaves refused past max_agents = {}",
                projection.capped, context.limits.max_agents
            ),
        );
    }
    if projection.over_budget > 0 {
        warn(
            WarningKind::Budget,
            format!(
                "the plan hit the budget: {} leaves refused because their worst case would pass it",
                projection.over_budget
            ),
        );
    }
    if let Some(prices) = context.prices {
        for profile in profiles.iter().filter(|p| p.usd.is_none()) {
            let model = profile.model.as_deref().unwrap_or("?");
            warn(
                WarningKind::Unpriced,
                format!(
                    "profile {} runs on {model}, which the price table (written {}) does not \
                     price: the dollars are unknown",
                    profile.name,
                    prices.written()
                ),
            );
        }
    }
    if let Some(ended) = &context.ended {
        let line = ended
            .line
            .map(|l| format!(" at line {l}"))
            .unwrap_or_default();
        warn(
            WarningKind::ScriptFailed,
            format!(
                "on the placeholders' path the script failed{line}: {}; a real run may fail \
                 there too, or its replies may take another path",
                ended.message
            ),
        );
    }
    if let Some(error) = &context.history_error {
        warn(
            WarningKind::HistoryUnreadable,
            format!(
                "the journal's replies could not be read ({error}): every leaf's expected \
                 output is the default"
            ),
        );
    }
    let skipped: Vec<String> = context
        .declared_phases
        .iter()
        .flatten()
        .filter(|declared| !context.entered_phases.contains(declared))
        .map(|declared| format!("{declared:?}"))
        .collect();
    if !skipped.is_empty() {
        warn(
            WarningKind::PhaseNotEntered,
            format!(
                "meta declares phase(s) {} that the plan never entered: a run that enters them \
                 (on other replies, or past where the plan ended) starts leaves these figures \
                 leave out",
                skipped.join(", ")
            ),
        );
    }
    if !context.reply_dependent.is_empty() {
        let loops: Vec<String> = context
            .reply_dependent
            .iter()
            .filter(|d| d.loop_trip_count)
            .map(|d| format!("{} at line {}", d.construct, d.line))
            .collect();
        let loops = if loops.is_empty() {
            String::new()
        } else {
            format!(
                "; loops whose trip count depends on a reply: {}",
                loops.join(", ")
            )
        };
        let led = if all.placeholder_path_leaves == 0 {
            String::new()
        } else {
            format!(
                "; {} of the leaves counted started in branches the placeholders led to \
                 (constructs at lines {}): a run may start them fewer or more times, or never",
                all.placeholder_path_leaves,
                lines(&all.placeholder_path_lines)
            )
        };
        warn(
            WarningKind::PlaceholderPath,
            format!(
                "{} construct(s) branch on replies, and the plan followed the placeholders' \
                 path{loops}{led}",
                context.reply_dependent.len()
            ),
        );
    }
    warnings
}

/// Line numbers as `3, 7, 12`.
fn lines(lines: &[u32]) -> String {
    let lines: Vec<String> = lines.iter().map(u32::to_string).collect();
    lines.join(", ")
}
