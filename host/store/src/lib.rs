//! The checkpoint journal of flowbox runs.
//!
//! A run is a thread: a header (the script, its args, the virtual start time and the limits),
//! then every completed leaf or tool call in the order the guest received it, then its end.
//! The runtime appends each batch of completions *before* the guest sees it (write-ahead), so a
//! run killed at any moment resumes from its journal without calling a finished leaf again.
//!
//! [`CheckpointStore`] is the interface; [`MemoryStore`] keeps journals in memory (tests) and
//! [`SqliteStore`] in one SQLite file, the embedded default. This crate knows nothing of
//! wasmtime or of the guest.
//!
//! Every record is a serde type, read and written only through it: a call's [`CallRequest`]
//! and [`EntryOutcome`], a finished thread's [`RecordedOutcome`] with its [`Summary`] and
//! [`ErrorInfo`]. The run's vocabulary that the journal holds (the run-error kinds, the
//! summary) is defined here, below the runtime, which re-exports it. A record that does not
//! decode is [`StoreError::CorruptRecord`], never a default.

#![warn(missing_docs)]

mod call;
#[cfg(test)]
mod contract;
mod digest;
mod error;
mod events;
mod memory;
mod outcome;
mod replies;
mod sqlite;
mod thread;
mod time;
pub mod view;

pub use call::{
    AgentRequest, CallErrorKind, CallKind, CallRequest, Entry, EntryOutcome, ToolRequest,
    unrepresentable_number,
};
pub use digest::{from_hex, hex, sha256_hex};
pub use error::{JournalRecord, StoreError};
pub use events::StoredEvent;
pub use memory::MemoryStore;
pub use outcome::{
    BranchFailure, ErrorInfo, GroupKind, RecordedOutcome, RunErrorClass, RunErrorKind, Summary,
    optional_f64,
};
pub use replies::ReplySample;
pub use sqlite::{Durability, SqliteStore};
pub use thread::{
    Listing, StoredThread, ThreadEnd, ThreadHeader, ThreadOverview, ThreadStatus, ThreadSummary,
    WorkflowRecord, WorkflowTotals,
};
pub use time::{UtcTime, now_unix_ms, now_unix_nanos};

/// The journal format this build writes. A journal with a higher version is refused; older
/// ones are migrated when opened (format 3 writes headers without a seed, which format 2
/// required, so a build that reads up to 2 must refuse it rather than call it damaged; format
/// 4 adds the threads' events; format 5 says how many of each completion's tokens are
/// estimates; format 6 keeps completions without a rowid, in their key's order, so that an
/// append writes one b-tree instead of two). A journal of an older format opened read-only is
/// read as it is: it has no events, and its token counts read as reported.
pub const SCHEMA_VERSION: u32 = 6;

/// A run's exclusive hold on a thread, from [`CheckpointStore::claim`]. Dropping it lets go;
/// so does the death of the process that holds it.
#[must_use = "the thread is released as soon as the claim is dropped"]
pub struct Claim {
    _hold: Box<dyn std::any::Any + Send + Sync>,
}

impl Claim {
    /// A claim that lasts as long as `hold` (whose `Drop` releases the thread).
    pub fn new(hold: impl std::any::Any + Send + Sync) -> Self {
        Self {
            _hold: Box::new(hold),
        }
    }
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Claim")
    }
}

/// Where flowbox keeps its journals.
///
/// Implementations must be safe to share between many concurrent runs. Every method that
/// writes returns only once the write is as durable as the implementation promises.
#[async_trait::async_trait]
pub trait CheckpointStore: Send + Sync + std::fmt::Debug {
    /// Takes `thread_id` for one run until the returned [`Claim`] is dropped, so that two runs
    /// — in this process or another — never drive one thread at once (both would call the
    /// backends for its unfinished leaves). Fails with [`StoreError::InUse`] while another
    /// claim is held. The thread need not exist yet.
    async fn claim(&self, thread_id: &str) -> Result<Claim, StoreError>;

    /// Starts a thread; fails with [`StoreError::ThreadExists`] if the id is taken.
    async fn begin(&self, header: &ThreadHeader) -> Result<(), StoreError>;

    /// Records the script's `meta.name` once the guest reported it.
    async fn set_name(&self, thread_id: &str, name: &str) -> Result<(), StoreError>;

    /// Appends one batch of completions, atomically, in order. `entries[0].seq` must be the
    /// number of entries already journaled for the thread, and the thread must not have
    /// finished ([`StoreError::Finished`]).
    async fn append(&self, thread_id: &str, entries: &[Entry]) -> Result<(), StoreError>;

    /// Records how the thread ended; a thread ends once ([`StoreError::Finished`]).
    async fn finish(&self, thread_id: &str, end: &ThreadEnd) -> Result<(), StoreError>;

    /// Appends the thread's last `events` to its history (as [`Self::append_events`]) and
    /// records its end (as [`Self::finish`]): how a run ends, so that its history is complete
    /// up to the end it leads to. A store that can write both in one transaction should (the
    /// SQLite and memory stores do), so that neither is written without the other; the default
    /// makes the two calls, and should the second fail, the first has been made.
    async fn finish_with_events(
        &self,
        thread_id: &str,
        events: &[StoredEvent],
        end: &ThreadEnd,
    ) -> Result<(), StoreError> {
        if !events.is_empty() {
            self.append_events(thread_id, events).await?;
        }
        self.finish(thread_id, end).await
    }

    /// Everything journaled about a thread, or `None`.
    async fn load(&self, thread_id: &str) -> Result<Option<StoredThread>, StoreError>;

    /// Every thread, newest first; a damaged one is named, not fatal to the others.
    async fn list(&self) -> Result<Listing, StoreError>;

    /// A thread's header, summary (as [`Self::list`] gives it) and end, or `None`: what
    /// [`Self::load`] reads but its completions (the default reads them).
    async fn overview(&self, thread_id: &str) -> Result<Option<ThreadOverview>, StoreError> {
        let now = now_unix_ms();
        Ok(self.load(thread_id).await?.map(|thread| ThreadOverview {
            summary: ThreadSummary::of(&thread, now),
            header: thread.header,
            end: thread.end,
        }))
    }

    /// The journaled completion of the thread's call `handle` (the first, should a damaged
    /// journal hold two), or `None`: one of [`Self::load`]'s entries without reading the
    /// others (the default reads them).
    async fn entry(&self, thread_id: &str, handle: u64) -> Result<Option<Entry>, StoreError> {
        Ok(self.load(thread_id).await?.and_then(|thread| {
            thread
                .entries
                .into_iter()
                .find(|entry| entry.handle == handle)
        }))
    }

    /// Records a workflow run a root agent started.
    async fn record_workflow(&self, record: &WorkflowRecord) -> Result<(), StoreError>;

    /// The workflow runs of one conversation, or of all conversations, oldest first.
    async fn workflows(
        &self,
        conversation_id: Option<&str>,
    ) -> Result<Vec<WorkflowRecord>, StoreError>;

    /// Up to `limit` of the newest successful leaf replies of all threads (newest thread
    /// first), for plans to learn how long replies run: what each asked for that says what
    /// kind of leaf it was, and the output tokens it used. A record that is not JSON is left
    /// out (loading its thread reports it). The default keeps no such history and has none.
    async fn recent_replies(&self, limit: usize) -> Result<Vec<ReplySample>, StoreError> {
        let _ = limit;
        Ok(Vec::new())
    }

    /// Whether the store keeps threads' histories of events: a run builds none for a store
    /// that does not (the default).
    fn keeps_events(&self) -> bool {
        false
    }

    /// Appends events to the thread's history, atomically, in order: `events[0].seq` must be
    /// one past the last one journaled ([`StoreError::OutOfOrder`]). A finished thread still
    /// takes events (a run whose end could not take its last ones writes them after it). A
    /// store that keeps no history ignores them, which is the default.
    async fn append_events(
        &self,
        thread_id: &str,
        events: &[StoredEvent],
    ) -> Result<(), StoreError> {
        let _ = (thread_id, events);
        Ok(())
    }

    /// At most `limit` of the thread's events with a sequence number above `after`, in order;
    /// none for a thread without history (or a store that keeps none, the default).
    async fn events(
        &self,
        thread_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let _ = (thread_id, after, limit);
        Ok(Vec::new())
    }

    /// At most `limit` of the thread's events about call `call_id` (those whose JSON has that
    /// `call_id`: its start, its tools, its end) with a sequence number above `after`, in
    /// order. An event that is not JSON is among them, for its reader to find damaged. The
    /// default pages through [`Self::events`], `limit` at a time.
    async fn call_events(
        &self,
        thread_id: &str,
        call_id: u64,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let mut found = Vec::new();
        let mut after = after;
        while found.len() < limit {
            let page = self.events(thread_id, after, limit).await?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            let wanted = limit - found.len();
            found.extend(
                page.into_iter()
                    .filter(|event| event.is_about(call_id))
                    .take(wanted),
            );
        }
        Ok(found)
    }

    /// Where a thread stands, or `None` when there is no such thread: [`Self::load`]'s
    /// status without reading its records (the default reads them).
    async fn status(&self, thread_id: &str) -> Result<Option<ThreadStatus>, StoreError> {
        Ok(self.load(thread_id).await?.map(|thread| thread.status))
    }

    /// The sequence number of the thread's last journaled event, 0 when it has none.
    async fn last_event_seq(&self, thread_id: &str) -> Result<u64, StoreError> {
        let _ = thread_id;
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records as the journal holds them, as JSON text: read back, they write the same text.
    fn round_trips<T: serde::Serialize + serde::de::DeserializeOwned>(text: &str) -> T {
        let value: T = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&value).unwrap(), text);
        value
    }

    #[test]
    fn records_keep_their_numbers_and_key_order() {
        let args = r#"{"zeta":1180591620717411303424,"r":0.21599615170364495,"tiny":5e-324,"nz":-0.0,"a":-36893488147419103232}"#;
        let header: ThreadHeader = round_trips(&format!(
            r#"{{"thread_id":"t","script":"return args","script_sha256":"s","args":{args},"args_sha256":"a","start_unix_nanos":18446744073709551615,"limits":{{"fuel":20000000000,"timeout":600.0}},"guard":true,"created_unix_ms":1}}"#
        ));
        assert_eq!(header.args.to_string(), args);
        assert_eq!(header.start_unix_nanos, u64::MAX);
        // A journal written before numbers were kept exactly, keys sorted, opens as it was; its
        // seed (nothing reads it: the thread id seeds the guest) is not written again.
        let old = r#"{"thread_id":"t","script":"return args","script_sha256":"s","args":{"id":1.2345678901234568e+22,"r":0.21599615170364497},"args_sha256":"a","start_unix_nanos":1,"seed":"t","limits":{},"guard":true,"created_unix_ms":1}"#;
        let header: ThreadHeader = serde_json::from_str(old).unwrap();
        assert_eq!(
            serde_json::to_string(&header).unwrap(),
            old.replace(r#""seed":"t","#, "")
        );
        // Requests are tagged by their kind, first, with every option written.
        let request: CallRequest = round_trips(&format!(
            r#"{{"kind":"agent","prompt":{{"task":"x","args":{args}}},"schema":{{"const":1180591620717411303424,"maximum":0.1}},"agent_type":null,"label":"l","instruction":null,"model":"fast","tools":[],"instance_id":null}}"#
        ));
        let CallRequest::Agent(agent) = &request else {
            panic!("{request:?}");
        };
        assert_eq!(agent.prompt["args"].to_string(), args);
        assert_eq!(agent.schema.as_ref().unwrap()["maximum"].to_string(), "0.1");
        let entry: Entry = round_trips(&format!(
            r#"{{"seq":0,"batch":0,"handle":1,"fingerprint":"f","request":{{"kind":"tool","name":"echo","arguments":{args}}},"outcome":{{"status":"ok","value":"{{\"n\":1180591620717411303425}}"}},"input_tokens":0,"output_tokens":0,"duration_ms":3}}"#
        ));
        let CallRequest::Tool(tool) = &entry.request else {
            panic!("{entry:?}");
        };
        assert_eq!(tool.arguments.to_string(), args);
        assert_eq!(entry.kind(), CallKind::Tool);
        // A request of an unknown kind, or with a field its kind does not have, is not one.
        for damaged in [
            r#"{"kind":"robot","name":"echo","arguments":{}}"#,
            r#"{"kind":"tool","name":"echo","arguments":{},"prompt":"x"}"#,
            r#"{"kind":"agent","schema":null}"#,
            r#"{"name":"echo","arguments":{}}"#,
        ] {
            assert!(
                serde_json::from_str::<CallRequest>(damaged).is_err(),
                "{damaged}"
            );
        }
        // The outcome is tagged by its status, and carries the reply as the text it was.
        let failed: EntryOutcome =
            round_trips(r#"{"status":"err","kind":"tool-failed","message":"no"}"#);
        assert!(matches!(failed, EntryOutcome::Err { .. }));
        let summary = r#"{"thread_id":"t","name":"n","leaves":1,"tools_called":2,"tokens_spent":3,"input_tokens":2,"output_tokens":1,"phases":["p"],"logs":["l"],"failed_branches":[],"warnings":[],"fuel_used":18446744073709551615,"duration_ms":4,"cost_usd":0.30000000000000004}"#;
        let end: ThreadEnd = round_trips(&format!(
            r#"{{"outcome":{{"ok":true,"result":{args},"error":null,"summary":{summary}}},"finished_unix_ms":2}}"#
        ));
        assert_eq!(end.outcome.result.as_ref().unwrap().to_string(), args);
        assert_eq!(end.outcome.summary.fuel_used, u64::MAX);
        assert_eq!(end.status(), ThreadStatus::Succeeded);
        assert_eq!(end.outcome.summary.cost_usd, Some(0.1 + 0.2));
        let failed: RecordedOutcome = round_trips(&format!(
            r#"{{"ok":false,"result":null,"error":{{"kind":"uncaught","message":"no","line":3,"exception":"ValueError"}},"summary":{summary}}}"#
        ));
        let error = failed.result.unwrap_err();
        assert_eq!((error.kind, error.line), (RunErrorKind::Uncaught, Some(3)));
        // A summary from before tools were counted reads as calling none.
        let old = summary.replace(r#""tools_called":2,"#, "");
        assert_eq!(
            serde_json::from_str::<Summary>(&old).unwrap().tools_called,
            0
        );
        // One from before the summary said `leaves` (and repeated the outcome's `ok`, summed
        // no cost, and left empty lists out) reads as the same summary without a cost.
        let old = summary
            .replace(r#""failed_branches":[],"warnings":[],"#, "")
            .replace(r#""leaves":1"#, r#""agents_spawned":1"#)
            .replace(r#""cost_usd":0.30000000000000004"#, r#""ok":true"#);
        let read: Summary = serde_json::from_str(&old).unwrap();
        let mut expected: Summary = serde_json::from_str(summary).unwrap();
        expected.cost_usd = None;
        assert_eq!(read, expected);
    }
}
