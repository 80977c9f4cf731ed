//! `flowbox serve`: a live web view of every thread of a journal, and the JSON API it reads
//! (`api.rs`), served from the binary itself — every asset is embedded (`assets/`), nothing is
//! fetched from elsewhere. The server only reads the journal (a read-only connection, which
//! never holds up a run writing it) and binds to loopback unless told otherwise.

mod api;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::Args;
use flowbox::store::{SqliteStore, StoreError};

use crate::Failure;
use crate::options::JournalOptions;

/// Arguments of `flowbox serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Where to listen. Loopback by default: give an address of another interface only on a
    /// network you trust (the view shows every script, prompt and reply).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    #[command(flatten)]
    journal: JournalOptions,
}

/// The journal, opened read-only on first use (it may not exist yet when the server starts).
#[derive(Debug)]
pub(crate) struct ReadOnlyJournal {
    path: PathBuf,
    store: Mutex<Option<Arc<SqliteStore>>>,
}

impl ReadOnlyJournal {
    /// The journal, or `None` while there is none at the path.
    pub(crate) fn store(&self) -> Result<Option<Arc<SqliteStore>>, StoreError> {
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

pub(crate) async fn serve(args: ServeArgs) -> Result<u8, Failure> {
    let path = args.journal.path().map_err(Failure::input)?;
    let journal = Arc::new(ReadOnlyJournal {
        path: path.clone(),
        store: Mutex::new(None),
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Failure::input(anyhow::anyhow!("cannot listen on {}: {e}", args.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|e| Failure::input(anyhow::anyhow!("{e}")))?;
    let scope = if address.ip().is_loopback() {
        "loopback only"
    } else {
        "reachable from the network"
    };
    err!(
        "flowbox serve: http://{address}/ ({scope}), reading {}",
        path.display()
    );
    axum::serve(listener, app(journal))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| Failure::input(anyhow::anyhow!("the server stopped: {e}")))?;
    Ok(0)
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

const PAGE: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

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
