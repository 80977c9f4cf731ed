//! The server over Streamable HTTP at `/mcp` (`flowbox mcp --listen ADDR`), for several clients
//! at once, each in its own session. rmcp's service checks the `Host` header against
//! the loopback names (and the address listened on), against DNS rebinding.

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::{ServeError, Server};

/// Serves `server` at `http://ADDR/mcp` until interrupted (Ctrl-C or SIGTERM).
pub(crate) async fn serve(
    server: Server,
    addr: SocketAddr,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let listen_error = |source| ServeError::Listen { addr, source };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(listen_error)?;
    let local = listener.local_addr().map_err(listen_error)?;
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    hosts.push(local.ip().to_string());
    let config = StreamableHttpServerConfig::default().with_allowed_hosts(hosts);
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    on_listening(local);
    axum::serve(listener, router)
        .with_graceful_shutdown(interrupted())
        .await
        .map_err(ServeError::Http)
}

async fn interrupted() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(term) => {
                    term.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminated => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
