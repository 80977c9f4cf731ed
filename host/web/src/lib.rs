//! flowbox's web view: a live view of every thread of a journal — its runs, each run's phases,
//! groups, leaves and log as they happen, a leaf's prompt and reply — and the JSON API it
//! reads (`api`), every asset embedded, nothing fetched from elsewhere. It only reads the
//! journal (a read-only connection, which never holds up a run writing it), opened on first use:
//! the journal may not exist yet when the server starts. A few requests read it at a time, the
//! others wait their turn, so the server's memory is bounded by that few, not by its clients.
//! `flowbox serve` wires its flags to [`serve`]; an embedder mounts [`router`] in its own
//! server.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7878").await?;
//! flowbox_web::serve(listener, "journal.db".into(), std::future::pending()).await
//! # }
//! ```

#![warn(missing_docs)]

mod api;

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flowbox::store::{SqliteStore, StoreError};
use tokio::sync::{Semaphore, SemaphorePermit};

/// Serves the web view of the journal at `journal` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    journal: PathBuf,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(journal))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The web view of the journal at `journal`: the pages at `/` and `/runs/{thread}`, their
/// assets, and the JSON API under `/api/`.
pub fn router(journal: PathBuf) -> Router {
    app(Arc::new(ReadOnlyJournal {
        path: journal,
        store: Mutex::new(None),
        turns: Semaphore::new(READERS),
    }))
}

/// How many requests read the journal at once. Its one connection serves one of them at a
/// time, so more would only wait there — each holding what it had read, on a thread of its
/// own — while those waiting for a turn hold nothing.
const READERS: usize = 4;

/// The journal, opened read-only on first use, and the turns at reading it.
#[derive(Debug)]
struct ReadOnlyJournal {
    path: PathBuf,
    store: Mutex<Option<Arc<SqliteStore>>>,
    /// One permit per request reading the journal: [`READERS`] of them.
    turns: Semaphore,
}

impl ReadOnlyJournal {
    /// Waits for a turn at reading the journal; `None` while there is no journal at the path.
    async fn turn(&self) -> Result<Option<Turn<'_>>, StoreError> {
        let permit = self
            .turns
            .acquire()
            .await
            .expect("the journal's turns are never closed");
        Ok(self.store()?.map(|store| Turn {
            store,
            _permit: permit,
        }))
    }

    /// The journal, or `None` while there is none at the path.
    fn store(&self) -> Result<Option<Arc<SqliteStore>>, StoreError> {
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if store.is_none() {
            match SqliteStore::open_read_only(&self.path) {
                Ok(opened) => *store = Some(Arc::new(opened)),
                Err(StoreError::Missing { .. }) => return Ok(None),
                Err(error) => return Err(error),
            }
        }
        Ok(store.clone())
    }
}

/// The journal, for one request's turn at reading it: the turn ends when this is dropped.
#[derive(Debug)]
struct Turn<'a> {
    store: Arc<SqliteStore>,
    _permit: SemaphorePermit<'a>,
}

impl Deref for Turn<'_> {
    type Target = SqliteStore;

    fn deref(&self) -> &SqliteStore {
        &self.store
    }
}

/// The web app and the API.
fn app(journal: Arc<ReadOnlyJournal>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/runs/{thread}", get(page))
        .route("/assets/app.js", get(script))
        .route("/assets/app.css", get(style))
        .nest("/api", api::routes())
        .fallback(not_found)
        .with_state(journal)
}

const PAGE: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");

/// Only the page's own script and style run: what a script or model wrote can never be code.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'";

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, kind),
            (CONTENT_SECURITY_POLICY, POLICY),
            (CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

async fn not_found() -> Response {
    api::ApiError::NotFound("no such page".into()).into_response()
}
