//! The front door: a `run_workflow` tool any root agent can carry, the guidance that teaches a
//! root model to use it, and an [`Orchestrator`] — a root agent loop over the same chat models as
//! the leaves.
//!
//! The root agent answers simple requests itself; for complex ones it writes a workflow script,
//! runs it with `run_workflow`, reads the structured result (or an error it can act on: kind,
//! message, line and a hint), and decides whether more work is needed.

mod guidance;
mod output;
mod tool;

use std::sync::Arc;

use flowbox_backends::{
    BackendError, ChatModel, ChatRequest, Conversation, Message, ToolSet, Usage,
};
use flowbox_store::WorkflowRecord;

use crate::Runtime;

pub use guidance::{Guidance, PATTERNS};
pub use output::{WorkflowError, WorkflowErrorKind, WorkflowOutput, WorkflowSummary};
pub use tool::{
    DEFAULT_MAX_RESULT_BYTES, RUN_WORKFLOW, RUN_WORKFLOW_DESCRIPTION, WorkflowInput, WorkflowTool,
    hint,
};

/// How the root agent behaves.
#[derive(Debug, Clone)]
struct RootConfig {
    /// The provider model id of the root agent.
    model: String,
    /// The embedder's own system prompt.
    system_prompt: String,
    /// Guidance appended to the system prompt; `None` turns it off.
    guidance: Option<Guidance>,
    /// Most root turns per question.
    max_turns: u32,
    /// Most tokens one root turn may write.
    max_tokens: u32,
    /// Results larger than this go back to the root model truncated.
    max_result_bytes: usize,
}

/// The answer to one question.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The root agent's final text.
    pub text: String,
    /// The conversation id (workflow runs are recorded under it).
    pub conversation_id: String,
    /// The workflows the root agent ran, in order.
    pub workflows: Vec<WorkflowRecord>,
    /// The root agent's own tokens (the workflows' are in `workflows`).
    pub usage: Usage,
    /// Root turns taken.
    pub turns: u32,
}

/// A root agent with `run_workflow`, over a [`Runtime`] the embedder already has: its
/// workflows run there, on that runtime's leaf backend, limits and journal.
///
/// For leaves on the root's own model and tools, build the runtime with an
/// [`AgentBackend`](crate::backends::AgentBackend) over the same [`ChatModel`]:
///
/// ```no_run
/// # use std::sync::Arc;
/// # use flowbox::Runtime;
/// # use flowbox::backends::{AgentBackend, AgentConfig};
/// # use flowbox::chat::ChatModel;
/// # use flowbox::orchestrator::Orchestrator;
/// # use flowbox::tools::ToolSet;
/// # fn demo(model: Arc<dyn ChatModel>, tools: ToolSet) -> Result<(), flowbox::SetupError> {
/// let config = AgentConfig { model: "gpt-4o".into(), ..AgentConfig::default() };
/// let leaves = AgentBackend::new(Arc::clone(&model), config, tools.clone());
/// let runtime = Runtime::builder().backend(leaves).build()?;
/// let orchestrator = Orchestrator::builder(runtime, model, "gpt-4o").tools(tools).build();
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Orchestrator {
    model: Arc<dyn ChatModel>,
    runtime: Runtime,
    tools: ToolSet,
    config: RootConfig,
}

/// Configures an [`Orchestrator`].
#[derive(Debug)]
pub struct OrchestratorBuilder {
    model: Arc<dyn ChatModel>,
    tools: ToolSet,
    runtime: Runtime,
    config: RootConfig,
    guidance_default: bool,
}

impl Orchestrator {
    /// A root agent over `model` (the provider's model id `model_id`) whose workflows run on
    /// `runtime`. The guidance for that runtime ([`Guidance::new`]: its limits, profiles,
    /// templates and tools, with patterns) is on by default.
    pub fn builder(
        runtime: Runtime,
        model: Arc<dyn ChatModel>,
        model_id: impl Into<String>,
    ) -> OrchestratorBuilder {
        OrchestratorBuilder {
            model,
            tools: ToolSet::new(),
            runtime,
            config: RootConfig {
                model: model_id.into(),
                system_prompt: String::new(),
                guidance: None,
                max_turns: 12,
                max_tokens: 4096,
                max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            },
            guidance_default: true,
        }
    }

    /// The runtime workflows run on.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The system prompt the root model gets.
    pub fn system_prompt(&self) -> String {
        match &self.config.guidance {
            Some(guidance) => guidance.append_to(&self.config.system_prompt),
            None => self.config.system_prompt.clone(),
        }
    }

    /// Answers `question` in a new conversation.
    pub async fn ask(&self, question: &str) -> Result<Answer, BackendError> {
        self.ask_in(&crate::run::thread::new_thread_id(), question)
            .await
    }

    /// Answers `question`, recording workflow runs under `conversation_id`.
    pub async fn ask_in(
        &self,
        conversation_id: &str,
        question: &str,
    ) -> Result<Answer, BackendError> {
        let workflows = WorkflowTool::new(self.runtime.clone())
            .max_result_bytes(self.config.max_result_bytes)
            .conversation(conversation_id);
        let mut tools = self.tools.clone();
        tools
            .insert(Arc::new(workflows.clone()))
            .map_err(BackendError::from)?;
        let mut conversation = Conversation::new(
            self.model.as_ref(),
            ChatRequest {
                model: self.config.model.clone(),
                system: self.system_prompt(),
                messages: vec![Message::User {
                    text: question.to_owned(),
                }],
                tools: tools.specs(),
                structured: None,
                max_tokens: self.config.max_tokens,
                idempotency_key: None,
            },
            self.config.max_turns,
        );
        let reply = conversation.run_tools(&tools, None).await?;
        Ok(Answer {
            text: reply.text,
            conversation_id: conversation_id.to_owned(),
            workflows: workflows.runs(),
            usage: conversation.usage(),
            turns: conversation.turns(),
        })
    }
}

impl OrchestratorBuilder {
    /// The root agent's own tools (the leaves' tools are their backend's).
    pub fn tools(mut self, tools: ToolSet) -> Self {
        self.tools = tools;
        self
    }

    /// The embedder's system prompt (the guidance is appended to it, never replaces it).
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.config.system_prompt = prompt.into();
        self
    }

    /// Replaces the default guidance, or turns it off with `None`.
    pub fn guidance(mut self, guidance: Option<Guidance>) -> Self {
        self.config.guidance = guidance;
        self.guidance_default = false;
        self
    }

    /// Most root turns per question (default 12).
    pub fn max_turns(mut self, turns: u32) -> Self {
        self.config.max_turns = turns;
        self
    }

    /// Most tokens one root turn may write (default 4096); a reply cut off there fails.
    pub fn max_tokens(mut self, tokens: u32) -> Self {
        self.config.max_tokens = tokens;
        self
    }

    /// Results larger than this go back to the root model truncated (default 32 KiB).
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.config.max_result_bytes = bytes;
        self
    }

    /// The orchestrator.
    pub fn build(self) -> Orchestrator {
        let mut config = self.config;
        if self.guidance_default {
            config.guidance = Some(Guidance::new(&self.runtime));
        }
        Orchestrator {
            model: self.model,
            runtime: self.runtime,
            tools: self.tools,
            config,
        }
    }
}
