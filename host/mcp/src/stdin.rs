//! Knowing at once that the client has gone: stdin, read through [`Watched`], trips
//! [`ClientGone`] at its end, so the calls still running are cancelled then rather than after
//! rmcp's drain period (by which time a client SDK may already have killed the server).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::Notify;

/// Set once the client's end of stdin is closed (or unreadable).
#[derive(Debug, Default)]
pub(crate) struct ClientGone {
    gone: AtomicBool,
    notify: Notify,
}

impl ClientGone {
    fn trip(&self) {
        self.gone.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Whether the client has gone.
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    /// Returns once the client has gone.
    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_gone() {
                return;
            }
            notified.await;
        }
    }
}

/// A reader that trips `gone` when it reaches its end or fails.
pub(crate) struct Watched<R> {
    inner: R,
    gone: std::sync::Arc<ClientGone>,
}

impl<R> Watched<R> {
    pub(crate) fn new(inner: R, gone: std::sync::Arc<ClientGone>) -> Self {
        Self { inner, gone }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Watched<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if buf.filled().len() == before && buf.remaining() > 0 => {
                self.gone.trip();
            }
            Poll::Ready(Err(_)) => self.gone.trip(),
            _ => {}
        }
        polled
    }
}
