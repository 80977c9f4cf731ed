//! The accept loop: HTTP/1 connections within [`Limits`], until shut down.

use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::{Door, DoorError};

/// The most bytes a request's head may take: its line and headers.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How long connections still open at shutdown are given to finish.
const DRAIN: Duration = Duration::from_secs(5);

/// How long a door waits for its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// The most connections open at once; the next ones wait in the OS's queue until one
    /// closes. Default 512.
    pub max_connections: usize,
    /// The longest a client may take to send a request's head (from the first byte it could
    /// send, including the wait between two requests on one connection), and again its body.
    /// Default 10 s.
    pub request_timeout: Duration,
    /// The longest a connection may stay silent both ways (nothing read, nothing written)
    /// while a request is served: a client that stops reading a reply. Default 120 s; a
    /// stream of events sends a keep-alive well within it.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 512,
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

impl Limits {
    /// These limits with at most `max` connections at once (at least 1).
    #[must_use]
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// These limits with `timeout` to send a request's head, and its body.
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// These limits with `timeout` of silence before a connection is closed.
    #[must_use]
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }
}

/// Serves `router` on `listener` through `door` until `shutdown` completes, then lets the
/// connections still open finish for a few seconds. Refuses at once, accepting nothing, a
/// listener the door may not listen on ([`Door::admits`]).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    door: &Door,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DoorError> {
    door.admits(listener.local_addr()?)?;
    let limits = door.limits;
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let (closing, closed) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => permit.expect("never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors, or a connection reset before it was accepted: wait a
                // moment rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let router = router.clone();
        let closed = closed.clone();
        connections.spawn(async move {
            connection(stream, router, limits, closed).await;
            drop(permit);
        });
        while connections.try_join_next().is_some() {}
    }
    let _ = closing.send(true);
    let _ = tokio::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.shutdown().await;
    Ok(())
}

/// Serves one connection until it ends, is idle too long, or the server shuts down.
async fn connection(
    stream: TcpStream,
    router: Router,
    limits: Limits,
    mut closed: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: Arc::clone(&activity),
    });
    let request_timeout = limits.request_timeout;
    let service = TowerToHyperService::new(router.map_request(
        move |request: axum::http::Request<Incoming>| {
            request.map(|body| Body::new(Deadline::new(body, request_timeout)))
        },
    ));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.request_timeout)
        .max_header_size(MAX_HEAD_BYTES)
        .max_buf_size(MAX_HEAD_BYTES);
    let mut served = pin!(builder.serve_connection(io, service));
    let mut watch = tokio::time::interval((limits.idle_timeout / 4).max(Duration::from_millis(50)));
    let mut closing = false;
    loop {
        tokio::select! {
            _ = served.as_mut() => return,
            changed = closed.changed(), if !closing => {
                closing = true;
                if changed.is_ok() {
                    served.as_mut().graceful_shutdown();
                }
            }
            _ = watch.tick() => {
                if activity.silent_for() >= limits.idle_timeout {
                    // Dropping the connection closes it.
                    return;
                }
            }
        }
    }
}

/// When a connection last read or wrote a byte.
#[derive(Debug)]
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(now, Ordering::Relaxed);
    }

    fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

/// A connection's stream that notes each byte read or written.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body that must arrive whole within a deadline from when its head did: one that
/// trickles in fails, and the request with it.
struct Deadline {
    body: Incoming,
    timer: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl Deadline {
    fn new(body: Incoming, timeout: Duration) -> Self {
        Self {
            body,
            timer: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        }
    }
}

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|frame| frame.map_err(Into::into))),
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(format!(
                    "the request's body did not arrive within {:?}",
                    self.timeout
                )
                .into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
