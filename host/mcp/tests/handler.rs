//! The server's handler without a process: a `flowbox_mcp::Server` on one end of an in-memory
//! pipe, JSON-RPC lines written and read on the other, as a client would over stdio. The
//! official client SDK drives the real binary in the CLI's tests; these pin the handler's own
//! answers.

use std::sync::Arc;
use std::time::Duration;

use flowbox::Runtime;
use flowbox::backends::FakeBackend;
use flowbox::store::MemoryStore;
use flowbox_mcp::Server;
use rmcp::ServiceExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, WriteHalf};

/// The client's end of the pipe.
struct Client {
    writer: WriteHalf<DuplexStream>,
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    next_id: u64,
}

impl Client {
    /// A server over `runtime` on the other end, initialised as a 2025-11-25 client.
    async fn connect(runtime: Runtime) -> Self {
        Self::connect_with(runtime, json!({})).await
    }

    /// [`Self::connect`], the client declaring `capabilities`.
    async fn connect_with(runtime: Runtime, capabilities: Value) -> Self {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let server = Server::builder(runtime).build();
        tokio::spawn(async move {
            let (read, write) = tokio::io::split(theirs);
            if let Ok(service) = server.serve((read, write)).await {
                let _ = service.waiting().await;
            }
        });
        let (read, writer) = tokio::io::split(ours);
        let mut client = Self {
            writer,
            lines: BufReader::new(read).lines(),
            next_id: 1,
        };
        let info = client
            .request(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                       "clientInfo": {"name": "test", "version": "1"}}),
            )
            .await;
        assert_eq!(info["result"]["serverInfo"]["name"], "flowbox", "{info}");
        client
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        client
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await.unwrap();
    }

    /// Sends a request and returns its response (notifications on the way are skipped).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
                .await
                .expect("the server answers")
                .unwrap()
                .expect("the server is still there");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        response["result"].clone()
    }
}

fn runtime(journal: bool) -> Runtime {
    let mut builder = Runtime::builder()
        .backend(FakeBackend::new())
        .cache_dir(flowbox_testkit::restate::workspace_root().join("target/flowbox-cache"));
    if journal {
        builder = builder.shared_store(Arc::new(MemoryStore::new()));
    }
    builder.build().expect("the guest loads")
}

#[tokio::test]
async fn the_tools_are_listed_with_their_schemas() {
    let mut client = Client::connect(runtime(false)).await;
    let listed = client.request("tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "run_workflow",
            "resume_workflow",
            "list_threads",
            "show_thread"
        ]
    );
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert_eq!(tool["outputSchema"]["type"], "object", "{tool}");
    }
}

#[tokio::test]
async fn a_run_answers_with_its_structured_outcome_and_a_listing_shows_it() {
    let mut client = Client::connect(runtime(true)).await;
    let result = client
        .call(
            "run_workflow",
            json!({"script": "return {'n': 10000000000000000000001, 'x': await agent('hi')}",
                   "thread_id": "t1"}),
        )
        .await;
    assert_eq!(result["isError"], false, "{result}");
    let output = &result["structuredContent"];
    assert_eq!(output["ok"], true);
    assert_eq!(output["result"]["n"].to_string(), "10000000000000000000001");
    assert_eq!(output["summary"]["leaves"], 1);
    assert_eq!(result["content"][0]["type"], "text");

    let listed = client.call("list_threads", json!({})).await;
    let threads = listed["structuredContent"]["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1);
    assert_eq!(threads[0]["thread_id"], "t1");
    assert_eq!(threads[0]["status"], "succeeded");
    let shown = client.call("show_thread", json!({"thread_id": "t1"})).await;
    assert_eq!(shown["structuredContent"]["status"], "succeeded", "{shown}");
    assert_eq!(
        shown["structuredContent"]["entries"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Asked again, a finished thread answers with its recorded outcome.
    let again = client
        .call("resume_workflow", json!({"thread_id": "t1"}))
        .await;
    assert_eq!(again["structuredContent"]["result"], output["result"]);
}

#[tokio::test]
async fn a_preview_carries_the_expected_output_the_journal_has_seen_beside_the_ceiling() {
    let mut client = Client::connect(runtime(true)).await;
    let script = "return await parallel([lambda i=i: agent(f'item {i}') for i in range(3)])";
    let preview = json!({"script": script, "preview": true});
    let before = client.call("run_workflow", preview.clone()).await;
    let plan = &before["structuredContent"]["plan"];
    assert_eq!(before["structuredContent"]["preview"], true, "{before}");
    assert_eq!(
        (
            &plan["expected_from_history"],
            &plan["expected_from_default"]
        ),
        (&json!(0), &json!(3))
    );
    assert_eq!(plan["expected_output_tokens"], 3 * 300);
    assert!(plan["expected_output_tokens"].as_u64() <= plan["max_output_tokens"].as_u64());

    let ran = client.call("run_workflow", json!({"script": script})).await;
    assert_eq!(ran["structuredContent"]["ok"], true, "{ran}");
    let after = client.call("run_workflow", preview).await;
    let plan = &after["structuredContent"]["plan"];
    assert_eq!(
        (
            &plan["expected_from_history"],
            &plan["expected_from_default"]
        ),
        (&json!(3), &json!(0)),
        "{plan}"
    );
    assert!(
        plan["expected_output_tokens"].as_u64() < Some(3 * 300),
        "{plan}"
    );
}

#[tokio::test]
async fn bad_calls_are_errors_the_model_can_act_on() {
    let mut client = Client::connect(runtime(false)).await;
    // A script that fails is a tool result with isError, kind, line and hint.
    let failed = client
        .call("run_workflow", json!({"script": "x = 1\nreturn 1 / 0"}))
        .await;
    assert_eq!(failed["isError"], true, "{failed}");
    let error = &failed["structuredContent"]["error"];
    assert_eq!(error["kind"], "uncaught");
    assert_eq!(error["line"], 2);
    assert!(error["hint"].as_str().is_some());
    // Arguments that do not fit the schema.
    let invalid = client
        .call("run_workflow", json!({"scrip": "return 1"}))
        .await;
    assert_eq!(
        invalid["structuredContent"]["error"]["kind"], "invalid_arguments",
        "{invalid}"
    );
    // A server without a journal says so for the thread tools.
    let listed = client.call("list_threads", json!({})).await;
    assert_eq!(
        listed["structuredContent"]["error"]["kind"],
        "journal_failure"
    );
    // An unknown tool and an unknown method are protocol errors.
    let unknown = client
        .request("tools/call", json!({"name": "nope", "arguments": {}}))
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let message = unknown["error"]["message"].as_str().unwrap();
    for tool in [
        "run_workflow",
        "resume_workflow",
        "list_threads",
        "show_thread",
        "thread_events",
    ] {
        assert!(message.contains(tool), "{message}");
    }
    let method = client.request("tools/nothing", json!({})).await;
    assert_eq!(method["error"]["code"], -32601, "{method}");
}

#[tokio::test]
async fn the_run_view_is_the_one_resource_and_its_tool_reads_a_threads_events() {
    let mut client = Client::connect(runtime(true)).await;
    let listed = client.request("resources/list", json!({})).await;
    let resources = &listed["result"]["resources"];
    assert_eq!(resources.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(resources[0]["uri"], "ui://flowbox/run-view.html");
    assert_eq!(resources[0]["mimeType"], "text/html;profile=mcp-app");
    let read = client
        .request(
            "resources/read",
            json!({"uri": "ui://flowbox/run-view.html"}),
        )
        .await;
    let html = read["result"]["contents"][0]["text"].as_str().unwrap();
    assert!(html.contains("makeTimeline") && html.contains("ui/initialize"));
    // A resource that does not exist, and params that are not a read's.
    let missing = client
        .request("resources/read", json!({"uri": "ui://flowbox/nope.html"}))
        .await;
    assert_eq!(missing["error"]["code"], -32002, "{missing}");
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ui://flowbox/run-view.html"),
        "{missing}"
    );
    let malformed = client.request("resources/read", json!({"url": 1})).await;
    assert_eq!(malformed["error"]["code"], -32602, "{malformed}");
    // A client without the extension is not offered the view's tool, but a call of it works
    // like any other: a thread's events after a sequence number.
    let done = client
        .call(
            "run_workflow",
            json!({"script": "return await agent('x')", "thread_id": "viewed"}),
        )
        .await;
    assert_eq!(done["structuredContent"]["ok"], true, "{done}");
    let page = client
        .call("thread_events", json!({"thread_id": "viewed", "after": 1}))
        .await;
    let page = &page["structuredContent"];
    assert_eq!(page["status"], "succeeded", "{page}");
    let events = page["events"].as_array().unwrap();
    assert_eq!(events[0]["seq"], 2, "after the first");
    assert_eq!(events.last().unwrap()["type"], "run_finished");
    assert_eq!(page["next"], events.last().unwrap()["seq"]);
    let unknown = client
        .call("thread_events", json!({"thread_id": "nobody"}))
        .await;
    assert_eq!(
        unknown["structuredContent"]["error"]["kind"], "unknown_thread",
        "{unknown}"
    );
    let bad = client
        .call("thread_events", json!({"thread_id": "viewed", "after": -1}))
        .await;
    assert_eq!(
        bad["structuredContent"]["error"]["kind"], "invalid_arguments",
        "{bad}"
    );
}

#[tokio::test]
async fn a_host_with_the_apps_extension_gets_the_view_named_on_the_run_tools() {
    let ui = json!({"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}});
    let mut client = Client::connect_with(runtime(false), json!({"extensions": ui})).await;
    let listed = client.request("tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let meta = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap()["_meta"].clone();
    assert_eq!(
        meta("run_workflow")["ui"]["resourceUri"],
        "ui://flowbox/run-view.html"
    );
    assert_eq!(
        meta("run_workflow")["ui/resourceUri"],
        "ui://flowbox/run-view.html"
    );
    assert_eq!(
        meta("resume_workflow")["ui"]["resourceUri"],
        "ui://flowbox/run-view.html"
    );
    assert_eq!(meta("thread_events")["ui"]["visibility"], json!(["app"]));
    assert_eq!(meta("list_threads"), Value::Null);
}
