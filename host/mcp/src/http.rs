//! The server over Streamable HTTP at `/mcp` (`flowbox mcp --listen ADDR`), for several clients
//! at once, each in its own session, behind a [`Door`]: rmcp's service checks the `Host`
//! header (when the door admits anyone) and the `Origin` (loopback and the door's allowed
//! ones), the door's token guards every request, and its limits bound the connections and
//! cut off slow clients. A session its client deletes has its running calls cancelled.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use flowbox_door::Door;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::{ServeError, Server};

/// Serves `server` at `http://ADDR/mcp` through `door` until interrupted (Ctrl-C or SIGTERM).
pub(crate) async fn serve(
    server: Server,
    addr: SocketAddr,
    door: &Door,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    door.admits(addr)?;
    let listen_error = |source| ServeError::Listen { addr, source };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(listen_error)?;
    let local = listener.local_addr().map_err(listen_error)?;
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_origins(door.allowed_origins())
        .enforce_origin_validation();
    config = if door.checks_host() {
        config.with_allowed_hosts(Door::host_names(local))
    } else {
        config.disable_allowed_hosts()
    };
    let sessions = server.clone();
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(sessions, deleted));
    let router = door.guarded(router);
    on_listening(local);
    flowbox_door::serve(listener, router, door, flowbox_door::interrupted())
        .await
        .map_err(ServeError::from)
}

/// Passes a request on; once a `DELETE` of a session succeeded, cancels that session's
/// running calls, which rmcp would otherwise let run to their end.
async fn deleted(State(server): State<Server>, request: Request, next: Next) -> Response {
    let session = (request.method() == Method::DELETE)
        .then(|| request.headers().get("mcp-session-id")?.to_str().ok())
        .flatten()
        .map(str::to_owned);
    let response = next.run(request).await;
    if let Some(id) = session
        && response.status().is_success()
    {
        server.session_closed(&id);
    }
    response
}
