//! Know the cost before paying it: a [`Plan`] of what a script will do, made by running it in
//! the real guest against instant placeholder leaves ([`Runtime::plan`](crate::Runtime::plan)),
//! the [`PriceTable`] it is priced with, the pre-launch gate that refuses a run whose plan is
//! too large ([`GateRefusal`]), and the [`FanoutProfile`] that makes wide fan-outs cheap by
//! default.
//!
//! A projection calls no backend and no tool not marked read-only: every leaf is answered at
//! once with a reply valid against its schema (as
//! [`FakeBackend`](crate::backends::FakeBackend) answers); a `call_tool` of a read-only tool
//! ([`Tool::read_only`](crate::tools::Tool::read_only): `read_file`, `list_dir`) runs for real,
//! so a fan-out over a listing plans as wide as it will run; any other tool's call gets a
//! placeholder valid against its declared result schema
//! ([`Tool::result_schema`](crate::tools::Tool::result_schema); `null` without one). Every leaf
//! counts its estimate's worst case against the budgets, so caps and budgets refuse in the plan
//! where they would refuse in the run. Control flow that depends on replies follows the
//! placeholders' path; the plan lists the constructs that do ([`ReplyDependence`]), loops whose
//! trip count depends on a reply first among them.
//!
//! Estimates come from the backend ([`LeafBackend::estimate`](crate::LeafBackend::estimate)):
//! input tokens counted with the model family's public tokenizer where there is one, else
//! approximated ([`Tokenizer`](crate::backends::Tokenizer)); output tokens a ceiling (the
//! leaf's output limit, or the longest reply its schema allows); dollars those tokens at the
//! table's prices — so a plan's dollars are what the leaves may cost at most on their first
//! turn, and exactly what a dollar budget reserves for them.
//!
//! Beside that ceiling a plan gives what the leaves will likely cost: the same input with the
//! output tokens expected of each leaf, learnt from the journal's replies of leaves like it,
//! else a default, never above its ceiling (see [`DEFAULT_EXPECTED_OUTPUT_TOKENS`] and
//! `expected.rs`). The expected figure is the one to show a person; gates and dollar budgets
//! use the ceiling.

mod expected;
mod prices;
mod report;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use flowbox_backends::LeafEstimate;

pub use expected::{DEFAULT_EXPECTED_OUTPUT_TOKENS, REPLY_SAMPLE};
pub(crate) use expected::{History, LeafKind};
pub use prices::{Price, PriceError, PriceTable};
pub(crate) use prices::{picos, usd};
pub(crate) use report::{Context, worst_case};

use flowbox_store::ErrorInfo;

/// What a script will do, projected before it runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Plan {
    /// `meta.name`, when the script has one.
    pub name: Option<String>,
    /// The leaf agents it starts.
    pub leaves: u32,
    /// The host tools it calls with `call_tool`.
    pub tool_calls: u32,
    /// The most leaves it has in flight at once.
    pub widest_fanout: u32,
    /// How many rounds of leaves that takes at `max_concurrency`: the leaf latencies a run
    /// waits for one after another.
    pub waves: u32,
    /// The concurrency the waves are counted at.
    pub max_concurrency: usize,
    /// Estimated input tokens of every leaf's first turn.
    pub input_tokens: u64,
    /// The most output tokens the leaves may write (their output ceilings).
    pub max_output_tokens: u64,
    /// What those tokens cost at most, in dollars; `None` without a price table or when a
    /// model has no price in it. Gates and dollar budgets use this ceiling.
    pub usd: Option<f64>,
    /// The output tokens the leaves will likely write: per leaf, what the journal's replies
    /// of leaves like it say, else [`DEFAULT_EXPECTED_OUTPUT_TOKENS`]; never above its ceiling.
    pub expected_output_tokens: u64,
    /// What the leaves will likely cost, in dollars (their input estimates and expected output
    /// tokens at the table's prices): the figure to show a person. `None` when `usd` is.
    pub expected_usd: Option<f64>,
    /// How many leaves' expected output comes from the journal's replies.
    pub expected_from_history: u32,
    /// How many leaves' expected output is the default (nothing alike in the journal, or no
    /// journal).
    pub expected_from_default: u32,
    /// How many of the leaves counted started in a branch of a reply-dependent construct that
    /// the placeholder replies led into (a retry on a verdict, say): a run may start them fewer
    /// or more times, or never. The phases and profiles say where they are.
    pub placeholder_path_leaves: u32,
    /// The date the price table was written, when there is one.
    pub prices_written: Option<String>,
    /// The same figures per phase, in the order the script entered them (leaves before the
    /// first `phase(...)` under `(no phase)`).
    pub phases: Vec<PlanGroup>,
    /// The same figures per model profile (`default` for the backend's default model).
    pub profiles: Vec<PlanGroup>,
    /// The host tools its leaves may use.
    pub leaf_tools: Vec<String>,
    /// The host tools the script calls itself.
    pub script_tools: Vec<String>,
    /// The constructs whose path depends on a reply: the plan followed the placeholders'.
    pub reply_dependent: Vec<ReplyDependence>,
    /// What deserves a look before running it.
    pub warnings: Vec<PlanWarning>,
    /// How the script ended on the placeholders' path, when it failed there.
    pub ended: Option<ErrorInfo>,
    /// Fuel the projection used.
    pub fuel_used: u64,
}

/// The figures of one phase or one model profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PlanGroup {
    /// The phase's title or the profile's name.
    pub name: String,
    /// For a profile: the provider model id it runs on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// For a profile: how its input tokens were counted (`o200k_base`, `cl100k_base`,
    /// `approximate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<&'static str>,
    /// Its leaves.
    pub leaves: u32,
    /// The most of its leaves in flight at once.
    pub widest_fanout: u32,
    /// The waves its leaves take at the plan's concurrency.
    pub waves: u32,
    /// Estimated input tokens.
    pub input_tokens: u64,
    /// Output ceiling, in tokens.
    pub max_output_tokens: u64,
    /// At most, in dollars (`None`: unpriced).
    pub usd: Option<f64>,
    /// Expected output tokens.
    pub expected_output_tokens: u64,
    /// Expected dollars (`None`: unpriced).
    pub expected_usd: Option<f64>,
    /// Leaves whose expected output comes from the journal's replies.
    pub expected_from_history: u32,
    /// Leaves whose expected output is the default.
    pub expected_from_default: u32,
    /// Its leaves that started in a branch the placeholder replies led into.
    pub placeholder_path_leaves: u32,
    /// The lines of the reply-dependent constructs whose branches hold those leaves.
    pub placeholder_path_lines: Vec<u32>,
    /// The host tools its leaves may use.
    pub tools: Vec<String>,
}

/// A construct whose path depends on a leaf's or tool's reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReplyDependence {
    /// The script line.
    pub line: u32,
    /// `while`, `for`, `comprehension`, `if`, `match` or `conditional expression`.
    pub construct: String,
    /// Whether it is a loop whose trip count depends on a reply (its condition or iterable
    /// does, or a `break`/`return` under a reply-dependent condition ends it).
    pub loop_trip_count: bool,
}

/// Something in a plan that deserves a look.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PlanWarning {
    /// What kind of warning.
    pub kind: WarningKind,
    /// What it says, with the figures.
    pub message: String,
}

/// The kinds of plan warnings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WarningKind {
    /// A fan-out wider than the threshold (the fan-out profile's width, else the concurrency).
    WideFanout,
    /// Leaves of a wide fan-out on the price table's most expensive model.
    ExpensiveFanout,
    /// The plan hit the leaf cap (`max_agents`).
    LeafCap,
    /// The plan hit the token or dollar budget.
    Budget,
    /// A model has no price, so the dollars are unknown.
    Unpriced,
    /// The script failed on the placeholders' path.
    ScriptFailed,
    /// Control flow depends on replies: the figures are for the placeholders' path.
    PlaceholderPath,
    /// The journal's replies could not be read: every expected figure is the default.
    HistoryUnreadable,
    /// A phase `meta` declares that the plan never entered: its leaves, if a run enters it,
    /// are not in the figures.
    PhaseNotEntered,
}

/// A run the pre-launch gate refused: its plan passed [`Limits::gate_leaves`] or
/// [`Limits::gate_usd`](crate::Limits::gate_usd). Nothing ran; the plan says what would have.
///
/// [`Limits::gate_leaves`]: crate::Limits::gate_leaves
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct GateRefusal {
    /// Why, with the figures.
    pub reason: String,
    /// The plan that measured it.
    pub plan: Plan,
}

/// A default profile for leaves in wide fan-outs: a leaf inside a `parallel`/`pipeline` group
/// of more than `wider_than` items runs on `profile` unless it names its model (with `model=`,
/// or through its `agent_type`'s template).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FanoutProfile {
    /// The profile's name, as a script would give it to `model=`.
    pub profile: String,
    /// The widest group whose leaves keep the default model.
    pub wider_than: u32,
}

/// One leaf of a projection, as the plan counts it.
#[derive(Debug)]
pub(crate) struct ProjectedLeaf {
    /// The phase it started in.
    pub phase: Option<String>,
    /// The backend's estimate.
    pub estimate: LeafEstimate,
    /// What kind of leaf it is, for its expected output.
    pub kind: LeafKind,
    /// The round it started in: leaves of one round are in flight together.
    pub round: u32,
    /// Its call's handle.
    pub handle: u64,
    /// The lines of the reply-dependent constructs whose branches it started in (the
    /// placeholders led there); empty when none did.
    pub placeholder_path: Vec<u32>,
}

/// What a projection's calls saw, for its plan.
#[derive(Debug, Default)]
pub(crate) struct Projection {
    /// Completed rounds: each `await-next` ends one.
    pub round: u32,
    pub leaves: Vec<ProjectedLeaf>,
    pub tools: BTreeSet<String>,
    pub tool_calls: u32,
    /// Leaves the cap refused.
    pub capped: u32,
    /// Leaves a budget refused.
    pub over_budget: u32,
}
