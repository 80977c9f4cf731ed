//! `flowbox mcp --listen ADDR`: the same server over Streamable HTTP at `/mcp`, for several
//! clients at once, each in its own session. rmcp's service checks the `Host` header against
//! the loopback names (and the address listened on), against DNS rebinding.

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::server::Server;
use crate::Failure;

/// Where `--listen` listens: `HOST:PORT`, or a bare `PORT` on the loopback address.
pub(crate) fn parse_listen(value: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = value.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    value.parse().map_err(|_| {
        format!("expected PORT or HOST:PORT, such as 8000 or 127.0.0.1:8000, not {value:?}")
    })
}

/// Serves `server` at `http://ADDR/mcp` until interrupted (Ctrl-C or SIGTERM).
pub(crate) async fn serve(server: Server, addr: SocketAddr) -> Result<u8, Failure> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::input(anyhow::anyhow!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::input(anyhow::anyhow!("cannot listen on {addr}: {e}")))?;
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
    err!("flowbox mcp: listening on http://{local}/mcp");
    axum::serve(listener, router)
        .with_graceful_shutdown(interrupted())
        .await
        .map_err(|e| Failure::output(anyhow::anyhow!("the HTTP server failed: {e}")))?;
    Ok(0)
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
