//! `call_tool` through the real guest: code-callable host tools, their argument checks, their
//! errors as `ToolError`, their events, and their place in the journal.

use std::sync::Arc;

use flowbox::backends::FakeBackend;
use flowbox::store::{CheckpointStore, MemoryStore};
use flowbox::tools::{ReadRoots, ToolSet};
use flowbox::{EventKind, LeafBackend, RunRequest, Runtime};
use flowbox_tests::root;
use serde_json::json;

/// A granted directory `notes` with one file.
fn notes() -> (tempfile::TempDir, ToolSet) {
    let base = tempfile::tempdir().unwrap();
    let notes = base.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("todo.txt"), "ship it").unwrap();
    std::fs::write(base.path().join("secret.txt"), "SECRET").unwrap();
    let tools = ReadRoots::open(&[notes]).unwrap().tools();
    (base, tools)
}

fn runtime(tools: ToolSet, store: Option<Arc<dyn CheckpointStore>>) -> Runtime {
    let mut builder = Runtime::builder()
        .shared_backend(Arc::new(FakeBackend::new()) as Arc<dyn LeafBackend>)
        .code_tools(tools)
        .cache_dir(root().join("target").join("flowbox-cache"));
    if let Some(store) = store {
        builder = builder.shared_store(store);
    }
    builder.build().expect("the guest loads")
}

#[tokio::test]
async fn scripts_call_granted_tools_and_catch_their_errors() {
    let (_base, tools) = notes();
    let rt = runtime(tools, None);
    let mut events = rt.subscribe();
    let script = r#"
todo = await call_tool("read_file", path="notes/todo.txt")
listing = await call_tool("list_dir", path="notes")
errors = []
for name, kwargs in [("read_file", {"path": "notes/../secret.txt"}),
                     ("read_file", {"path": 5}),
                     ("read_file", {"path": "notes/todo.txt", "mode": "w"}),
                     ("delete_file", {"path": "notes/todo.txt"})]:
    try:
        await call_tool(name, **kwargs)
    except ToolError as e:
        errors.append(str(e))
summary = await agent({"file": todo["content"]})
return {"todo": todo["content"], "names": [e["name"] for e in listing["entries"]],
        "errors": errors, "summary": summary}
"#;
    let outcome = rt
        .run_request(RunRequest::new(script).thread_id("tools"))
        .await;
    let result = outcome.result.unwrap();
    assert_eq!(result["todo"], "ship it");
    assert_eq!(result["names"], json!(["todo.txt"]));
    let errors = result["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 4);
    assert!(!errors[0].as_str().unwrap().contains("SECRET"));
    assert!(
        errors[1]
            .as_str()
            .unwrap()
            .contains("invalid arguments for read_file"),
        "{errors:?}"
    );
    assert!(errors[2].as_str().unwrap().contains("mode"), "{errors:?}");
    assert!(
        errors[3]
            .as_str()
            .unwrap()
            .contains("no tool named \"delete_file\""),
        "{errors:?}"
    );
    assert_eq!(outcome.summary.tools_called, 3);
    assert_eq!(outcome.summary.leaves, 1);

    let mut called = 0;
    let mut finished = 0;
    while let Some(event) = events.recv().await {
        match event.kind {
            EventKind::ToolCalled { .. } => called += 1,
            EventKind::ToolFinished { .. } => finished += 1,
            EventKind::RunFinished { .. } => break,
            _ => {}
        }
    }
    assert_eq!((called, finished), (3, 3));
}

#[tokio::test]
async fn without_registered_tools_call_tool_is_a_tool_error() {
    let rt = runtime(ToolSet::new(), None);
    let outcome = rt
        .run(
            "try:\n    await call_tool('read_file', path='x')\nexcept ToolError as e:\n    return str(e)\n",
            json!({}),
        )
        .await;
    assert_eq!(
        outcome.result.unwrap(),
        json!("there is no tool named \"read_file\"; available: none")
    );
}

#[tokio::test]
async fn tool_calls_are_journaled_and_replayed_like_leaves() {
    let (base, tools) = notes();
    let store = Arc::new(MemoryStore::new());
    let rt = runtime(tools.clone(), Some(store.clone()));
    let script = "a = await call_tool('read_file', path='notes/todo.txt')\nreturn [a['content'], await agent('x')]";
    let first = rt
        .run_request(RunRequest::new(script).thread_id("journaled-tools"))
        .await;
    let run = store.load("journaled-tools").await.unwrap().unwrap();
    let flowbox::store::CallRequest::Tool(tool) = &run.entries[0].request else {
        panic!("{:?}", run.entries[0].request);
    };
    assert_eq!(tool.name, "read_file");

    // Replay from a copy without the end: the tool is not called again — even with the file
    // gone, the journaled content comes back.
    std::fs::remove_file(base.path().join("notes/todo.txt")).unwrap();
    let copy = Arc::new(MemoryStore::new());
    copy.begin(&run.header).await.unwrap();
    copy.append("journaled-tools", &run.entries).await.unwrap();
    let replay = runtime(tools, Some(copy));
    let again = replay.resume("journaled-tools", None).await;
    assert_eq!(again.result.unwrap(), first.result.unwrap());
    assert_eq!(again.summary.fuel_used, first.summary.fuel_used);
}

/// A tool that counts how many calls run at once.
#[derive(Debug, Default)]
struct Slow {
    in_flight: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl flowbox::tools::Tool for Slow {
    fn spec(&self) -> flowbox::tools::ToolSpec {
        flowbox::tools::ToolSpec {
            name: "slow".into(),
            description: "Waits a little.".into(),
            parameters: json!({"type": "object"}),
        }
    }

    async fn call(
        &self,
        _: serde_json::Value,
    ) -> Result<serde_json::Value, flowbox::tools::ToolError> {
        use std::sync::atomic::Ordering;
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(json!("done"))
    }
}

/// A runtime whose one code-callable tool is `slow`, under `limits`.
fn slow_tool_runtime(limits: flowbox::Limits) -> (Arc<Slow>, Runtime) {
    let slow = Arc::new(Slow::default());
    let mut tools = ToolSet::new();
    tools.insert(slow.clone()).unwrap();
    let rt = Runtime::builder()
        .backend(FakeBackend::new())
        .code_tools(tools)
        .limits(limits)
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .unwrap();
    (slow, rt)
}

#[tokio::test]
async fn tool_calls_share_the_concurrency_slots_and_have_a_lifetime_cap() {
    let (slow, rt) = slow_tool_runtime(
        flowbox::Limits::default()
            .with_max_concurrency(3)
            .with_max_tool_calls(10),
    );
    let outcome = rt
        .run(
            "r = await parallel([lambda: call_tool('slow') for _ in range(12)])\nreturn [x for x in r if x is None]",
            json!({}),
        )
        .await;
    assert_eq!(outcome.result.unwrap(), json!([null, null]));
    assert_eq!(outcome.summary.tools_called, 10);
    assert_eq!(slow.most.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert!(
        outcome
            .summary
            .logs
            .iter()
            .any(|l| l.contains("at most 10 tool calls")),
        "{:?}",
        outcome.summary.logs
    );
}

#[tokio::test]
async fn past_the_tool_call_cap_a_script_gets_tool_cap_exceeded() {
    let (_slow, rt) = slow_tool_runtime(flowbox::Limits::default().with_max_tool_calls(1));
    let script = "await call_tool('slow')
try:
    await call_tool('slow')
except ToolCapExceeded as e:
    return [type(e).__name__, isinstance(e, ToolError), e.kind, e.retryable, str(e)]
";
    let outcome = rt.run(script, json!({})).await;
    assert_eq!(
        outcome.result.unwrap(),
        json!([
            "ToolCapExceeded",
            true,
            "tool_cap_exceeded",
            false,
            "this run may make at most 1 tool calls and has made them all"
        ])
    );
    assert_eq!(outcome.summary.tools_called, 1);
}

/// The failures a script may catch name their kind as the guidance says, and none of them is
/// retryable: a tool that fails (`tool`), the tool-call and leaf caps, a spent token budget.
#[tokio::test]
async fn each_failure_a_script_catches_has_the_kind_the_guidance_names() {
    let (_base, tools) = notes();
    let limits = flowbox::Limits::default()
        .with_max_agents(1)
        .with_max_tool_calls(2);
    let rt = Runtime::builder()
        .shared_backend(Arc::new(FakeBackend::new()) as Arc<dyn LeafBackend>)
        .code_tools(tools)
        .limits(limits)
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .unwrap();
    let script = r#"
seen = []
async def probe(call):
    try:
        await call()
    except (AgentError, ToolError) as e:
        seen.append([type(e).__name__, e.kind, e.retryable])
await probe(lambda: call_tool("read_file", path="notes/missing.txt"))
await probe(lambda: call_tool("list_dir", path="notes"))
await probe(lambda: call_tool("list_dir", path="notes"))
await probe(lambda: agent("one"))
await probe(lambda: agent("two"))
return seen
"#;
    let outcome = rt.run(script, json!({})).await;
    assert_eq!(
        outcome.result.unwrap(),
        json!([
            ["ToolError", "tool", false],
            ["ToolCapExceeded", "tool_cap_exceeded", false],
            ["AgentCapExceeded", "agent_cap_exceeded", false]
        ])
    );
    let budget = Runtime::builder()
        .shared_backend(Arc::new(FakeBackend::new()) as Arc<dyn LeafBackend>)
        .limits(flowbox::Limits::default().with_budget_tokens(Some(1)))
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .unwrap();
    let script = "await agent('one')\ntry:\n    await agent('two')\nexcept BudgetExceeded as e:\n    return [e.kind, e.retryable, isinstance(e, AgentError)]\n";
    assert_eq!(
        budget.run(script, json!({})).await.result.unwrap(),
        json!(["budget_exceeded", false, true])
    );
}
