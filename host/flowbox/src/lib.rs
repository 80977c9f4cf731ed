//! flowbox runs the short Python orchestration scripts a language model writes at run time —
//! *dynamic agent workflows* — inside a CPython-on-WASI WebAssembly component, bounded by fuel,
//! a memory cap and a deadline, with no access to files, environment or network. The script
//! only decides the control flow; its leaf agents run here, on the host, through a
//! [`LeafBackend`].
//!
//! ```
#![doc = include_str!("../examples/embed.rs")]
//! ```
//!
//! A run gets a fresh WebAssembly store; the compiled guest is shared and cached on disk, so
//! a [`Runtime`] is built once per process and each run costs a few milliseconds plus its
//! leaves. Every run is held to [`Limits`]; what ends a run is a [`RunError`], and what a script
//! can handle (a failed leaf, an exhausted budget) reaches it as a Python exception instead.
//! Runs publish [`Event`]s to [`Runtime::subscribe`]rs as they happen.
//!
//! The root holds the run path; the rest lives in modules: [`backends`] (the leaf backends and
//! the agent loop), [`chat`] (the chat-model contract the agent loop drives), [`tools`] (host
//! tools), [`store`] (the checkpoint journal and the typed view of its threads), [`events`]
//! (the event stream, a thread's history and the [`Progress`](events::Progress) it adds up to),
//! [`orchestrator`] (`run_workflow` for a root agent), [`plan`] (what a script will do and
//! cost, before it runs: [`Runtime::plan`], the price table, the pre-launch gate),
//! [`external`] (runs another durable-execution engine drives) and, with the `http` feature,
//! [`http`] (the real chat providers).

#![warn(missing_docs)]

mod bindings;
mod calls;
mod clock;
mod error;
pub mod events;
mod files;
mod host;
mod instance;
mod journal;
mod limits;
pub mod orchestrator;
pub mod plan;
mod run;
mod runtime;
mod text;
#[cfg(feature = "otlp")]
pub mod trace;

pub use error::{
    ErrorInfo, JournalError, RunError, RunErrorClass, RunErrorKind, ScriptError, ScriptErrorKind,
};
pub use events::{Event, EventKind, EventStream, MetaPhase, Position};
pub use flowbox_backends::{
    BackendError, BackendErrorKind, LeafBackend, LeafObserver, LeafReply, LeafRequest, Usage,
    Waiting,
};
pub use flowbox_store::Summary;
pub use instance::guest::Guest;
pub use instance::pool::WarmPoolStats;
pub use limits::{InvalidLimit, Limits};
pub use run::outcome::RunOutcome;
pub use run::request::RunRequest;
pub use runtime::{Runtime, RuntimeBuilder, SetupError};

/// The attribute the backend, chat-model, tool and store traits are written with: implement
/// them as `#[flowbox::async_trait] impl LeafBackend for MyBackend { ... }`.
pub use async_trait::async_trait;

/// Leaf backends: what answers a script's `agent(...)` calls. [`LeafBackend`] and the types
/// it speaks are at the crate root.
pub mod backends {
    pub use flowbox_backends::schema::{SchemaError, reply_problems};
    pub use flowbox_backends::{
        APPROXIMATE_BYTES_PER_TOKEN, AgentBackend, AgentConfig, AgentTemplate, CheckedBackend,
        DEFAULT_BASE_PROMPT, DEFAULT_OUTPUT_LIMIT, FakeBackend, LEAF_ADDENDUM, LeafCatalog,
        LeafEstimate, ModelProfile, ScriptedBackend, ScriptedConfigError, Tokenizer,
        TransportCause,
    };
}

/// Chat models: the contract [`backends::AgentBackend`] and the
/// [`Orchestrator`](orchestrator::Orchestrator) drive, a conversation with a tool loop, and
/// offline models for tests and demos. The real providers are in `http`.
pub mod chat {
    pub use flowbox_backends::{
        ChatModel, ChatRequest, ChatResponse, Conversation, FakeChat, Message, ScriptedChat,
        StructuredOutput, ToolCall,
    };
}

/// Host tools: what leaf agents use in their own loop and scripts reach with `call_tool`.
pub mod tools {
    pub use flowbox_backends::{ReadRoots, Tool, ToolError, ToolSet, ToolSpec};
}

/// The checkpoint journal: the [`CheckpointStore`](store::CheckpointStore) contract, its
/// records (with the parts of a [`Summary`], such as its
/// [`BranchFailure`](store::BranchFailure)s), the two stores (in memory, in SQLite), the typed
/// view of a thread every listing renders ([`ThreadStatus`](store::ThreadStatus),
/// [`ThreadSummary`](store::ThreadSummary)) and how it reads as text ([`view`](store::view)),
/// and the helpers its records are written with (hex and SHA-256, Unix time, UTC calendar
/// times).
pub mod store {
    pub use flowbox_store::{
        AgentRequest, BranchFailure, CallErrorKind, CallKind, CallRequest, CheckpointStore, Claim,
        Durability, Entry, EntryOutcome, GroupKind, JournalRecord, Listing, MemoryStore,
        RecordedOutcome, ReplySample, SCHEMA_VERSION, SqliteStore, StoreError, StoredEvent,
        StoredThread, ThreadEnd, ThreadHeader, ThreadOverview, ThreadStatus, ThreadSummary,
        ToolRequest, UtcTime, WorkflowRecord, WorkflowTotals, from_hex, hex, now_unix_ms,
        now_unix_nanos, sha256_hex, view,
    };
}

pub mod external {
    //! Runs driven by another durable-execution engine: the seam a crate such as `flowbox-restate`
    //! plugs into. The guest, the limits, the caps and budgets, the events and the summary are the
    //! local engine's; only where the calls go and the order their completions come back in belong
    //! to the [`CompletionSource`], whose own journal is then the checkpoint log (the runtime keeps
    //! none beside it).
    //!
    //! A source must be deterministic across attempts: an attempt that replays the engine's journal
    //! has to hand back the same completions in the same batches as the first attempt did, so the
    //! guest takes the same path and uses the same fuel.

    pub use crate::calls::source::{CompletionSource, ExternalCall, ExternalCompletion};
    pub use crate::events::EventSink;
    pub use crate::run::external::{ExternalRun, Remote};
    pub use crate::run::request::RunRequestParts;
}

/// The real chat providers (the `http` feature): OpenAI-compatible Chat Completions and
/// Anthropic Messages, for [`backends::AgentBackend`] leaves and the orchestrator's root agent.
#[cfg(feature = "http")]
pub mod http {
    pub use flowbox_backends::http::{AnthropicChat, OpenAiChat, RetryPolicy};
}
