//! The script primitives through the real guest: agent, parallel, pipeline, phase, log,
//! print, args, budget, and the script forms.

use std::sync::Arc;
use std::time::Duration;

use flowbox::{Limits, RunRequest};
use flowbox_tests::{CountingBackend, error_of, result_of, run, runtime, runtime_with, scripted};
use serde_json::json;

#[tokio::test]
async fn agent_returns_text_or_a_schema_valid_object() {
    let rt = runtime();
    let value = result_of(
        &rt,
        r#"
text = await agent("Summarise ünïcode", label="sum")
data = await agent({"task": "rate", "n": 3}, schema={
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
    "required": ["score", "tags"],
})
return {"text": text, "score_ok": 1 <= data["score"] <= 5, "tags": len(data["tags"]) >= 1}
"#,
    )
    .await;
    assert_eq!(
        value,
        json!({"text": "[fake sum] Summarise ünïcode", "score_ok": true, "tags": true})
    );
}

#[tokio::test]
async fn parallel_keeps_input_order_and_turns_failures_into_none() {
    // Later items answer first; one item fails.
    let rt = scripted(
        r#"{"rules": [
            {"prompt": "^0$", "text": "zero", "latency_ms": 60},
            {"prompt": "^1$", "error": "boom"},
            {"prompt": "^2$", "text": "two", "latency_ms": 1},
            {"prompt": "^3$", "text": "three", "latency_ms": 30}
        ]}"#,
        Limits::default(),
    );
    let outcome = run(
        &rt,
        r#"
items = [lambda i=i: agent(str(i)) for i in range(4)]
return await parallel(items)
"#,
        json!({}),
    )
    .await;
    assert_eq!(
        outcome.result.unwrap(),
        json!(["zero", null, "two", "three"])
    );
    assert!(
        outcome.summary.logs.iter().any(|l| l.contains("boom")),
        "{:?}",
        outcome.summary.logs
    );
}

#[tokio::test]
async fn parallel_accepts_awaitables_callables_and_plain_values() {
    let rt = runtime();
    let value = result_of(
        &rt,
        r#"
async def double(x):
    return x * 2
return await parallel([agent("a"), double(4), lambda: 7, lambda: agent("b")])
"#,
    )
    .await;
    assert_eq!(value, json!(["[fake leaf] a", 8, 7, "[fake leaf] b"]));
}

#[tokio::test]
async fn parallel_rejects_a_bad_item_before_any_leaf_starts() {
    let rt = runtime();
    let outcome = run(
        &rt,
        r#"
try:
    await parallel([lambda: agent("a"), 42])
except TypeError as e:
    return str(e)
"#,
        json!({}),
    )
    .await;
    let message = outcome.result.unwrap();
    assert!(message.as_str().unwrap().contains("1"), "{message}");
    assert_eq!(outcome.summary.leaves, 0);
}

#[tokio::test]
async fn pipeline_flows_items_through_stages_by_arity() {
    let rt = runtime();
    let value = result_of(
        &rt,
        r#"
async def first(prev):
    return await agent(f"draft {prev}")
def second(prev, item):
    return None if item == "b" else f"{item}:{len(prev) > 0}"
async def third(prev, item, index):
    return f"{prev}#{index}"
return await pipeline(["a", "b", "c"], first, second, third)
"#,
    )
    .await;
    assert_eq!(value, json!(["a:True#0", null, "c:True#2"]));
}

#[tokio::test]
async fn pipeline_checks_every_stage_before_starting() {
    let rt = runtime();
    let outcome = run(
        &rt,
        r#"
def ok(prev):
    return prev
def too_many(a, b, c, d):
    return a
try:
    await pipeline([1, 2], lambda p: agent(str(p)), ok, too_many)
except TypeError as e:
    return str(e)
"#,
        json!({}),
    )
    .await;
    let message = outcome.result.unwrap();
    assert!(message.as_str().unwrap().contains("too_many"), "{message}");
    assert_eq!(outcome.summary.leaves, 0);
}

#[tokio::test]
async fn failures_raise_catchable_exceptions() {
    let rt = scripted(
        r#"{"rules": [{"prompt": "bad", "error": "provider exploded"}], "fallback": "fake"}"#,
        Limits::default().with_max_agents(2),
    );
    let value = result_of(
        &rt,
        r#"
out = []
try:
    await agent("bad")
except AgentError as e:
    out.append("agent: " + str(e))
await agent("good")
try:
    await agent("third")
except AgentCapExceeded as e:
    out.append("cap")
try:
    await agent({"x": 1}, schema={"type": "nonsense"})
except ValueError as e:
    out.append("schema")
return out
"#,
    )
    .await;
    assert_eq!(value, json!(["agent: provider exploded", "cap", "schema"]));
}

#[tokio::test]
async fn an_uncaught_agent_error_ends_the_run_with_its_line() {
    let rt = scripted(r#"{"rules": [{"error": "nope"}]}"#, Limits::default());
    let error = error_of(&rt, "x = 1\n\nreturn await agent('a')\n").await;
    assert_eq!(
        error,
        json!({"kind": "uncaught", "message": "nope", "line": 3, "exception": "AgentError"})
    );
}

#[tokio::test]
async fn the_budget_is_visible_and_enforced() {
    let rt = scripted(
        r#"{"rules": [{"text": "ok", "tokens": {"input": 30, "output": 20}}]}"#,
        Limits::default().with_budget_tokens(Some(120)),
    );
    let value = result_of(
        &rt,
        r#"
seen = [budget.total, budget.spent(), budget.remaining()]
n = 0
while True:
    try:
        await agent("work")
        n += 1
    except BudgetExceeded:
        break
return {"seen": seen, "leaves": n, "spent": budget.spent(), "remaining": budget.remaining()}
"#,
    )
    .await;
    assert_eq!(
        value,
        json!({"seen": [120, 0, 120], "leaves": 3, "spent": 150, "remaining": 0})
    );
}

#[tokio::test]
async fn phases_logs_and_print_land_in_the_summary() {
    let rt = runtime();
    let outcome = run(
        &rt,
        r#"
meta = {"name": "demo", "description": "d", "phases": [{"title": "one"}]}
async def main():
    phase("one")
    log("hello")
    print("a", 1, sep="-")
    phase("two")
    return args["n"] + 1
"#,
        json!({"n": 41}),
    )
    .await;
    assert_eq!(outcome.result.unwrap(), json!(42));
    let summary = outcome.summary;
    assert_eq!(summary.name.as_deref(), Some("demo"));
    assert_eq!(summary.phases, vec!["one", "two"]);
    assert_eq!(summary.logs, vec!["hello", "a-1"]);
    assert!(summary.fuel_used > 0);
    // "two" is not among meta's phases: allowed, with a warning.
    assert_eq!(
        summary.warnings,
        ["phase(\"two\") is not one of the phases meta declares (\"one\")"]
    );
}

#[tokio::test]
async fn a_phase_meta_does_not_declare_is_warned_about_once() {
    let rt = runtime();
    let declared = r#"
meta = {"name": "n", "description": "d", "phases": [{"title": "read"}, {"title": "write"}]}
async def main():
    for title in ["read", "reading", "write", "reading", "wrte"]:
        phase(title)
    return 1
"#;
    let summary = run(&rt, declared, json!({})).await.summary;
    assert_eq!(
        summary.phases,
        ["read", "reading", "write", "reading", "wrte"]
    );
    assert_eq!(
        summary.warnings,
        [
            "phase(\"reading\") is not one of the phases meta declares (\"read\", \"write\")",
            "phase(\"wrte\") is not one of the phases meta declares (\"read\", \"write\")",
        ]
    );
    // Without declared phases, any title is fine.
    for script in [
        "phase(\"anything\")\nreturn 1",
        "meta = {\"name\": \"n\", \"description\": \"d\"}\nasync def main():\n    phase(\"x\")\n    return 1",
    ] {
        let outcome = run(&rt, script, json!({})).await;
        assert!(
            outcome.result.is_ok() && outcome.summary.warnings.is_empty(),
            "{script}"
        );
    }
}

#[tokio::test]
async fn every_branch_that_became_none_is_in_the_summary() {
    let rt = scripted(
        r#"{"rules": [
            {"prompt": "^bad$", "error": "provider down"},
            {"text": "ok {prompt}"}
        ]}"#,
        Limits::default(),
    );
    let outcome = run(
        &rt,
        r#"
def shout(text):
    return text.upper()

def count(text):
    return text + 1

reviews = await parallel([
    lambda: agent("good"),
    lambda: agent("bad"),
    lambda: agent(len("x") + "y"),
])
flow = await pipeline(["a", "bad"], lambda x: agent(x), shout, count)
return {"reviews": reviews, "flow": flow}
"#,
        json!({}),
    )
    .await;
    assert_eq!(
        outcome.result.as_ref().unwrap(),
        &json!({"reviews": ["ok good", null, null], "flow": [null, null]})
    );
    let json = outcome.to_json();
    let failed = &json["summary"]["failed_branches"];
    assert_eq!(
        failed[0],
        json!({"group": "parallel", "index": 2, "stage": null, "exception": "TypeError",
               "message": "unsupported operand type(s) for +: 'int' and 'str'", "line": 11})
    );
    assert_eq!(
        failed[1],
        json!({"group": "parallel", "index": 1, "stage": null, "exception": "AgentError",
               "message": "provider down", "line": 10})
    );
    let pipeline: Vec<_> = failed.as_array().unwrap()[2..].to_vec();
    assert!(
        pipeline.contains(&json!({"group": "pipeline", "index": 0, "stage": 3,
            "exception": "TypeError", "message": "can only concatenate str (not \"int\") to str",
            "line": 6})),
        "{failed}"
    );
    assert!(
        pipeline.contains(&json!({"group": "pipeline", "index": 1, "stage": 1,
            "exception": "AgentError", "message": "provider down", "line": 13})),
        "{failed}"
    );
    assert_eq!(json["summary"]["failed_branch_count"], 4);
    assert!(outcome.summary.warnings.is_empty());
}

/// A consumer never needs to know that a missing list means an empty one.
#[tokio::test]
async fn a_summary_with_nothing_to_report_still_has_both_lists() {
    let rt = runtime();
    let outcome = run(&rt, "return await agent('fine')", json!({})).await;
    let json = outcome.to_json();
    assert_eq!(json["ok"], true, "{json}");
    for summary in [
        &json["summary"],
        &serde_json::to_value(&outcome.summary).unwrap(),
    ] {
        assert_eq!(summary["failed_branches"], json!([]), "{summary}");
        assert_eq!(summary["warnings"], json!([]), "{summary}");
    }
}

#[tokio::test]
async fn past_the_kept_failures_the_rest_are_counted() {
    let rt = runtime();
    let outcome = run(
        &rt,
        "return len([r for r in await parallel([lambda: 1 / 0] * 150) if r is None])",
        json!({}),
    )
    .await;
    assert_eq!(outcome.result.unwrap(), json!(150));
    let summary = outcome.summary;
    assert_eq!(
        summary.failed_branches.len(),
        flowbox::Summary::MAX_FAILED_BRANCHES
    );
    assert_eq!(summary.failed_branch_count, 150);
    assert_eq!(summary.failed_branches[99].index, 99);
}

#[tokio::test]
async fn leaves_in_flight_count_against_the_budget_only_once_they_finish() {
    // Every leaf costs 100 tokens; "slow" takes long enough for the script to look meanwhile.
    let rt = scripted(
        r#"{"rules": [
            {"prompt": "^slow", "text": "slow", "latency_ms": 200, "tokens": {"input": 60, "output": 40}},
            {"text": "fast", "tokens": {"input": 60, "output": 40}}
        ]}"#,
        Limits::default().with_budget_tokens(Some(250)),
    );
    let value = result_of(
        &rt,
        r#"
seen = {}
async def watch():
    await agent("fast")
    seen["while slow runs"] = budget.remaining()
results = await parallel([lambda: agent("slow 1"), watch])
seen["after both"] = budget.remaining()
# 50 tokens remain, so leaves may still start; together they overshoot the ceiling.
more = await parallel([lambda: agent("fast"), lambda: agent("fast")])
seen["spent"] = budget.spent()
try:
    await agent("one more")
except BudgetExceeded:
    seen["then"] = "BudgetExceeded"
return seen
"#,
    )
    .await;
    assert_eq!(
        value,
        json!({"while slow runs": 150, "after both": 50, "spent": 400, "then": "BudgetExceeded"})
    );
}

#[tokio::test]
async fn args_are_a_fresh_copy_in_every_run() {
    let rt = runtime();
    let script = "args['items'].append(len(args['items']))\nreturn args";
    for _ in 0..2 {
        let outcome = run(&rt, script, json!({"items": [0]})).await;
        assert_eq!(outcome.result.unwrap(), json!({"items": [0, 1]}));
    }
}

#[tokio::test]
async fn all_three_script_forms_run() {
    let rt = runtime();
    let with_meta = "meta = {'name': 'n', 'description': 'd'}\nasync def main():\n    return 1\n";
    let body = "x = await agent('q')\nreturn [x, true, false, null]\n";
    let lone = "async def run():\n    return 'lone'\n";
    assert_eq!(result_of(&rt, with_meta).await, json!(1));
    assert_eq!(
        result_of(&rt, body).await,
        json!(["[fake leaf] q", true, false, null])
    );
    assert_eq!(result_of(&rt, lone).await, json!("lone"));
}

#[tokio::test]
async fn rejected_scripts_report_the_scripts_own_lines() {
    let rt = runtime();
    let syntax = error_of(&rt, "x = 1\nreturn (\n").await;
    assert_eq!(
        (syntax["kind"].as_str(), syntax["line"].as_u64()),
        (Some("syntax"), Some(2))
    );
    let meta = error_of(
        &rt,
        "meta = {'name': foo(), 'description': 'd'}\nreturn 1\n",
    )
    .await;
    assert_eq!(meta["kind"], "invalid_meta");
    assert_eq!(meta["line"], 1);
    let import = error_of(&rt, "x = 1\n\nimport os\nreturn 1\n").await;
    assert_eq!(
        (import["kind"].as_str(), import["line"].as_u64()),
        (Some("forbidden"), Some(3))
    );
    assert!(
        import["message"].as_str().unwrap().contains("agent"),
        "{import}"
    );
    let none = error_of(&rt, "x = 1\n").await;
    assert_eq!(none["kind"], "no_entry_point");
    let uncaught = error_of(
        &rt,
        "async def main():\n    x = 1\n    raise KeyError('k')\n",
    )
    .await;
    assert_eq!(
        (uncaught["line"].as_u64(), uncaught["exception"].as_str()),
        (Some(3), Some("KeyError"))
    );
}

#[tokio::test]
async fn results_must_be_json_with_the_path_named() {
    let rt = runtime();
    let error = error_of(&rt, "x = 1\nreturn {'a': [1, {'b': float('nan')}]}").await;
    assert_eq!(error["kind"], "invalid_result");
    assert_eq!(error["line"], 2, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(r#"["a"][1]["b"]"#) && message.contains("NaN"),
        "{message}"
    );
    let error = error_of(&rt, "return {'s': {1, 2}}").await;
    assert!(
        error["message"].as_str().unwrap().contains("set"),
        "{error}"
    );
}

#[tokio::test]
async fn the_same_run_uses_the_same_fuel_and_random_numbers() {
    // Sequential leaves arrive one per await, so two live runs see the same completions in the
    // same batches; concurrent leaves batch by timing, which replay (not a live rerun) fixes.
    let rt = runtime();
    let script = r#"
import random, time
xs = [random.random() for _ in range(3)]
t0 = time.monotonic()
time.sleep(5)
reviews = [await agent(f"r{i}") for i in range(5)]
return {"xs": xs, "slept": time.monotonic() - t0 >= 5, "n": len(reviews)}
"#;
    let a = rt
        .run_request(RunRequest::new(script).thread_id("same"))
        .await;
    let b = rt
        .run_request(RunRequest::new(script).thread_id("same"))
        .await;
    let c = rt
        .run_request(RunRequest::new(script).thread_id("other"))
        .await;
    let (ra, rb, rc) = (a.result.unwrap(), b.result.unwrap(), c.result.unwrap());
    assert_eq!(ra, rb);
    assert_eq!(ra["slept"], json!(true));
    assert_ne!(ra["xs"], rc["xs"]);
    assert_eq!(a.summary.fuel_used, b.summary.fuel_used);
}

/// A thread's random numbers are fixed by its id for good, not by the build: a journal written
/// before an upgrade replays after it, even where `random` chose the calls.
#[tokio::test]
async fn a_threads_random_numbers_are_the_same_in_every_build() {
    let rt = runtime();
    let outcome = rt
        .run_request(
            RunRequest::new("import random\nreturn [random.random(), random.randint(0, 10**9)]")
                .thread_id("pinned"),
        )
        .await;
    assert_eq!(
        outcome.result.unwrap(),
        json!([0.18463530849207932, 476862990])
    );
}

#[tokio::test]
async fn leaves_run_concurrently_up_to_the_limit() {
    let backend = Arc::new(CountingBackend::new(Duration::from_millis(20)));
    let rt = runtime_with(backend.clone(), Limits::default().with_max_concurrency(4));
    let outcome = run(
        &rt,
        "return len(await parallel([lambda i=i: agent(str(i)) for i in range(12)]))",
        json!({}),
    )
    .await;
    assert_eq!(outcome.result.unwrap(), json!(12));
    assert_eq!(backend.calls(), 12);
    assert_eq!(backend.max_in_flight(), 4);
}
