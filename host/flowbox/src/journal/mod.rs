//! Durable runs: what a run writes to the checkpoint journal, and how a resumed run replays it.
//!
//! Live, every batch of completions is appended to the journal before the guest sees it. On
//! resume, the guest runs again from the start; each call it starts is checked against the
//! journal entry for the same handle (same fingerprint, or the run diverged), and `await-next`
//! hands back the journaled batches in their recorded order without calling any backend — so
//! the guest takes exactly the same steps and uses exactly the same fuel. When the journal is
//! used up, the run continues live. A leaf cache (`reuse_leaves_from`) is different: it lends a
//! new thread the results of byte-identical requests from an earlier thread, wherever they occur.

pub(crate) mod codec;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use flowbox_store::{CallKind, CallRequest, CheckpointStore, Entry, EntryOutcome, StoreError};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::RunError;
use crate::error::JournalError;

/// SHA-256 of a request's canonical JSON, hex: its JSON object (tagged by its kind, every
/// option written, unset ones as `null`), compact, object keys sorted, every string and number
/// as its JSON text. This is the text journals were fingerprinted by when the host still built
/// requests as JSON values and sorted keys, so their threads still replay; a request can differ
/// from its journaled self only in key order when the same script on the same args runs
/// elsewhere, never by accident.
pub(crate) fn fingerprint(request: &CallRequest) -> String {
    fingerprint_json(&serde_json::to_value(request).expect("requests serialise"))
}

fn fingerprint_json(request: &Value) -> String {
    let mut text = Vec::new();
    canonical(request, &mut text);
    flowbox_store::hex(&Sha256::digest(&text))
}

/// Writes `value` as canonical JSON text: serde_json's compact text for each key and scalar.
fn canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<_> = map.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (n, (key, member)) in members.into_iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_json(out, key);
                out.push(b':');
                canonical(member, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_json(out, scalar),
    }
}

fn write_json(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    serde_json::to_writer(out, value).expect("JSON text is written into memory");
}

/// A call's identity for the journal: its request and the request's fingerprint.
#[derive(Debug, Clone)]
pub(crate) struct CallRecord {
    pub request: CallRequest,
    pub fingerprint: String,
}

impl CallRecord {
    pub(crate) fn new(request: CallRequest) -> Self {
        let fingerprint = fingerprint(&request);
        Self {
            request,
            fingerprint,
        }
    }

    pub(crate) fn kind(&self) -> CallKind {
        self.request.kind()
    }
}

/// Appends a live run's completions to its thread, batch by batch.
#[derive(Debug)]
pub(crate) struct JournalWriter {
    store: Arc<dyn CheckpointStore>,
    thread_id: String,
    next_seq: u64,
    next_batch: u64,
}

impl JournalWriter {
    /// A writer continuing after the `entries` already journaled.
    pub(crate) fn new(
        store: Arc<dyn CheckpointStore>,
        thread_id: String,
        entries: &[Entry],
    ) -> Self {
        Self {
            store,
            thread_id,
            next_seq: entries.len() as u64,
            next_batch: entries.last().map_or(0, |e| e.batch + 1),
        }
    }

    /// The next entry's sequence number and batch, for building a batch of entries.
    pub(crate) fn position(&self) -> (u64, u64) {
        (self.next_seq, self.next_batch)
    }

    /// Durably appends one batch; the guest may see it once this returns.
    pub(crate) async fn append(&mut self, entries: Vec<Entry>) -> Result<(), RunError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.store
            .append(&self.thread_id, &entries)
            .await
            .map_err(journal_error)?;
        self.next_seq += entries.len() as u64;
        self.next_batch += 1;
        Ok(())
    }
}

/// A store failure as a run error; a damaged record is a corrupt journal of its
/// thread, naming the record (and the call, for an entry).
pub(crate) fn journal_error(error: StoreError) -> RunError {
    match error {
        StoreError::InUse { .. } => RunError::ThreadInUse(error.to_string()),
        StoreError::CorruptRecord {
            path,
            thread_id,
            record,
            detail,
        } => RunError::Journal(JournalError::Corrupt {
            thread_id,
            detail: format!("its {record} in {} is damaged: {detail}", path.display()),
        }),
        other => RunError::Journal(other.into()),
    }
}

/// The journaled completions a resumed run must see again, in order.
#[derive(Debug)]
pub(crate) struct Replay {
    /// Journaled batches not yet delivered, oldest first.
    batches: VecDeque<Vec<Entry>>,
    /// Every journaled call by handle: what the guest must request for it.
    expected: HashMap<u64, (CallKind, String)>,
}

impl Replay {
    pub(crate) fn new(entries: Vec<Entry>) -> Self {
        let expected = entries
            .iter()
            .map(|e| (e.handle, (e.kind(), e.fingerprint.clone())))
            .collect();
        let mut batches: VecDeque<Vec<Entry>> = VecDeque::new();
        for entry in entries {
            match batches.back_mut() {
                Some(batch) if batch[0].batch == entry.batch => batch.push(entry),
                _ => batches.push_back(vec![entry]),
            }
        }
        Self { batches, expected }
    }

    /// Whether `handle` was journaled, after checking that the guest asked for the same thing;
    /// a different request is a divergence.
    pub(crate) fn check_start(&self, handle: u64, record: &CallRecord) -> Result<bool, RunError> {
        match self.expected.get(&handle) {
            None => Ok(false),
            Some((kind, fingerprint))
                if *kind == record.kind() && *fingerprint == record.fingerprint =>
            {
                Ok(true)
            }
            Some((kind, _)) => Err(RunError::Divergence(format!(
                "call {handle} was a different {} in the journal than the {} the script now \
                 makes ({}); the script's control flow changed since the thread was recorded",
                kind_name(*kind),
                kind_name(record.kind()),
                describe(&record.request),
            ))),
        }
    }

    /// The next journaled batch, if any remain.
    pub(crate) fn next_batch(&mut self) -> Option<Vec<Entry>> {
        self.batches.pop_front()
    }

    /// Journaled completions the run has not consumed.
    pub(crate) fn remaining(&self) -> usize {
        self.batches.iter().map(Vec::len).sum()
    }
}

/// Results of an earlier thread, lent to byte-identical requests of a new one.
#[derive(Debug, Default)]
pub(crate) struct LeafCache {
    by_fingerprint: HashMap<String, VecDeque<Entry>>,
}

impl LeafCache {
    /// A cache of `entries`' successful results; repeated requests get their results in the
    /// order the earlier thread received them.
    pub(crate) fn new(entries: Vec<Entry>) -> Self {
        let mut by_fingerprint: HashMap<String, VecDeque<Entry>> = HashMap::new();
        for entry in entries {
            if matches!(entry.outcome, EntryOutcome::Ok { .. }) {
                by_fingerprint
                    .entry(entry.fingerprint.clone())
                    .or_default()
                    .push_back(entry);
            }
        }
        Self { by_fingerprint }
    }

    /// Takes a cached result for `record`, if one is left.
    /// (The fingerprint covers the request's kind, so an entry found is of the same kind.)
    pub(crate) fn take(&mut self, record: &CallRecord) -> Option<Entry> {
        self.by_fingerprint
            .get_mut(&record.fingerprint)?
            .pop_front()
    }
}

fn kind_name(kind: CallKind) -> &'static str {
    match kind {
        CallKind::Agent => "agent call",
        CallKind::Tool => "tool call",
    }
}

/// A short description of a request for divergence messages: its prompt, or its tool's name.
pub(crate) fn describe(request: &CallRequest) -> String {
    let text = match request {
        CallRequest::Agent(agent) => agent.prompt.to_string(),
        CallRequest::Tool(tool) => Value::from(tool.name.as_str()).to_string(),
    };
    flowbox_backends::preview(&text, 80)
}

#[cfg(test)]
mod tests {
    use flowbox_store::{AgentRequest, ToolRequest};
    use serde_json::json;

    use flowbox_store::sha256_hex;

    use super::*;

    fn agent(prompt: &str) -> CallRequest {
        CallRequest::Agent(AgentRequest {
            prompt: json!(prompt),
            schema: None,
            agent_type: None,
            label: None,
            instruction: None,
            model: None,
            tools: None,
            instance_id: None,
        })
    }

    fn entry(seq: u64, batch: u64, handle: u64, request: CallRequest) -> Entry {
        Entry {
            seq,
            batch,
            handle,
            fingerprint: fingerprint(&request),
            request,
            outcome: EntryOutcome::Ok {
                value: format!("\"{seq}\""),
            },
            input_tokens: 1,
            output_tokens: 1,
            estimated_tokens: 0,
            duration_ms: 0,
        }
    }

    #[test]
    fn fingerprints_ignore_key_order_and_see_every_byte() {
        let a: Value = serde_json::from_str(r#"{"prompt": "x", "label": "l"}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"label": "l", "prompt": "x"}"#).unwrap();
        assert_eq!(fingerprint_json(&a), fingerprint_json(&b));
        assert_ne!(
            fingerprint_json(&a),
            fingerprint_json(&json!({"prompt": "x ", "label": "l"}))
        );
        // Numbers by their text: a float's last bit, a negative zero, a big integer.
        let number = |text: &str| fingerprint_json(&serde_json::from_str(text).unwrap());
        for (x, y) in [
            ("0.21599615170364495", "0.21599615170364497"),
            ("-0.0", "0.0"),
            ("1180591620717411303424", "1180591620717411303425"),
        ] {
            assert_ne!(number(x), number(y), "{x} vs {y}");
        }
    }

    #[test]
    fn fingerprints_are_those_of_journals_written_with_sorted_keys() {
        // As journals recorded it before key order was kept: compact JSON, keys sorted.
        let text =
            r#"{"z":{"b":[1,{"y":"\u0000\"","x":null}],"a":true},"kind":"agent","é":-1.5e-7}"#;
        let sorted =
            r#"{"kind":"agent","z":{"a":true,"b":[1,{"x":null,"y":"\u0000\""}]},"é":-1.5e-7}"#;
        let request: Value = serde_json::from_str(text).unwrap();
        assert_eq!(fingerprint_json(&request), sha256_hex(sorted.as_bytes()));
    }

    #[test]
    fn typed_requests_have_the_fingerprints_old_journals_hold() {
        // Fingerprints from host/store/tests/fixtures/journal-v2.sql, taken when requests were
        // built as JSON values: open threads written then still replay.
        let mut greet = agent("hello from an old journal");
        if let CallRequest::Agent(request) = &mut greet {
            request.label = Some("greet".into());
        }
        assert_eq!(
            fingerprint(&greet),
            "a834098fa86f39107a4884592525a79166f4b47a08ddf02b03456891a462b65b"
        );
        let read = CallRequest::Tool(ToolRequest {
            name: "read_file".into(),
            arguments: json!({"path": "notes/plan.txt"}),
        });
        assert_eq!(
            fingerprint(&read),
            "2491a8684f1abd9a5ee0788e559fbe6b6ddda2ccbb93cbbf4655d542be1c17ee"
        );
        let check: CallRequest = serde_json::from_str(
            r#"{"kind":"agent","prompt":{"task":"check","n":1180591620717411303424,"x":0.21599615170364495},"schema":{"type":"object","properties":{"verdict":{"enum":["approve","revise"]}},"required":["verdict"]},"agent_type":null,"label":"check","instruction":null,"model":null,"tools":null,"instance_id":null}"#,
        )
        .unwrap();
        assert_eq!(
            fingerprint(&check),
            "0bded2bb245a2096b8262fb489f57f3114a91e43fa89513bb4483bddff1b033e"
        );
    }

    #[test]
    fn replay_groups_batches_and_checks_starts() {
        let mut replay = Replay::new(vec![
            entry(0, 0, 2, agent("b")),
            entry(1, 0, 1, agent("a")),
            entry(2, 1, 3, agent("c")),
        ]);
        let same = CallRecord::new(agent("a"));
        assert!(replay.check_start(1, &same).unwrap());
        assert!(!replay.check_start(9, &same).unwrap());
        let error = replay.check_start(2, &same).unwrap_err();
        assert!(
            matches!(&error, RunError::Divergence(m) if m.contains("call 2")),
            "{error}"
        );
        assert_eq!(replay.remaining(), 3);
        assert_eq!(replay.next_batch().unwrap().len(), 2);
        assert_eq!(replay.next_batch().unwrap()[0].handle, 3);
        assert!(replay.next_batch().is_none());
    }

    #[test]
    fn the_cache_lends_each_result_once_in_order() {
        let request = agent("same");
        let mut cache = LeafCache::new(vec![
            entry(0, 0, 1, request.clone()),
            entry(1, 1, 2, request.clone()),
        ]);
        let record = CallRecord::new(request);
        assert_eq!(cache.take(&record).unwrap().seq, 0);
        assert_eq!(cache.take(&record).unwrap().seq, 1);
        assert!(cache.take(&record).is_none());
    }
}
