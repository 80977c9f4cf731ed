//! The Streamable HTTP sessions that have calls running, so that deleting a session (`DELETE
//! /mcp` with its `Mcp-Session-Id`) cancels them the way a client that leaves does: leaves in
//! flight are dropped, what finished stays journaled, and the thread stays resumable.

use std::collections::HashMap;
use std::sync::Mutex;

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use tokio::sync::watch;

/// The header that names a request's session.
const SESSION_HEADER: &str = "mcp-session-id";

/// The sessions with running calls: each one's closing signal and how many calls it runs.
#[derive(Debug, Default)]
pub(super) struct Sessions(Mutex<HashMap<String, (watch::Sender<bool>, usize)>>);

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (watch::Sender<bool>, usize)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A call of the session the request `context` came in (none over stdio or without a
    /// session), until the guard is dropped.
    pub(super) fn enter(&self, context: &RequestContext<RoleServer>) -> Option<InSession<'_>> {
        let id = context
            .extensions
            .get::<axum::http::request::Parts>()?
            .headers
            .get(SESSION_HEADER)?
            .to_str()
            .ok()?
            .to_owned();
        let mut sessions = self.lock();
        let (closed, calls) = sessions
            .entry(id.clone())
            .or_insert_with(|| (watch::Sender::new(false), 0));
        *calls += 1;
        let closed = closed.subscribe();
        Some(InSession {
            sessions: self,
            id,
            closed,
        })
    }

    /// Cancels the running calls of the session `id`, which was closed.
    pub(super) fn close(&self, id: &str) {
        if let Some((closed, _)) = self.lock().remove(id) {
            closed.send_replace(true);
        }
    }
}

/// A running call of a session.
pub(super) struct InSession<'a> {
    sessions: &'a Sessions,
    id: String,
    closed: watch::Receiver<bool>,
}

impl InSession<'_> {
    /// Resolves once the session is closed.
    pub(super) async fn closed(&mut self) {
        // An error means the sender is gone, which only `close` does after sending.
        let _ = self.closed.wait_for(|closed| *closed).await;
    }
}

impl Drop for InSession<'_> {
    fn drop(&mut self) {
        let mut sessions = self.sessions.lock();
        if let Some((_, calls)) = sessions.get_mut(&self.id) {
            *calls -= 1;
            if *calls == 0 {
                sessions.remove(&self.id);
            }
        }
    }
}
