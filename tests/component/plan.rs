//! Plans, dollar budgets, the pre-launch gate and the fan-out profile, through the real guest:
//! a plan counts what a real run of the same script starts, per profile; it scales with the
//! args; a gate below it refuses before any backend call; a dollar budget stops at the leaf
//! that would cross it; `run_workflow` previews; read-only tools run in a plan, others get a
//! placeholder of their declared shape; the expected cost comes from the journal's replies,
//! else the default, and never passes the ceiling.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use flowbox::backends::{
    AgentConfig, AgentTemplate, CheckedBackend, LeafEstimate, ScriptedBackend,
};
use flowbox::orchestrator::WorkflowTool;
use flowbox::plan::{
    DEFAULT_EXPECTED_OUTPUT_TOKENS, FanoutProfile, Plan, PlanGroup, PriceTable, WarningKind,
};
use flowbox::store::{CheckpointStore, MemoryStore, SqliteStore};
use flowbox::tools::{ToolError, ToolSet};
use flowbox::{
    BackendError, LeafBackend, LeafReply, LeafRequest, Limits, RunError, RunRequest, Runtime,
};
use flowbox_tests::{PanickingBackend, root};
use serde_json::json;

/// Remembers the profile (`model=`) of every leaf it answers, and answers like its inner
/// backend.
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn LeafBackend>,
    models: Mutex<Vec<Option<String>>>,
}

impl Recording {
    fn over(inner: impl LeafBackend + 'static) -> Arc<Self> {
        Arc::new(Self {
            inner: Arc::new(inner),
            models: Mutex::default(),
        })
    }

    /// How many leaves ran on each profile (`default` for none).
    fn per_profile(&self) -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for model in self.models.lock().unwrap().iter() {
            *counts
                .entry(model.clone().unwrap_or_else(|| "default".into()))
                .or_insert(0) += 1;
        }
        counts
    }
}

#[async_trait::async_trait]
impl LeafBackend for Recording {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        self.models.lock().unwrap().push(request.model.clone());
        self.inner.call(request).await
    }
}

fn per_profile(plan: &Plan) -> BTreeMap<String, u32> {
    plan.profiles
        .iter()
        .map(|profile| (profile.name.clone(), profile.leaves))
        .collect()
}

fn prices() -> PriceTable {
    PriceTable::load(root().join("examples/prices.json")).expect("the example price table")
}

/// Leaves on `gpt-4o` by default and `gpt-4o-mini` as the `fast` profile, held to that
/// configuration, over `inner`.
fn checked(inner: Arc<dyn LeafBackend>) -> CheckedBackend {
    let mut config = AgentConfig {
        model: "gpt-4o".into(),
        ..AgentConfig::default()
    };
    config.profiles.insert("fast".into(), "gpt-4o-mini".into());
    config
        .profiles
        .insert("big".into(), "claude-opus-4-1".into());
    config.templates.insert(
        "critic".into(),
        AgentTemplate {
            description: None,
            base_prompt: "You criticise.".into(),
            model: Some("big".into()),
            tools: None,
        },
    );
    CheckedBackend::new(inner, config, ToolSet::new())
}

fn builder(backend: Arc<dyn LeafBackend>) -> flowbox::RuntimeBuilder {
    Runtime::builder()
        .shared_backend(backend)
        .cache_dir(root().join("target").join("flowbox-cache"))
}

fn pattern(name: &str) -> String {
    let path = root().join(format!("host/flowbox/patterns/{name}.py"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn the_plan_of_every_pattern_matches_the_leaves_a_real_run_makes_per_profile() {
    let mut names: Vec<String> = std::fs::read_dir(root().join("host/flowbox/patterns"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "py"))
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 7, "{names:?}");
    for name in &names {
        // Scripted leaves, jittered so that they finish out of order, answering as the
        // placeholders do; wide groups move to the fast profile.
        let scripted = ScriptedBackend::from_json(
            r#"{"seed": 3, "latency_ms": 1, "jitter_ms": 4, "fallback": "fake"}"#,
        )
        .unwrap();
        let recording = Recording::over(scripted);
        let runtime = builder(Arc::new(checked(recording.clone())))
            .prices(prices())
            .fanout_profile(FanoutProfile {
                profile: "fast".into(),
                wider_than: 2,
            })
            .build()
            .unwrap();
        let script = pattern(name);
        let plan = runtime
            .plan(RunRequest::new(script.clone()))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            recording.models.lock().unwrap().is_empty(),
            "{name}: the plan called a leaf"
        );
        let outcome = runtime.run(&script, json!({})).await;
        let summary = outcome.summary.clone();
        outcome.result.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(plan.leaves, summary.leaves, "{name}");
        assert_eq!(per_profile(&plan), recording.per_profile(), "{name}");
        assert_eq!(plan.tool_calls, summary.tools_called, "{name}");
        let phases: Vec<&str> = plan.phases.iter().map(|p| p.name.as_str()).collect();
        let entered: Vec<&str> = summary.phases.iter().map(String::as_str).collect();
        assert!(
            phases.iter().all(|p| entered.contains(p)),
            "{name}: {phases:?} {entered:?}"
        );
        assert_eq!(
            plan.phases.iter().map(|p| p.leaves).sum::<u32>(),
            plan.leaves,
            "{name}"
        );
        let usd = plan
            .usd
            .unwrap_or_else(|| panic!("{name}: unpriced: {plan:?}"));
        assert_eq!(usd > 0.0, plan.leaves > 0, "{name}: {plan:?}");
    }
}

#[tokio::test]
async fn a_loop_over_the_items_scales_the_plan_with_the_args() {
    let runtime = builder(Arc::new(PanickingBackend::always()))
        .build()
        .unwrap();
    let script = r#"
phase("review")
reviews = await parallel([lambda i=i: agent(f"review {i}") for i in args["items"]])
phase("summarise")
for r in reviews:
    await agent({"summarise": r}, schema={"enum": ["ok", "not ok"]})
return len(reviews)
"#;
    let plan_of = |n: usize| {
        let items: Vec<usize> = (0..n).collect();
        runtime.plan(RunRequest::new(script).args(json!({"items": items})))
    };
    let small = plan_of(3).await.unwrap();
    let large = plan_of(40).await.unwrap();
    assert_eq!((small.leaves, large.leaves), (6, 80));
    assert_eq!((small.widest_fanout, large.widest_fanout), (3, 40));
    // 40 at once take 3 waves at concurrency 16, then 40 one after another.
    assert_eq!(large.waves, 3 + 40);
    let review = &large.phases[0];
    assert_eq!(
        (review.name.as_str(), review.leaves, review.waves),
        ("review", 40, 3)
    );
    let summarise = &large.phases[1];
    // The schema bounds each answer to 8 bytes of JSON, hence 8 tokens at most.
    assert_eq!(
        (summarise.leaves, summarise.max_output_tokens),
        (40, 40 * 8)
    );
    assert!(large.input_tokens > small.input_tokens);
    assert_eq!(large.usd, None, "no price table, no dollars");
    assert!(
        large
            .warnings
            .iter()
            .any(|w| w.kind == WarningKind::WideFanout),
        "{large:?}"
    );
    // The `for` over the replies is marked: its trip count depends on them.
    assert!(
        large
            .reply_dependent
            .iter()
            .any(|d| d.line == 5 && d.construct == "for" && d.loop_trip_count),
        "{:?}",
        large.reply_dependent
    );
}

#[tokio::test]
async fn a_gate_below_the_plan_refuses_the_run_before_any_backend_call() {
    let store = Arc::new(MemoryStore::new());
    let runtime = builder(Arc::new(checked(Arc::new(PanickingBackend::always()))))
        .prices(prices())
        .shared_store(store.clone())
        .build()
        .unwrap();
    let script = "meta = {'name': 'gated', 'description': 'five leaves'}\n\
                  return await parallel([lambda i=i: agent(f'item {i}') for i in range(5)])";
    for (limits, reason) in [
        (
            Limits::default().with_gate_leaves(Some(4)),
            "the plan starts 5 leaves and the gate admits at most 4",
        ),
        (
            Limits::default().with_gate_usd(Some(0.01)),
            "the plan may cost up to $0.2",
        ),
        (
            Limits::default().with_gate_usd(Some(0.01)),
            "(expected ~$0.0",
        ),
    ] {
        let request = RunRequest::new(script).limits(limits).thread_id("gated");
        let outcome = runtime.run_request(request).await;
        let Err(RunError::GateRefused(refusal)) = &outcome.result else {
            panic!("not refused by the gate: {:?}", outcome.result);
        };
        assert!(refusal.reason.contains(reason), "{}", refusal.reason);
        assert_eq!(refusal.plan.leaves, 5);
        // The refused plan carries the expected cost beside the ceiling the gate measured.
        let expected = refusal.plan.expected_usd.expect("priced");
        assert!(expected < refusal.plan.usd.unwrap(), "{:?}", refusal.plan);
        assert_eq!(refusal.plan.expected_from_default, 5);
        assert_eq!(outcome.summary.leaves, 0);
        // Nothing was journaled: the refused run left no thread.
        assert!(store.load("gated").await.unwrap().is_none());
        let json = outcome.to_json();
        assert_eq!(json["error"]["kind"], "gate_refused");
        assert_eq!(json["error"]["plan"]["leaves"], 5);
        assert_eq!(json["error"]["plan"]["expected_usd"], json!(expected));
    }
}

#[tokio::test]
async fn a_gate_the_plan_passes_admits_the_run_it_measured() {
    let recording = Recording::over(flowbox::backends::FakeBackend::new());
    let runtime = builder(Arc::new(checked(recording.clone())))
        .prices(prices())
        .build()
        .unwrap();
    // The fan-out's width comes from `random`: the plan and the run see the same numbers.
    let script = "import random\nn = random.randint(2, 9)\n\
                  return await parallel([lambda i=i: agent(f'item {i}') for i in range(n)])";
    let limits = Limits::default()
        .with_gate_leaves(Some(9))
        .with_gate_usd(Some(10.0));
    let outcome = runtime
        .run_request(
            RunRequest::new(script)
                .limits(limits.clone())
                .thread_id("seeded"),
        )
        .await;
    let leaves = outcome.result.unwrap().as_array().unwrap().len();
    let plan = runtime
        .plan(RunRequest::new(script).limits(limits).thread_id("seeded"))
        .await
        .unwrap();
    assert_eq!(plan.leaves as usize, leaves);
    assert_eq!(recording.models.lock().unwrap().len(), leaves);
}

/// A scripted backend answering `"ok"` with 3 input and 2 output tokens; its leaves are priced
/// by the generic estimate as the model `default`.
fn priced_runtime(budget: f64) -> Runtime {
    let scripted = ScriptedBackend::from_json(
        r#"{"rules": [{"prompt": ".", "json": "ok", "tokens": {"input": 3, "output": 2}}]}"#,
    )
    .unwrap();
    // $1000 per million tokens either way: $0.001 a token.
    let prices = PriceTable::from_json(
        r#"{"written": "2025-11-30", "models": {"default": {"input": 1000, "output": 1000}}}"#,
    )
    .unwrap();
    builder(Arc::new(scripted))
        .prices(prices)
        .limits(Limits::default().with_budget_usd(Some(budget)))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_dollar_budget_stops_at_the_leaf_that_would_cross_it_and_not_one_later() {
    // Each leaf's worst case: 6 input tokens (prompt "p" and the schema, approximated) and 4
    // output tokens (the schema's longest reply) = $0.01; each spends 5 tokens = $0.005.
    let estimate = {
        let mut request = LeafRequest::new(1, json!("p"));
        request.schema = Some(json!({"enum": ["ok"]}));
        LeafEstimate::generic(&request)
    };
    assert_eq!((estimate.input_tokens, estimate.max_output_tokens), (6, 4));
    let runtime = priced_runtime(0.03);
    let script = r#"
started = 0
try:
    for i in range(10):
        await agent("p", schema={"enum": ["ok"]})
        started += 1
except BudgetExceeded as e:
    return {"started": started, "spent": budget.spent_usd(), "left": budget.remaining_usd(),
            "total": budget.total_usd, "message": str(e)}
"#;
    let result = runtime.run(script, json!({})).await.result.unwrap();
    // After 4 leaves $0.02 is spent and a fifth may cost $0.01: exactly the budget, allowed.
    // After 5, $0.025 + $0.01 would pass it: the sixth is refused.
    assert_eq!(result["started"], 5);
    assert_eq!(result["spent"], json!(0.025));
    assert_eq!(result["left"], json!(0.005));
    assert_eq!(result["total"], json!(0.03));
    let message = result["message"].as_str().unwrap();
    assert!(
        message
            .contains("$0.025000 spent, $0.000000 in flight and this leaf's worst case $0.010000"),
        "{message}"
    );

    // Leaves started together reserve their worst cases: three fit in $0.03, the fourth not.
    let script = r#"
out = await parallel([lambda: agent("p", schema={"enum": ["ok"]}) for _ in range(6)])
return [r is not None for r in out]
"#;
    let outcome = runtime.run(script, json!({})).await;
    assert_eq!(
        outcome.result.unwrap(),
        json!([true, true, true, false, false, false])
    );
    assert_eq!(outcome.summary.leaves, 3);
}

#[tokio::test]
async fn a_dollar_budget_refuses_a_leaf_it_cannot_price_and_needs_a_price_table() {
    let runtime = priced_runtime(1.0);
    let error = flowbox_tests::error_of(&runtime, "return await agent('p', model='fast')").await;
    assert_eq!(error["exception"], "ValueError", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("has no price for model \"fast\""),
        "{message}"
    );

    let unpriced = builder(Arc::new(flowbox::backends::FakeBackend::new()));
    let error = unpriced
        .limits(Limits::default().with_budget_usd(Some(1.0)))
        .build()
        .unwrap_err();
    assert!(
        error.to_string().contains("RuntimeBuilder::prices"),
        "{error}"
    );
    let runtime = flowbox_tests::runtime();
    let request = RunRequest::new("return 1").limits(Limits::default().with_gate_usd(Some(1.0)));
    let outcome = runtime.run_request(request).await;
    assert!(
        matches!(&outcome.result, Err(RunError::InvalidLimits(e)) if e.field == "gate_usd"),
        "{:?}",
        outcome.result
    );
}

#[tokio::test]
async fn the_fanout_profile_moves_only_default_model_leaves_of_wide_groups() {
    let recording = Recording::over(flowbox::backends::FakeBackend::new());
    let runtime = builder(Arc::new(checked(recording.clone())))
        .fanout_profile(FanoutProfile {
            profile: "fast".into(),
            wider_than: 2,
        })
        .build()
        .unwrap();
    let script = r#"
await agent("alone")
await parallel([lambda: agent("a"), lambda: agent("b")])
await parallel([lambda: agent("w1"), lambda: agent("w2", model="big"),
                lambda: agent("w3", agent_type="critic")])
return 1
"#;
    runtime.run(script, json!({})).await.result.unwrap();
    let models = recording.models.lock().unwrap().clone();
    let fast = Some("fast".to_owned());
    let big = Some("big".to_owned());
    // w3's template names its model, so it keeps it: the request carries no model of its own.
    assert_eq!(models, [None, None, None, fast, big, None]);
}

#[tokio::test]
async fn preview_through_run_workflow_returns_the_plan_and_runs_nothing() {
    let runtime = builder(Arc::new(checked(Arc::new(PanickingBackend::always()))))
        .prices(prices())
        .build()
        .unwrap();
    let tool = WorkflowTool::new(runtime.clone());
    let input = serde_json::from_value(json!({
        "script": "return await parallel([lambda i=i: agent(f'x {i}') for i in args['items']])",
        "args": {"items": [1, 2, 3]},
        "preview": true,
    }))
    .unwrap();
    let output = tool.execute(input).await.to_value();
    assert_eq!(output["ok"], true, "{output}");
    assert_eq!(output["preview"], true);
    assert_eq!(output["plan"]["leaves"], 3);
    assert_eq!(output["plan"]["profiles"][0]["model"], "gpt-4o");
    assert_eq!(output["plan"]["profiles"][0]["tokenizer"], "o200k_base");
    // Beside the ceiling, what the leaves will likely cost: with no journal, the default.
    let plan = &output["plan"];
    assert_eq!(
        plan["expected_output_tokens"],
        3 * DEFAULT_EXPECTED_OUTPUT_TOKENS
    );
    assert_eq!(
        (
            &plan["expected_from_history"],
            &plan["expected_from_default"]
        ),
        (&json!(0), &json!(3))
    );
    assert!(plan["expected_usd"].as_f64().unwrap() < plan["usd"].as_f64().unwrap());
    assert_eq!(plan["profiles"][0]["expected_from_default"], 3);
    assert!(tool.runs().is_empty(), "a preview is not a run");

    // A gate refusal reaches the root model with its plan and a hint.
    let gated = WorkflowTool::new(
        builder(Arc::new(checked(Arc::new(PanickingBackend::always()))))
            .limits(Limits::default().with_gate_leaves(Some(2)))
            .build()
            .unwrap(),
    );
    let input = serde_json::from_value(json!({
        "script": "return await parallel([lambda i=i: agent(f'x {i}') for i in range(3)])",
    }))
    .unwrap();
    let output = gated.execute(input).await.to_value();
    assert_eq!(output["error"]["kind"], "gate_refused", "{output}");
    assert_eq!(output["error"]["plan"]["leaves"], 3);
    let hint = output["error"]["hint"].as_str().unwrap();
    assert!(hint.contains("cheaper profile"), "{hint}");
}

#[tokio::test]
async fn a_script_that_fails_on_the_placeholders_path_still_has_a_plan_saying_where() {
    let runtime = flowbox_tests::runtime();
    let script = "r = await agent('x')\nreturn r['missing']\n";
    let plan = runtime.plan(RunRequest::new(script)).await.unwrap();
    assert_eq!(plan.leaves, 1);
    let ended = plan.ended.as_ref().expect("the failure is in the plan");
    assert_eq!(ended.line, Some(2));
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.kind == WarningKind::ScriptFailed)
    );
    // A script that does not pass its checks has no plan.
    let error = runtime
        .plan(RunRequest::new("import os\nreturn 1"))
        .await
        .unwrap_err();
    assert_eq!(error.kind().as_str(), "forbidden");
}

/// A phase `meta` declares that the plan never entered (the placeholders' path skipped it) is
/// a warning naming it; a plan that enters every declared phase has none.
#[tokio::test]
async fn a_declared_phase_the_plan_never_entered_is_a_warning() {
    let runtime = flowbox_tests::runtime();
    let script = r#"
meta = {"name": "triage", "description": "d",
        "phases": [{"title": "decide"}, {"title": "escalate"}, {"title": "close"}]}
async def main():
    phase("decide")
    verdict = await agent("decide", schema={"type": "object", "required": ["urgent"],
                                              "properties": {"urgent": {"type": "boolean"}}})
    if verdict["urgent"] is True and verdict["urgent"] is not False:
        phase("escalate")
        return await agent("page the on-call")
    phase("close")
    return "closed"
"#;
    let plan = runtime.plan(RunRequest::new(script)).await.unwrap();
    let skipped: Vec<&str> = plan
        .warnings
        .iter()
        .filter(|w| w.kind == WarningKind::PhaseNotEntered)
        .map(|w| w.message.as_str())
        .collect();
    assert_eq!(skipped.len(), 1, "{:?}", plan.warnings);
    let entered: Vec<&str> = plan.phases.iter().map(|p| p.name.as_str()).collect();
    let missing = if entered.contains(&"escalate") {
        "\"close\""
    } else {
        "\"escalate\""
    };
    assert!(skipped[0].contains(missing), "{skipped:?} {entered:?}");
    let linear = "meta = {\"name\": \"n\", \"description\": \"d\", \"phases\": \
                  [{\"title\": \"a\"}, {\"title\": \"b\"}]}\n\
                  async def main():\n    phase(\"a\")\n    x = await agent(\"x\")\n    \
                  phase(\"b\")\n    return x\n";
    let plan = runtime.plan(RunRequest::new(linear)).await.unwrap();
    assert!(
        !plan
            .warnings
            .iter()
            .any(|w| w.kind == WarningKind::PhaseNotEntered),
        "{:?}",
        plan.warnings
    );
}

/// A review that retries on a verdict and fans out when it passes: the placeholder verdict
/// takes one of the two branches, and the plan's phase table says which leaves it counted there.
const RETRY: &str = r#"
meta = {"name": "review", "description": "d", "phases": [{"title": "draft"}, {"title": "check"}]}
async def main():
    phase("draft")
    draft = await agent("draft")
    phase("check")
    verdict = await agent("check", schema={"type": "object", "required": ["ok"],
                                           "properties": {"ok": {"type": "boolean"}}})
    if verdict["ok"] is not True:
        draft = await redo(draft)
    else:
        await parallel([lambda: agent("polish"), lambda: agent("proofread")])
    return draft

async def redo(draft):
    return await agent("redo " + draft)
"#;

#[tokio::test]
async fn the_phase_table_counts_the_leaves_a_placeholder_led_into_a_branch() {
    let runtime = flowbox_tests::runtime();
    let plan = runtime.plan(RunRequest::new(RETRY)).await.unwrap();
    let phases: Vec<(&str, u32, u32, &[u32])> = plan
        .phases
        .iter()
        .map(|p| {
            let lines = p.placeholder_path_lines.as_slice();
            (p.name.as_str(), p.leaves, p.placeholder_path_leaves, lines)
        })
        .collect();
    // The fake backend's placeholder for a boolean is `false`... or `true`: either way the
    // branch taken is counted and marked with the `if` at line 9, never the leaves before it.
    let taken = plan.leaves - 2;
    assert!(taken == 1 || taken == 2, "{plan:?}");
    assert_eq!(
        phases,
        [
            ("draft", 1, 0, &[][..]),
            ("check", 1 + taken, taken, &[9][..])
        ]
    );
    assert_eq!(plan.placeholder_path_leaves, taken);
    let warning = plan
        .warnings
        .iter()
        .find(|w| w.kind == WarningKind::PlaceholderPath)
        .expect("a placeholder-path warning");
    assert!(
        warning.message.contains(&format!(
            "{taken} of the leaves counted started in branches the placeholders led to \
             (constructs at lines 9)"
        )),
        "{}",
        warning.message
    );
    // Profiles carry the same count.
    assert_eq!(plan.profiles[0].placeholder_path_leaves, taken);
    // A straight script has none.
    let plan = runtime
        .plan(RunRequest::new("x = await agent('a')\nreturn x\n"))
        .await
        .unwrap();
    assert_eq!(plan.placeholder_path_leaves, 0);
    assert_eq!(plan.phases[0].placeholder_path_lines, Vec::<u32>::new());
}

/// A directory `notes` with `n` files (and a subdirectory, which is no file to review), granted
/// as the runtime's code tools.
fn granted_notes(n: usize) -> (tempfile::TempDir, ToolSet) {
    let base = tempfile::tempdir().unwrap();
    let notes = base.path().join("notes");
    std::fs::create_dir_all(notes.join("old")).unwrap();
    for i in 0..n {
        std::fs::write(notes.join(format!("note{i}.md")), format!("note {i}")).unwrap();
    }
    let tools = flowbox::tools::ReadRoots::open(&[notes]).unwrap().tools();
    (base, tools)
}

/// One leaf per file of a listing the script did not write.
const PER_FILE: &str = r#"
listing = await call_tool("list_dir", path="notes")
files = [e["name"] for e in listing["entries"] if e["kind"] == "file"]
text = (await call_tool("read_file", path="notes/" + files[0]))["content"]
reviews = await parallel([lambda f=f: agent(f"review {f} after {text}") for f in files])
return len(reviews)
"#;

#[tokio::test]
async fn a_plan_runs_read_only_tools_so_a_fan_out_over_a_listing_plans_as_wide_as_it_runs() {
    let (_base, tools) = granted_notes(7);
    let recording = Recording::over(flowbox::backends::FakeBackend::new());
    let runtime = builder(recording.clone())
        .code_tools(tools)
        .build()
        .unwrap();
    let plan = runtime.plan(RunRequest::new(PER_FILE)).await.unwrap();
    assert!(
        recording.models.lock().unwrap().is_empty(),
        "the plan called a leaf"
    );
    assert_eq!(plan.ended, None, "{plan:?}");
    assert!(
        plan.warnings
            .iter()
            .all(|w| w.kind != WarningKind::ScriptFailed)
    );
    assert_eq!((plan.leaves, plan.widest_fanout), (7, 7));
    assert_eq!(plan.tool_calls, 2);
    assert_eq!(plan.script_tools, ["list_dir", "read_file"]);
    // What read-only tools return is what the run gets: no construct depends on a reply.
    assert_eq!(plan.reply_dependent, [], "{plan:?}");
    assert_eq!(plan.placeholder_path_leaves, 0);
    let outcome = runtime.run(PER_FILE, json!({})).await;
    assert_eq!(outcome.result.unwrap(), json!(7));
    assert_eq!(plan.leaves, outcome.summary.leaves);
    assert_eq!(plan.tool_calls, outcome.summary.tools_called);
}

/// Counts the calls of a tool that does its work in a closure.
fn counted(
    tool: &str,
    answer: Result<serde_json::Value, &'static str>,
) -> (Arc<AtomicUsize>, flowbox_tests::FnTool) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let tool = flowbox_tests::FnTool::new(tool, "", json!({"type": "object"}), move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        answer.clone().map_err(|e| ToolError::Failed(e.into()))
    });
    (calls, tool)
}

#[tokio::test]
async fn a_plan_calls_an_embedders_read_only_tool_and_gives_the_others_a_placeholder_of_their_shape()
 {
    let (catalog_calls, catalog) = counted("catalog", Ok(json!({"items": ["a", "b", "c"]})));
    let (deploy_calls, deploy) = counted("deploy", Ok(json!({"id": "d-1", "urls": ["u"]})));
    let (notify_calls, notify) = counted("notify", Ok(json!("sent")));
    let deployed = json!({
        "type": "object",
        "properties": {"id": {"type": "string"}, "urls": {"type": "array", "items": {"type": "string"}}},
        "required": ["id", "urls"]
    });
    let mut tools = ToolSet::new();
    tools.insert(Arc::new(catalog.as_read_only())).unwrap();
    tools
        .insert(Arc::new(deploy.returning(deployed.clone())))
        .unwrap();
    tools.insert(Arc::new(notify)).unwrap();
    let runtime = builder(Arc::new(PanickingBackend::always()))
        .code_tools(tools)
        .build()
        .unwrap();
    let script = r#"
items = (await call_tool("catalog"))["items"]
deployed = await call_tool("deploy", target="staging")
checks = await parallel([lambda i=i: agent(f"check {i} at {deployed['urls']}") for i in items])
return {"id": deployed["id"], "checks": len(checks)}
"#;
    let plan = runtime.plan(RunRequest::new(script)).await.unwrap();
    assert_eq!(catalog_calls.load(Ordering::SeqCst), 1, "read-only: called");
    assert_eq!(
        deploy_calls.load(Ordering::SeqCst),
        0,
        "not read-only: never called"
    );
    // The placeholder fits `deploy`'s result schema: the script indexed it and went on.
    assert_eq!(plan.ended, None, "{plan:?}");
    assert_eq!(plan.leaves, 3, "one per item of the real catalog");
    assert_eq!((plan.tool_calls, plan.script_tools.len()), (2, 2));

    // A tool that declares no result shape gets `None`, as before tools could declare one:
    // indexing it fails the plan's path, which the plan says.
    let script = "sent = await call_tool('notify', text='hi')\nreturn sent['status']\n";
    let plan = runtime.plan(RunRequest::new(script)).await.unwrap();
    assert_eq!(notify_calls.load(Ordering::SeqCst), 0);
    let ended = plan.ended.as_ref().expect("the placeholder was None");
    assert_eq!(
        (ended.line, ended.exception.as_deref()),
        (Some(2), Some("TypeError"))
    );
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.kind == WarningKind::ScriptFailed)
    );
    // The real run calls them all.
    runtime.run(script, json!({})).await.result.unwrap_err();
    assert_eq!(notify_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_read_only_tool_failing_in_a_plan_reaches_the_script_as_in_the_run() {
    let (calls, lookup) = counted("lookup", Err("the index is offline"));
    let mut tools = ToolSet::new();
    tools.insert(Arc::new(lookup.as_read_only())).unwrap();
    let runtime = builder(Arc::new(flowbox::backends::FakeBackend::new()))
        .code_tools(tools)
        .build()
        .unwrap();
    // Caught: the script takes its fallback path in the plan as in the run.
    let caught = r#"
try:
    hits = (await call_tool("lookup", q="x"))["hits"]
except ToolError as e:
    hits = [e.kind, str(e)]
return await parallel([lambda h=h: agent(h) for h in hits])
"#;
    let plan = runtime.plan(RunRequest::new(caught)).await.unwrap();
    assert_eq!((plan.ended.as_ref(), plan.leaves), (None, 2), "{plan:?}");
    let result = runtime.run(caught, json!({})).await.result.unwrap();
    assert_eq!(
        result,
        json!(["[fake leaf] tool", "[fake leaf] the index is offline"])
    );
    // Uncaught: the plan ends where and as the run does.
    let uncaught = "x = 1\nawait call_tool('lookup', q='x')\nreturn x\n";
    let plan = runtime.plan(RunRequest::new(uncaught)).await.unwrap();
    let ended = serde_json::to_value(plan.ended.expect("the plan ended")).unwrap();
    let run = runtime.run(uncaught, json!({})).await.to_json();
    assert_eq!(ended, run["error"], "{ended}");
    assert_eq!(ended["exception"], "ToolError");
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

/// Reviewers that write 180 output tokens and a synthesis that writes 60, as a backend reports
/// them and the journal records them.
const MEASURED_REPLIES: &str = r#"{"rules": [
    {"label": "^review ", "text": "{label}: two nits", "tokens": {"input": 400, "output": 180}},
    {"label": "^synthesis$", "json": {"verdict": "approve", "summary": "ok"},
     "tokens": {"input": 300, "output": 60}}
]}"#;

/// A runtime on `gpt-4o` leaves answering with [`MEASURED_REPLIES`], priced, journaling to
/// `store` when there is one.
fn measured(store: Option<Arc<dyn CheckpointStore>>) -> Runtime {
    let scripted = ScriptedBackend::from_json(MEASURED_REPLIES).unwrap();
    let mut builder = builder(Arc::new(checked(Arc::new(scripted)))).prices(prices());
    if let Some(store) = store {
        builder = builder.shared_store(store);
    }
    builder.build().unwrap()
}

fn review_script() -> String {
    std::fs::read_to_string(root().join("examples/review.py")).unwrap()
}

fn expected_of(group: &PlanGroup) -> (u64, u32, u32) {
    (
        group.expected_output_tokens,
        group.expected_from_history,
        group.expected_from_default,
    )
}

/// The dollars of `tokens` output tokens of `gpt-4o` ($10 per million).
fn gpt_4o_output_usd(tokens: u64) -> f64 {
    tokens as f64 * 10.0 / 1e6
}

#[tokio::test]
async fn the_expected_cost_comes_from_the_journals_replies_else_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn CheckpointStore> =
        Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap());
    let runtime = measured(Some(store));
    let script = review_script();
    let default = DEFAULT_EXPECTED_OUTPUT_TOKENS;

    // A new journal has seen nothing: every leaf expects the default, well under its ceiling.
    let fresh = runtime.plan(RunRequest::new(script.clone())).await.unwrap();
    assert_eq!(
        (
            fresh.expected_output_tokens,
            fresh.expected_from_history,
            fresh.expected_from_default
        ),
        (5 * default, 0, 5)
    );
    assert_eq!(fresh.max_output_tokens, 5 * 4096);

    runtime
        .run(&script, json!({}))
        .await
        .result
        .expect("the review runs");

    // A similar run, of other files: other prompts and labels, the same kinds of leaves.
    let args = json!({"files": ["a.py", "b.py", "c.py"]});
    let plan = runtime
        .plan(RunRequest::new(script.clone()).args(args.clone()))
        .await
        .unwrap();
    assert_eq!(
        (
            plan.expected_output_tokens,
            plan.expected_from_history,
            plan.expected_from_default
        ),
        (3 * 180 + 60, 4, 0)
    );
    assert_eq!(expected_of(&plan.phases[0]), (3 * 180, 3, 0));
    assert_eq!(expected_of(&plan.phases[1]), (60, 1, 0));
    assert_eq!(expected_of(&plan.profiles[0]), (3 * 180 + 60, 4, 0));
    // The same input, only the output differs: the dollars differ by its price.
    let (usd, expected) = (plan.usd.unwrap(), plan.expected_usd.unwrap());
    let saved = gpt_4o_output_usd(plan.max_output_tokens - plan.expected_output_tokens);
    assert!((usd - expected - saved).abs() < 1e-9, "{usd} {expected}");
    let phases: f64 = plan.phases.iter().map(|p| p.expected_usd.unwrap()).sum();
    assert!((phases - expected).abs() < 1e-9, "{phases} {expected}");

    // Leaves the journal has seen nothing like: another profile's text, a new schema and
    // label. Each expects the default, held under its ceiling (`yes`/`no` is 5 bytes of JSON).
    let new = "a = await agent('Name a colour', model='fast', label='colour')\n\
               b = await agent('Ship it?', schema={'enum': ['yes', 'no']}, label='ask')\n\
               return [a, b]";
    let plan = runtime.plan(RunRequest::new(new)).await.unwrap();
    assert_eq!(
        (
            plan.expected_output_tokens,
            plan.expected_from_history,
            plan.expected_from_default
        ),
        (default + 5, 0, 2)
    );
    assert_eq!(plan.max_output_tokens, 4096 + 5);

    // Without a journal there is no history: defaults only.
    let plan = measured(None)
        .plan(RunRequest::new(script).args(args))
        .await
        .unwrap();
    assert_eq!(
        (
            plan.expected_output_tokens,
            plan.expected_from_history,
            plan.expected_from_default
        ),
        (4 * default, 0, 4)
    );
    assert!(
        plan.warnings
            .iter()
            .all(|w| w.kind != WarningKind::HistoryUnreadable)
    );
}

#[tokio::test]
async fn the_expected_output_is_never_above_a_leafs_ceiling() {
    // The journal has seen 180-token reviews; a plan whose leaves may write 100 at most expects
    // 100 of each.
    let store: Arc<dyn CheckpointStore> = Arc::new(MemoryStore::new());
    let runtime = measured(Some(store.clone()));
    runtime
        .run(&review_script(), json!({}))
        .await
        .result
        .unwrap();
    let scripted = ScriptedBackend::from_json(MEASURED_REPLIES).unwrap();
    let mut config = AgentConfig {
        model: "gpt-4o".into(),
        max_tokens: 100,
        ..AgentConfig::default()
    };
    config.profiles.insert("fast".into(), "gpt-4o-mini".into());
    let capped = builder(Arc::new(CheckedBackend::new(
        Arc::new(scripted),
        config,
        ToolSet::new(),
    )))
    .prices(prices())
    .shared_store(store)
    .build()
    .unwrap();
    let plan = capped.plan(RunRequest::new(review_script())).await.unwrap();
    assert_eq!(plan.max_output_tokens, 5 * 100);
    assert_eq!(
        (plan.expected_output_tokens, plan.expected_from_history),
        (4 * 100 + 60, 5)
    );
    for group in plan.phases.iter().chain(&plan.profiles) {
        assert!(
            group.expected_output_tokens <= group.max_output_tokens,
            "{group:?}"
        );
        assert!(group.expected_usd <= group.usd, "{group:?}");
    }
}

#[tokio::test]
async fn a_journal_whose_replies_cannot_be_read_leaves_the_plan_its_defaults_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let store: Arc<dyn CheckpointStore> = Arc::new(SqliteStore::open(&path).unwrap());
    let runtime = measured(Some(store));
    runtime
        .run(&review_script(), json!({}))
        .await
        .result
        .unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE entries SET output_tokens = -5", [])
        .unwrap();
    let plan = runtime
        .plan(RunRequest::new(review_script()))
        .await
        .unwrap();
    assert_eq!(
        (plan.expected_from_history, plan.expected_from_default),
        (0, 5)
    );
    let warning = plan
        .warnings
        .iter()
        .find(|w| w.kind == WarningKind::HistoryUnreadable)
        .expect("the plan says why its expected figures are the defaults");
    assert!(
        warning.message.contains("its output token count is -5"),
        "{}",
        warning.message
    );
}
