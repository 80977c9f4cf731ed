//! The JSON API under `/api/`: threads, one thread, its events from a sequence number, one
//! leaf's detail, and a thread's events as a live stream (server-sent events). Every answer is
//! JSON; a thread or leaf that does not exist is a 404 and a bad parameter — in the path or the
//! query — a 400, each with `{"error": "..."}`. `docs/events.md` documents the shapes. Each
//! answer reads only what it shows, during one of the journal's turns (see `ReadOnlyJournal`);
//! a live stream takes a turn for each look.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use flowbox::events::history::{self, Follower, HistorySource, RunState};
use flowbox::store::view::ThreadList;
use flowbox::store::{
    CallErrorKind, CallKind, CallRequest, CheckpointStore, EntryOutcome, Listing, RecordedOutcome,
    StoreError, ThreadStatus, ThreadSummary,
};
use flowbox::{Event, EventKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ReadOnlyJournal, Turn};

/// The most events one `/events` answer holds.
const MAX_LIMIT: usize = history::PAGE;

pub(super) fn routes() -> Router<Arc<ReadOnlyJournal>> {
    Router::new()
        .route("/threads", get(threads))
        .route("/threads/{thread}", get(thread))
        .route("/threads/{thread}/events", get(events))
        .route("/threads/{thread}/stream", get(stream))
        .route("/threads/{thread}/leaves/{call}", get(leaf))
        .fallback(|| async { ApiError::NotFound("no such API path".into()) })
}

/// An API error, as `{"error": "..."}` with its status.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// 404: no such thread, leaf or path.
    NotFound(String),
    /// 400: a parameter that does not parse.
    BadRequest(String),
    /// 500: the journal could not be read.
    Journal(StoreError),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            Self::NotFound(message) => (StatusCode::NOT_FOUND, message),
            Self::BadRequest(message) => (StatusCode::BAD_REQUEST, message),
            Self::Journal(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
        };
        (status, Json(ErrorBody { error: message })).into_response()
    }
}

/// The body of every error answer.
#[derive(Debug, Serialize)]
struct ErrorBody {
    error: String,
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        Self::Journal(error)
    }
}

type ApiResult = Result<Response, ApiError>;

/// `GET /api/threads/{thread}`: the thread's summary and what it ran.
#[derive(Debug, Serialize)]
struct ThreadDetail {
    #[serde(flatten)]
    summary: ThreadSummary,
    script: String,
    args: Value,
    limits: Value,
    outcome: Option<RecordedOutcome>,
    last_event_seq: u64,
    /// The command that continues it, when it is resumable.
    resume_command: Option<String>,
}

/// The query of `GET /api/threads/{thread}/events`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    /// Events after this sequence number (0: from the start).
    #[serde(default)]
    after: u64,
    /// At most this many, from 1 to [`MAX_LIMIT`].
    limit: Option<usize>,
}

/// `GET /api/threads/{thread}/events`: a page of the thread's history.
#[derive(Debug, Serialize)]
struct EventsPage {
    thread_id: String,
    status: ThreadStatus,
    events: Vec<flowbox::Event>,
    /// The `after` of the next page.
    next: u64,
}

/// The query of `GET /api/threads/{thread}/stream`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamQuery {
    /// Events after this sequence number (0: from the start); a reconnecting browser's
    /// `Last-Event-ID` takes its place.
    #[serde(default)]
    after: u64,
}

/// The path's parameters, or a 400 saying what is wrong with them (such as a percent-escape
/// that is not UTF-8).
fn path<T>(path: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    path.map(|Path(path)| path)
        .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))
}

/// The query, or a 400 saying what is wrong with it.
fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query
        .map(|Query(query)| query)
        .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))
}

async fn threads(State(journal): State<Arc<ReadOnlyJournal>>) -> ApiResult {
    let listing = match journal.turn().await? {
        Some(store) => store.list().await?,
        None => Listing::default(),
    };
    Ok(Json(ThreadList::from(listing)).into_response())
}

/// A 404 naming the thread.
fn missing(thread_id: &str) -> ApiError {
    ApiError::NotFound(format!("no thread {thread_id} in the journal"))
}

/// A turn at reading the journal, or a 404 naming the thread while there is no journal.
async fn turn<'a>(journal: &'a ReadOnlyJournal, thread_id: &str) -> Result<Turn<'a>, ApiError> {
    journal.turn().await?.ok_or_else(|| missing(thread_id))
}

/// Where the thread stands, or a 404 naming it.
async fn status(store: &Turn<'_>, thread_id: &str) -> Result<ThreadStatus, ApiError> {
    store
        .status(thread_id)
        .await?
        .ok_or_else(|| missing(thread_id))
}

async fn thread(
    State(journal): State<Arc<ReadOnlyJournal>>,
    thread_id: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let thread_id = path(thread_id)?;
    let store = turn(&journal, &thread_id).await?;
    let run = store
        .overview(&thread_id)
        .await?
        .ok_or_else(|| missing(&thread_id))?;
    let resume_command = (run.summary.status == ThreadStatus::Resumable)
        .then(|| format!("flowbox resume {thread_id}"));
    Ok(Json(ThreadDetail {
        summary: run.summary,
        last_event_seq: store.last_event_seq(&thread_id).await?,
        script: run.header.script,
        args: run.header.args,
        limits: run.header.limits,
        outcome: run.end.map(|end| end.outcome),
        resume_command,
    })
    .into_response())
}

async fn events(
    State(journal): State<Arc<ReadOnlyJournal>>,
    thread_id: Result<Path<String>, PathRejection>,
    page: Result<Query<EventsQuery>, QueryRejection>,
) -> ApiResult {
    let thread_id = path(thread_id)?;
    let EventsQuery { after, limit } = query(page)?;
    let limit = match limit {
        None => MAX_LIMIT,
        Some(limit) if (1..=MAX_LIMIT).contains(&limit) => limit,
        Some(limit) => {
            return Err(ApiError::BadRequest(format!(
                "limit must be from 1 to {MAX_LIMIT}, not {limit}"
            )));
        }
    };
    let store = turn(&journal, &thread_id).await?;
    let status = status(&store, &thread_id).await?;
    let events = history::read(&*store, &thread_id, after, limit).await?;
    let next = events.last().map_or(after, |e| e.seq);
    Ok(Json(EventsPage {
        thread_id,
        status,
        events,
        next,
    })
    .into_response())
}

/// A thread's history as a live stream reads it: each look at the journal waits for a turn.
#[derive(Debug)]
struct Followed(Arc<ReadOnlyJournal>);

#[flowbox::async_trait]
impl HistorySource for Followed {
    type Error = StoreError;

    async fn events_after(
        &self,
        thread_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        match self.0.turn().await? {
            Some(store) => history::read(&*store, thread_id, after, limit).await,
            None => Ok(Vec::new()),
        }
    }

    async fn state(&self, thread_id: &str) -> Result<RunState, StoreError> {
        match self.0.turn().await? {
            Some(store) => {
                let store: &dyn CheckpointStore = &*store;
                store.state(thread_id).await
            }
            None => Err(StoreError::UnknownThread(thread_id.to_owned())),
        }
    }
}

async fn stream(
    State(journal): State<Arc<ReadOnlyJournal>>,
    thread_id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    from: Result<Query<StreamQuery>, QueryRejection>,
) -> ApiResult {
    let thread_id = path(thread_id)?;
    let StreamQuery { after } = query(from)?;
    // A reconnecting browser says where it stopped.
    let resumed = headers
        .get("last-event-id")
        .and_then(|id| id.to_str().ok())
        .and_then(|id| id.parse::<u64>().ok());
    let after = resumed.unwrap_or(after);
    status(&turn(&journal, &thread_id).await?, &thread_id).await?;
    let follower = Follower::new(Arc::new(Followed(journal)), thread_id, after)
        .with_poll(Duration::from_millis(100));
    let events = futures_util::stream::unfold(
        (follower, Vec::<SseEvent>::new(), false),
        |(mut follower, mut ready, mut done)| async move {
            loop {
                if let Some(event) = ready.pop() {
                    return Some((Ok::<_, Infallible>(event), (follower, ready, done)));
                }
                if done {
                    return None;
                }
                match follower.next().await {
                    Ok(Some(batch)) => {
                        // Popped from the back: stored newest first.
                        ready = batch
                            .iter()
                            .rev()
                            .map(|event| {
                                SseEvent::default()
                                    .id(event.seq.to_string())
                                    .event(event.kind.name())
                                    .data(serde_json::to_string(event).expect("events serialise"))
                            })
                            .collect();
                    }
                    Ok(None) => {
                        done = true;
                        ready = vec![SseEvent::default().event("end").data("{}")];
                    }
                    Err(error) => {
                        done = true;
                        ready = vec![
                            SseEvent::default().event("error").data(
                                serde_json::to_string(&ErrorBody {
                                    error: error.to_string(),
                                })
                                .expect("error bodies serialise"),
                            ),
                        ];
                    }
                }
            }
        },
    );
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

async fn leaf(
    State(journal): State<Arc<ReadOnlyJournal>>,
    params: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult {
    let (thread_id, call) = path(params)?;
    let call: u64 = call
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("a call id is a whole number, not {call:?}")))?;
    let store = turn(&journal, &thread_id).await?;
    status(&store, &thread_id).await?;
    // What the history says of it: where it started, the tools it called.
    let mut started = None;
    let mut tools = Vec::new();
    let mut replayed = false;
    let mut after = 0;
    loop {
        let events = history::read_call(&*store, &thread_id, call, after, history::PAGE).await?;
        let more = events.len() == history::PAGE;
        after = events.last().map_or(after, |event| event.seq);
        for event in events {
            match event.kind {
                EventKind::LeafStarted { call_id, .. } | EventKind::ToolCalled { call_id, .. }
                    if call_id == call =>
                {
                    started = Some(event);
                }
                EventKind::LeafToolCalled { call_id, name } if call_id == call => tools.push(name),
                EventKind::LeafFinished {
                    call_id,
                    replayed: true,
                    ..
                } if call_id == call => replayed = true,
                _ => {}
            }
        }
        if !more {
            break;
        }
    }
    let Some(entry) = store.entry(&thread_id, call).await? else {
        let Some(started) = started else {
            return Err(ApiError::NotFound(format!(
                "thread {thread_id} has no call {call}"
            )));
        };
        return Ok(Json(RunningCall {
            call_id: call,
            status: CallStatus::Running,
            started,
            tools_called: tools,
        })
        .into_response());
    };
    let (status, reply, error) = match &entry.outcome {
        // A reply is JSON text as journaled; one that is not (it cannot be, but the journal is
        // a file) shows as the text it is.
        EntryOutcome::Ok { value } => (
            CallStatus::Ok,
            serde_json::from_str::<Value>(value).unwrap_or_else(|_| Value::from(value.as_str())),
            None,
        ),
        EntryOutcome::Err {
            kind,
            message,
            retryable,
            ..
        } => (
            CallStatus::Error,
            Value::Null,
            Some(CallError {
                kind: *kind,
                message: message.clone(),
                retryable: *retryable,
            }),
        ),
    };
    Ok(Json(FinishedCall {
        call_id: call,
        kind: entry.kind(),
        status,
        request: &entry.request,
        reply,
        error,
        input_tokens: entry.input_tokens,
        output_tokens: entry.output_tokens,
        duration_ms: entry.duration_ms,
        tools_called: tools,
        replayed,
        started,
    })
    .into_response())
}

/// Where a call of `GET /api/threads/{thread}/leaves/{call}` stands.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
enum CallStatus {
    Running,
    Ok,
    Error,
}

/// A call still running: what its history says so far.
#[derive(Debug, Serialize)]
struct RunningCall {
    call_id: u64,
    status: CallStatus,
    started: Event,
    tools_called: Vec<String>,
}

/// A journaled call: its request and outcome, and what its history says of it.
#[derive(Debug, Serialize)]
struct FinishedCall<'a> {
    call_id: u64,
    kind: CallKind,
    status: CallStatus,
    request: &'a CallRequest,
    reply: Value,
    error: Option<CallError>,
    input_tokens: u64,
    output_tokens: u64,
    duration_ms: u64,
    tools_called: Vec<String>,
    replayed: bool,
    started: Option<Event>,
}

/// Why a journaled call failed.
#[derive(Debug, Serialize)]
struct CallError {
    kind: CallErrorKind,
    message: String,
    retryable: bool,
}
