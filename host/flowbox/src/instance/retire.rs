//! Finished runs' stores, dropped off the caller's path, at a moment when no run is in flight.
//!
//! A finished run's calls are cancelled and its hold on the journal let go of at once; the
//! store itself, whose guest memory takes ~0.15 ms or more to unmap (and whose pages the warm
//! pool and the fresh instances' profile first read), goes to one background thread. That thread waits, for up
//! to [`MAX_DEFER`], until no run of the process is in flight (see `quiet`): dropping a store
//! next to a run costs the run more than the drop (a pooled trivial run took ~0.53 ms instead
//! of ~0.37 ms here while the thread dropped stores as they came). Once half of [`RETIRING`]
//! stores wait it drops at once, so a process that is never without a run in flight keeps
//! the queue short; past [`RETIRING`], a finishing run drops its own.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvError, SyncSender, TryRecvError, TrySendError};
use std::time::Instant;

use wasmtime::Store;

use crate::instance::busy::{self, MAX_DEFER, POLL, STAY_AWAKE};
use crate::instance::context::RunCtx;

/// How many finished runs' stores may wait for the background thread; past that a finishing
/// run drops its own.
const RETIRING: usize = 16;

/// Stores sent to the retiring thread and not dropped yet.
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Ends a finished run's store: its calls are cancelled and its handles on the journal let go
/// of here and now (a leaf still running stops as it would if the store were dropped, and a
/// process that exits next closes its journal cleanly; the run's events, which the store also
/// holds, let go of theirs once the run's end is written, see `RunEvents::release_journal`);
/// the rest is dropped by the retiring thread, after the warm pool or the fresh instances'
/// profile has learnt which pages of its memory the run wrote and read.
pub(crate) fn retire(mut store: Store<RunCtx>) {
    let ctx = store.data_mut();
    ctx.calls.end();
    ctx.store = None;
    if ctx
        .touched
        .as_ref()
        .is_some_and(|touched| touched.learner.wants_now())
        && let Some(touched) = ctx.touched.take()
    {
        touched.learn();
    }
    static RETIRED: OnceLock<Option<SyncSender<Store<RunCtx>>>> = OnceLock::new();
    let sender = RETIRED.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Store<RunCtx>>(RETIRING);
        std::thread::Builder::new()
            .name("flowbox-retire".into())
            .spawn(move || drop_stores(&receiver))
            .ok()
            .map(|_| sender)
    });
    let Some(sender) = sender else {
        unmap(store);
        return;
    };
    WAITING.fetch_add(1, Ordering::Relaxed);
    if let Err(TrySendError::Full(store) | TrySendError::Disconnected(store)) =
        sender.try_send(store)
    {
        WAITING.fetch_sub(1, Ordering::Relaxed);
        unmap(store);
    }
}

/// Drops `dropped` (stores, and the guest memory they hold), but not while the warm pool
/// compares the memory map around an instantiation: a range unmapped in between could be
/// taken over by the new memory, which would then look old (see `prefault`).
pub(crate) fn unmap<T>(dropped: T) {
    let _unmapping = crate::instance::prefault::hold_unmapping();
    drop(dropped);
}

/// The retiring thread: drops each store that arrives, at a quiet moment, until every sender
/// is gone. A send wakes it only when it has slept (see `quiet`).
fn drop_stores(receiver: &Receiver<Store<RunCtx>>) {
    let mut last = Instant::now();
    loop {
        let mut store = match receiver.try_recv() {
            Ok(store) => store,
            Err(TryRecvError::Empty) if last.elapsed() < STAY_AWAKE => {
                std::thread::sleep(POLL);
                continue;
            }
            Err(TryRecvError::Empty) => match receiver.recv() {
                Ok(store) => store,
                Err(RecvError) => return,
            },
            Err(TryRecvError::Disconnected) => return,
        };
        busy::hold_off(Instant::now() + MAX_DEFER, || {
            WAITING.load(Ordering::Relaxed) >= RETIRING / 2
        });
        WAITING.fetch_sub(1, Ordering::Relaxed);
        // The memory is still mapped: the pool reads which pages the run wrote.
        if let Some(touched) = store.data_mut().touched.take() {
            touched.learn();
        }
        unmap(store);
        last = Instant::now();
    }
}
