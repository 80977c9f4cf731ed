//! Delivering completions: every finished call at once, in the order they finished (or the
//! journal's next batch while a resumed run replays, or another engine's batch whole),
//! journaled before the guest sees them, and only then counted against the budgets.

use std::collections::VecDeque;
use std::time::Duration;

use flowbox_backends::{BackendError, BackendErrorKind, LeafReply, Usage, Waiting};
use flowbox_store::{CallErrorKind, CallKind, Entry, EntryOutcome, unrepresentable_number};

use super::decode::{CallFailure, completion_outcome, entry_outcome};
use super::events::{external_finished, leaf_finished};
use super::source::ExternalCompletion;
use super::{Calls, Completion, Finished};
use crate::RunError;
use crate::clock::millis;
use crate::events::EventKind;
use crate::journal::codec::{entry_reply, entry_usage, journal_entry};
use crate::journal::{JournalWriter, Replay};

/// How many times the message limit one `await-next` may hand the guest at once; the rest
/// waits for the next call, so a burst of large replies never lands in the guest (or the
/// journal) as one giant batch.
const BATCH_MESSAGES: usize = 4;

impl Calls {
    /// A call that has finished, if any: one done where it started, else a task's report.
    fn try_finished(&mut self) -> Option<Finished> {
        self.finished
            .pop_front()
            .or_else(|| self.receiver.try_recv().ok())
    }

    /// The next call to finish, waiting for a task to report if none has.
    async fn next_finished(&mut self) -> Finished {
        match self.try_finished() {
            Some(done) => done,
            // Every call in flight that the journal does not answer is in one of the two.
            None => self
                .receiver
                .recv()
                .await
                .expect("the run holds a sender, so the channel stays open"),
        }
    }

    /// Waits for at least one pending call and returns every finished one: the next journaled
    /// batch while a resumed run replays, then live completions in finishing order, journaled
    /// before they are returned.
    pub(crate) async fn await_next(
        &mut self,
    ) -> Result<Result<Vec<Completion>, CallFailure>, RunError> {
        if self.in_flight.is_empty() {
            return Ok(Err(CallFailure::invalid(
                "await-next was called with no call pending",
            )));
        }
        self.project_round();
        if let Some(batch) = self
            .checkpoints
            .replay
            .as_mut()
            .and_then(Replay::next_batch)
        {
            return self.replay_batch(batch).map(Ok);
        }
        if self.in_flight.values().any(|call| call.from_journal) {
            return Err(RunError::Divergence(
                "the journal ran out while the script waits for a call it recorded".into(),
            ));
        }
        // Another engine's batch is delivered whole: its boundaries are part of its journal.
        let (first, mut external) = match &mut self.checkpoints.external {
            Some(source) => {
                let mut batch: VecDeque<Finished> = source
                    .next_batch()
                    .await?
                    .into_iter()
                    .map(Finished::from)
                    .collect();
                let first = batch.pop_front().ok_or_else(|| {
                    RunError::Host("the completion source returned an empty batch".into())
                })?;
                (first, Some(batch))
            }
            None => {
                let done = match self.try_finished() {
                    Some(done) => done,
                    None => {
                        self.backend.run_waiting(&self.thread_id, &self.waiting());
                        self.next_finished().await
                    }
                };
                (done, None)
            }
        };
        let mut completions = Vec::new();
        let mut entries = Vec::new();
        let mut batch_bytes = 0;
        let position = self
            .checkpoints
            .journal
            .as_ref()
            .map(JournalWriter::position);
        let mut next = Some(first);
        while let Some(done) = next.take() {
            let offset = completions.len();
            // Only a source can name a call that was never started (or twice).
            let Some(call) = self.in_flight.remove(&done.handle) else {
                return Err(RunError::Host(format!(
                    "the completion source delivered call {}, which is not pending",
                    done.handle
                )));
            };
            if external.is_some() {
                let price = call.cost.as_ref().map(|cost| cost.price);
                self.events
                    .emit(|| external_finished(call.kind, &done, price));
            }
            let (completion, usage) = self.deliverable(done.handle, call.kind, done.result);
            batch_bytes += completion.outcome.as_ref().map_or(0, String::len);
            if let (Some((seq, batch)), Some(record)) = (position, call.record) {
                entries.push(journal_entry(
                    seq + offset as u64,
                    batch,
                    completion.handle,
                    entry_outcome(&completion.outcome),
                    record,
                    usage,
                    done.duration,
                ));
            }
            self.budget.count(usage);
            if call.kind == CallKind::Agent {
                self.dollars.settle(call.cost.as_ref(), usage);
            }
            completions.push(completion);
            if let Some(batch) = &mut external {
                next = batch.pop_front();
            } else if batch_bytes < BATCH_MESSAGES.saturating_mul(self.max_reply_bytes) {
                next = self.try_finished();
            }
        }
        if let Some(journal) = &mut self.checkpoints.journal {
            journal.append(entries).await?;
        }
        self.warn_about_budget();
        Ok(Ok(completions))
    }

    /// What the blocked guest has in flight (every call of it live: the journal's were
    /// delivered first).
    fn waiting(&self) -> Waiting {
        let leaves: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(_, call)| call.kind == CallKind::Agent)
            .map(|(handle, _)| *handle)
            .collect();
        let tools = self.in_flight.len() - leaves.len();
        Waiting::new(leaves, tools, self.max_concurrency)
    }

    fn replay_batch(&mut self, batch: Vec<Entry>) -> Result<Vec<Completion>, RunError> {
        let mut completions = Vec::with_capacity(batch.len());
        for entry in batch {
            let call = match self.in_flight.remove(&entry.handle) {
                Some(call) if call.from_journal => call,
                _ => {
                    return Err(RunError::Divergence(format!(
                        "the journal delivers call {} next, which the script has not started",
                        entry.handle
                    )));
                }
            };
            let usage = entry_usage(&entry);
            let duration = Duration::from_millis(entry.duration_ms);
            let result = match &entry.outcome {
                EntryOutcome::Ok { .. } => Ok(usage),
                EntryOutcome::Err { message, .. } => Err(message.clone()),
            };
            match call.kind {
                CallKind::Agent => {
                    if let Ok(reply) = entry_reply(&entry) {
                        if let Some(leaf) = &call.replayed {
                            self.backend.replayed(leaf, &reply);
                        }
                        self.feeds.delivered(entry.handle, &reply.value);
                    }
                    let price = call.cost.as_ref().map(|cost| cost.price);
                    self.events
                        .emit(|| leaf_finished(entry.handle, result, duration, true, price));
                }
                CallKind::Tool => self.events.emit(|| EventKind::ToolFinished {
                    call_id: entry.handle,
                    ok: result.is_ok(),
                    duration_ms: millis(duration),
                    replayed: true,
                    error: result.err(),
                }),
            }
            self.budget.count(usage);
            if call.kind == CallKind::Agent {
                self.dollars.settle(call.cost.as_ref(), usage);
            }
            completions.push(Completion {
                handle: entry.handle,
                outcome: completion_outcome(entry.outcome),
            });
        }
        self.warn_about_budget();
        Ok(completions)
    }

    /// The completion the guest gets for a backend or tool result, and the tokens it counts;
    /// a leaf's reply the guest gets is indexed for the leaves it may feed (not a plan's
    /// placeholder).
    fn deliverable(
        &mut self,
        handle: u64,
        kind: CallKind,
        result: Result<LeafReply, BackendError>,
    ) -> (Completion, Usage) {
        let failed = match kind {
            CallKind::Agent => CallErrorKind::AgentFailed,
            CallKind::Tool => CallErrorKind::ToolFailed,
        };
        let (outcome, usage) = match result {
            Ok(reply) => {
                let text = reply.value.to_string();
                // What the guest cannot read back as JSON it must not be handed: it would
                // take `1e999` for infinity, and a replay would refuse the journal.
                let outcome = if let Some(number) = unrepresentable_number(&reply.value) {
                    let message = format!("the reply holds the number {number}, beyond any float");
                    Err(CallFailure::backend(
                        failed,
                        &BackendError::terminal(message),
                    ))
                } else if text.len() > self.max_reply_bytes {
                    let too_large = BackendErrorKind::TooLarge {
                        what: "the reply",
                        size: text.len() as u64,
                        limit: self.max_reply_bytes as u64,
                    };
                    Err(CallFailure::backend(failed, &too_large.into()))
                } else {
                    if kind == CallKind::Agent && self.projection.is_none() {
                        self.feeds.delivered(handle, &reply.value);
                    }
                    Ok(text)
                };
                (outcome, reply.usage)
            }
            // A failed leaf may still have used tokens (turns before it failed): they count.
            Err(error) => (Err(CallFailure::backend(failed, &error)), error.usage()),
        };
        (Completion { handle, outcome }, usage)
    }

    fn warn_about_budget(&mut self) {
        if let Some((spent, total)) = self.budget.warning_due() {
            self.events
                .emit(|| EventKind::BudgetWarning { spent, total });
        }
    }
}

impl From<ExternalCompletion> for Finished {
    fn from(completion: ExternalCompletion) -> Self {
        Self {
            handle: completion.handle,
            result: completion.result,
            duration: completion.duration,
        }
    }
}
