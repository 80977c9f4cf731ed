//! Serving flowbox's Restate services: the endpoint (which services, with which retry and
//! timeout options) and our own accept loop, which sets `TCP_NODELAY` on every connection (the
//! SDK's server does not, and Nagle's algorithm then stalls each exchange by ~40 ms).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use flowbox::tools::ToolSet;
use flowbox::{LeafBackend, Runtime};
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use restate_sdk::endpoint::{Endpoint, HandlerOptions, ServiceOptions};
use restate_sdk::hyper::HyperEndpoint;
use restate_sdk::service::IntoServiceDefinition;
use tokio::net::TcpListener;

use crate::identity::IdentityKey;
use crate::leaf::FlowboxLeaf;
use crate::workflow::FlowboxWorkflow;

/// How many attempts a workflow gets before Restate kills it: a worker failing on a bug
/// stops there with a machinery error instead of spinning, while a worker restarting (a few
/// seconds, at intervals growing to 2 s: about 13 s in all) is waited for.
pub const WORKFLOW_ATTEMPTS: u64 = 10;

/// Which of flowbox's services a worker serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Services {
    /// The workflow service and the leaf service.
    All,
    /// The workflow service only: its leaves go to other workers.
    Workflow,
    /// The leaf service only.
    Leaf,
}

impl Services {
    /// Whether the workflow service is among them.
    pub fn workflow(self) -> bool {
        matches!(self, Self::All | Self::Workflow)
    }

    /// Whether the leaf service is among them.
    pub fn leaf(self) -> bool {
        matches!(self, Self::All | Self::Leaf)
    }
}

/// What a worker serves with.
#[derive(Debug, Clone)]
pub struct Worker {
    /// Runs the workflows (its backend checks and prices leaves; its limits are the default).
    pub runtime: Runtime,
    /// Answers the leaves.
    pub backend: Arc<dyn LeafBackend>,
    /// The host tools scripts call with `call_tool`.
    pub tools: ToolSet,
    /// Which services to serve.
    pub services: Services,
    /// The public keys of the Restate servers the worker serves: a request signed with none of
    /// them is refused (401) before it reaches a service. Empty, every request is served, and
    /// whoever can connect runs workflows and leaves on the worker's backend: serve such a
    /// worker on loopback only (`flowbox worker` refuses other addresses without `--insecure`).
    pub identity_keys: Vec<IdentityKey>,
}

impl Worker {
    /// The Restate endpoint serving the worker's services to the servers of its identity keys.
    pub fn endpoint(&self) -> Endpoint {
        let mut builder = Endpoint::builder();
        for key in &self.identity_keys {
            builder = builder
                .identity_key(key.as_str())
                .expect("an IdentityKey passed the SDK's parser when it was made");
        }
        if self.services.workflow() {
            let options = ServiceOptions::new()
                .retry_policy_initial_interval(Duration::from_millis(200))
                .retry_policy_max_interval(Duration::from_secs(2))
                .retry_policy_max_attempts(WORKFLOW_ATTEMPTS)
                .retry_policy_kill_on_max_attempts()
                .handler("run", HandlerOptions::new())
                // A follower asks for events many times a second: keep no journal of that.
                .handler(
                    "events",
                    HandlerOptions::new().journal_retention(Duration::ZERO),
                );
            builder = builder.bind(
                FlowboxWorkflow::new(self.runtime.clone())
                    .into_service_definition()
                    .options(options),
            );
        }
        if self.services.leaf() {
            // A leaf may think for minutes without a word to Restate.
            let options = ServiceOptions::new()
                .inactivity_timeout(Duration::from_secs(15 * 60))
                .abort_timeout(Duration::from_secs(15 * 60));
            builder = builder.bind(
                FlowboxLeaf::new(Arc::clone(&self.backend), self.tools.clone())
                    .into_service_definition()
                    .options(options),
            );
        }
        builder.build()
    }

    /// The deployment's version: the crate's version and the guest's hash. A worker of another
    /// version registers as another deployment, so in-flight runs stay on the code they
    /// started with.
    pub fn version(&self) -> String {
        format!(
            "flowbox-{}-{}",
            env!("CARGO_PKG_VERSION"),
            &self.runtime.guest_sha256()[..12]
        )
    }
}

/// Serves `endpoint` over HTTP/2 (h2c) on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, endpoint: Endpoint, shutdown: impl Future<Output = ()>) {
    let service = HyperEndpoint::new(endpoint);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => return,
        };
        let Ok((stream, _)) = accepted else {
            // Out of descriptors, say: the next accept may succeed.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        tokio::spawn(async move {
            let connection = http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service);
            // A peer that goes away ends its connection; Restate retries what was in flight.
            let _ = connection.await;
        });
    }
}
