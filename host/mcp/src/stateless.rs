//! `--leaves sampling` for clients of the stateless 2026-07-28 revision, where the server
//! cannot call the client. A call runs its thread until the guest is blocked with nothing left
//! to do but wait for the client's model, then ends with an input-required result carrying the
//! sampling request of every leaf waiting at that moment, in one batch. The client retries the
//! call with the answers; the thread is replayed from its journal (the leaves answered before
//! are not asked again), the waiting leaves get their answers, and the run goes on to the next
//! batch or the end. Between round trips the server keeps nothing but the journal: the
//! `requestState` names the thread and the requests asked, and carries the earlier turns of a
//! leaf still in progress (a `schema=` leaf whose first reply failed validation and which now
//! waits for its repair turn), which no journal entry holds until the leaf is done.
//!
//! "Waiting at that moment" is decided by the runtime, not a timer: [`Leaves`] hears from
//! [`LeafBackend::run_waiting`] that the guest is blocked and which leaves are in flight, and
//! the batch is ready once each of those leaves waits for an answer or for a concurrency slot
//! that a waiting leaf holds. The neighbours: [`crate::sampling`] (the 2025-11-25 way, one
//! `sampling/createMessage` request to the client per turn, and the request and reply mapping
//! both revisions share) and [`crate::server`] (the round trip of a call).
#![expect(
    deprecated,
    reason = "sampling (deprecated by SEP-2577) is how 2026-07-28 clients lend their model"
)]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use flowbox::chat::{ChatModel, ChatRequest, ChatResponse};
use flowbox::store::{from_hex, hex};
use flowbox::{
    BackendError, LeafBackend, LeafObserver, LeafReply, LeafRequest, Waiting,
    backends::LeafEstimate,
};
use rmcp::ErrorData;
use rmcp::model::{
    self as wire, CreateMessageRequest, InputRequest, InputRequests, InputRequiredResult,
    InputResponses,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::sampling::{NO_SAMPLING, chat_response, sampling_request};

/// The rounds under way, by thread id: the answers each call brought and the leaves waiting
/// for more.
#[derive(Debug, Default)]
pub(crate) struct Rounds(Mutex<HashMap<String, Arc<Round>>>);

impl Rounds {
    /// Runs the leaves of `thread_id` as one round, answered from `answers`, until the returned
    /// guard is dropped; a thread another call already runs keeps its round (and that call
    /// refuses this one's run as a thread in use).
    pub(crate) fn open(
        self: &Arc<Self>,
        thread_id: &str,
        answers: Answers,
        sampling: bool,
    ) -> Opened {
        let round = Arc::new(Round {
            answers: answers.0,
            sampling,
            state: Mutex::default(),
            ready: Notify::new(),
        });
        let mut rounds = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let owner = !rounds.contains_key(thread_id);
        if owner {
            rounds.insert(thread_id.to_owned(), Arc::clone(&round));
        }
        Opened {
            rounds: Arc::clone(self),
            thread_id: owner.then(|| thread_id.to_owned()),
            round,
        }
    }

    fn get(&self, thread_id: &str) -> Option<Arc<Round>> {
        let rounds = self.0.lock().unwrap_or_else(|p| p.into_inner());
        rounds.get(thread_id).cloned()
    }
}

/// A round of one thread; dropping it ends the round.
pub(crate) struct Opened {
    rounds: Arc<Rounds>,
    thread_id: Option<String>,
    round: Arc<Round>,
}

impl Opened {
    /// The batch, once every leaf in flight waits for the client.
    pub(crate) async fn batch(&self) -> Batch {
        loop {
            let notified = self.round.ready.notified();
            if let Some(batch) = self.round.lock().batch.clone() {
                return batch;
            }
            notified.await;
        }
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        if let Some(thread_id) = &self.thread_id {
            let mut rounds = self.rounds.0.lock().unwrap_or_else(|p| p.into_inner());
            rounds.remove(thread_id);
        }
    }
}

#[derive(Debug)]
struct Round {
    /// The client's answers, by request key.
    answers: HashMap<String, wire::CreateMessageResult>,
    /// Whether the client declared the sampling capability.
    sampling: bool,
    state: Mutex<RoundState>,
    ready: Notify,
}

/// Where the round's leaves are. A leaf enters (the backend's `call` begins) and then either
/// returns or asks for an answer the round does not have and waits for good.
#[derive(Debug, Default)]
struct RoundState {
    entered: HashMap<u64, Option<String>>,
    returned: HashSet<u64>,
    /// The turn each waiting leaf asks for, by call id.
    asked: BTreeMap<u64, (String, wire::CreateMessageRequestParams)>,
    /// What the runtime last said is in flight while its guest is blocked; `None` once a leaf
    /// returned since (its completion will wake the guest).
    waiting: Option<Waiting>,
    batch: Option<Batch>,
}

impl Round {
    fn lock(&self) -> std::sync::MutexGuard<'_, RoundState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Decides whether the run can go no further without the client, and if so makes the
    /// batch.
    fn settle(&self, state: &mut RoundState) {
        if state.batch.is_some() || state.asked.is_empty() {
            return;
        }
        let Some(waiting) = &state.waiting else {
            return;
        };
        if waiting.tools > 0 {
            return;
        }
        let mut for_a_slot = 0;
        for call in &waiting.leaves {
            if state.asked.contains_key(call) {
                continue;
            }
            if state.returned.contains(call) || state.entered.contains_key(call) {
                // Its completion is on the way, or it is still working.
                return;
            }
            for_a_slot += 1;
        }
        // Every slot taken is held by a waiting leaf; one free would start another leaf.
        if for_a_slot > 0 && state.asked.len() < waiting.slots {
            return;
        }
        let requests = state
            .asked
            .values()
            .map(|(key, params)| (key.clone(), params.clone()))
            .collect();
        let calls: BTreeSet<u64> = state.asked.keys().copied().collect();
        // The earlier turns of the waiting leaves, which the next round replays them with.
        let carried = self
            .answers
            .iter()
            .filter(|(key, _)| parse_key(key).is_some_and(|(call, _)| calls.contains(&call)))
            .map(|(key, answer)| (key.clone(), answer.clone()))
            .collect();
        state.batch = Some(Batch { requests, carried });
        self.ready.notify_one();
    }
}

/// What a round ends with when its leaves wait for the client.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    requests: BTreeMap<String, wire::CreateMessageRequestParams>,
    carried: BTreeMap<String, wire::CreateMessageResult>,
}

impl Batch {
    /// The input-required result asking the client for this batch, for a retry of the call
    /// on `thread_id`.
    pub(crate) fn input_required(self, thread_id: &str) -> InputRequiredResult {
        let (requests, pending) = self.for_task();
        let state = RequestState {
            version: STATE_VERSION,
            thread_id: thread_id.to_owned(),
            asked: pending.asked,
            carried: pending.carried,
        };
        InputRequiredResult::new(Some(requests), Some(state.encode()))
    }

    /// The batch as a task's `input_required` status gives it: the requests, keyed as an
    /// input-required result keys them, and what their answers must match.
    pub(crate) fn for_task(self) -> (InputRequests, Pending) {
        let pending = Pending {
            asked: self.requests.keys().cloned().collect(),
            carried: self.carried,
        };
        let requests = self
            .requests
            .into_iter()
            .map(|(key, params)| {
                let request = InputRequest::CreateMessage(CreateMessageRequest::new(params));
                (key, request)
            })
            .collect();
        (requests, pending)
    }
}

/// The key of a leaf's turn: `leaf-{call}-turn-{n}`, turns from 1.
fn key(call: u64, turn: u64) -> String {
    format!("leaf-{call}-turn-{turn}")
}

fn parse_key(key: &str) -> Option<(u64, u64)> {
    let (call, turn) = key.strip_prefix("leaf-")?.split_once("-turn-")?;
    Some((call.parse().ok()?, turn.parse().ok()?))
}

/// The format of the request state this build writes.
const STATE_VERSION: u32 = 1;

/// What the client echoes back with its answers. Nothing in it is trusted: its thread is
/// looked up in the journal, its keys are what the answers must match, and its carried turns
/// are answers the client gave (forging one is no more than answering differently).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestState {
    version: u32,
    thread_id: String,
    asked: BTreeSet<String>,
    carried: BTreeMap<String, wire::CreateMessageResult>,
}

impl RequestState {
    /// Hex of the JSON: opaque to the client, and survives any transport.
    fn encode(&self) -> String {
        let json = serde_json::to_string(self).expect("the request state serialises");
        hex(json.as_bytes())
    }

    fn decode(text: &str) -> Option<Self> {
        let state: Self = serde_json::from_slice(&from_hex(text)?).ok()?;
        (state.version == STATE_VERSION).then_some(state)
    }
}

/// The answers a call brings: none on its first call, the carried turns and the client's
/// responses on a retry.
#[derive(Debug, Default)]
pub(crate) struct Answers(HashMap<String, wire::CreateMessageResult>);

/// A retry's thread and answers, checked against the request state it echoes.
#[derive(Debug)]
pub(crate) struct Retry {
    pub(crate) thread_id: String,
    pub(crate) answers: Answers,
}

impl Retry {
    /// The retry a call is, `None` for a first call, or the protocol error for a request state
    /// that is not this server's or answers that do not match it.
    pub(crate) fn of(
        request_state: Option<&str>,
        responses: Option<&InputResponses>,
    ) -> Result<Option<Self>, ErrorData> {
        let Some(text) = request_state else {
            return match responses {
                Some(_) => Err(ErrorData::invalid_params(
                    "inputResponses without a requestState: retry the call with the \
                     requestState of the input-required result it answers",
                    None,
                )),
                None => Ok(None),
            };
        };
        let state = RequestState::decode(text).ok_or_else(|| {
            ErrorData::invalid_params(
                "the requestState is not one this server issued (it does not decode): send \
                 it back exactly as the input-required result gave it",
                None,
            )
        })?;
        let empty = InputResponses::new();
        let pending = Pending {
            asked: state.asked,
            carried: state.carried,
        };
        Ok(Some(Self {
            thread_id: state.thread_id,
            answers: pending.answers(responses.unwrap_or(&empty))?,
        }))
    }
}

/// The requests of a batch and the earlier turns of its leaves: what a retry (or, for a call
/// run as a task, a `tasks/update`) must answer.
#[derive(Debug)]
pub(crate) struct Pending {
    asked: BTreeSet<String>,
    carried: BTreeMap<String, wire::CreateMessageResult>,
}

impl Pending {
    /// The answers `responses` give, with the carried turns, or the protocol error for
    /// responses that miss or add keys to the ones asked or are not sampling results.
    pub(crate) fn answers(&self, responses: &InputResponses) -> Result<Answers, ErrorData> {
        let missing: Vec<&str> = self
            .asked
            .iter()
            .filter(|key| !responses.contains_key(*key))
            .map(String::as_str)
            .collect();
        let unexpected: Vec<&str> = responses
            .keys()
            .filter(|key| !self.asked.contains(*key))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() || !unexpected.is_empty() {
            let mut message = String::from("the inputResponses do not answer the requests asked");
            if !missing.is_empty() {
                message.push_str(&format!("; missing: {}", missing.join(", ")));
            }
            if !unexpected.is_empty() {
                message.push_str(&format!("; not asked: {}", unexpected.join(", ")));
            }
            return Err(ErrorData::invalid_params(
                format!("{message} (asked: {})", join(&self.asked)),
                None,
            ));
        }
        let mut answers = HashMap::new();
        for (key, response) in responses {
            let answer = serde_json::from_value::<wire::CreateMessageResult>(response.clone())
                .map_err(|error| {
                    ErrorData::invalid_params(
                        format!("inputResponses[{key:?}] is not a sampling result: {error}"),
                        None,
                    )
                })?;
            answers.insert(key.clone(), answer);
        }
        answers.extend(self.carried.clone());
        Ok(Answers(answers))
    }
}

fn join(keys: &BTreeSet<String>) -> String {
    keys.iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The leaf backend: the agent loop over [`BatchChat`], telling a thread's round where its
/// leaves are.
#[derive(Debug)]
pub(crate) struct Leaves {
    inner: Arc<dyn LeafBackend>,
    rounds: Arc<Rounds>,
}

impl Leaves {
    pub(crate) fn new(inner: Arc<dyn LeafBackend>, rounds: Arc<Rounds>) -> Self {
        Self { inner, rounds }
    }

    /// Notes that a leaf of a round begins, or refuses it when it would wait forever: two
    /// leaves of one conversation (`instance_id`) take turns, so the second would wait for
    /// the first, which waits for the client.
    fn enter(&self, request: &LeafRequest) -> Result<Option<Arc<Round>>, BackendError> {
        let Some(round) = self.rounds.get(&request.thread_id) else {
            return Ok(None);
        };
        let mut state = round.lock();
        if let Some(instance) = &request.instance_id {
            let busy = state.entered.iter().any(|(call, other)| {
                other.as_ref() == Some(instance) && !state.returned.contains(call)
            });
            if busy {
                return Err(BackendError::terminal(format!(
                    "another leaf of conversation {instance:?} is waiting for the client's \
                     model: under the 2026-07-28 revision leaves sharing an instance_id must \
                     be awaited one after the other"
                )));
            }
        }
        state
            .entered
            .insert(request.call_id, request.instance_id.clone());
        drop(state);
        Ok(Some(round))
    }

    fn returned(round: Option<Arc<Round>>, call_id: u64) {
        if let Some(round) = round {
            let mut state = round.lock();
            state.returned.insert(call_id);
            state.waiting = None;
        }
    }
}

#[flowbox::async_trait]
impl LeafBackend for Leaves {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        let round = self.enter(request)?;
        let result = self.inner.call(request).await;
        Self::returned(round, request.call_id);
        result
    }

    async fn call_observed(
        &self,
        request: &LeafRequest,
        observer: &dyn LeafObserver,
    ) -> Result<LeafReply, BackendError> {
        let round = self.enter(request)?;
        let result = self.inner.call_observed(request, observer).await;
        Self::returned(round, request.call_id);
        result
    }

    fn check(&self, request: &LeafRequest) -> Result<(), BackendError> {
        self.inner.check(request)
    }

    fn estimate(&self, request: &LeafRequest) -> LeafEstimate {
        self.inner.estimate(request)
    }

    fn catalog(&self) -> flowbox::backends::LeafCatalog {
        self.inner.catalog()
    }

    fn replayed(&self, request: &LeafRequest, reply: &LeafReply) {
        self.inner.replayed(request, reply);
    }

    fn run_finished(&self, thread_id: &str) {
        self.inner.run_finished(thread_id);
    }

    fn run_waiting(&self, thread_id: &str, waiting: &Waiting) {
        if let Some(round) = self.rounds.get(thread_id) {
            let mut state = round.lock();
            state.waiting = Some(waiting.clone());
            round.settle(&mut state);
        }
    }
}

/// The chat model of `--leaves sampling`: a turn of a thread in a round is answered from the
/// round's answers or asked of the client in the round's batch; any other thread's turn goes
/// to the client as a `sampling/createMessage` request (the 2025-11-25 way).
#[derive(Debug)]
pub(crate) struct BatchChat {
    rounds: Arc<Rounds>,
    sessions: Arc<dyn ChatModel>,
}

impl BatchChat {
    pub(crate) fn new(rounds: Arc<Rounds>, sessions: Arc<dyn ChatModel>) -> Self {
        Self { rounds, sessions }
    }
}

#[flowbox::async_trait]
impl ChatModel for BatchChat {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        // A leaf's turns are keyed `{thread}/{call}/{turn}`; thread ids have no `/`.
        let mut parts = request
            .idempotency_key
            .as_deref()
            .unwrap_or_default()
            .split('/');
        let thread_id = parts.next().unwrap_or_default();
        let turn = (|| Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?)))();
        let (Some(round), Some((call, turn))) = (self.rounds.get(thread_id), turn) else {
            return self.sessions.complete(request).await;
        };
        if !round.sampling {
            return Err(BackendError::terminal(NO_SAMPLING));
        }
        let (params, sent_bytes) = sampling_request(request)?;
        let key = key(call, turn);
        if let Some(answer) = round.answers.get(&key) {
            return Ok(chat_response(answer.clone(), sent_bytes));
        }
        {
            let mut state = round.lock();
            state.asked.insert(call, (key, params));
            round.settle(&mut state);
        }
        // The round ends with this leaf's request in its batch; the next round answers it.
        std::future::pending().await
    }

    fn combines_tools_and_structure(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round() -> Round {
        Round {
            answers: HashMap::new(),
            sampling: true,
            state: Mutex::default(),
            ready: Notify::new(),
        }
    }

    fn params(text: &str) -> wire::CreateMessageRequestParams {
        wire::CreateMessageRequestParams::new(vec![wire::SamplingMessage::user_text(text)], 10)
    }

    #[test]
    fn a_batch_waits_for_every_leaf_in_flight() {
        let round = round();
        let mut state = round.lock();
        state.entered.insert(1, None);
        state.entered.insert(2, None);
        state.asked.insert(1, (key(1, 1), params("one")));
        state.waiting = Some(Waiting::new(vec![1, 2], 0, 8));
        round.settle(&mut state);
        assert!(state.batch.is_none(), "leaf 2 is still working");
        state.asked.insert(2, (key(2, 1), params("two")));
        round.settle(&mut state);
        let batch = state.batch.clone().expect("both wait");
        assert_eq!(
            batch.requests.keys().collect::<Vec<_>>(),
            ["leaf-1-turn-1", "leaf-2-turn-1"]
        );
    }

    #[test]
    fn a_leaf_that_returned_or_a_free_slot_holds_the_batch_back() {
        let round = round();
        let mut state = round.lock();
        state.entered.insert(1, None);
        state.asked.insert(1, (key(1, 1), params("one")));
        state.entered.insert(2, None);
        state.returned.insert(2);
        // Leaf 3 waits for a slot: with 2 slots, one is free once leaf 2 lets go of it.
        state.waiting = Some(Waiting::new(vec![1, 2, 3], 0, 2));
        round.settle(&mut state);
        assert!(state.batch.is_none());
        state.waiting = Some(Waiting::new(vec![1, 3], 0, 2));
        round.settle(&mut state);
        assert!(state.batch.is_none(), "a slot is free for leaf 3");
        state.waiting = Some(Waiting::new(vec![1, 3], 1, 1));
        round.settle(&mut state);
        assert!(state.batch.is_none(), "a tool call is in flight");
        state.waiting = Some(Waiting::new(vec![1, 3], 0, 1));
        round.settle(&mut state);
        assert_eq!(state.batch.as_ref().map(|b| b.requests.len()), Some(1));
    }

    #[test]
    fn request_states_round_trip_and_forgeries_are_refused() {
        let state = RequestState {
            version: STATE_VERSION,
            thread_id: "t-1".into(),
            asked: [key(3, 2)].into_iter().collect(),
            carried: BTreeMap::new(),
        };
        let text = state.encode();
        let answer = serde_json::json!({"role": "assistant", "model": "m",
            "content": {"type": "text", "text": "hi"}});
        let responses: InputResponses = [(key(3, 2), answer.clone())].into_iter().collect();
        let retry = Retry::of(Some(&text), Some(&responses)).unwrap().unwrap();
        assert_eq!(retry.thread_id, "t-1");
        assert!(retry.answers.0.contains_key("leaf-3-turn-2"));

        for forged in ["", "zz", "7b7d", "not hex at all", "é"] {
            let error = Retry::of(Some(forged), Some(&responses)).unwrap_err();
            assert!(
                error.message.contains("not one this server issued"),
                "{error:?}"
            );
        }
        let wrong: InputResponses = [(key(4, 1), answer)].into_iter().collect();
        let error = Retry::of(Some(&text), Some(&wrong)).unwrap_err();
        assert!(
            error.message.contains("missing: leaf-3-turn-2")
                && error.message.contains("not asked: leaf-4-turn-1"),
            "{error:?}"
        );
        let bad: InputResponses = [(key(3, 2), serde_json::json!({"no": 1}))]
            .into_iter()
            .collect();
        let error = Retry::of(Some(&text), Some(&bad)).unwrap_err();
        assert!(error.message.contains("not a sampling result"), "{error:?}");
        let error = Retry::of(None, Some(&responses)).unwrap_err();
        assert!(
            error.message.contains("without a requestState"),
            "{error:?}"
        );
        assert!(Retry::of(None, None).unwrap().is_none());
    }
}
