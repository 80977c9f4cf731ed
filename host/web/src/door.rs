//! Who may read the view ([`flowbox_door::Door`]'s rules), and how a browser proves it holds
//! the door's token without typing it: a one-time login link (`/login?code=...`) that sets a
//! session cookie.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, Request, State};
use axum::http::header::{COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flowbox_door::{Door, Token, forbidden, host_of, random_secret, unauthorized};
use serde::Deserialize;

/// The session cookie's name.
const COOKIE_NAME: &str = "flowbox_session";

/// The most browsers logged in at once; a new login forgets the oldest.
const MAX_SESSIONS: usize = 64;

/// Told each one-time login code: when the server starts, and each time one is used.
pub(crate) type OnLoginCode = Arc<dyn Fn(&str) + Send + Sync>;

/// The door of one view: its rules, the address it listens on, and its logins.
pub(crate) struct Access {
    door: Door,
    local: SocketAddr,
    logins: Option<Logins>,
}

/// The one-time code that logs a browser in, and the sessions of those that did.
struct Logins {
    code: Mutex<Token>,
    sessions: Mutex<VecDeque<Token>>,
    on_code: OnLoginCode,
}

impl Access {
    /// The door of a view listening on `local`; with a token, a first login code is made and
    /// told to `on_code`.
    pub(crate) fn new(
        door: Door,
        local: SocketAddr,
        on_code: OnLoginCode,
    ) -> Result<Self, flowbox_door::DoorError> {
        let logins = match door.token() {
            None => None,
            Some(_) => Some(Logins {
                code: Mutex::new(Logins::fresh_code(&on_code)?),
                sessions: Mutex::default(),
                on_code,
            }),
        };
        Ok(Self {
            door,
            local,
            logins,
        })
    }
}

impl Logins {
    /// A new code, told to `on_code`.
    fn fresh_code(on_code: &OnLoginCode) -> Result<Token, flowbox_door::DoorError> {
        let code = random_secret()?;
        on_code(&code);
        Token::new(&code)
    }

    /// Whether `headers` carry the cookie of a session.
    fn has_session(&self, headers: &HeaderMap) -> bool {
        let Some(presented) = cookie(headers, COOKIE_NAME) else {
            return false;
        };
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.iter().any(|session| session.matches(presented))
    }

    /// Spends `code` if it is the current one: a new session's secret, and a new code for the
    /// next browser.
    fn log_in(&self, code: &str) -> Option<String> {
        let mut current = self.code.lock().unwrap_or_else(|p| p.into_inner());
        if !current.matches(code) {
            return None;
        }
        *current = Self::fresh_code(&self.on_code).ok()?;
        let secret = random_secret().ok()?;
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.len() == MAX_SESSIONS {
            sessions.pop_front();
        }
        sessions.push_back(Token::new(&secret).ok()?);
        Some(secret)
    }
}

/// The value of the cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// Checks every request against the door: the `Host` (when anyone may come in), a browser's
/// `Origin` and fetch metadata (no page of another site reads the view), and the token or a
/// session cookie (when the door has one).
pub(crate) async fn check(
    State(access): State<Arc<Access>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = host_of(headers);
    if !access.door.host_allowed(host, access.local) {
        return forbidden(&format!(
            "this server answers to localhost and {}, not to the Host {:?}",
            access.local,
            host.unwrap_or_default()
        ));
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !access.door.origin_allowed(origin, host) {
            return forbidden(&format!(
                "requests from the origin {origin:?} are not allowed"
            ));
        }
    }
    // A browser says where a request comes from: another site may link to the view (a
    // navigation), never read it.
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    let mode = headers.get("sec-fetch-mode").and_then(|v| v.to_str().ok());
    if matches!(site, Some("cross-site" | "same-site")) && mode != Some("navigate") {
        return forbidden("a page of another site may not read this view");
    }
    let Some(logins) = &access.logins else {
        return next.run(request).await;
    };
    if request.uri().path() == "/login" {
        return log_in(logins, request);
    }
    let token = access.door.token().expect("logins need a token");
    if token.authorizes(headers) || logins.has_session(headers) {
        return next.run(request).await;
    }
    unauthorized(
        "this view needs its token: open a login link `flowbox serve` printed, or send \
         `Authorization: Bearer TOKEN`",
    )
}

/// The query of `/login`.
#[derive(Debug, Deserialize)]
struct LoginQuery {
    code: String,
}

/// `GET /login?code=CODE`: a session cookie and the way to the view, once per code.
fn log_in(logins: &Logins, request: Request) -> Response {
    let code = Query::<LoginQuery>::try_from_uri(request.uri())
        .map(|Query(query)| query.code)
        .unwrap_or_default();
    let Some(secret) = logins.log_in(&code) else {
        return unauthorized(
            "this login link is spent or not this server's: each link logs in one browser; \
             `flowbox serve` prints a new one on its terminal after each use",
        );
    };
    (
        StatusCode::SEE_OTHER,
        [
            (LOCATION, "/".to_owned()),
            (
                SET_COOKIE,
                format!("{COOKIE_NAME}={secret}; HttpOnly; SameSite=Strict; Path=/"),
            ),
        ],
    )
        .into_response()
}
