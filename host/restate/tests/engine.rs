//! The engine choice for an embedder: a runtime built with `RuntimeBuilder::remote(RestateEngine)`
//! sends its runs, and so its orchestrator's `run_workflow`, to a real Restate server (installed
//! by `make restate-setup`), served here by an in-process worker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowbox::backends::FakeBackend;
use flowbox::orchestrator::WorkflowTool;
use flowbox::tools::ToolSet;
use flowbox::{RunRequest, Runtime};
use flowbox_restate::{Client, RestateEngine, Services, Worker};
use flowbox_testkit::restate::{RestateServer, workspace_root};
use serde_json::{Value, json};

fn runtime() -> flowbox::RuntimeBuilder {
    Runtime::builder()
        .backend(FakeBackend::new())
        .cache_dir(workspace_root().join("target/flowbox-cache"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedders_run_workflow_runs_on_restate_by_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let server = RestateServer::start(dir.path());
    let worker = Worker {
        runtime: runtime().build().unwrap(),
        backend: Arc::new(FakeBackend::new()),
        tools: ToolSet::new(),
        services: Services::All,
        identity_keys: Vec::new(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!(
        "http://{}/{}",
        listener.local_addr().unwrap(),
        worker.version()
    );
    tokio::spawn(flowbox_restate::serve(
        listener,
        worker.endpoint(),
        std::future::pending(),
    ));
    let admin = Client::new(&server.admin).unwrap();
    let started = Instant::now();
    while admin.register(&uri).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "Restate never came up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Registering the same code at the same address again changes nothing.
    let again = admin.register(&uri).await.unwrap();
    let first = admin.register(&uri).await.unwrap();
    assert_eq!(again["id"], first["id"]);

    let ingress_url = server.ingress.clone();
    let engine = Arc::new(RestateEngine::new(&ingress_url).unwrap());
    let remote = runtime().remote(engine).build().unwrap();
    let local = runtime().build().unwrap();
    let input: flowbox::orchestrator::WorkflowInput = serde_json::from_value(json!({
        "script": "r = await parallel([lambda i=i: agent(f'part {i}') for i in range(3)])\n\
                   return {'parts': r, 'n': 10000000000000000000001}",
        "thread_id": "embedded-1",
    }))
    .unwrap();
    let on_restate = WorkflowTool::new(remote.clone())
        .execute(input.clone())
        .await
        .to_value();
    let here = WorkflowTool::new(local).execute(input).await.to_value();
    assert_eq!(on_restate["ok"], true, "{on_restate}");
    assert_eq!(on_restate["result"], here["result"]);
    assert_eq!(
        on_restate["result"]["n"].to_string(),
        "10000000000000000000001"
    );
    // The run is Restate's: its outcome is there to attach to.
    let outcome: Value = Client::new(&ingress_url)
        .unwrap()
        .attach("embedded-1")
        .await
        .unwrap()
        .expect("Restate knows the thread");
    assert_eq!(outcome["result"], on_restate["result"]);
    // A changed script on the same thread is a divergence, as locally.
    let changed = remote
        .run_request(RunRequest::new("return 1").thread_id("embedded-1"))
        .await;
    assert_eq!(
        changed.result.unwrap_err().kind(),
        flowbox::RunErrorKind::Divergence
    );
}
