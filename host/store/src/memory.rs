//! Journals kept in memory: for tests and for embedders that do not need durability.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::{
    CheckpointStore, Claim, Entry, Listing, ReplySample, StoreError, StoredEvent, StoredThread,
    ThreadEnd, ThreadHeader, ThreadStatus, ThreadSummary, WorkflowRecord,
};

/// A [`CheckpointStore`] in memory, lost with the process.
#[derive(Debug, Default)]
pub struct MemoryStore {
    runs: Mutex<HashMap<String, StoredThread>>,
    workflows: Mutex<Vec<WorkflowRecord>>,
    events: Mutex<HashMap<String, Vec<StoredEvent>>>,
    claimed: Arc<Mutex<HashSet<String>>>,
}

/// Releases a claimed thread when dropped.
struct Release {
    claimed: Arc<Mutex<HashSet<String>>>,
    thread_id: String,
}

impl Drop for Release {
    fn drop(&mut self) {
        let mut claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        claimed.remove(&self.thread_id);
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// `thread` with the status it has now: as its end says, else running while claimed.
    fn with_status(&self, mut thread: StoredThread) -> StoredThread {
        thread.status = match &thread.end {
            Some(end) => end.status(),
            None => {
                let claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
                ThreadStatus::unfinished(claimed.contains(&thread.header.thread_id))
            }
        };
        thread
    }

    fn with_run<T>(
        &self,
        thread_id: &str,
        action: impl FnOnce(&mut StoredThread) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let run = runs
            .get_mut(thread_id)
            .ok_or_else(|| StoreError::UnknownThread(thread_id.to_owned()))?;
        action(run)
    }
}

#[async_trait::async_trait]
impl CheckpointStore for MemoryStore {
    async fn claim(&self, thread_id: &str) -> Result<Claim, StoreError> {
        let mut claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        if !claimed.insert(thread_id.to_owned()) {
            return Err(StoreError::InUse {
                thread_id: thread_id.to_owned(),
                holder: "another run in this process".into(),
            });
        }
        Ok(Claim::new(Release {
            claimed: Arc::clone(&self.claimed),
            thread_id: thread_id.to_owned(),
        }))
    }

    async fn begin(&self, header: &ThreadHeader) -> Result<(), StoreError> {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if runs.contains_key(&header.thread_id) {
            return Err(StoreError::ThreadExists(header.thread_id.clone()));
        }
        runs.insert(
            header.thread_id.clone(),
            StoredThread {
                header: header.clone(),
                name: None,
                // Read afresh whenever the thread is (see `with_status`).
                status: ThreadStatus::Resumable,
                entries: Vec::new(),
                end: None,
            },
        );
        Ok(())
    }

    async fn set_name(&self, thread_id: &str, name: &str) -> Result<(), StoreError> {
        self.with_run(thread_id, |run| {
            run.name = Some(name.to_owned());
            Ok(())
        })
    }

    async fn append(&self, thread_id: &str, entries: &[Entry]) -> Result<(), StoreError> {
        self.with_run(thread_id, |run| {
            if run.end.is_some() {
                return Err(StoreError::Finished(thread_id.to_owned()));
            }
            let next = run.entries.len() as u64;
            StoreError::check_sequence(thread_id, next, entries.iter().map(|entry| entry.seq))?;
            run.entries.extend_from_slice(entries);
            Ok(())
        })
    }

    async fn finish(&self, thread_id: &str, end: &ThreadEnd) -> Result<(), StoreError> {
        self.finish_with_events(thread_id, &[], end).await
    }

    async fn load(&self, thread_id: &str) -> Result<Option<StoredThread>, StoreError> {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        Ok(runs.get(thread_id).map(|run| self.with_status(run.clone())))
    }

    async fn list(&self) -> Result<Listing, StoreError> {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let now = crate::now_unix_ms();
        let mut threads: Vec<ThreadSummary> = runs
            .values()
            .map(|run| ThreadSummary::of(&self.with_status(run.clone()), now))
            .collect();
        threads.sort_by(|a, b| {
            b.created_unix_ms
                .cmp(&a.created_unix_ms)
                .then_with(|| b.thread_id.cmp(&a.thread_id))
        });
        Ok(Listing {
            threads,
            damaged: Vec::new(),
        })
    }

    async fn status(&self, thread_id: &str) -> Result<Option<ThreadStatus>, StoreError> {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        Ok(runs
            .get(thread_id)
            .map(|run| self.with_status(run.clone()).status))
    }

    async fn record_workflow(&self, record: &WorkflowRecord) -> Result<(), StoreError> {
        let mut workflows = self.workflows.lock().unwrap_or_else(|p| p.into_inner());
        workflows.push(record.clone());
        Ok(())
    }

    async fn workflows(
        &self,
        conversation_id: Option<&str>,
    ) -> Result<Vec<WorkflowRecord>, StoreError> {
        let workflows = self.workflows.lock().unwrap_or_else(|p| p.into_inner());
        Ok(workflows
            .iter()
            .filter(|record| conversation_id.is_none_or(|id| record.conversation_id == id))
            .cloned()
            .collect())
    }

    async fn recent_replies(&self, limit: usize) -> Result<Vec<ReplySample>, StoreError> {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let mut threads: Vec<&StoredThread> = runs.values().collect();
        threads.sort_by_key(|run| std::cmp::Reverse(run.header.created_unix_ms));
        Ok(threads
            .into_iter()
            .flat_map(|run| run.entries.iter().filter_map(ReplySample::of))
            .take(limit)
            .collect())
    }

    fn keeps_events(&self) -> bool {
        true
    }

    async fn append_events(
        &self,
        thread_id: &str,
        events: &[StoredEvent],
    ) -> Result<(), StoreError> {
        self.with_run(thread_id, |_| Ok(()))?;
        let mut all = self.events.lock().unwrap_or_else(|p| p.into_inner());
        extend_history(
            all.entry(thread_id.to_owned()).or_default(),
            thread_id,
            events,
        )
    }

    /// Under both locks, taken in the order the other writers take them, so that neither the
    /// events nor the end is written without the other.
    async fn finish_with_events(
        &self,
        thread_id: &str,
        events: &[StoredEvent],
        end: &ThreadEnd,
    ) -> Result<(), StoreError> {
        self.with_run(thread_id, |run| {
            if run.end.is_some() {
                return Err(StoreError::Finished(thread_id.to_owned()));
            }
            let mut all = self.events.lock().unwrap_or_else(|p| p.into_inner());
            extend_history(
                all.entry(thread_id.to_owned()).or_default(),
                thread_id,
                events,
            )?;
            run.end = Some(end.clone());
            Ok(())
        })
    }

    async fn events(
        &self,
        thread_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let all = self.events.lock().unwrap_or_else(|p| p.into_inner());
        Ok(all.get(thread_id).map_or_else(Vec::new, |history| {
            history
                .iter()
                .filter(|event| event.seq > after)
                .take(limit)
                .cloned()
                .collect()
        }))
    }

    async fn last_event_seq(&self, thread_id: &str) -> Result<u64, StoreError> {
        let all = self.events.lock().unwrap_or_else(|p| p.into_inner());
        Ok(all
            .get(thread_id)
            .and_then(|history| history.last())
            .map_or(0, |last| last.seq))
    }
}

/// Appends `events` to a thread's `history`, unless the first is not numbered one past its
/// last or the rest leave a gap.
fn extend_history(
    history: &mut Vec<StoredEvent>,
    thread_id: &str,
    events: &[StoredEvent],
) -> Result<(), StoreError> {
    let next = history.last().map_or(1, |last| last.seq + 1);
    StoreError::check_sequence(thread_id, next, events.iter().map(|event| event.seq))?;
    history.extend_from_slice(events);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_the_store_contract() {
        crate::contract::round_trip(&MemoryStore::new()).await;
        crate::contract::claims_are_exclusive(&MemoryStore::new()).await;
        crate::contract::events_round_trip(&MemoryStore::new()).await;
        crate::contract::finishing_writes_the_last_events_with_the_end(&MemoryStore::new()).await;
        crate::contract::recent_replies_are_the_newest_successful_leaves(&MemoryStore::new()).await;
    }
}
