//! `flowbox show THREAD --follow`: a thread's history as it is written, from its journal — by
//! this process or another — until its run ends. One line per event, or with `--json` the
//! events as JSON Lines (as `--events` writes them).

use std::sync::Arc;

use flowbox::EventKind;
use flowbox::events::history::Follower;
use flowbox::store::{CheckpointStore, SqliteStore, ThreadStatus};

use crate::Failure;

/// Prints `thread`'s events from the start as they arrive; the exit status is the run's (0
/// when it succeeded, 1 when it failed).
pub(crate) async fn follow(store: SqliteStore, thread: &str, json: bool) -> Result<u8, Failure> {
    let store: Arc<dyn CheckpointStore> = Arc::new(store);
    let mut follower = Follower::new(Arc::clone(&store), thread, 0);
    let mut ok = None;
    while let Some(events) = follower.next().await.map_err(Failure::journal)? {
        for event in events {
            if let EventKind::RunFinished { ok: finished, .. } = &event.kind {
                ok = Some(*finished);
            }
            if json {
                out!(
                    "{}",
                    serde_json::to_string(&event).expect("events serialise")
                );
            } else {
                out!("{}", event.line());
            }
        }
    }
    // A thread whose history has no end (written before events were journaled) ends as its
    // record says.
    let ok = match ok {
        Some(ok) => ok,
        None => {
            store.status(thread).await.map_err(Failure::journal)? == Some(ThreadStatus::Succeeded)
        }
    };
    Ok(if ok { 0 } else { 1 })
}
