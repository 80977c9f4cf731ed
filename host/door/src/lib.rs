//! The rules of flowbox's HTTP doors — `flowbox mcp --listen` (flowbox-mcp) and `flowbox
//! serve` (flowbox-web) — kept in one place, so both doors answer alike:
//!
//! - **Who may come in.** A [`Door`] without a [`Token`] admits anyone who can reach it, so it
//!   may only listen on loopback ([`Door::admits`]) unless the operator says
//!   [`Door::insecure`]; there it checks the `Host` header against the loopback names and the
//!   address listened on (against DNS rebinding). A door with a token admits only requests
//!   that carry it (`Authorization: Bearer TOKEN`, compared in constant time), and a refused
//!   one is answered `401` with `WWW-Authenticate: Bearer`. Either way a browser's `Origin`,
//!   when present, must be the door's own, a loopback one, or one the operator allowed
//!   ([`Door::allow_origin`]): `403` otherwise, so a web page in the user's browser cannot
//!   drive the door.
//! - **How long they may take.** [`serve`] holds at most [`Limits::max_connections`]
//!   connections (the next ones wait in the OS's queue), cuts off a client that takes longer
//!   than [`Limits::request_timeout`] to send a request's head or its body (one that sends
//!   the first line and then nothing, or trickles a byte at a time), and closes a connection
//!   silent both ways for [`Limits::idle_timeout`]; so clients that hold connections open
//!   cannot keep the others out.
//!
//! ```no_run
//! # async fn run() -> Result<(), flowbox_door::DoorError> {
//! use flowbox_door::{Door, Token};
//!
//! let door = Door::new().with_token(Token::new("a long random secret, not this one")?);
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8000").await?;
//! let router = door.guarded(axum::Router::new());
//! flowbox_door::serve(listener, router, &door, std::future::pending()).await
//! # }
//! ```

#![warn(missing_docs)]

mod listen;
mod origin;
mod token;

use std::net::SocketAddr;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use listen::{Limits, serve};
pub use token::{Token, random_secret};

use origin::{Allowed, Origin};

/// What a door asks of those who come in, and how long it waits for them. The default admits
/// anyone on loopback, with the default [`Limits`].
#[derive(Debug, Clone, Default)]
pub struct Door {
    token: Option<Token>,
    origins: Vec<Allowed>,
    limits: Limits,
    insecure: bool,
}

/// Why a door cannot be set up or opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DoorError {
    /// The door would admit anyone, on an address others can reach.
    #[error(
        "{addr} is reachable from other machines and the door has no token: anyone who can \
         reach it could come in"
    )]
    Exposed {
        /// The address listened on.
        addr: SocketAddr,
    },
    /// A token that is too short to be a secret, or that cannot go in a header.
    #[error("the token {0}")]
    Token(String),
    /// An allowed origin that is not `scheme://host[:port]`.
    #[error("{origin:?} is not an origin: {reason}")]
    Origin {
        /// The origin given.
        origin: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The listener failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Door {
    /// A door that admits anyone on loopback.
    pub fn new() -> Self {
        Self::default()
    }

    /// Admits only requests carrying `token`.
    #[must_use]
    pub fn with_token(mut self, token: Token) -> Self {
        self.token = Some(token);
        self
    }

    /// Also admits browser requests from `origin`: `scheme://host`, `scheme://host:port`, or
    /// `scheme://host:*` for any port (without a port, the scheme's own: 80 or 443).
    pub fn allow_origin(mut self, origin: &str) -> Result<Self, DoorError> {
        self.origins.push(Allowed::parse(origin)?);
        Ok(self)
    }

    /// Waits for clients within `limits`.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Lets a door without a token listen on an address other machines can reach, and skips
    /// its `Host` check: the operator's explicit choice, for a network they trust.
    #[must_use]
    pub fn insecure(mut self, insecure: bool) -> Self {
        self.insecure = insecure;
        self
    }

    /// The token requests must carry, if any.
    pub fn token(&self) -> Option<&Token> {
        self.token.as_ref()
    }

    /// How long the door waits for clients.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether the door may listen on `addr`: a loopback address always; another only with a
    /// token, or when opened [`insecure`](Self::insecure)ly.
    pub fn admits(&self, addr: SocketAddr) -> Result<(), DoorError> {
        if addr.ip().is_loopback() || self.token.is_some() || self.insecure {
            Ok(())
        } else {
            Err(DoorError::Exposed { addr })
        }
    }

    /// Who may come in through the door listening on `addr`, in a few words for its banner.
    pub fn scope(&self, addr: SocketAddr) -> &'static str {
        if self.token.is_some() {
            "token required"
        } else if addr.ip().is_loopback() && !self.insecure {
            "loopback only"
        } else if addr.ip().is_loopback() {
            "loopback, any Host"
        } else {
            "insecure: anyone who reaches it"
        }
    }

    /// Whether the `Host` header must name this machine's loopback or the address listened
    /// on: when anyone who reaches the door is admitted, that is what keeps a page whose name
    /// was rebound to this address out. With a token (or `insecure`), any name may reach it.
    pub fn checks_host(&self) -> bool {
        self.token.is_none() && !self.insecure
    }

    /// The names a `Host` header may give a door listening on `local` when it
    /// [checks hosts](Self::checks_host): loopback's, and the address listened on.
    pub fn host_names(local: SocketAddr) -> [String; 4] {
        [
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
            local.ip().to_string(),
        ]
    }

    /// Whether a request with this `Host` header may come in through a door listening on
    /// `local`: one of the [`host_names`](Self::host_names) and the port listened on (always,
    /// when the door [does not check hosts](Self::checks_host)).
    pub fn host_allowed(&self, host: Option<&str>, local: SocketAddr) -> bool {
        if !self.checks_host() {
            return true;
        }
        let Some(host) = host.and_then(|host| host.parse::<axum::http::uri::Authority>().ok())
        else {
            return false;
        };
        let name = host.host().trim_start_matches('[').trim_end_matches(']');
        let named = Self::host_names(local)
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(name));
        named && host.port_u16().is_none_or(|port| port == local.port())
    }

    /// Whether a browser request from `origin` may come in: the door's own origin (`host` is
    /// the request's `Host` header), a loopback one, or one allowed.
    pub fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let Some(origin) = Origin::parse(origin) else {
            return false;
        };
        origin.is_loopback()
            || host.is_some_and(|host| origin.is_at(host))
            || self.origins.iter().any(|allowed| allowed.matches(&origin))
    }

    /// The origins a browser request may come from besides the door's own, as
    /// `scheme://host:port` patterns (`:*` for any port): the loopback ones, then the allowed.
    pub fn allowed_origins(&self) -> Vec<String> {
        origin::LOOPBACK
            .iter()
            .map(|origin| (*origin).to_owned())
            .chain(self.origins.iter().map(Allowed::pattern))
            .collect()
    }

    /// `router` behind the door's token: every request without it is answered `401` (nothing
    /// changes without a token).
    pub fn guarded(&self, router: axum::Router) -> axum::Router {
        match &self.token {
            None => router,
            Some(token) => router.layer(axum::middleware::from_fn_with_state(
                token.clone(),
                require_token,
            )),
        }
    }
}

async fn require_token(State(token): State<Token>, request: Request, next: Next) -> Response {
    if token.authorizes(request.headers()) {
        next.run(request).await
    } else {
        unauthorized("this server needs its token: send `Authorization: Bearer TOKEN`")
    }
}

/// `401 Unauthorized` with `WWW-Authenticate: Bearer` and `{"error": message}`.
pub fn unauthorized(message: &str) -> Response {
    let mut response = error(StatusCode::UNAUTHORIZED, message);
    response.headers_mut().insert(
        WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Bearer realm=\"flowbox\""),
    );
    response
}

/// `403 Forbidden` with `{"error": message}`.
pub fn forbidden(message: &str) -> Response {
    error(StatusCode::FORBIDDEN, message)
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

/// Completes when the process is interrupted: Ctrl-C, or SIGTERM on Unix.
pub async fn interrupted() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(term) => {
                    term.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminated => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The `Host` header of a request, if it is text.
pub fn host_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::HOST)
        .and_then(|host| host.to_str().ok())
}

#[cfg(test)]
mod tests;
