//! The orchestrator offline: a scripted root model that answers directly, fixes a rejected
//! script, and runs a fan-out — asserting on what the root model receives.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use flowbox::backends::{
    AgentBackend, AgentConfig, AgentTemplate, CheckedBackend, FakeBackend, ModelProfile,
};
use flowbox::chat::{ChatModel, ChatRequest, ChatResponse, Message, ToolCall};
use flowbox::orchestrator::{Guidance, Orchestrator, RUN_WORKFLOW, WorkflowTool};
use flowbox::store::{CheckpointStore, MemoryStore, WorkflowTotals};
use flowbox::tools::{ReadRoots, Tool};
use flowbox::{BackendError, Limits, Runtime};
use flowbox_tests::root;
use serde_json::{Value, json};

/// A root model that plays scripted turns and records every request it gets.
#[derive(Debug, Default)]
struct RootModel {
    turns: Mutex<VecDeque<ChatResponse>>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl RootModel {
    fn new(turns: Vec<ChatResponse>) -> Arc<Self> {
        Arc::new(Self {
            turns: Mutex::new(turns.into()),
            ..Self::default()
        })
    }

    fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl ChatModel for RootModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        self.requests.lock().unwrap().push(request.clone());
        self.turns
            .lock()
            .unwrap()
            .pop_front()
            .ok_or_else(|| BackendError::terminal("the root model ran out of turns"))
    }
}

fn say(text: &str) -> ChatResponse {
    ChatResponse {
        text: text.into(),
        ..ChatResponse::default()
    }
}

fn run_workflow(script: &str) -> ChatResponse {
    ChatResponse {
        tool_calls: vec![ToolCall {
            id: "call".into(),
            name: RUN_WORKFLOW.into(),
            arguments: json!({"script": script}),
        }],
        ..ChatResponse::default()
    }
}

/// A runtime with fake leaves, for orchestrators whose root model is scripted.
fn fake_leaves() -> Runtime {
    Runtime::builder()
        .backend(FakeBackend::new())
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .expect("the runtime builds")
}

fn orchestrator(model: Arc<RootModel>, store: Arc<MemoryStore>) -> Orchestrator {
    let runtime = Runtime::builder()
        .backend(FakeBackend::new())
        .shared_store(store)
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .expect("the runtime builds");
    Orchestrator::builder(runtime, model, "root-model")
        .system_prompt("You are the team's assistant.")
        .build()
}

/// The JSON a tool message carried.
fn tool_output(request: &ChatRequest) -> Value {
    match request.messages.last() {
        Some(Message::Tool { content, .. }) => serde_json::from_str(content).unwrap(),
        other => panic!("expected a tool result last, got {other:?}"),
    }
}

#[tokio::test]
async fn a_trivial_question_is_answered_directly() {
    let model = RootModel::new(vec![say("4")]);
    let store = Arc::new(MemoryStore::new());
    let answer = orchestrator(model.clone(), store.clone())
        .ask("What is 2 + 2?")
        .await
        .unwrap();
    assert_eq!(answer.text, "4");
    assert!(answer.workflows.is_empty());
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.model, "root-model");
    assert!(
        request
            .system
            .starts_with("You are the team's assistant.\n\n## Workflows")
    );
    assert!(
        request
            .system
            .contains("### plan, execute each step, check with bounded retries")
    );
    assert_eq!(
        request.messages,
        vec![Message::User {
            text: "What is 2 + 2?".into()
        }]
    );
    let tool = request
        .tools
        .iter()
        .find(|t| t.name == RUN_WORKFLOW)
        .unwrap();
    assert!(
        tool.description
            .contains("ONLY for tasks that genuinely need several")
    );
    assert!(store.workflows(None).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_rejected_script_comes_back_as_an_actionable_error_and_the_fix_succeeds() {
    let model = RootModel::new(vec![
        run_workflow("import os\nreturn os.listdir('/')"),
        run_workflow("return await agent('list the files')"),
        say("Done: the leaf listed them."),
    ]);
    let store = Arc::new(MemoryStore::new());
    let answer = orchestrator(model.clone(), store.clone())
        .ask_in("conv-1", "List the files")
        .await
        .unwrap();
    assert_eq!(answer.text, "Done: the leaf listed them.");
    let requests = model.requests();
    assert_eq!(requests.len(), 3);

    let rejected = tool_output(&requests[1]);
    assert_eq!(rejected["ok"], false);
    assert_eq!(rejected["error"]["kind"], "forbidden");
    assert_eq!(rejected["error"]["line"], 1);
    assert!(
        rejected["error"]["message"]
            .as_str()
            .unwrap()
            .contains("import of 'os'")
    );
    assert!(
        rejected["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("injected primitives")
    );

    let fixed = tool_output(&requests[2]);
    assert_eq!(fixed["ok"], true);
    assert_eq!(fixed["result"], "[fake leaf] list the files");
    assert_eq!(fixed["summary"]["leaves"], 1);
    assert!(fixed["summary"]["thread_id"].is_string());

    assert_eq!(answer.workflows.len(), 2);
    assert!(fixed["summary"]["thread_id"].as_str().unwrap().len() > 8);
    let recorded = store.workflows(Some("conv-1")).await.unwrap();
    assert_eq!(
        WorkflowTotals::of(&recorded),
        WorkflowTotals {
            runs: 2,
            failed: 1,
            leaves: 1,
            tokens: fixed["summary"]["tokens"].as_u64().unwrap()
        }
    );
    assert!(store.workflows(Some("other")).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_fan_out_is_run_and_summarised() {
    let script = r#"
meta = {"name": "perspectives", "description": "three views", "phases": [{"title": "views"}]}
async def main():
    phase("views")
    views = await parallel([lambda v=v: agent(f"view of {v}") for v in ["cost", "risk", "speed"]])
    return {"views": views}
"#;
    let model = RootModel::new(vec![
        run_workflow(script),
        say("Three views, all positive."),
    ]);
    let answer = orchestrator(model.clone(), Arc::new(MemoryStore::new()))
        .ask("Weigh the plan from three angles")
        .await
        .unwrap();
    assert_eq!(answer.text, "Three views, all positive.");
    let output = tool_output(&model.requests()[1]);
    assert_eq!(output["summary"]["name"], "perspectives");
    assert_eq!(output["summary"]["leaves"], 3);
    assert_eq!(output["summary"]["phases"], json!(["views"]));
    assert_eq!(output["result"]["views"][2], "[fake leaf] view of speed");
    assert_eq!(answer.workflows[0].leaves, 3);
}

#[tokio::test]
async fn guidance_can_be_replaced_or_turned_off() {
    let model = RootModel::new(vec![say("a"), say("b")]);
    let custom = Orchestrator::builder(fake_leaves(), model.clone(), "m")
        .system_prompt("Base.")
        .guidance(Some(Guidance::custom("Use workflows wisely.")))
        .build();
    custom.ask("q").await.unwrap();
    let off = Orchestrator::builder(fake_leaves(), model.clone(), "m")
        .system_prompt("Base.")
        .guidance(None)
        .build();
    off.ask("q").await.unwrap();
    let requests = model.requests();
    assert_eq!(requests[0].system, "Base.\n\nUse workflows wisely.");
    assert_eq!(requests[1].system, "Base.");
    let runtime = fake_leaves();
    let short = Guidance::without_patterns(&runtime);
    assert!(short.text().len() * 2 < Guidance::new(&runtime).text().len());
    assert!(
        short
            .text()
            .contains("1000 leaf agents and 1000 tool calls in all")
    );
}

/// A runtime over offline leaves held to two profiles, a template and the read tools of
/// `granted`, which scripts may call too.
fn equipped(granted: &std::path::Path) -> Runtime {
    let tools = ReadRoots::open(&[granted.to_owned()]).unwrap().tools();
    let mut config = AgentConfig::default();
    config.profiles.insert(
        "fast".into(),
        ModelProfile::new("small-model").with_description("cheap, for sweeps"),
    );
    config.profiles.insert(
        "deep".into(),
        ModelProfile::new("large-model").with_description("slow, for judgement"),
    );
    config.templates.insert(
        "critic".into(),
        AgentTemplate {
            description: Some("finds the weak points of a draft".into()),
            base_prompt: "You criticise.".into(),
            model: Some("deep".into()),
            tools: Some(vec![]),
        },
    );
    let leaves = CheckedBackend::new(Arc::new(FakeBackend::new()), config, tools.clone());
    Runtime::builder()
        .backend(leaves)
        .code_tools(tools)
        .limits(
            Limits::default()
                .with_budget_tokens(Some(20_000))
                .with_max_agents(300),
        )
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_guidance_names_exactly_what_each_host_has() {
    let base = tempfile::tempdir().unwrap();
    let docs = base.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    let bare = Guidance::new(&fake_leaves());
    let equipped_runtime = equipped(&docs);
    let equipped = Guidance::new(&equipped_runtime);
    let (bare, equipped) = (bare.text(), equipped.text());

    let nothing = [
        "Model profiles: none, so leave `model=` out",
        "Leaf templates: none, so leave `agent_type=` out.",
        "Host tools: none",
        "no token budget",
    ];
    let what_it_has = [
        "- `deep`: slow, for judgement\n- `fast`: cheap, for sweeps\n",
        "- `critic`: finds the weak points of a draft (profile `deep`; no tools)",
        "- `list_dir(path: string)` [leaves, call_tool]: List a directory, one level (it does not recurse).",
        "- `read_file(path: string)` [leaves, call_tool]: Read a UTF-8 text file. `path` \
         starts with a granted directory's name (docs)",
        "Returns {\"path\", \"content\"",
        "300 leaf agents",
        "a budget of 20000 tokens",
        "call_tool(\"read_file\"",
    ];
    for line in nothing {
        assert!(bare.contains(line), "{line}");
        assert!(!equipped.contains(line), "{line}");
    }
    for part in what_it_has {
        assert!(equipped.contains(part), "{part}\n---\n{equipped}");
        assert!(!bare.contains(part), "{part}");
    }
    // The orchestrator's default guidance is its runtime's.
    let orchestrator =
        Orchestrator::builder(equipped_runtime, RootModel::new(vec![]), "root-model").build();
    assert!(orchestrator.system_prompt().ends_with(equipped));
}

#[tokio::test]
async fn the_tool_reports_failed_branches_and_warnings() {
    let tool = WorkflowTool::new(fake_leaves());
    let script = r#"
meta = {"name": "n", "description": "d", "phases": [{"title": "work"}]}
async def main():
    phase("wrok")
    results = await parallel([lambda i=i: 1 / (i % 2) for i in range(24)])
    return len([r for r in results if r is None])
"#;
    let output = tool.call(json!({"script": script})).await.unwrap();
    assert_eq!(output["result"], 12);
    let summary = &output["summary"];
    let failed = summary["failed_branches"].as_array().unwrap();
    assert_eq!(failed.len(), 10);
    assert_eq!(
        failed[0],
        json!({"group": "parallel", "index": 0, "stage": null,
               "exception": "ZeroDivisionError", "message": "division by zero", "line": 5})
    );
    assert_eq!(summary["failed_branch_count"], 12);
    assert_eq!(
        summary["warnings"],
        json!(["phase(\"wrok\") is not one of the phases meta declares (\"work\")"])
    );
    // A clean run has empty lists and no count.
    let clean = tool.call(json!({"script": "return 1"})).await.unwrap();
    assert_eq!(
        (
            &clean["summary"]["failed_branches"],
            &clean["summary"]["warnings"]
        ),
        (&json!([]), &json!([]))
    );
    assert!(clean["summary"].get("failed_branch_count").is_none());
}

#[tokio::test]
async fn the_tool_stands_alone_and_truncates_large_results() {
    let store = Arc::new(MemoryStore::new());
    let runtime = Runtime::builder()
        .backend(FakeBackend::new())
        .cache_dir(root().join("target").join("flowbox-cache"))
        .shared_store(store.clone())
        .build()
        .unwrap();
    let tool = WorkflowTool::new(runtime).max_result_bytes(100);
    let spec = tool.spec();
    assert_eq!(spec.name, "run_workflow");
    assert_eq!(spec.parameters["required"], json!(["script"]));
    let big = tool
        .call(json!({"script": "return ['item ' * 10 for _ in range(50)]"}))
        .await
        .unwrap();
    assert_eq!(big["ok"], true);
    assert_eq!(big["result"]["truncated"], true);
    assert!(big["result"]["bytes"].as_u64().unwrap() > 100);
    assert!(big["result"]["preview"].as_str().unwrap().ends_with('…'));
    let with_args = tool
        .call(
            json!({"script": "return args['n'] * 2", "args": {"n": 21}, "thread_id": "standalone"}),
        )
        .await
        .unwrap();
    assert_eq!(
        (
            with_args["result"].clone(),
            with_args["summary"]["thread_id"].clone()
        ),
        (json!(42), json!("standalone"))
    );
    let err = tool.call(json!({"code": "return 1"})).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("invalid arguments for run_workflow"),
        "{err}"
    );
    let failed = tool
        .call(json!({"script": "while True:\n    pass\nreturn 1"}))
        .await;
    let failed = failed.unwrap();
    assert_eq!(failed["error"]["kind"], "out_of_fuel");
    assert!(
        failed["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("orchestration glue")
    );
    // The finished thread asked for again returns its recorded outcome, runs nothing and is
    // not counted a second time.
    let again = tool
        .call(
            json!({"script": "return args['n'] * 2", "args": {"n": 21}, "thread_id": "standalone"}),
        )
        .await
        .unwrap();
    assert_eq!(again["result"], json!(42));
    assert!(
        again["note"]
            .as_str()
            .unwrap()
            .contains("nothing ran again"),
        "{again}"
    );
    // Outside a conversation every finished run is still recorded, under the empty id.
    let recorded = store.workflows(Some("")).await.unwrap();
    assert_eq!(recorded.len(), 3, "{recorded:?}");
    assert_eq!(tool.runs().len(), 3);
    // Another script under that thread id is an error the model can act on.
    let diverged = tool
        .call(json!({"script": "return 0", "thread_id": "standalone"}))
        .await
        .unwrap();
    assert_eq!(diverged["error"]["kind"], "divergence");
    assert!(
        diverged["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("leave thread_id out"),
        "{diverged}"
    );
    assert_eq!(WorkflowTotals::of(&recorded).failed, 1);
    assert_eq!(recorded[1].thread_id, "standalone");
}

#[tokio::test]
async fn the_root_agent_is_bounded_in_turns() {
    let looping: Vec<ChatResponse> = (0..20).map(|_| run_workflow("return 1")).collect();
    let model = RootModel::new(looping);
    let orchestrator = Orchestrator::builder(fake_leaves(), model.clone(), "m")
        .max_turns(3)
        .build();
    let err = orchestrator.ask("loop").await.unwrap_err();
    assert!(err.to_string().contains("all 3 of its turns"), "{err}");
    assert_eq!(model.requests().len(), 3);
}

#[tokio::test]
async fn thread_names_the_model_chooses_stay_inside_its_conversation() {
    let named = ChatResponse {
        tool_calls: vec![ToolCall {
            id: "c".into(),
            name: RUN_WORKFLOW.into(),
            arguments: json!({"script": "return 7", "thread_id": "step-1"}),
        }],
        ..ChatResponse::default()
    };
    let model = RootModel::new(vec![named, say("done")]);
    let store = Arc::new(MemoryStore::new());
    orchestrator(model.clone(), store.clone())
        .ask_in("conv-a", "go")
        .await
        .unwrap();
    let output = tool_output(&model.requests()[1]);
    assert_eq!(output["summary"]["thread_id"], "conv-a.step-1");
    assert!(store.load("conv-a.step-1").await.unwrap().is_some());
    assert!(store.load("step-1").await.unwrap().is_none());
}

/// A host tool of the root agent's: the team's calendar.
#[derive(Debug)]
struct Calendar;

#[async_trait::async_trait]
impl Tool for Calendar {
    fn spec(&self) -> flowbox::tools::ToolSpec {
        flowbox::tools::ToolSpec {
            name: "calendar".into(),
            description: "The team's next release date.".into(),
            parameters: json!({"type": "object", "properties": {}}),
        }
    }

    async fn call(&self, _: Value) -> Result<Value, flowbox::tools::ToolError> {
        Ok(json!("2026-12-01"))
    }
}

#[tokio::test]
async fn leaves_on_an_agent_backend_over_the_root_model_use_its_model_and_tools() {
    // One scripted model plays the root and, in between, the workflow's leaf.
    let model = RootModel::new(vec![
        run_workflow("return await agent('When do we release?')"),
        say("On 2026-12-01."),
        say("We release on 2026-12-01."),
    ]);
    let mut tools = flowbox::tools::ToolSet::new();
    tools.insert(Arc::new(Calendar)).unwrap();
    let leaves = AgentBackend::new(
        model.clone(),
        AgentConfig {
            model: "root-model".into(),
            ..AgentConfig::default()
        },
        tools.clone(),
    );
    let runtime = Runtime::builder()
        .backend(leaves)
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .unwrap();
    let orchestrator = Orchestrator::builder(runtime, model.clone(), "root-model")
        .tools(tools)
        .build();
    let answer = orchestrator.ask("When is the release?").await.unwrap();
    assert_eq!(answer.text, "We release on 2026-12-01.");

    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let names = |request: &ChatRequest| -> Vec<String> {
        request.tools.iter().map(|t| t.name.clone()).collect()
    };
    assert_eq!(names(&requests[0]), ["calendar", RUN_WORKFLOW]);
    // The leaf: the root's model id and its tools, without run_workflow, and a leaf's prompt.
    let leaf = &requests[1];
    assert_eq!(leaf.model, "root-model");
    assert_eq!(names(leaf), ["calendar"]);
    assert!(
        leaf.system.contains(flowbox::backends::LEAF_ADDENDUM),
        "{}",
        leaf.system
    );
    assert_eq!(
        leaf.messages,
        vec![Message::User {
            text: "When do we release?".into()
        }]
    );
    assert_eq!(tool_output(&requests[2])["result"], "On 2026-12-01.");
}
