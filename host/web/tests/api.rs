//! The web view's API in-process: the router on a loopback listener, over a journal written
//! through the store's own API, asked over plain HTTP/1.1. `flowbox serve`'s tests drive the
//! binary over journals real runs wrote, and a headless Chromium drives the pages.

use std::path::Path;

use flowbox::Summary;
use flowbox::store::{CheckpointStore, RecordedOutcome, SqliteStore, ThreadEnd, ThreadHeader};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The view of the journal at `path`, listening on a free loopback port.
async fn start(path: &Path) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(flowbox_web::WebView::new(path).serve(listener, std::future::pending()));
    address
}

/// A GET: the status, the headers (names lowercased) and the body.
async fn get(address: &str, path: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_lowercase(), body.to_owned())
}

async fn json(address: &str, path: &str) -> (u16, Value) {
    let (status, _, body) = get(address, path).await;
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn header(thread_id: &str, created_unix_ms: u64) -> ThreadHeader {
    ThreadHeader {
        thread_id: thread_id.into(),
        script: "return 1".into(),
        script_sha256: "s".repeat(64),
        args: json!({"big": 10000000000000000000001u128.to_string()}),
        args_sha256: "a".repeat(64),
        start_unix_nanos: 1,
        limits: json!({}),
        guard: true,
        created_unix_ms,
    }
}

#[tokio::test]
async fn threads_read_from_a_journal_that_appears_after_the_server_started() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let address = start(&path).await;
    let (status, empty) = json(&address, "/api/threads").await;
    assert_eq!(status, 200);
    assert_eq!(empty, json!({"threads": [], "damaged": []}));

    let store = SqliteStore::open(&path).unwrap();
    store.begin(&header("done", 1_000)).await.unwrap();
    let mut summary = Summary::new("done");
    summary.duration_ms = 42;
    let end = ThreadEnd {
        outcome: RecordedOutcome {
            result: Ok(json!(1)),
            summary,
        },
        finished_unix_ms: 2_000,
    };
    store.finish("done", &end).await.unwrap();
    store.begin(&header("open", 3_000)).await.unwrap();

    let (status, listing) = json(&address, "/api/threads").await;
    assert_eq!(status, 200);
    let threads = listing["threads"].as_array().unwrap();
    let statuses: Vec<(&str, &str)> = threads
        .iter()
        .map(|t| {
            (
                t["thread_id"].as_str().unwrap(),
                t["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(statuses, [("open", "resumable"), ("done", "succeeded")]);
    assert_eq!(threads[1]["duration_ms"], 42);
    assert_eq!(threads[1]["finished_unix_ms"], 2_000);

    let (status, thread) = json(&address, "/api/threads/open").await;
    assert_eq!(status, 200);
    assert_eq!(thread["resume_command"], "flowbox resume open");
    assert_eq!(thread["outcome"], Value::Null);
    let (_, done) = json(&address, "/api/threads/done").await;
    assert_eq!(done["resume_command"], Value::Null);
    assert_eq!(done["outcome"]["result"], 1);
}

#[tokio::test]
async fn bad_requests_are_answered_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    SqliteStore::open(&path)
        .unwrap()
        .begin(&header("t", 1))
        .await
        .unwrap();
    let address = start(&path).await;
    for (path, status, says) in [
        ("/api/threads/nope", 404, "no thread nope"),
        ("/api/threads/t/leaves/1", 404, "has no call 1"),
        ("/api/threads/t/leaves/x", 400, "whole number"),
        ("/api/threads/t/events?after=x", 400, "after"),
        ("/api/threads/t/events?limit=0", 400, "limit must be from 1"),
        (
            "/api/threads/t/events?since=1",
            400,
            "unknown field `since`",
        ),
        ("/api/else", 404, "no such API path"),
        ("/elsewhere", 404, "no such page"),
        // A path whose escapes decode to no text names what does not decode, in every route
        // and either parameter.
        ("/api/threads/%FF%FE", 400, "UTF-8"),
        ("/api/threads/%FF%FE/events", 400, "UTF-8"),
        ("/api/threads/%FF%FE/stream", 400, "UTF-8"),
        ("/api/threads/%FF%FE/leaves/1", 400, "UTF-8"),
        ("/api/threads/t/leaves/%FF%FE", 400, "UTF-8"),
    ] {
        let (got, body) = json(&address, path).await;
        assert_eq!(got, status, "{path}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{path}: {body}");
    }
}

#[tokio::test]
async fn the_pages_run_only_their_own_script() {
    let dir = tempfile::tempdir().unwrap();
    let address = start(&dir.path().join("journal.db")).await;
    for path in [
        "/",
        "/runs/t",
        "/assets/app.js",
        "/assets/app.css",
        "/assets/timeline.js",
        "/assets/timeline.css",
    ] {
        let (status, head, _) = get(&address, path).await;
        assert_eq!(status, 200, "{path}");
        assert!(
            head.contains("content-security-policy: default-src 'none'; script-src 'self'"),
            "{path}: {head}"
        );
    }
}
