//! An embedder's worker given identity keys: its endpoint serves what one of their servers
//! signed and refuses (401) anything else before it reaches a service; without keys it serves
//! every request. No server or socket: requests go straight to the endpoint.

use std::sync::Arc;

use flowbox::Runtime;
use flowbox::backends::FakeBackend;
use flowbox::tools::ToolSet;
use flowbox_restate::{IdentityKey, Services, Worker};
use flowbox_testkit::restate::{IdentityKeyPair, workspace_root};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;

fn worker(identity_keys: Vec<IdentityKey>) -> Worker {
    let backend = Arc::new(FakeBackend::new());
    Worker {
        runtime: Runtime::builder()
            .backend(FakeBackend::new())
            .cache_dir(workspace_root().join("target/flowbox-cache"))
            .warm_pool(0)
            .build()
            .unwrap(),
        backend,
        tools: ToolSet::new(),
        services: Services::All,
        identity_keys,
    }
}

/// The status and body of `GET /discover` with `headers`.
async fn discover(worker: &Worker, headers: &[(String, String)]) -> (u16, String) {
    let mut request = hyper::Request::get("http://worker/discover")
        .header("accept", "application/vnd.restate.endpointmanifest.v4+json");
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = worker
        .endpoint()
        .handle(request.body(Empty::<Bytes>::new()).unwrap());
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn a_worker_with_identity_keys_serves_only_what_their_servers_signed() {
    let (server, other, stranger) = (
        IdentityKeyPair::generate(),
        IdentityKeyPair::generate(),
        IdentityKeyPair::generate(),
    );
    let keys = [&server, &other].map(|pair| pair.public.parse().unwrap());
    let worker = worker(keys.to_vec());
    for signer in [&server, &other] {
        let (status, body) = discover(&worker, &signer.sign("/discover")).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("FlowboxLeaf"), "{body}");
    }
    for (headers, missing) in [
        (vec![], "MissingHeader"),
        (stranger.sign("/discover"), "Error when verifying identity"),
        // Signed for another path: a signature cannot be replayed elsewhere.
        (
            server.sign("/invoke/FlowboxLeaf/call"),
            "Error when verifying identity",
        ),
    ] {
        let (status, body) = discover(&worker, &headers).await;
        assert_eq!(status, 401, "{body}");
        assert!(body.contains(missing), "{body}");
        assert!(!body.contains("FlowboxLeaf"), "{body}");
    }
}

#[tokio::test]
async fn a_worker_without_identity_keys_serves_unsigned_requests() {
    let (status, body) = discover(&worker(Vec::new()), &[]).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("FlowboxWorkflow"), "{body}");
}
