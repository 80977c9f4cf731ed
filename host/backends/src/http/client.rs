//! One JSON POST to a provider, retried by a [`RetryPolicy`], with errors that name the
//! provider and the HTTP status, say whether they are retryable, and never carry the API key.
//!
//! The provider modules build the URL, headers and body and read the reply; everything about
//! the wire below that (TLS, timeouts, retries, error bodies) is here.

use std::error::Error as _;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::retry::{RetryPolicy, retry_after};
use crate::{BackendError, Usage};

/// The largest response body the client reads from a provider: 16 MiB. A real reply is a few
/// KiB to a few hundred (a long completion with tool calls); past this, a misbehaving or
/// hostile server is trying to fill the host's memory, and the call fails at once without a
/// retry, since asking again would get the same flood.
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// What replaces the API key wherever it would have appeared.
const REDACTED: &str = "[redacted]";

/// The most bytes of a provider's body quoted in an error.
const SNIPPET_BYTES: usize = 500;

/// Reads the provider's own message out of a JSON error body.
pub(crate) type ErrorReader = fn(&Value) -> Option<String>;

/// An HTTP client for one provider endpoint.
pub(crate) struct HttpClient {
    client: reqwest::Client,
    policy: RetryPolicy,
    /// Who answers, for messages: `Anthropic API at https://api.anthropic.com`.
    label: String,
    /// The API key, removed from every message (a 401 body may quote it back).
    secret: Option<String>,
    read_error: ErrorReader,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("label", &self.label)
            .field("policy", &self.policy)
            .field("api_key", &self.secret.as_ref().map(|_| REDACTED))
            .finish_non_exhaustive()
    }
}

/// One failed attempt, before the retry loop decides what to do with it.
struct Failure {
    message: String,
    retryable: bool,
    /// The provider's `Retry-After`, when it sent one.
    retry_after: Option<std::time::Duration>,
}

impl Failure {
    fn new(message: String, retryable: bool) -> Self {
        Self {
            message,
            retryable,
            retry_after: None,
        }
    }
}

impl HttpClient {
    pub(crate) fn new(
        label: String,
        secret: Option<String>,
        policy: RetryPolicy,
        read_error: ErrorReader,
    ) -> Result<Self, BackendError> {
        let tls = tls_config()
            .map_err(|e| BackendError::terminal(format!("{label}: cannot configure TLS: {e}")))?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(policy.request_timeout)
            .user_agent(concat!("flowbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                BackendError::terminal(format!(
                    "{label}: cannot build the HTTP client: {}",
                    chain(e)
                ))
            })?;
        Ok(Self {
            client,
            policy,
            label,
            secret: secret.filter(|key| !key.is_empty()),
            read_error,
        })
    }

    /// A header carrying the API key, marked sensitive so that no debug output shows it.
    pub(crate) fn secret_header(&self, value: String) -> Result<HeaderValue, BackendError> {
        let mut header = HeaderValue::try_from(value).map_err(|_| {
            self.error(
                "the API key has characters an HTTP header cannot carry",
                false,
            )
        })?;
        header.set_sensitive(true);
        Ok(header)
    }

    /// An error about this provider that says whether it is retryable, with the key removed.
    pub(crate) fn error(&self, message: impl fmt::Display, retryable: bool) -> BackendError {
        let kind = if retryable {
            "retryable"
        } else {
            "not retryable"
        };
        let mut message = format!("{}: {message} ({kind})", self.label);
        if let Some(secret) = &self.secret {
            message = message.replace(secret.as_str(), REDACTED);
        }
        BackendError::Failed {
            message,
            retryable,
            usage: Usage::default(),
        }
    }

    /// POSTs `body` as JSON to `url`, retrying as the policy says, and reads the 2xx reply as
    /// a `T`.
    pub(crate) async fn post<T: DeserializeOwned>(
        &self,
        url: &str,
        mut headers: HeaderMap,
        body: &Value,
    ) -> Result<T, BackendError> {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let body = body.to_string().into_bytes();
        let mut retry = 0;
        loop {
            let failure = match self.attempt(url, &headers, &body).await {
                Ok(reply) => return Ok(reply),
                Err(failure) => failure,
            };
            let attempts = retry + 1;
            let tried = if attempts > 1 {
                format!(" (gave up after {attempts} attempts)")
            } else {
                String::new()
            };
            if !failure.retryable || retry >= self.policy.max_retries {
                return Err(self.error(format!("{}{tried}", failure.message), failure.retryable));
            }
            let wait = match failure.retry_after {
                Some(asked) if asked > self.policy.max_backoff => {
                    let message = format!(
                        "{}; the provider asked to wait {} s, longer than max_backoff ({} s){tried}",
                        failure.message,
                        asked.as_secs_f64(),
                        self.policy.max_backoff.as_secs_f64()
                    );
                    return Err(self.error(message, true));
                }
                Some(asked) => asked,
                None => self.policy.backoff(retry),
            };
            tokio::time::sleep(wait).await;
            retry += 1;
        }
    }

    async fn attempt<T: DeserializeOwned>(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<T, Failure> {
        let response = self
            .client
            .post(url)
            .headers(headers.clone())
            .body(body.to_vec())
            .send()
            .await
            .map_err(|e| self.transport_failure(e))?;
        let status = response.status();
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let bytes = self.read_body(response).await?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                // A 200 the client cannot read means the URL is not this kind of API (or the
                // API changed); sending the same request again will not help.
                Failure::new(
                    format!(
                        "HTTP {status}, but the body is not the expected JSON ({e}): {}",
                        snippet(&bytes)
                    ),
                    false,
                )
            });
        }
        let detail = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|error| (self.read_error)(&error))
            .unwrap_or_else(|| snippet(&bytes));
        Err(Failure {
            message: format!("HTTP {status}: {detail}"),
            retryable: retryable_status(status),
            retry_after,
        })
    }

    /// The body, read chunk by chunk so that one larger than [`MAX_RESPONSE_BYTES`] is refused
    /// before it is held in memory.
    async fn read_body(&self, mut response: reqwest::Response) -> Result<Vec<u8>, Failure> {
        let status = response.status();
        let too_large = || {
            Failure::new(
                format!(
                    "HTTP {status}, but the body is larger than the {} MiB a provider reply \
                     may be",
                    MAX_RESPONSE_BYTES >> 20
                ),
                false,
            )
        };
        if response
            .content_length()
            .is_some_and(|length| length > MAX_RESPONSE_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        loop {
            let chunk = response.chunk().await.map_err(|e| {
                if e.is_timeout() {
                    self.timeout_failure()
                } else {
                    Failure::new(
                        format!("HTTP {status}, but the body was cut short: {}", chain(e)),
                        true,
                    )
                }
            })?;
            let Some(chunk) = chunk else {
                return Ok(body);
            };
            if body.len().saturating_add(chunk.len()) > MAX_RESPONSE_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
    }

    fn transport_failure(&self, error: reqwest::Error) -> Failure {
        if error.is_timeout() {
            self.timeout_failure()
        } else if error.is_builder() {
            Failure::new(format!("invalid request: {}", chain(error)), false)
        } else if error.is_connect() {
            Failure::new(format!("cannot connect: {}", chain(error)), true)
        } else {
            Failure::new(format!("the request failed: {}", chain(error)), true)
        }
    }

    fn timeout_failure(&self) -> Failure {
        Failure::new(
            format!(
                "timed out: no complete response within the request timeout ({} s)",
                self.policy.request_timeout.as_secs_f64()
            ),
            true,
        )
    }
}

/// Rate limits (429), request timeouts (408) and server trouble (5xx, including Anthropic's
/// 529 "overloaded") may pass; any other status is an answer about the request itself.
fn retryable_status(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || status.is_server_error()
}

/// An error and its causes on one line, without the URL reqwest would repeat.
fn chain(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The start of a body, as text, for an error message.
fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(SNIPPET_BYTES)]);
    let text = text.trim();
    match (text.is_empty(), bytes.len() > SNIPPET_BYTES) {
        (true, _) => "(empty body)".to_owned(),
        (false, true) => format!("{text}…"),
        (false, false) => text.to_owned(),
    }
}

/// TLS with rustls and the *ring* provider, trusting the Mozilla roots compiled in
/// (webpki-roots). Handing reqwest a finished config keeps aws-lc out of the build and sets
/// no process-wide default provider behind an embedder's back.
fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    // reqwest is built for HTTP/1.1 only, so that is all we may offer in ALPN.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
