//! One JSON POST to a provider, retried by a [`RetryPolicy`], with errors that name the
//! provider and the HTTP status, say whether they are retryable, and never carry a secret.
//!
//! The provider modules build the URL, headers and body and read the reply; everything about
//! the wire below that (TLS, timeouts, retries, error bodies) is here. Every error message is
//! built here, and passes through the [`Redactor`] on its way out.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::redact::{REDACTED, Redactor, hide_userinfo};
use super::retry::{RetryPolicy, retry_after};
use crate::error::http_status_retryable;
use crate::{BackendError, BackendErrorKind, TransportCause};

/// The largest response body the client reads from a provider: 16 MiB. A real reply is a few
/// KiB to a few hundred (a long completion with tool calls); past this, a misbehaving or
/// hostile server is trying to fill the host's memory, and the call fails at once without a
/// retry, since asking again would get the same flood.
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// The most characters of a provider's body quoted in an error.
const SNIPPET_CHARS: usize = 500;

/// Reads the provider's own error out of a JSON error body.
pub(crate) type ErrorReader = fn(&Value) -> Option<ProviderError>;

/// What a provider's error body says, in its own terms.
#[derive(Debug, Default)]
pub(crate) struct ProviderError {
    /// Its message, for people.
    pub message: String,
    /// Its error code or type (`unsupported_parameter`, `rate_limit_error`).
    pub code: Option<String>,
    /// The request parameter it is about (`max_tokens`).
    pub param: Option<String>,
}

/// A provider's successful answer, read as a `T`.
pub(crate) struct Posted<T> {
    pub reply: T,
    /// How many times the request was sent again, after failures worth retrying, before it.
    pub retries: u32,
}

/// An HTTP client for one provider endpoint.
pub(crate) struct HttpClient {
    client: reqwest::Client,
    policy: RetryPolicy,
    /// Who answers, for messages: `Anthropic API at https://api.anthropic.com`, the base URL's
    /// user information hidden.
    label: String,
    /// Removes the API key, the base URL's credentials and echoed authentication headers from
    /// every message (a 401 body may quote them back).
    redactor: Redactor,
    has_key: bool,
    read_error: ErrorReader,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("label", &self.label)
            .field("policy", &self.policy)
            .field("api_key", &self.has_key.then_some(REDACTED))
            .finish_non_exhaustive()
    }
}

/// One failed attempt, before the retry loop decides what to do with it.
enum Failure {
    /// An answer with an error status.
    Status {
        status: StatusCode,
        /// The provider's message, or the start of the body.
        detail: String,
        provider: ProviderError,
        /// The provider's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// No complete answer.
    Transport {
        cause: TransportCause,
        message: String,
        source: Option<reqwest::Error>,
    },
    /// A successful answer that is not the expected JSON.
    BadReply { message: String },
    /// An answer larger than [`MAX_RESPONSE_BYTES`].
    TooLarge { status: StatusCode },
}

impl Failure {
    fn transport(cause: TransportCause, message: String, source: reqwest::Error) -> Self {
        Self::Transport {
            cause,
            message,
            source: Some(source.without_url()),
        }
    }

    fn retryable(&self) -> bool {
        match self {
            Self::Status { status, .. } => http_status_retryable(status.as_u16()),
            Self::Transport { cause, .. } => cause.is_retryable(),
            Self::BadReply { .. } | Self::TooLarge { .. } => false,
        }
    }
}

impl HttpClient {
    /// A client of `provider` (`Anthropic API`) at `base_url`, whose secrets are `api_key` and
    /// the credentials `base_url` may carry.
    pub(crate) fn new(
        provider: &str,
        base_url: &str,
        api_key: Option<String>,
        policy: RetryPolicy,
        read_error: ErrorReader,
    ) -> Result<Self, BackendError> {
        let (shown, mut secrets) = hide_userinfo(base_url);
        let label = format!("{provider} at {shown}");
        let api_key = api_key.filter(|key| !key.is_empty());
        let has_key = api_key.is_some();
        secrets.extend(api_key);
        let setup = |what: &str| BackendErrorKind::Setup {
            message: format!("{label}: {what} (not retryable)"),
        };
        let tls = tls_config()
            .map_err(|e| BackendError::new(setup("cannot configure TLS")).with_source(e))?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(policy.request_timeout)
            .user_agent(concat!("flowbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                BackendError::new(setup("cannot build the HTTP client"))
                    .with_source(e.without_url())
            })?;
        // reqwest sends a URL's user information as `Authorization: Basic …`, which a provider
        // may echo back as it is.
        let basic = client.post(base_url).build().ok().and_then(|request| {
            let value = request.headers().get(AUTHORIZATION)?.to_str().ok()?;
            value.strip_prefix("Basic ").map(str::to_owned)
        });
        secrets.extend(basic);
        Ok(Self {
            client,
            policy,
            label,
            redactor: Redactor::new(secrets),
            has_key,
            read_error,
        })
    }

    /// A header carrying the API key, marked sensitive so that no debug output shows it.
    pub(crate) fn secret_header(&self, value: String) -> Result<HeaderValue, BackendError> {
        let mut header = HeaderValue::try_from(value).map_err(|_| {
            self.setup_error("the API key has characters an HTTP header cannot carry")
        })?;
        header.set_sensitive(true);
        Ok(header)
    }

    /// `text` without secrets.
    fn redact(&self, text: String) -> String {
        self.redactor.redact(&text)
    }

    /// This provider cannot be used as configured.
    pub(crate) fn setup_error(&self, message: impl fmt::Display) -> BackendError {
        let message = self.redact(format!("{}: {message} (not retryable)", self.label));
        BackendErrorKind::Setup { message }.into()
    }

    /// A request that cannot be sent as it is (a header value HTTP cannot carry).
    pub(crate) fn invalid_request(&self, message: impl fmt::Display) -> BackendError {
        BackendErrorKind::Transport {
            provider: self.label.clone(),
            cause: TransportCause::InvalidRequest,
            attempts: 0,
            message: self.redact(message.to_string()),
        }
        .into()
    }

    /// A successful answer that is no reply.
    pub(crate) fn bad_reply(&self, message: impl fmt::Display) -> BackendError {
        BackendErrorKind::BadReply {
            provider: self.label.clone(),
            message: self.redact(message.to_string()),
        }
        .into()
    }

    /// The model called `tool` with arguments that are not JSON.
    pub(crate) fn malformed_arguments(&self, tool: &str, error: serde_json::Error) -> BackendError {
        BackendErrorKind::MalformedToolArguments {
            provider: self.label.clone(),
            tool: tool.to_owned(),
            message: error.to_string(),
        }
        .into()
    }

    /// The error a last failed attempt ends the call with; `also` is said after its detail.
    fn give_up(&self, failure: Failure, attempts: u32, also: &str) -> BackendError {
        let tried = if attempts > 1 {
            format!(" (gave up after {attempts} attempts)")
        } else {
            String::new()
        };
        let provider = self.label.clone();
        match failure {
            Failure::Status {
                status,
                detail,
                provider: said,
                retry_after,
            } => BackendErrorKind::Http {
                provider,
                status: status.as_u16(),
                provider_code: said.code.map(|code| self.redact(code)),
                param: said.param.map(|param| self.redact(param)),
                retry_after,
                attempts,
                message: self.redact(format!("HTTP {status}: {detail}{also}{tried}")),
            }
            .into(),
            Failure::Transport {
                cause,
                message,
                source,
            } => {
                let error = BackendError::new(BackendErrorKind::Transport {
                    provider,
                    cause,
                    attempts,
                    message: self.redact(format!("{message}{also}{tried}")),
                });
                match source {
                    Some(source) => error.with_source(source),
                    None => error,
                }
            }
            Failure::BadReply { message } => self.bad_reply(message),
            Failure::TooLarge { status } => BackendErrorKind::ResponseTooLarge {
                provider,
                status_text: status.to_string(),
                limit: MAX_RESPONSE_BYTES as u64,
            }
            .into(),
        }
    }

    /// POSTs `body` as JSON to `url`, retrying as the policy says, and reads the 2xx reply as
    /// a `T`.
    pub(crate) async fn post<T: DeserializeOwned>(
        &self,
        url: &str,
        mut headers: HeaderMap,
        body: &Value,
    ) -> Result<Posted<T>, BackendError> {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let body = body.to_string().into_bytes();
        let mut retry = 0;
        loop {
            let failure = match self.attempt(url, &headers, &body).await {
                Ok(reply) => {
                    return Ok(Posted {
                        reply,
                        retries: retry,
                    });
                }
                Err(failure) => failure,
            };
            let attempts = retry + 1;
            if !failure.retryable() || retry >= self.policy.max_retries {
                return Err(self.give_up(failure, attempts, ""));
            }
            let asked = match &failure {
                Failure::Status { retry_after, .. } => *retry_after,
                _ => None,
            };
            let wait = match asked {
                Some(asked) if asked > self.policy.max_backoff => {
                    let also = format!(
                        "; the provider asked to wait {} s, longer than max_backoff ({} s)",
                        asked.as_secs_f64(),
                        self.policy.max_backoff.as_secs_f64()
                    );
                    return Err(self.give_up(failure, attempts, &also));
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
                Failure::BadReply {
                    message: format!(
                        "HTTP {status}, but the body is not the expected JSON ({e}): {}",
                        self.redactor.excerpt(&bytes, SNIPPET_CHARS)
                    ),
                }
            });
        }
        let provider = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|error| (self.read_error)(&error))
            .unwrap_or_default();
        let detail = if provider.message.is_empty() {
            self.redactor.excerpt(&bytes, SNIPPET_CHARS)
        } else {
            provider.message.clone()
        };
        Err(Failure::Status {
            status,
            detail,
            provider,
            retry_after,
        })
    }

    /// The body, read chunk by chunk so that one larger than [`MAX_RESPONSE_BYTES`] is refused
    /// before it is held in memory.
    async fn read_body(&self, mut response: reqwest::Response) -> Result<Vec<u8>, Failure> {
        let status = response.status();
        if response
            .content_length()
            .is_some_and(|length| length > MAX_RESPONSE_BYTES as u64)
        {
            return Err(Failure::TooLarge { status });
        }
        let mut body = Vec::new();
        loop {
            let chunk = response.chunk().await.map_err(|e| {
                if e.is_timeout() {
                    self.timeout_failure(e)
                } else {
                    Failure::transport(
                        TransportCause::CutShort,
                        format!("HTTP {status}, but the body was cut short"),
                        e,
                    )
                }
            })?;
            let Some(chunk) = chunk else {
                return Ok(body);
            };
            if body.len().saturating_add(chunk.len()) > MAX_RESPONSE_BYTES {
                return Err(Failure::TooLarge { status });
            }
            body.extend_from_slice(&chunk);
        }
    }

    fn transport_failure(&self, error: reqwest::Error) -> Failure {
        if error.is_timeout() {
            self.timeout_failure(error)
        } else if error.is_builder() {
            Failure::transport(
                TransportCause::InvalidRequest,
                "invalid request".into(),
                error,
            )
        } else if error.is_connect() {
            Failure::transport(TransportCause::Connect, "cannot connect".into(), error)
        } else {
            Failure::transport(TransportCause::Other, "the request failed".into(), error)
        }
    }

    fn timeout_failure(&self, error: reqwest::Error) -> Failure {
        Failure::transport(
            TransportCause::Timeout,
            format!(
                "timed out: no complete response within the request timeout ({} s)",
                self.policy.request_timeout.as_secs_f64()
            ),
            error,
        )
    }
}

/// TLS with rustls and the *ring* provider, trusting the Mozilla roots compiled in
/// (webpki-roots). Handing reqwest a finished config keeps aws-lc out of the build and sets
/// no process-wide default provider behind an embedder's back. The library's OTLP export uses
/// it too.
pub fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
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
