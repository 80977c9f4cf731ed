//! The journal's reads, one function per store operation: a thread whole, one thread or every
//! thread's summary without their completions, one completion, a thread's events (all, or those
//! of one call), the workflow records, a sample of recent leaf replies.

use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{CachedStatement, Connection, OptionalExtension, Params, Row, params};

use super::error::{classify, corrupt};
use crate::{
    CallKind, Entry, EntryOutcome, JournalRecord, Listing, RecordedOutcome, ReplySample,
    StoreError, StoredEvent, StoredThread, ThreadEnd, ThreadHeader, ThreadOverview, ThreadSummary,
    WorkflowRecord,
};

use super::records::{Stored, count, decode, has_estimates, has_events, status};

/// A thread's end from its columns: none while it runs; a finished one must have an outcome
/// that agrees with its status, and a time.
fn end(
    path: &Path,
    thread_id: &str,
    status: Stored,
    outcome: Option<String>,
    finished: Option<i64>,
) -> Result<Option<ThreadEnd>, StoreError> {
    let damaged = |detail: &str| corrupt(path, thread_id, JournalRecord::End, detail);
    if status == Stored::Unfinished {
        return Ok(None);
    }
    let (Some(outcome), Some(finished)) = (outcome, finished) else {
        return Err(damaged("the thread finished without an outcome and a time"));
    };
    let end = ThreadEnd {
        outcome: decode::<RecordedOutcome>(path, thread_id, JournalRecord::End, &outcome)?,
        finished_unix_ms: count(
            path,
            thread_id,
            JournalRecord::End,
            "its finishing time",
            finished,
        )?,
    };
    if Stored::of_end(&end) != status {
        return Err(damaged(&format!(
            "the thread is {} but its outcome is {}",
            status.as_str(),
            Stored::of_end(&end).as_str()
        )));
    }
    Ok(Some(end))
}

/// One entry row, as read.
struct EntryRow {
    seq: i64,
    batch: i64,
    handle: i64,
    kind: String,
    fingerprint: String,
    request: String,
    outcome: String,
    input_tokens: i64,
    output_tokens: i64,
    duration_ms: i64,
    estimated_tokens: i64,
}

/// The columns an [`EntryRow`] is read from. A journal of an older format opened read-only
/// has no estimates: its counts read as reported.
fn entry_columns(connection: &Connection, path: &Path) -> Result<&'static str, StoreError> {
    Ok(if has_estimates(connection, path)? {
        "seq, batch, handle, kind, fingerprint, request, outcome,
            input_tokens, output_tokens, duration_ms, estimated_tokens"
    } else {
        "seq, batch, handle, kind, fingerprint, request, outcome,
            input_tokens, output_tokens, duration_ms, 0"
    })
}

impl EntryRow {
    /// The row of a query of [`entry_columns`].
    fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            seq: row.get(0)?,
            batch: row.get(1)?,
            handle: row.get(2)?,
            kind: row.get(3)?,
            fingerprint: row.get(4)?,
            request: row.get(5)?,
            outcome: row.get(6)?,
            input_tokens: row.get(7)?,
            output_tokens: row.get(8)?,
            duration_ms: row.get(9)?,
            estimated_tokens: row.get(10)?,
        })
    }

    fn decode(self, path: &Path, thread_id: &str) -> Result<Entry, StoreError> {
        let position =
            |what: &str, value: i64| count(path, thread_id, JournalRecord::Counters, what, value);
        let record = JournalRecord::Entry {
            seq: position("an entry's sequence number", self.seq)?,
            call: position("an entry's call number", self.handle)?,
        };
        let count = |what: &str, value: i64| count(path, thread_id, record, what, value);
        let entry = Entry {
            seq: count("its sequence number", self.seq)?,
            batch: count("its batch", self.batch)?,
            handle: count("its call number", self.handle)?,
            fingerprint: self.fingerprint,
            request: decode(path, thread_id, record, &self.request)?,
            outcome: decode::<EntryOutcome>(path, thread_id, record, &self.outcome)?,
            input_tokens: count("its input token count", self.input_tokens)?,
            output_tokens: count("its output token count", self.output_tokens)?,
            estimated_tokens: count("its estimated token count", self.estimated_tokens)?,
            duration_ms: count("its duration", self.duration_ms)?,
        };
        // What replay hands the guest must be what the live run handed it: JSON.
        if let Some(problem) = entry.outcome.reply_problem() {
            return Err(corrupt(path, thread_id, record, problem));
        }
        // The kind is kept in its own column too, for listing; the two must agree.
        if CallKind::parse(&self.kind) != Some(entry.kind()) {
            return Err(corrupt(
                path,
                thread_id,
                record,
                format!(
                    "its kind is {:?} but its request is a {} request",
                    self.kind,
                    entry.kind().as_str()
                ),
            ));
        }
        Ok(entry)
    }
}

/// Everything journaled about `thread_id`; `claimed` says whether a run holds it.
pub(super) fn load(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
    claimed: impl FnOnce() -> bool,
) -> Result<Option<StoredThread>, StoreError> {
    let row = connection
        .prepare_cached(
            "SELECT header, name, status, outcome, finished_unix_ms FROM runs
             WHERE thread_id = ?1",
        )
        .and_then(|mut statement| {
            statement
                .query_row([thread_id], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Option<String>>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, Option<String>>(3)?,
                        row.get::<_, Option<i64>>(4)?,
                    ))
                })
                .optional()
        })
        .map_err(|e| classify(path, e))?;
    let Some((header, name, status_text, outcome, finished)) = row else {
        return Ok(None);
    };
    let header: ThreadHeader = decode(path, thread_id, JournalRecord::Header, &header)?;
    let stored = status(path, thread_id, &status_text)?;
    let end = end(path, thread_id, stored, outcome, finished)?;
    let mut statement = connection
        .prepare_cached(&format!(
            "SELECT {} FROM entries WHERE thread_id = ?1 ORDER BY seq",
            entry_columns(connection, path)?
        ))
        .map_err(|e| classify(path, e))?;
    let rows = statement
        .query_map([thread_id], EntryRow::read)
        .map_err(|e| classify(path, e))?;
    let mut entries = Vec::new();
    for row in rows {
        entries.push(
            row.map_err(|e| classify(path, e))?
                .decode(path, thread_id)?,
        );
    }
    Ok(Some(StoredThread {
        header,
        name,
        status: stored.status(claimed),
        entries,
        end,
    }))
}

/// The completion of `thread_id`'s call `handle`, the first should there be two.
pub(super) fn entry(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
    handle: u64,
) -> Result<Option<Entry>, StoreError> {
    // No call has a handle past what the column holds.
    let Ok(handle) = i64::try_from(handle) else {
        return Ok(None);
    };
    let row = connection
        .prepare_cached(&format!(
            "SELECT {} FROM entries WHERE thread_id = ?1 AND handle = ?2 ORDER BY seq LIMIT 1",
            entry_columns(connection, path)?
        ))
        .and_then(|mut statement| {
            statement
                .query_row(params![thread_id, handle], EntryRow::read)
                .optional()
        })
        .map_err(|e| classify(path, e))?;
    row.map(|row| row.decode(path, thread_id)).transpose()
}

/// A thread's summary, as [`ListingRow::read`] reads it, from the thread's row `r` and its
/// completions `e` grouped by thread. Token counts are summed as floats (`TOTAL`), which cannot
/// overflow as `SUM` can on a damaged entry; with their least values, a damaged count is found
/// and named. The duration and the cost are read from the outcome's summary without decoding
/// the rest of it; `->` gives the cost's JSON text as written, so the listing's number is the
/// summary's. An outcome that is not JSON reads as neither, and the thread as damaged.
const SUMMARY: &str = "r.thread_id, r.name, r.status, r.created_unix_ms, r.finished_unix_ms,
    CASE WHEN json_valid(r.outcome) THEN r.outcome ->> '$.summary.duration_ms' END,
    CASE WHEN json_valid(r.outcome) THEN r.outcome -> '$.summary.cost_usd' END,
    COALESCE(SUM(e.kind = 'agent'), 0),
    TOTAL(e.input_tokens) + TOTAL(e.output_tokens),
    MIN(MIN(e.input_tokens), MIN(e.output_tokens))";

/// The rows [`SUMMARY`] is computed from.
const SUMMARY_OF: &str = "runs r LEFT JOIN entries e ON e.thread_id = r.thread_id";

/// A thread without its completions: its header, its summary and its end. `claimed` says
/// whether a run holds a thread; an unfinished one's duration runs to `now_unix_ms`.
pub(super) fn overview(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
    claimed: impl Fn(&str) -> bool,
    now_unix_ms: u64,
) -> Result<Option<ThreadOverview>, StoreError> {
    let row = connection
        .prepare_cached(&format!(
            "SELECT {SUMMARY}, r.header, r.outcome FROM {SUMMARY_OF}
             WHERE r.thread_id = ?1 GROUP BY r.thread_id"
        ))
        .and_then(|mut statement| {
            statement
                .query_row([thread_id], |row| {
                    Ok((
                        ListingRow::read(row)?,
                        row.get::<_, String>(10)?,
                        row.get::<_, Option<String>>(11)?,
                    ))
                })
                .optional()
        })
        .map_err(|e| classify(path, e))?;
    let Some((summary, header, outcome)) = row else {
        return Ok(None);
    };
    let header = decode(path, thread_id, JournalRecord::Header, &header)?;
    let stored = status(path, thread_id, &summary.status)?;
    let end = end(path, thread_id, stored, outcome, summary.finished)?;
    let summary = summary.decode(path, claimed, now_unix_ms)?;
    Ok(Some(ThreadOverview {
        header,
        summary,
        end,
    }))
}

/// Every thread's summary, newest first; a row that does not read is kept, as the error
/// naming its thread, in its place. `claimed` says whether a run holds a thread; an unfinished
/// one's duration runs to `now_unix_ms`.
pub(super) fn list(
    connection: &Connection,
    path: &Path,
    claimed: impl Fn(&str) -> bool,
    now_unix_ms: u64,
) -> Result<Listing, StoreError> {
    let mut statement = connection
        .prepare_cached(&format!(
            "SELECT {SUMMARY} FROM {SUMMARY_OF} GROUP BY r.thread_id
             ORDER BY r.created_unix_ms DESC, r.thread_id DESC"
        ))
        .map_err(|e| classify(path, e))?;
    let rows = statement
        .query_map([], ListingRow::read)
        .map_err(|e| classify(path, e))?;
    let mut listing = Listing::default();
    for row in rows {
        match row
            .map_err(|e| classify(path, e))?
            .decode(path, &claimed, now_unix_ms)
        {
            Ok(thread) => listing.threads.push(thread),
            Err(damaged) => listing.damaged.push(damaged),
        }
    }
    Ok(listing)
}

/// One thread's listing row, as read.
struct ListingRow {
    thread_id: String,
    name: Option<String>,
    status: String,
    created: i64,
    finished: Option<i64>,
    /// The outcome's summary's `duration_ms`, when it has one.
    duration: Option<rusqlite::types::Value>,
    /// The outcome's summary's `cost_usd` as JSON text, when it has one.
    cost: Option<String>,
    leaves: i64,
    tokens: f64,
    least_tokens: Option<i64>,
}

impl ListingRow {
    /// The row of a query of [`SUMMARY`].
    fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            thread_id: row.get(0)?,
            name: row.get(1)?,
            status: row.get(2)?,
            created: row.get(3)?,
            finished: row.get(4)?,
            duration: row.get(5)?,
            cost: row.get(6)?,
            leaves: row.get(7)?,
            tokens: row.get(8)?,
            least_tokens: row.get(9)?,
        })
    }

    fn decode(
        self,
        path: &Path,
        claimed: impl Fn(&str) -> bool,
        now_unix_ms: u64,
    ) -> Result<ThreadSummary, StoreError> {
        let id = self.thread_id.as_str();
        let stored = status(path, id, &self.status)?;
        let created = count(
            path,
            id,
            JournalRecord::Header,
            "its creation time",
            self.created,
        )?;
        if let Some(least) = self.least_tokens.filter(|least| *least < 0) {
            return Err(corrupt(
                path,
                id,
                JournalRecord::Counters,
                format!("an entry's token count is {least}"),
            ));
        }
        // Below 2^53 a float holds every integer exactly.
        if !(0.0..9_007_199_254_740_992.0).contains(&self.tokens) {
            return Err(corrupt(
                path,
                id,
                JournalRecord::Counters,
                format!("its token counts add up to {}", self.tokens),
            ));
        }
        let damaged_end = |detail: String| corrupt(path, id, JournalRecord::End, detail);
        let (finished_unix_ms, duration_ms, cost_usd) = match stored {
            Stored::Unfinished => (None, now_unix_ms.saturating_sub(created), None),
            Stored::Succeeded | Stored::Failed => {
                let finished = self
                    .finished
                    .ok_or_else(|| damaged_end("the thread finished without a time".into()))?;
                let finished = count(path, id, JournalRecord::End, "its finishing time", finished)?;
                let duration = match self.duration {
                    Some(rusqlite::types::Value::Integer(ms)) if ms >= 0 => ms as u64,
                    other => {
                        return Err(damaged_end(format!(
                            "its outcome's duration is {other:?}, not a whole number of \
                             milliseconds"
                        )));
                    }
                };
                let cost = match self.cost.as_deref() {
                    None | Some("null") => None,
                    Some(text) => Some(serde_json::from_str::<f64>(text).map_err(|e| {
                        damaged_end(format!("its outcome's cost {text} is not a number: {e}"))
                    })?),
                };
                (Some(finished), duration, cost)
            }
        };
        Ok(ThreadSummary {
            status: stored.status(|| claimed(id)),
            name: self.name,
            leaves: count(
                path,
                id,
                JournalRecord::Counters,
                "its leaf count",
                self.leaves,
            )?,
            tokens: self.tokens as u64,
            cost_usd,
            created_unix_ms: created,
            finished_unix_ms,
            duration_ms,
            thread_id: self.thread_id,
        })
    }
}

pub(super) fn workflows(
    connection: &Connection,
    path: &Path,
    conversation_id: Option<&str>,
) -> Result<Vec<WorkflowRecord>, StoreError> {
    let mut statement = connection
        .prepare_cached(
            "SELECT conversation_id, thread_id, name, leaves, tokens, ok, recorded_unix_ms
             FROM workflows WHERE ?1 IS NULL OR conversation_id = ?1 ORDER BY id",
        )
        .map_err(|e| classify(path, e))?;
    let rows = statement
        .query_map([conversation_id], |row| {
            Ok((
                WorkflowRecord {
                    conversation_id: row.get(0)?,
                    thread_id: row.get(1)?,
                    name: row.get(2)?,
                    leaves: 0,
                    tokens: 0,
                    ok: row.get(5)?,
                    recorded_unix_ms: 0,
                },
                [row.get::<_, i64>(3)?, row.get(4)?, row.get(6)?],
            ))
        })
        .map_err(|e| classify(path, e))?;
    let mut records = Vec::new();
    for row in rows {
        let (mut record, [leaves, tokens, recorded]) = row.map_err(|e| classify(path, e))?;
        let count = |what: &str, value: i64| {
            count(
                path,
                &record.thread_id,
                JournalRecord::Workflow,
                what,
                value,
            )
        };
        record.leaves = count("its leaf count", leaves)?;
        record.tokens = count("its token count", tokens)?;
        record.recorded_unix_ms = count("its time", recorded)?;
        records.push(record);
    }
    Ok(records)
}

/// At most `limit` events of a thread after `after`, in order.
pub(super) fn events(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
    after: u64,
    limit: usize,
) -> Result<Vec<StoredEvent>, StoreError> {
    if !has_events(connection, path)? {
        return Ok(Vec::new());
    }
    let statement = connection
        .prepare_cached(
            "SELECT seq, kind, event FROM events WHERE thread_id = ?1 AND seq > ?2
             ORDER BY seq LIMIT ?3",
        )
        .map_err(|e| classify(path, e))?;
    event_rows(
        statement,
        path,
        thread_id,
        params![thread_id, position(after), position(limit)],
    )
}

/// At most `limit` events of a thread after `after` whose JSON has the `call_id` `call_id`,
/// in order, with any that is not JSON among them; SQLite looks, so only they are read.
pub(super) fn call_events(
    connection: &Connection,
    path: &Path,
    thread_id: &str,
    call_id: u64,
    after: u64,
    limit: usize,
) -> Result<Vec<StoredEvent>, StoreError> {
    if !has_events(connection, path)? {
        return Ok(Vec::new());
    }
    // No event has a call past what SQLite's integers hold.
    let Ok(call_id) = i64::try_from(call_id) else {
        return Ok(Vec::new());
    };
    let statement = connection
        .prepare_cached(
            "SELECT seq, kind, event FROM events WHERE thread_id = ?1 AND seq > ?2
                AND CASE WHEN json_valid(event) THEN event ->> '$.call_id' = ?4 ELSE 1 END
             ORDER BY seq LIMIT ?3",
        )
        .map_err(|e| classify(path, e))?;
    event_rows(
        statement,
        path,
        thread_id,
        params![thread_id, position(after), position(limit), call_id],
    )
}

/// A sequence number or a count as an SQL integer: one past what it holds is as good as any.
fn position(value: impl TryInto<i64>) -> i64 {
    value.try_into().unwrap_or(i64::MAX)
}

/// The events a query of `(seq, kind, event)` finds.
fn event_rows(
    mut statement: CachedStatement<'_>,
    path: &Path,
    thread_id: &str,
    params: impl Params,
) -> Result<Vec<StoredEvent>, StoreError> {
    let rows = statement
        .query_map(params, |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ))
        })
        .map_err(|e| classify(path, e))?;
    let mut events = Vec::new();
    for row in rows {
        let (seq, kind, event) = row.map_err(|e| classify(path, e))?;
        let seq = count(
            path,
            thread_id,
            JournalRecord::Counters,
            "an event's sequence number",
            seq,
        )?;
        events.push(StoredEvent { seq, kind, event });
    }
    Ok(events)
}

/// Up to `limit` of the newest successful leaf replies: the threads newest first (by their
/// age index, so only the rows returned are read), the fields of each request taken out in
/// SQL (its prompt never leaves SQLite). Rows that are not JSON are left out.
pub(super) fn recent_replies(
    connection: &Connection,
    path: &Path,
    limit: usize,
) -> Result<Vec<ReplySample>, StoreError> {
    // `CROSS JOIN` keeps `runs` the outer loop, walked in its age index's order, so the
    // statement sorts one thread's entries at a time and stops after `limit` rows, instead of
    // sorting every entry of the journal.
    let mut statement = connection
        .prepare_cached(
            "SELECT e.thread_id, e.seq, e.handle, e.output_tokens, e.request ->> '$.model',
                 e.request ->> '$.agent_type', e.request ->> '$.label', e.request -> '$.schema'
             FROM runs r CROSS JOIN entries e ON e.thread_id = r.thread_id
             WHERE e.kind = 'agent'
                 AND CASE WHEN json_valid(e.request) AND json_valid(e.outcome)
                     THEN e.outcome ->> '$.status' = 'ok' ELSE 0 END
             ORDER BY r.created_unix_ms DESC, e.seq
             LIMIT ?1",
        )
        .map_err(|e| classify(path, e))?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = statement
        .query_map([limit], |row| {
            let text = |index: usize| -> rusqlite::Result<Option<String>> {
                Ok(match row.get_ref(index)? {
                    ValueRef::Text(text) => Some(String::from_utf8_lossy(text).into_owned()),
                    _ => None,
                })
            };
            Ok((
                row.get::<_, String>(0)?,
                [row.get::<_, i64>(1)?, row.get(2)?, row.get(3)?],
                [text(4)?, text(5)?, text(6)?, text(7)?],
            ))
        })
        .map_err(|e| classify(path, e))?;
    let mut replies = Vec::new();
    for row in rows {
        let (thread_id, [seq, handle, output], [model, agent_type, label, schema]) =
            row.map_err(|e| classify(path, e))?;
        let position =
            |what: &str, value: i64| count(path, &thread_id, JournalRecord::Counters, what, value);
        let record = JournalRecord::Entry {
            seq: position("an entry's sequence number", seq)?,
            call: position("an entry's call number", handle)?,
        };
        let schema: Option<serde_json::Value> = match schema.as_deref() {
            None | Some("null") => None,
            Some(text) => Some(decode(path, &thread_id, record, text)?),
        };
        replies.push(ReplySample {
            model,
            agent_type,
            label,
            schema,
            output_tokens: count(path, &thread_id, record, "its output token count", output)?,
        });
    }
    Ok(replies)
}
