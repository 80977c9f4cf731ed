//! Why a backend call failed: one [`BackendError`] for every backend, chat model and provider,
//! its cause a [`BackendErrorKind`] the caller matches on (never its message), the tokens spent
//! before it failed, and whether trying again may help.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::Usage;
use crate::schema::SchemaError;
use crate::tool::ToolError;

/// Why a backend call failed: a [`BackendErrorKind`], the tokens the call spent first, and the
/// underlying error when there is one ([`Error::source`]).
///
/// The message ([`fmt::Display`]) is for people; code decides with [`Self::kind`] and
/// [`Self::is_retryable`].
#[derive(Clone)]
pub struct BackendError {
    // Boxed: errors travel in every `Result` of the call path, and the kinds are large.
    kind: Box<BackendErrorKind>,
    usage: Usage,
    source: Option<Arc<dyn Error + Send + Sync>>,
}

/// What went wrong in a backend call. Each variant carries the data a caller needs to act on
/// it; [`Self::name`] is a stable `snake_case` name for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// A failure the backend describes only in words: an embedder's own backend, a scripted
    /// failure, a replayed one.
    #[error("{message}")]
    Failed {
        /// What went wrong, without secrets.
        message: String,
        /// Whether the same call may succeed if tried again.
        retryable: bool,
    },
    /// The backend panicked while handling the call.
    #[error("the leaf backend panicked: {message}")]
    Panicked {
        /// The panic's message.
        message: String,
    },
    /// The agent took all its model turns without giving a final answer.
    #[error("the agent used all {turns} of its turns without a final answer")]
    TurnsExhausted {
        /// The turns it had.
        turns: u32,
    },
    /// The model's reply was cut off at the output limit of one turn.
    #[error(
        "the model's reply was cut off at its limit of {max_tokens} output tokens per turn; ask \
         for a shorter answer, or raise max_tokens (the CLI's --max-output-tokens)"
    )]
    Truncated {
        /// The output limit of one turn.
        max_tokens: u32,
    },
    /// The structured reply still does not match the schema after the repair turn.
    #[error("the leaf's reply does not match the schema, even after a repair turn: {errors}")]
    SchemaMismatch {
        /// What is wrong with the reply, each error with where it is.
        errors: String,
    },
    /// The request's schema cannot be used.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The request names an `agent_type` no template has.
    #[error("unknown agent_type {name:?}; registered: {}", list(registered))]
    UnknownAgentType {
        /// The name asked for.
        name: String,
        /// The templates there are.
        registered: Vec<String>,
    },
    /// The request names a model profile that is not configured.
    #[error("unknown model profile {name:?}; profiles: {}", list(profiles))]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// The profiles there are.
        profiles: Vec<String>,
    },
    /// A host tool refused or failed (an unknown name, invalid arguments, a file that is not a
    /// regular file, ...).
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// The run made all the tool calls it may make.
    #[error("this run may make at most {limit} tool calls and has made them all")]
    ToolCallCap {
        /// The run's `max_tool_calls`.
        limit: u32,
    },
    /// A reply or tool result is larger than one message may be.
    #[error("{what} is {size} bytes; the limit is {limit} bytes")]
    TooLarge {
        /// What was too large, as the message names it (`the reply`).
        what: &'static str,
        /// Its size in bytes.
        size: u64,
        /// The limit in bytes.
        limit: u64,
    },
    /// A provider answered with an HTTP error status.
    #[error("{provider}: {message} ({})", retry_word(http_status_retryable(*status)))]
    Http {
        /// Who answered: `Anthropic API at https://api.anthropic.com`.
        provider: String,
        /// The HTTP status.
        status: u16,
        /// The provider's own error code, when its error body has one (OpenAI's `code`, or its
        /// `type` without one; Anthropic's `error.type`).
        provider_code: Option<String>,
        /// The request parameter the provider's error names (OpenAI's `param`).
        param: Option<String>,
        /// How long the provider asked us to wait (`Retry-After`).
        retry_after: Option<Duration>,
        /// Attempts made, the retries included.
        attempts: u32,
        /// What happened, for people: the status, the provider's message, the attempts.
        message: String,
    },
    /// No complete HTTP answer: the connection failed, timed out or was cut short.
    #[error("{provider}: {message} ({})", retry_word(cause.is_retryable()))]
    Transport {
        /// Who was asked.
        provider: String,
        /// What failed.
        cause: TransportCause,
        /// Attempts made, the retries included.
        attempts: u32,
        /// What happened, for people.
        message: String,
    },
    /// A provider's successful answer cannot be read as a reply (not the expected JSON, no
    /// choices, no structured output).
    #[error("{provider}: {message} (not retryable)")]
    BadReply {
        /// Who answered.
        provider: String,
        /// What is wrong with the answer, for people.
        message: String,
    },
    /// A provider's answer is larger than `http::MAX_RESPONSE_BYTES` allows.
    #[error(
        "{provider}: HTTP {status_text}, but the body is larger than the {} MiB a provider reply \
         may be (not retryable)", limit >> 20
    )]
    ResponseTooLarge {
        /// Who answered.
        provider: String,
        /// The HTTP status and its reason (`200 OK`).
        status_text: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// The model called a tool with arguments that are not JSON; sampling again may fix it.
    #[error(
        "{provider}: the model's arguments for tool `{tool}` are not valid JSON: {message} \
         (retryable)"
    )]
    MalformedToolArguments {
        /// Who answered.
        provider: String,
        /// The tool the model called.
        tool: String,
        /// What the JSON parser said.
        message: String,
    },
    /// The backend is not configured so that it can work (a missing or empty API key, a TLS
    /// stack that cannot start, a header value HTTP cannot carry).
    #[error("{message}")]
    Setup {
        /// What is wrong, for people.
        message: String,
    },
}

/// Why an HTTP request got no complete answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportCause {
    /// The connection could not be made.
    Connect,
    /// No complete response within the request timeout.
    Timeout,
    /// The body ended before it was complete.
    CutShort,
    /// The request could not be built (not retryable).
    InvalidRequest,
    /// Anything else on the way.
    Other,
}

impl TransportCause {
    /// Whether sending the request again may get an answer.
    pub fn is_retryable(self) -> bool {
        !matches!(self, Self::InvalidRequest)
    }
}

/// Rate limits (429), request timeouts (408) and server trouble (5xx, including Anthropic's
/// 529 "overloaded") may pass; any other status is an answer about the request itself.
pub(crate) fn http_status_retryable(status: u16) -> bool {
    status == 408 || status == 429 || (500..600).contains(&status)
}

fn retry_word(retryable: bool) -> &'static str {
    if retryable {
        "retryable"
    } else {
        "not retryable"
    }
}

/// Names, comma-separated, or `none`.
fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

impl BackendErrorKind {
    /// A stable `snake_case` name for the variant (`turns_exhausted`, `http`, ...), for logs,
    /// metrics and the script's view of the error.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Failed { .. } => "failed",
            Self::Panicked { .. } => "panicked",
            Self::TurnsExhausted { .. } => "turns_exhausted",
            Self::Truncated { .. } => "truncated",
            Self::SchemaMismatch { .. } => "schema_mismatch",
            Self::Schema(_) => "schema",
            Self::UnknownAgentType { .. } => "unknown_agent_type",
            Self::UnknownProfile { .. } => "unknown_profile",
            Self::Tool(_) => "tool",
            Self::ToolCallCap { .. } => "tool_call_cap",
            Self::TooLarge { .. } => "too_large",
            Self::Http { .. } => "http",
            Self::Transport { .. } => "transport",
            Self::BadReply { .. } => "bad_reply",
            Self::ResponseTooLarge { .. } => "response_too_large",
            Self::MalformedToolArguments { .. } => "malformed_tool_arguments",
            Self::Setup { .. } => "setup",
        }
    }

    /// Whether the same call may succeed if tried again: a provider's passing trouble (429,
    /// 408, 5xx, a dropped connection, a timeout), broken tool-call JSON from the model, or a
    /// failure its backend called retryable. Limits, refusals and schema mismatches are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Failed { retryable, .. } => *retryable,
            Self::Http { status, .. } => http_status_retryable(*status),
            Self::Transport { cause, .. } => cause.is_retryable(),
            Self::MalformedToolArguments { .. } => true,
            Self::Panicked { .. }
            | Self::TurnsExhausted { .. }
            | Self::Truncated { .. }
            | Self::SchemaMismatch { .. }
            | Self::Schema(_)
            | Self::UnknownAgentType { .. }
            | Self::UnknownProfile { .. }
            | Self::Tool(_)
            | Self::ToolCallCap { .. }
            | Self::TooLarge { .. }
            | Self::BadReply { .. }
            | Self::ResponseTooLarge { .. }
            | Self::Setup { .. } => false,
        }
    }
}

impl BackendError {
    /// An error of `kind`, having spent no tokens.
    pub fn new(kind: BackendErrorKind) -> Self {
        Self {
            kind: Box::new(kind),
            usage: Usage::default(),
            source: None,
        }
    }

    /// A failure that will not go away by retrying, having spent no tokens.
    pub fn terminal(message: impl Into<String>) -> Self {
        Self::failed(message, false)
    }

    /// A failure described in words; `retryable` says whether trying again may succeed.
    pub fn failed(message: impl Into<String>, retryable: bool) -> Self {
        Self::new(BackendErrorKind::Failed {
            message: message.into(),
            retryable,
        })
    }

    /// The backend panicked with `message`.
    pub fn panicked(message: impl Into<String>) -> Self {
        Self::new(BackendErrorKind::Panicked {
            message: message.into(),
        })
    }

    /// The same error, recording that the call spent `usage` before it failed (replacing
    /// what was recorded before). A panic records none: its tokens are lost with it.
    pub fn with_usage(mut self, usage: Usage) -> Self {
        if !matches!(*self.kind, BackendErrorKind::Panicked { .. }) {
            self.usage = usage;
        }
        self
    }

    /// The same error, caused by `source`.
    pub fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> &BackendErrorKind {
        &self.kind
    }

    /// Tokens the call spent before it failed; zero when unknown.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Whether trying the same call again may succeed (see [`BackendErrorKind::is_retryable`]).
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    /// How many times the request was sent again before the call gave up: the attempts of an
    /// HTTP or transport failure less the first; zero for every other failure.
    pub fn retries(&self) -> u32 {
        match self.kind() {
            BackendErrorKind::Http { attempts, .. }
            | BackendErrorKind::Transport { attempts, .. } => attempts.saturating_sub(1),
            _ => 0,
        }
    }
}

impl From<BackendErrorKind> for BackendError {
    fn from(kind: BackendErrorKind) -> Self {
        Self::new(kind)
    }
}

impl From<ToolError> for BackendError {
    fn from(error: ToolError) -> Self {
        Self::new(BackendErrorKind::Tool(error))
    }
}

impl From<SchemaError> for BackendError {
    fn from(error: SchemaError) -> Self {
        Self::new(BackendErrorKind::Schema(error))
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.kind.fmt(f)
    }
}

impl fmt::Debug for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendError")
            .field("kind", &self.kind)
            .field("usage", &self.usage)
            .field("source", &self.source)
            .finish()
    }
}

impl Error for BackendError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match &self.source {
            Some(source) => Some(source.as_ref()),
            // The kinds that wrap an error of their own show it as theirs (`transparent`), so
            // it is not a source too.
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_carry_the_tokens_they_spent() {
        let spent = Usage {
            input_tokens: 12,
            output_tokens: 3,
            estimated_tokens: 0,
        };
        let error = BackendError::terminal("no");
        assert_eq!(error.usage(), Usage::default());
        let error = error.with_usage(spent);
        assert_eq!((error.usage(), error.to_string()), (spent, "no".into()));
        assert!(!error.is_retryable());
        assert_eq!(error.kind().name(), "failed");
        // A panic's tokens are lost with it.
        let panicked = BackendError::panicked("boom").with_usage(spent);
        assert_eq!(panicked.usage(), Usage::default());
        assert_eq!(panicked.to_string(), "the leaf backend panicked: boom");
        assert!(!panicked.is_retryable());
    }

    #[test]
    fn http_statuses_decide_retryability() {
        let http = |status| BackendErrorKind::Http {
            provider: "P".into(),
            status,
            provider_code: None,
            param: None,
            retry_after: None,
            attempts: 1,
            message: format!("HTTP {status}"),
        };
        for status in [408, 429, 500, 503, 529] {
            assert!(http(status).is_retryable(), "{status}");
            assert_eq!(
                http(status).to_string(),
                format!("P: HTTP {status} (retryable)")
            );
        }
        for status in [400, 401, 404, 418] {
            assert!(!http(status).is_retryable(), "{status}");
            assert!(http(status).to_string().ends_with("(not retryable)"));
        }
        assert_eq!(http(429).name(), "http");
    }

    #[test]
    fn limits_say_what_they_are() {
        let cap = BackendError::from(BackendErrorKind::ToolCallCap { limit: 10 });
        assert_eq!(
            cap.to_string(),
            "this run may make at most 10 tool calls and has made them all"
        );
        assert_eq!(cap.kind().name(), "tool_call_cap");
        let large = BackendErrorKind::TooLarge {
            what: "the reply",
            size: 2000,
            limit: 1000,
        };
        assert_eq!(
            large.to_string(),
            "the reply is 2000 bytes; the limit is 1000 bytes"
        );
        assert!(!cap.is_retryable() && !large.is_retryable());
        let file = BackendError::from(ToolError::NotARegularFile { path: "d/p".into() });
        assert_eq!(file.kind().name(), "tool");
        assert_eq!(file.to_string(), "d/p is not a regular file");
    }

    #[test]
    fn a_source_is_kept_and_shown_apart() {
        let io = std::io::Error::other("disk on fire");
        let error = BackendError::terminal("cannot read").with_source(io);
        assert_eq!(error.to_string(), "cannot read");
        assert_eq!(error.source().unwrap().to_string(), "disk on fire");
        assert!(BackendError::terminal("x").source().is_none());
    }
}
