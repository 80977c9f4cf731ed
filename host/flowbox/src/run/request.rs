//! [`RunRequest`]: what an embedder asks a [`Runtime`](crate::Runtime) to run, and how.

use serde_json::Value;

use crate::Limits;

/// A script to run, with its arguments and options.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub(crate) script: String,
    pub(crate) args: Value,
    pub(crate) thread_id: Option<String>,
    /// Whether `thread_id` names a thread this run starts ([`Self::start_thread`]).
    pub(crate) starts_thread: bool,
    pub(crate) limits: Option<Limits>,
    pub(crate) guard: bool,
    pub(crate) reuse_leaves_from: Option<String>,
}

impl RunRequest {
    /// A request to run `script` with empty args (`{}`), a new thread id and the runtime's
    /// limits.
    pub fn new(script: impl Into<String>) -> Self {
        Self {
            script: script.into(),
            args: Value::Object(serde_json::Map::new()),
            thread_id: None,
            starts_thread: false,
            limits: None,
            guard: true,
            reuse_leaves_from: None,
        }
    }

    /// A new thread id such as `20261130-034521-9f2c1a0b3e7d4c58`, as a request without one
    /// gets: the UTC start time, so ids sort by age, and 64 random bits.
    pub fn new_thread_id() -> String {
        crate::run::thread::new_thread_id()
    }

    /// The request's parts, for an [`Remote`](crate::external::Remote) that carries it to
    /// another engine.
    pub fn parts(&self) -> RunRequestParts<'_> {
        RunRequestParts {
            script: &self.script,
            args: &self.args,
            thread_id: self.thread_id.as_deref(),
            limits: self.limits.as_ref(),
            guard: self.guard,
            reuse_leaves_from: self.reuse_leaves_from.as_deref(),
        }
    }

    /// Checks a thread id as a run checks it (1 to 128 ASCII letters, digits, `-`, `_`, `.`,
    /// `:`), for callers that put it in a URL before any run sees it.
    pub fn check_thread_id(thread_id: &str) -> Result<(), crate::RunError> {
        crate::run::thread::check_thread_id(thread_id)
    }

    /// The JSON value the script sees as `args`.
    pub fn args(mut self, args: Value) -> Self {
        self.args = args;
        self
    }

    /// Runs under this thread id instead of a new one (it seeds the guest's random source).
    ///
    /// With a journal ([`crate::RuntimeBuilder::store`]), an id the journal already holds
    /// resumes that thread: the script and args must be the ones it started with (else the run
    /// ends with [`RunError::Divergence`](crate::RunError::Divergence)), a finished thread
    /// returns its recorded outcome, and an interrupted one replays its journal and continues
    /// live.
    pub fn thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self.starts_thread = false;
        self
    }

    /// Runs as the new thread `thread_id`, one drawn with [`Self::new_thread_id`] so that the
    /// caller knows it before the run starts (to follow its events, say), instead of an id
    /// that may name a thread to resume: the run reads nothing back from the journal first,
    /// and a journal that already has the thread refuses the run with
    /// [`RunError::Journal`](crate::RunError::Journal), leaving the thread as it was. (A
    /// [remote](crate::RuntimeBuilder::remote) engine runs it as [`Self::thread_id`] does.)
    pub fn start_thread(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self.starts_thread = true;
        self
    }

    /// Limits for this run instead of the runtime's.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Lends this run the results of byte-identical requests journaled by an earlier thread,
    /// wherever they occur in the new run (needs a journal). Unlike resuming, the script may
    /// differ from the earlier one: requests that changed go to the backend, unchanged ones are
    /// answered from the earlier thread's results, each at most once and in their order.
    pub fn reuse_leaves_from(mut self, thread_id: impl Into<String>) -> Self {
        self.reuse_leaves_from = Some(thread_id.into());
        self
    }

    /// Turns the in-guest script guard off (it is on by default).
    ///
    /// The guard is not the security boundary — the WebAssembly sandbox is — so a script run
    /// without it still has no files, environment, network or host functions beyond the WIT
    /// interface; it merely gets the interpreter's full standard library. Meant for tests
    /// that prove exactly that, and for trusted scripts.
    pub fn guard(mut self, enabled: bool) -> Self {
        self.guard = enabled;
        self
    }
}

/// A [`RunRequest`]'s parts, for a [`Remote`](crate::external::Remote) that carries the request
/// elsewhere.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RunRequestParts<'a> {
    /// The script's source.
    pub script: &'a str,
    /// Its `args`.
    pub args: &'a Value,
    /// The thread id, when the request names one.
    pub thread_id: Option<&'a str>,
    /// The request's own limits, when it has them.
    pub limits: Option<&'a crate::Limits>,
    /// Whether the in-guest script guard is on.
    pub guard: bool,
    /// The earlier thread whose leaves the request reuses, if any.
    pub reuse_leaves_from: Option<&'a str>,
}
