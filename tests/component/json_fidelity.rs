//! JSON crosses the host unchanged: integers past 64 bits, floats to the bit, a subnormal, `-0.0`
//! and object key order, through the real guest — args, results, a leaf's prompt and structured
//! reply (validated against a schema that needs the exact numbers), a `call_tool` call, the
//! SQLite journal, a resumed run and events. Every check compares JSON text: equal values could
//! still differ in key order.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use flowbox::backends::{AgentBackend, AgentConfig};
use flowbox::chat::{ChatModel, ChatRequest, ChatResponse, Message};
use flowbox::store::{
    CallRequest, CheckpointStore, EntryOutcome, MemoryStore, SqliteStore, ThreadStatus,
};
use flowbox::tools::{Tool, ToolError, ToolSet, ToolSpec};
use flowbox::{BackendError, Event, EventKind, LeafBackend, RunOutcome, RunRequest, Runtime};
use flowbox_tests::{PanickingBackend, root};
use serde_json::{Value, json};

/// 2**70, -(2**65), a float whose last bit a lossy parser gets wrong, the smallest subnormal, a
/// negative zero; keys out of alphabetical order, nested too.
const ARGS: &str = r#"{"zeta":1180591620717411303424,"neg":-36893488147419103232,"r":0.21599615170364495,"tiny":5e-324,"nz":-0.0,"nested":{"b":1,"a":[2,{"y":null,"x":true}]}}"#;

/// The leaf prompt the script builds, as compact JSON.
const PROMPT: &str = r#"{"x":1180591620717411303424,"r":0.21599615170364495,"big":-36893488147419103232,"tiny":5e-324,"nz":-0.0}"#;

/// The schema the script gives: only 2**70 itself is a valid `id`.
const SCHEMA: &str = r#"{"type":"object","properties":{"id":{"const":1180591620717411303424},"r":{"type":"number","maximum":0.21599615170364495},"n":{"type":"integer","minimum":-36893488147419103232}},"required":["id","r","n"]}"#;

/// The structured reply the model gives.
const REPLY: &str = r#"{"n":-36893488147419103232,"id":1180591620717411303424,"r":0.21599615170364495,"tiny":5e-324,"nz":-0.0}"#;

/// The arguments `call_tool("echo", z=2**70, a=0.21599615170364495, m=-0.0)` sends.
const TOOL_ARGUMENTS: &str = r#"{"z":1180591620717411303424,"a":0.21599615170364495,"m":-0.0}"#;

/// What the echo tool adds to its arguments.
const TOOL_EXTRA: &str = r#"[-1180591620717411303425,5e-324,-0.0]"#;

const SCRIPT: &str = r#"
import math
seen = {
    "keys": list(args) + list(args["nested"]),
    "exact": [args["zeta"] == 2**70, args["neg"] == -(2**65), args["r"] == 0.21599615170364495,
              args["tiny"] == 5e-324, args["nz"] == 0 and math.copysign(1.0, args["nz"]) == -1.0],
    "types": [type(args[k]).__name__ for k in ("zeta", "neg", "r", "tiny", "nz")],
}
reply = await agent({"x": 2**70, "r": 0.21599615170364495, "big": -(2**65), "tiny": 5e-324,
                     "nz": -0.0}, schema=SCHEMA)
tool = await call_tool("echo", z=2**70, a=0.21599615170364495, m=-0.0)
checks = [reply["id"] == 2**70, reply["n"] == -(2**65), reply["r"] == 0.21599615170364495,
          reply["tiny"] == 5e-324, math.copysign(1.0, reply["nz"]) == -1.0,
          list(reply) == ["n", "id", "r", "tiny", "nz"],
          tool["extra"][0] == -(2**70) - 1, list(tool["arguments"]) == ["z", "a", "m"]]
return {"args": args, "seen": seen, "reply": reply, "checks": checks, "tool": tool}
"#;

/// The script with the schema inlined as a Python literal (JSON's literals are Python's here).
fn script() -> String {
    format!("SCHEMA = {SCHEMA}\n{SCRIPT}")
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// The whole result [`SCRIPT`] returns, as compact JSON.
fn expected_result() -> String {
    format!(
        r#"{{"args":{ARGS},"seen":{{"keys":["zeta","neg","r","tiny","nz","nested","b","a"],"exact":[true,true,true,true,true],"types":["int","int","float","float","float"]}},"reply":{REPLY},"checks":[true,true,true,true,true,true,true,true],"tool":{{"arguments":{TOOL_ARGUMENTS},"extra":{TOOL_EXTRA}}}}}"#
    )
}

/// A chat model that answers with canned JSON text, as an OpenAI-compatible server does, and
/// records what it was asked.
#[derive(Debug, Default)]
struct CannedModel {
    replies: Mutex<VecDeque<String>>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl CannedModel {
    fn new(replies: &[&str]) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.iter().map(|r| (*r).to_owned()).collect()),
            ..Self::default()
        })
    }

    fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl ChatModel for CannedModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        self.requests.lock().unwrap().push(request.clone());
        let text = self.replies.lock().unwrap().pop_front();
        let text = text.ok_or_else(|| BackendError::terminal("no canned reply left"))?;
        Ok(ChatResponse {
            text,
            ..ChatResponse::default()
        })
    }
}

/// A code-callable tool that returns its arguments and some exact numbers of its own.
#[derive(Debug, Default)]
struct Echo {
    calls: AtomicUsize,
    arguments: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Tool for Echo {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "echo".into(),
            description: "Returns its arguments.".into(),
            parameters: parse(
                r#"{"type":"object","properties":{"z":{"type":"integer","maximum":1180591620717411303424}},"required":["z"]}"#,
            ),
        }
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.arguments.lock().unwrap().push(arguments.to_string());
        Ok(json!({"arguments": arguments, "extra": parse(TOOL_EXTRA)}))
    }
}

fn agent(model: Arc<CannedModel>) -> Arc<dyn LeafBackend> {
    Arc::new(AgentBackend::new(
        model,
        AgentConfig::default(),
        ToolSet::new(),
    ))
}

fn runtime(
    backend: Arc<dyn LeafBackend>,
    echo: Arc<Echo>,
    store: Option<Arc<dyn CheckpointStore>>,
) -> Runtime {
    let mut tools = ToolSet::new();
    tools.insert(echo).unwrap();
    let mut builder = Runtime::builder()
        .shared_backend(backend)
        .code_tools(tools)
        .cache_dir(root().join("target").join("flowbox-cache"));
    if let Some(store) = store {
        builder = builder.shared_store(store);
    }
    builder.build().expect("the guest loads")
}

fn result_text(outcome: &RunOutcome) -> String {
    match &outcome.result {
        Ok(value) => value.to_string(),
        Err(error) => panic!("the run failed: {error}\nlogs: {:#?}", outcome.summary.logs),
    }
}

#[tokio::test]
async fn args_reach_the_script_and_results_come_back_exactly() {
    let rt = runtime(agent(CannedModel::new(&[])), Arc::default(), None);
    let outcome = rt.run("return args", parse(ARGS)).await;
    assert_eq!(result_text(&outcome), ARGS);
    let outcome = rt
        .run(
            "return {'x': 2**70, 'r': 0.21599615170364495, 'big': -(2**65), 'tiny': 5e-324, \
             'nz': -0.0, 'one': 1.0, 'huge': 10**40 + 1}",
            json!({}),
        )
        .await;
    assert_eq!(
        result_text(&outcome),
        r#"{"x":1180591620717411303424,"r":0.21599615170364495,"big":-36893488147419103232,"tiny":5e-324,"nz":-0.0,"one":1.0,"huge":10000000000000000000000000000000000000001}"#
    );
    // What `flowbox run --json` prints is built from the same value.
    let printed = outcome.to_json()["result"].to_string();
    assert!(printed.starts_with(r#"{"x":1180591620717411303424,"r":0.21599615170364495,"#));
}

#[tokio::test]
async fn prompts_structured_replies_and_tool_calls_keep_their_numbers() {
    let model = CannedModel::new(&[REPLY]);
    let echo = Arc::new(Echo::default());
    let rt = runtime(agent(model.clone()), echo.clone(), None);
    let outcome = rt.run(&script(), parse(ARGS)).await;
    assert_eq!(result_text(&outcome), expected_result());

    let requests = model.requests();
    assert_eq!(requests.len(), 1, "the reply validated at once");
    let [Message::User { text }] = requests[0].messages.as_slice() else {
        panic!("{:?}", requests[0].messages);
    };
    // The prompt as the model reads it: pretty-printed, with the script's numbers and order.
    assert_eq!(text, &serde_json::to_string_pretty(&parse(PROMPT)).unwrap());
    assert_eq!(parse(text).to_string(), PROMPT);
    let structured = requests[0].structured.as_ref().unwrap();
    assert_eq!(structured.schema.to_string(), SCHEMA);
    assert_eq!(
        *echo.arguments.lock().unwrap(),
        vec![TOOL_ARGUMENTS.to_owned()]
    );
}

/// What a script may change of `json` for its own use: none of it may change what flowbox
/// writes and reads for it.
const RECONFIGURE_JSON: &str = r#"
import json
json.JSONEncoder.item_separator = " | "
json.JSONEncoder.key_separator = " = "
json.JSONEncoder.encode = lambda self, o: "not json"
json.JSONEncoder.iterencode = lambda self, o, _one_shot=False: iter(["not json"])
json.JSONDecoder.decode = lambda self, s, _w=None: "not decoded"
json.JSONDecoder.raw_decode = lambda self, s, idx=0: ("not decoded", len(s))
"#;

#[tokio::test]
async fn a_script_reconfiguring_json_changes_nothing_that_crosses() {
    let store = Arc::new(MemoryStore::new());
    let model = CannedModel::new(&[REPLY]);
    let echo = Arc::new(Echo::default());
    let rt = runtime(agent(model.clone()), echo.clone(), Some(store.clone()));
    let request = RunRequest::new(format!("{RECONFIGURE_JSON}{}", script()))
        .args(parse(ARGS))
        .thread_id("reconfigured");
    let outcome = rt.run_request(request).await;
    assert_eq!(result_text(&outcome), expected_result());
    let text = match model.requests()[0].messages.as_slice() {
        [Message::User { text }] => parse(text).to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(text, PROMPT);
    assert_eq!(
        *echo.arguments.lock().unwrap(),
        vec![TOOL_ARGUMENTS.to_owned()]
    );
    let run = store.load("reconfigured").await.unwrap().unwrap();
    assert_eq!(run.status, ThreadStatus::Succeeded);

    // The issue's own case: a list comes back as the list it is.
    let outcome = rt
        .run(
            "import json\njson.JSONEncoder.item_separator = ' | '\nreturn ['a', 'b']\n",
            json!({}),
        )
        .await;
    assert_eq!(result_text(&outcome), r#"["a","b"]"#);
}

#[tokio::test]
async fn schemas_judge_replies_by_their_exact_numbers() {
    // 2**70 + 1 and a float one bit above the maximum are refused, and the repair turn says so;
    // the exact reply then passes.
    let wrong =
        r#"{"n":-36893488147419103232,"id":1180591620717411303425,"r":0.21599615170364495}"#;
    let above =
        r#"{"n":-36893488147419103233,"id":1180591620717411303424,"r":0.21599615170364498}"#;
    for bad in [wrong, above] {
        let model = CannedModel::new(&[bad, REPLY]);
        let rt = runtime(agent(model.clone()), Arc::default(), None);
        let outcome = rt
            .run(
                &format!("SCHEMA = {SCHEMA}\nreturn await agent('give', schema=SCHEMA)"),
                json!({}),
            )
            .await;
        assert_eq!(result_text(&outcome), REPLY);
        let requests = model.requests();
        assert_eq!(requests.len(), 2, "{bad} needed a repair turn");
        let Some(Message::User { text }) = requests[1].messages.last() else {
            panic!("{:?}", requests[1].messages);
        };
        assert!(
            text.contains("does not match the required JSON Schema"),
            "{text}"
        );
    }
    let model = CannedModel::new(&[wrong, above]);
    let rt = runtime(agent(model), Arc::default(), None);
    let outcome = rt
        .run(
            &format!(
                "SCHEMA = {SCHEMA}\ntry:\n    await agent('give', schema=SCHEMA)\nexcept AgentError as e:\n    return str(e)"
            ),
            json!({}),
        )
        .await;
    let message = outcome.result.unwrap();
    let message = message.as_str().unwrap();
    assert!(message.contains("even after a repair turn"), "{message}");
    assert!(message.contains("-36893488147419103233"), "{message}");
    assert!(message.contains("0.21599615170364498"), "{message}");
    // Tool arguments are checked the same way: `z` may be at most 2**70.
    let rt = runtime(agent(CannedModel::new(&[])), Arc::default(), None);
    let outcome = rt
        .run(
            "try:\n    await call_tool('echo', z=2**70 + 1)\nexcept ToolError as e:\n    return str(e)",
            json!({}),
        )
        .await;
    let message = outcome.result.unwrap();
    assert!(
        message.as_str().unwrap().contains("1180591620717411303425"),
        "{message}"
    );
}

#[tokio::test]
async fn the_journal_and_a_resumed_run_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let echo = Arc::new(Echo::default());
    let store: Arc<dyn CheckpointStore> = Arc::new(SqliteStore::open(&path).unwrap());
    let live = runtime(agent(CannedModel::new(&[REPLY])), echo.clone(), Some(store));
    let request = RunRequest::new(script())
        .args(parse(ARGS))
        .thread_id("exact");
    let first = live.run_request(request.clone()).await;
    assert_eq!(result_text(&first), expected_result());

    // What the file holds, read back by a fresh store.
    let reopened = Arc::new(SqliteStore::open(&path).unwrap());
    let run = reopened.load("exact").await.unwrap().unwrap();
    assert_eq!(run.header.args.to_string(), ARGS);
    assert_eq!(run.entries.len(), 2);
    let CallRequest::Agent(agent) = &run.entries[0].request else {
        panic!("{:?}", run.entries[0].request);
    };
    assert_eq!(agent.prompt.to_string(), PROMPT);
    assert_eq!(agent.schema.as_ref().unwrap().to_string(), SCHEMA);
    assert_eq!(
        run.entries[0].outcome,
        EntryOutcome::Ok {
            value: REPLY.into()
        }
    );
    let CallRequest::Tool(tool) = &run.entries[1].request else {
        panic!("{:?}", run.entries[1].request);
    };
    assert_eq!(tool.arguments.to_string(), TOOL_ARGUMENTS);
    let EntryOutcome::Ok { value } = &run.entries[1].outcome else {
        panic!("{:?}", run.entries[1].outcome);
    };
    assert_eq!(
        value,
        &format!(r#"{{"arguments":{TOOL_ARGUMENTS},"extra":{TOOL_EXTRA}}}"#)
    );
    let end = run.end.clone().unwrap();
    assert_eq!(
        end.outcome.result.as_ref().unwrap().to_string(),
        expected_result()
    );

    // A run interrupted before its end resumes from the journal alone, to the same text.
    let copy_path = dir.path().join("copy.db");
    let copy = Arc::new(SqliteStore::open(&copy_path).unwrap());
    copy.begin(&run.header).await.unwrap();
    copy.append("exact", &run.entries).await.unwrap();
    let replay = runtime(
        Arc::new(PanickingBackend::always()),
        echo.clone(),
        Some(copy),
    );
    let again = replay.resume("exact", None).await;
    assert_eq!(result_text(&again), expected_result());
    assert_eq!(again.summary.fuel_used, first.summary.fuel_used);
    assert_eq!(
        echo.calls.load(Ordering::SeqCst),
        1,
        "the tool was replayed"
    );

    // The finished thread answers with its recorded outcome, whether resumed or run again
    // with the same args: its args still match their recorded hash.
    let finished = runtime(
        Arc::new(PanickingBackend::always()),
        echo.clone(),
        Some(reopened),
    );
    let recorded = finished.resume("exact", None).await;
    assert!(recorded.recorded);
    assert_eq!(result_text(&recorded), expected_result());
    let recorded = finished.run_request(request).await;
    assert!(recorded.recorded);
    assert_eq!(result_text(&recorded), expected_result());
}

#[tokio::test]
async fn events_carry_the_prompt_text_and_read_back_as_written() {
    let rt = runtime(agent(CannedModel::new(&[REPLY])), Arc::default(), None);
    let mut stream = rt.subscribe();
    let outcome = rt
        .run_request(
            RunRequest::new(script())
                .args(parse(ARGS))
                .thread_id("events"),
        )
        .await;
    assert_eq!(result_text(&outcome), expected_result());
    let mut events = Vec::new();
    while let Some(event) = stream.try_recv() {
        events.push(event);
    }
    let preview = events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::LeafStarted { prompt_preview, .. } => Some(prompt_preview.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(preview, PROMPT);
    assert!(matches!(
        events.last().map(|e| &e.kind),
        Some(EventKind::RunFinished { ok: true, .. })
    ));
    for event in &events {
        let text = serde_json::to_string(event).unwrap();
        let back: Event = serde_json::from_str(&text).unwrap();
        assert_eq!(&back, event);
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
    }
}

/// A reply holding a number no float can hold is a failed leaf, not an infinity handed to the
/// script (which no JSON holds, and which the journal could not replay).
#[tokio::test]
async fn a_reply_with_a_number_beyond_any_float_fails_its_leaf() {
    let model = CannedModel::new(&[r#"{"n": 1e999}"#]);
    let rt = runtime(agent(model), Arc::new(Echo::default()), None);
    let script = r#"
try:
    reply = await agent("n?", schema={"type": "object", "properties": {"n": {"type": "number"}}})
    return {"got": str(reply)}
except AgentError as e:
    return {"failed": str(e)}
"#;
    let outcome = rt.run(script, Value::Null).await;
    let result = outcome.result.expect("the script handles the failed leaf");
    let failed = result["failed"].as_str().expect("the leaf failed");
    assert!(failed.contains("beyond any float"), "{failed}");
}
