//! Leaf backends for tests: one that counts its calls and how many run at once, one that
//! panics.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowbox_backends::{BackendError, FakeBackend, LeafBackend, LeafReply, LeafRequest};

/// A fake backend that waits `delay` on every call and counts calls and how many were in
/// flight at once.
#[derive(Debug)]
pub struct CountingBackend {
    delay: Duration,
    calls: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl CountingBackend {
    /// A backend whose every call takes `delay`.
    pub fn new(delay: Duration) -> Self {
        Self {
            delay,
            calls: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        }
    }

    /// Calls started so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The most calls that were running at the same moment.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    /// Calls running right now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }
}

/// Decrements the in-flight count when a call ends, including when it is cancelled.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl LeafBackend for CountingBackend {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _guard = InFlight(&self.in_flight);
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        FakeBackend::reply(request)
    }
}

/// A backend that panics: on every call ([`Self::always`], for a replay that must not reach
/// the backend), or on one prompt ([`Self::on`]), answering the others like [`FakeBackend`].
#[derive(Debug, Default)]
pub struct PanickingBackend {
    /// The prompt text that panics; `None` for every call.
    trigger: Option<String>,
}

impl PanickingBackend {
    /// Panics on every call.
    pub fn always() -> Self {
        Self::default()
    }

    /// Panics on calls whose prompt text is `prompt`.
    pub fn on(prompt: &str) -> Self {
        Self {
            trigger: Some(prompt.to_owned()),
        }
    }
}

#[async_trait::async_trait]
impl LeafBackend for PanickingBackend {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        let prompt = request.prompt_text();
        if self
            .trigger
            .as_ref()
            .is_none_or(|trigger| *trigger == prompt)
        {
            panic!("backend bug on purpose: called with {prompt:?}");
        }
        FakeBackend::reply(request)
    }
}
