//! The JSON API under `/api/`: threads, one thread, its events from a sequence number, one
//! leaf's detail, and a thread's events as a live stream (server-sent events). Every answer is
//! JSON; a thread or leaf that does not exist is a 404 and a bad parameter a 400, each with
//! `{"error": "..."}`. `docs/events.md` documents the shapes.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use flowbox::EventKind;
use flowbox::history::{self, Follower};
use flowbox::store::{
    CallRequest, CheckpointStore, EntryOutcome, RunStatus, SqliteStore, StoreError, StoredRun,
};
use serde_json::{Value, json};

use super::Journal;

/// The most events one `/events` answer holds.
const MAX_LIMIT: usize = history::PAGE;

pub(super) fn routes() -> Router<Arc<Journal>> {
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
        (status, Json(json!({ "error": message }))).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        Self::Journal(error)
    }
}

type ApiResult = Result<Response, ApiError>;

/// The status a person reads: a thread that is not finished is `running` while a run holds it,
/// else `resumable`.
fn status_word(store: &SqliteStore, thread_id: &str, status: RunStatus) -> &'static str {
    match status {
        RunStatus::Succeeded => "ok",
        RunStatus::Failed => "failed",
        RunStatus::Running if store.is_claimed(thread_id) => "running",
        RunStatus::Running => "resumable",
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A thread's line in the runs list, from its full record.
fn summary(store: &SqliteStore, run: &StoredRun) -> Value {
    let thread_id = run.header.thread_id.as_str();
    let leaves = run
        .entries
        .iter()
        .filter(|e| matches!(e.request, CallRequest::Agent(_)))
        .count();
    let tokens: u64 = run
        .entries
        .iter()
        .map(|e| e.input_tokens + e.output_tokens)
        .sum();
    let created = run.header.created_unix_ms;
    let (finished, duration) = match &run.end {
        Some(end) => (Some(end.finished_unix_ms), end.outcome.summary.duration_ms),
        None => (None, now_ms().saturating_sub(created)),
    };
    json!({
        "thread_id": thread_id,
        "name": run.name,
        "status": status_word(store, thread_id, run.status()),
        "created_unix_ms": created,
        "finished_unix_ms": finished,
        "duration_ms": duration,
        "leaves": leaves,
        "tokens": tokens,
    })
}

async fn threads(State(journal): State<Arc<Journal>>) -> ApiResult {
    let Some(store) = journal.store()? else {
        return Ok(Json(json!({ "threads": [], "damaged": [] })).into_response());
    };
    let listing = store.list().await?;
    let mut threads = Vec::with_capacity(listing.threads.len());
    let mut damaged: Vec<String> = listing.damaged.iter().map(ToString::to_string).collect();
    for listed in &listing.threads {
        match store.load(&listed.thread_id).await {
            Ok(Some(run)) => threads.push(summary(&store, &run)),
            Ok(None) => {}
            Err(error) => damaged.push(error.to_string()),
        }
    }
    Ok(Json(json!({ "threads": threads, "damaged": damaged })).into_response())
}

/// The journal and the thread, or a 404 naming it.
async fn load(
    journal: &Journal,
    thread_id: &str,
) -> Result<(Arc<SqliteStore>, StoredRun), ApiError> {
    let missing = || ApiError::NotFound(format!("no thread {thread_id} in the journal"));
    let store = journal.store()?.ok_or_else(missing)?;
    let run = store.load(thread_id).await?.ok_or_else(missing)?;
    Ok((store, run))
}

async fn thread(State(journal): State<Arc<Journal>>, Path(thread_id): Path<String>) -> ApiResult {
    let (store, run) = load(&journal, &thread_id).await?;
    let mut out = summary(&store, &run);
    let resumable = out["status"] == "resumable";
    let last_event_seq = store.last_event_seq(&thread_id).await?;
    let object = out.as_object_mut().expect("a summary is an object");
    object.insert("script".into(), Value::from(run.header.script.as_str()));
    object.insert("args".into(), run.header.args.clone());
    object.insert("limits".into(), run.header.limits.clone());
    object.insert(
        "outcome".into(),
        run.end.as_ref().map_or(Value::Null, |end| {
            serde_json::to_value(&end.outcome).expect("outcomes serialise")
        }),
    );
    object.insert("last_event_seq".into(), last_event_seq.into());
    object.insert(
        "resume_command".into(),
        if resumable {
            Value::from(format!("flowbox resume {thread_id}"))
        } else {
            Value::Null
        },
    );
    Ok(Json(out).into_response())
}

/// The query's parameters, each one of `allowed`, as numbers.
fn numbers(
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    allowed: &[&str],
) -> Result<HashMap<String, u64>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let mut out = HashMap::new();
    for (key, value) in query {
        if !allowed.contains(&key.as_str()) {
            return Err(ApiError::BadRequest(format!(
                "unknown parameter {key:?}; this endpoint takes {}",
                allowed.join(", ")
            )));
        }
        let number = value.parse::<u64>().map_err(|_| {
            ApiError::BadRequest(format!(
                "{key} must be a whole number of 0 or more, not {value:?}"
            ))
        })?;
        out.insert(key, number);
    }
    Ok(out)
}

async fn events(
    State(journal): State<Arc<Journal>>,
    Path(thread_id): Path<String>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> ApiResult {
    let query = numbers(query, &["after", "limit"])?;
    let after = query.get("after").copied().unwrap_or(0);
    let limit = match query.get("limit").copied() {
        None => MAX_LIMIT,
        Some(limit) if (1..=MAX_LIMIT as u64).contains(&limit) => limit as usize,
        Some(limit) => {
            return Err(ApiError::BadRequest(format!(
                "limit must be from 1 to {MAX_LIMIT}, not {limit}"
            )));
        }
    };
    let (store, run) = load(&journal, &thread_id).await?;
    let events = history::read(store.as_ref(), &thread_id, after, limit).await?;
    let next = events.last().map_or(after, |e| e.seq);
    Ok(Json(json!({
        "thread_id": thread_id,
        "status": status_word(&store, &thread_id, run.status()),
        "events": events,
        "next": next,
    }))
    .into_response())
}

async fn stream(
    State(journal): State<Arc<Journal>>,
    Path(thread_id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> ApiResult {
    let query = numbers(query, &["after"])?;
    // A reconnecting browser says where it stopped.
    let resumed = headers
        .get("last-event-id")
        .and_then(|id| id.to_str().ok())
        .and_then(|id| id.parse::<u64>().ok());
    let after = resumed.or(query.get("after").copied()).unwrap_or(0);
    let (store, _) = load(&journal, &thread_id).await?;
    let store: Arc<dyn CheckpointStore> = store;
    let follower = Follower::new(store, thread_id, after).with_poll(Duration::from_millis(100));
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
                            SseEvent::default()
                                .event("error")
                                .data(json!({ "error": error.to_string() }).to_string()),
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
    State(journal): State<Arc<Journal>>,
    Path((thread_id, call)): Path<(String, String)>,
) -> ApiResult {
    let call: u64 = call
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("a call id is a whole number, not {call:?}")))?;
    let (store, run) = load(&journal, &thread_id).await?;
    // What the history says of it: where it started, the tools it called.
    let mut started = None;
    let mut tools = Vec::new();
    let mut replayed = false;
    let mut after = 0;
    loop {
        let events = history::read(store.as_ref(), &thread_id, after, history::PAGE).await?;
        let Some(last) = events.last() else { break };
        after = last.seq;
        for event in events {
            match event.kind {
                EventKind::LeafStarted { call_id, .. } | EventKind::ToolCalled { call_id, .. }
                    if call_id == call =>
                {
                    started = Some(serde_json::to_value(&event).expect("events serialise"));
                }
                EventKind::LeafToolCalled { call_id, name } if call_id == call => {
                    tools.push(Value::from(name));
                }
                EventKind::LeafFinished {
                    call_id,
                    replayed: true,
                    ..
                } if call_id == call => replayed = true,
                _ => {}
            }
        }
    }
    let Some(entry) = run.entries.iter().find(|e| e.handle == call) else {
        let Some(started) = started else {
            return Err(ApiError::NotFound(format!(
                "thread {thread_id} has no call {call}"
            )));
        };
        return Ok(Json(json!({
            "call_id": call,
            "status": "running",
            "started": started,
            "tools_called": tools,
        }))
        .into_response());
    };
    let (status, reply, error) = match &entry.outcome {
        EntryOutcome::Ok { value } => (
            "ok",
            serde_json::from_str::<Value>(value).unwrap_or_else(|_| Value::from(value.as_str())),
            Value::Null,
        ),
        EntryOutcome::Err {
            kind,
            message,
            retryable,
            ..
        } => (
            "error",
            Value::Null,
            json!({ "kind": kind.to_string(), "message": message, "retryable": retryable }),
        ),
    };
    Ok(Json(json!({
        "call_id": call,
        "kind": entry.kind().as_str(),
        "status": status,
        "request": entry.request,
        "reply": reply,
        "error": error,
        "input_tokens": entry.input_tokens,
        "output_tokens": entry.output_tokens,
        "duration_ms": entry.duration_ms,
        "tools_called": tools,
        "replayed": replayed,
        "started": started,
    }))
    .into_response())
}
