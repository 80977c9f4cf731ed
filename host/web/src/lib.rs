//! flowbox's web view: a live view of every thread of a journal — its runs, each run's phases,
//! groups, leaves and log as they happen, a leaf's prompt and reply — and the JSON API it
//! reads (`api`), every asset embedded, nothing fetched from elsewhere. It only reads the
//! journal (a read-only connection, which never holds up a run writing it), opened on first use:
//! the journal may not exist yet when the server starts. A few requests read it at a time, the
//! others wait their turn, so the server's memory is bounded by that few, not by its clients.
//! `flowbox serve` wires its flags to a [`WebView`]; an embedder mounts [`router`] behind its
//! own door.
//!
//! It shows every script, prompt and reply, so [`WebView::serve`] keeps it behind a
//! [`flowbox_door::Door`]: loopback only unless the door has a token, no page of another site
//! reads it (`Host`, `Origin` and fetch-metadata checks; no CORS), and with a token a browser
//! logs in through a one-time link (`door`).
//!
//! ```no_run
//! # async fn run() -> Result<(), flowbox_door::DoorError> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7878").await?;
//! flowbox_web::WebView::new("journal.db")
//!     .serve(listener, std::future::pending())
//!     .await
//! # }
//! ```

#![warn(missing_docs)]

mod api;
mod door;

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::HeaderValue;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flowbox::store::{SqliteStore, StoreError};
use flowbox_door::{Door, DoorError};
use tokio::sync::{Semaphore, SemaphorePermit};

/// The web view of one journal, behind a door.
#[derive(Clone)]
pub struct WebView {
    journal: PathBuf,
    door: Door,
    on_login_code: door::OnLoginCode,
}

impl std::fmt::Debug for WebView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebView")
            .field("journal", &self.journal)
            .field("door", &self.door)
            .finish_non_exhaustive()
    }
}

impl WebView {
    /// The view of the journal at `journal`, behind the default door (loopback only, anyone
    /// on the machine).
    pub fn new(journal: impl Into<PathBuf>) -> Self {
        Self {
            journal: journal.into(),
            door: Door::new(),
            on_login_code: Arc::new(|_| {}),
        }
    }

    /// Behind `door`.
    #[must_use]
    pub fn door(mut self, door: Door) -> Self {
        self.door = door;
        self
    }

    /// With a token on the door, `tell` is given each one-time login code, for a link
    /// `http://HOST/login?code=CODE` that logs one browser in: when the view starts serving,
    /// and again each time a code is used.
    #[must_use]
    pub fn on_login_code(mut self, tell: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_login_code = Arc::new(tell);
        self
    }

    /// Serves the view on `listener` until `shutdown` completes; refuses, serving nothing, a
    /// listener its door may not listen on.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), DoorError> {
        let local = listener.local_addr()?;
        self.door.admits(local)?;
        let access = Arc::new(door::Access::new(
            self.door.clone(),
            local,
            self.on_login_code,
        )?);
        let router =
            router(self.journal).layer(axum::middleware::from_fn_with_state(access, door::check));
        flowbox_door::serve(listener, router, &self.door, shutdown).await
    }
}

/// The web view of the journal at `journal` without a door: the pages at `/` and
/// `/runs/{thread}`, their assets, and the JSON API under `/api/`.
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
        .route("/assets/timeline.js", get(timeline_script))
        .route("/assets/timeline.css", get(timeline_style))
        .nest("/api", api::routes())
        .fallback(not_found)
        .with_state(journal)
        .layer(axum::middleware::map_response(guarded))
}

/// What every answer says to a browser: do not guess its type, do not hand it to another
/// site's page or frame, do not tell another site where the user came from.
async fn guarded(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

const PAGE: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");

/// The run timeline's script (`makeTimeline`, fed a run's events, and the helpers `el` and
/// `duration`), which the run page uses and `flowbox-mcp`'s MCP App view embeds.
pub const TIMELINE_SCRIPT: &str = include_str!("../assets/timeline.js");
/// The timeline's style, with the colours every flowbox page shares.
pub const TIMELINE_STYLE: &str = include_str!("../assets/timeline.css");

/// Only the page's own script and style run: what a script or model wrote can never be code.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

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

async fn timeline_script() -> Response {
    asset("text/javascript; charset=utf-8", TIMELINE_SCRIPT)
}

async fn timeline_style() -> Response {
    asset("text/css; charset=utf-8", TIMELINE_STYLE)
}

async fn not_found() -> Response {
    api::ApiError::NotFound("no such page".into()).into_response()
}
