//! The queue behind a lossless [`EventStream`](crate::EventStream): every event reaches its
//! reader, and a full queue makes the script's writers wait instead of dropping anything.
//!
//! `events` publishes into it; the stream reads from it. A queue holds up to its capacity
//! before writers that may wait ([`EventQueue::room`]) do; writers that must not (a leaf, the
//! end of a run) append past it, so what it holds beyond the capacity is bounded by what
//! those writers publish, not by how fast the reader is.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::events::Event;

/// One lossless subscriber's events, in publishing order.
#[derive(Debug)]
pub(crate) struct EventQueue {
    state: Mutex<State>,
    /// Writers that may wait do so while the queue holds this many events.
    capacity: usize,
    /// Wakes the reader when an event arrives in an empty queue, or the queue closes.
    readable: Notify,
    /// Wakes waiting writers once the reader has drained the queue to half its capacity, so
    /// a fast writer and a slow reader take turns in batches, not one event at a time.
    writable: Notify,
}

#[derive(Debug, Default)]
struct State {
    events: VecDeque<Event>,
    /// A writer is waiting for room.
    writers_waiting: bool,
    /// No more events will come (the runtime is gone): the reader drains what is left.
    closed: bool,
    /// The reader dropped its stream: events are discarded and nobody waits any more.
    abandoned: bool,
}

impl EventQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            capacity: capacity.max(1),
            readable: Notify::new(),
            writable: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `event` however full the queue is (waiting is [`Self::room`]'s job).
    pub(crate) fn push(&self, event: Event) {
        let mut state = self.state();
        if state.abandoned {
            return;
        }
        // The reader sleeps only after seeing the queue empty, so only then is it woken.
        let was_empty = state.events.is_empty();
        state.events.push_back(event);
        drop(state);
        if was_empty {
            self.readable.notify_one();
        }
    }

    /// Whether a writer that may wait should, now.
    pub(crate) fn is_full(&self) -> bool {
        let state = self.state();
        !state.abandoned && state.events.len() >= self.capacity
    }

    /// Whether the reader is gone, so the queue can be forgotten.
    pub(crate) fn is_abandoned(&self) -> bool {
        self.state().abandoned
    }

    /// Waits until the queue holds fewer events than its capacity, or its reader is gone.
    pub(crate) async fn room(&self) {
        loop {
            let notified = self.writable.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check, so a wake-up between the check and the wait counts.
            notified.as_mut().enable();
            {
                let mut state = self.state();
                if state.abandoned || state.events.len() < self.capacity {
                    return;
                }
                state.writers_waiting = true;
            }
            notified.await;
        }
    }

    /// The next event, without waiting.
    pub(crate) fn try_pop(&self) -> Option<Event> {
        let mut state = self.state();
        let event = state.events.pop_front()?;
        if state.writers_waiting && state.events.len() <= self.capacity / 2 {
            state.writers_waiting = false;
            drop(state);
            self.writable.notify_waiters();
        }
        Some(event)
    }

    /// The next event; `None` once the queue is closed and drained.
    pub(crate) async fn pop(&self) -> Option<Event> {
        loop {
            if let Some(event) = self.try_pop() {
                return Some(event);
            }
            if self.state().closed {
                // Events pushed before the close was seen are still delivered.
                return self.try_pop();
            }
            // A push after the check above leaves a permit, so this returns at once.
            self.readable.notified().await;
        }
    }

    /// No more events will come: the reader gets what is queued, then the end.
    pub(crate) fn close(&self) {
        self.state().closed = true;
        self.readable.notify_one();
    }

    /// The reader is gone: drop what is queued and release every waiting writer.
    pub(crate) fn abandon(&self) {
        let mut state = self.state();
        state.abandoned = true;
        state.events = VecDeque::new();
        drop(state);
        self.writable.notify_waiters();
    }
}
