//! flowbox runs the short Python orchestration scripts a language model writes at run time —
//! *dynamic agent workflows* — inside a CPython-on-WASI WebAssembly component, bounded by fuel,
//! a memory cap and a deadline, with no access to files, environment or network. The script
//! only decides the control flow; its leaf agents run here, on the host, through a
//! [`LeafBackend`].
//!
//! ```no_run
//! use flowbox::{FakeBackend, Runtime};
//! use serde_json::json;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = Runtime::builder().backend(FakeBackend::new()).build()?;
//! let script = r#"
//! reviews = await parallel([lambda f=f: agent(f"Review {f}") for f in args["files"]])
//! return {"reviews": reviews}
//! "#;
//! let outcome = runtime.run(script, json!({"files": ["a.rs", "b.rs"]})).await;
//! println!("{} leaves, {} tokens", outcome.summary.agents_spawned, outcome.summary.tokens_spent);
//! println!("{}", outcome.result?);
//! # Ok(())
//! # }
//! ```
//!
//! A run gets a fresh WebAssembly store; the compiled guest is shared and cached on disk, so
//! a [`Runtime`] is built once per process and each run costs a few milliseconds plus its
//! leaves. Every run is held to [`Limits`]; what ends a run is a [`RunError`], and what a script
//! can handle (a failed leaf, an exhausted budget) reaches it as a Python exception instead.
//! Runs publish [`Event`]s to [`Runtime::subscribe`]rs as they happen.

#![warn(missing_docs)]

mod bindings;
mod cache;
mod calls;
mod clock;
mod engine;
mod error;
mod events;
mod host;
mod journal;
mod limits;
mod orchestrator;
mod outcome;
mod request;
mod run;
mod thread;

pub use engine::{Runtime, RuntimeBuilder, SetupError};
pub use error::{RunError, ScriptError, ScriptErrorKind};
pub use events::{ErrorInfo, Event, EventKind, EventStream, MetaPhase, Position};
pub use flowbox_backends::{
    AgentBackend, AgentConfig, AgentTemplate, BackendError, ChatModel, ChatRequest, ChatResponse,
    CheckedBackend, Conversation, DEFAULT_BASE_PROMPT, FakeBackend, FakeChat, LEAF_ADDENDUM,
    LeafBackend, LeafObserver, LeafReply, LeafRequest, Message, ReadRoots, ScriptedBackend,
    ScriptedChat, Tool, ToolCall, ToolError, ToolSet, ToolSpec, Usage, preview,
};
pub use flowbox_store::{
    CallKind, CheckpointStore, Durability, EntryOutcome, MemoryStore, RunListing, RunStatus,
    SqliteStore, StoreError, StoredRun, UtcTime, WorkflowRecord, WorkflowTotals,
};
pub use limits::Limits;
pub use orchestrator::{
    Answer, DEFAULT_MAX_RESULT_BYTES, Guidance, Orchestrator, OrchestratorBuilder,
    OrchestratorConfig, PATTERNS, RUN_WORKFLOW, RUN_WORKFLOW_DESCRIPTION, WorkflowInput,
    WorkflowTool,
};

/// The real chat providers (the `http` feature): OpenAI-compatible Chat Completions and
/// Anthropic Messages, for [`AgentBackend`] leaves.
#[cfg(feature = "http")]
pub mod http {
    pub use flowbox_backends::http::{AnthropicChat, OpenAiChat, RetryPolicy};
}
pub use outcome::{RunOutcome, Summary};
pub use run::RunRequest;
pub use thread::new_thread_id;
