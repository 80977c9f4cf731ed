//! The leaf backends over a chat model: [`AgentBackend`], which runs each leaf as a
//! [`Conversation`], keeping the conversations of calls that share an `instance_id`; and
//! [`CheckedBackend`], an offline backend held to the same configuration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::config::{
    AgentConfig, AgentTemplate, Resolved, estimate, render_prompt, resolve, system_prompt,
};
use super::conversation::Conversation;
use crate::chat::{ChatModel, ChatRequest, Message};
use crate::tool::ToolSet;
use crate::{
    BackendError, LeafBackend, LeafCatalog, LeafEstimate, LeafObserver, LeafReply, LeafRequest,
};

type History = Arc<tokio::sync::Mutex<Vec<Message>>>;

/// A [`LeafBackend`] that runs every leaf as an agent loop over a chat model.
#[derive(Debug)]
pub struct AgentBackend {
    model: Arc<dyn ChatModel>,
    config: AgentConfig,
    tools: ToolSet,
    /// Conversations by (thread id, instance id), dropped when the run finishes.
    pub(super) histories: Mutex<HashMap<(String, String), History>>,
}

impl AgentBackend {
    /// Leaves over `model`, with `tools` available to them.
    pub fn new(model: Arc<dyn ChatModel>, config: AgentConfig, tools: ToolSet) -> Self {
        Self {
            model,
            config,
            tools,
            histories: Mutex::new(HashMap::new()),
        }
    }

    fn resolve(&self, request: &LeafRequest) -> Result<Resolved<'_>, BackendError> {
        resolve(&self.config, &self.tools, request)
    }

    /// Runs the leaf's turns; `observer` hears of its tool calls.
    async fn answer(
        &self,
        request: &LeafRequest,
        observer: Option<&dyn LeafObserver>,
    ) -> Result<LeafReply, BackendError> {
        let resolved = self.resolve(request)?;
        let history = self.history(request);
        // Calls sharing an instance id take turns: each sees the previous one's exchange.
        let mut conversation = match &history {
            Some(history) => Some(history.lock().await),
            None => None,
        };
        let mut messages = conversation
            .as_ref()
            .map(|c| c.to_vec())
            .unwrap_or_default();
        let user = Message::User {
            text: render_prompt(&request.prompt),
        };
        messages.push(user.clone());
        let mut turn = Conversation::new(
            self.model.as_ref(),
            ChatRequest {
                model: resolved.model,
                system: self.system_prompt(resolved.template, request.instruction.as_deref()),
                messages,
                tools: resolved.tools.specs(),
                structured: None,
                max_tokens: self.config.max_tokens,
                idempotency_key: Some(request.idempotency_key.clone()),
            },
            self.config.max_turns,
        );
        if let Some(observer) = observer {
            turn = turn.observed(observer);
        }
        let answer = match &request.schema {
            None => turn
                .run_tools(&resolved.tools, None)
                .await
                .map(|response| Value::String(response.text)),
            Some(schema) => turn.structured(&resolved.tools, schema).await,
        };
        // A leaf that fails after some turns has still spent their tokens; the error carries
        // them so that budgets count them.
        let value = answer.map_err(|error| error.with_usage(turn.usage))?;
        if let Some(conversation) = &mut conversation {
            conversation.push(user);
            conversation.push(Message::Assistant {
                text: answer_text(&value),
                tool_calls: Vec::new(),
            });
        }
        Ok(LeafReply {
            value,
            usage: turn.usage,
        })
    }

    fn history(&self, request: &LeafRequest) -> Option<History> {
        let id = request.instance_id.as_ref()?;
        let mut histories = self.histories.lock().unwrap_or_else(|p| p.into_inner());
        Some(Arc::clone(
            histories
                .entry((request.thread_id.clone(), id.clone()))
                .or_default(),
        ))
    }

    fn system_prompt(&self, template: Option<&AgentTemplate>, instruction: Option<&str>) -> String {
        system_prompt(&self.config, template, instruction)
    }
}

/// An offline backend ([`crate::FakeBackend`], [`crate::ScriptedBackend`]) held to the rules
/// of real leaf agents: a request's `model` must name a profile, its `agent_type` a template
/// and its `tools` registered tools, exactly as an [`AgentBackend`] with this configuration
/// would check them — so a script refused by a real backend is refused offline too.
#[derive(Debug)]
pub struct CheckedBackend {
    inner: Arc<dyn LeafBackend>,
    config: AgentConfig,
    tools: ToolSet,
}

impl CheckedBackend {
    /// `inner`, refusing what an `AgentBackend` with `config` and `tools` would refuse.
    pub fn new(inner: Arc<dyn LeafBackend>, config: AgentConfig, tools: ToolSet) -> Self {
        Self {
            inner,
            config,
            tools,
        }
    }
}

#[async_trait::async_trait]
impl LeafBackend for CheckedBackend {
    fn check(&self, request: &LeafRequest) -> Result<(), BackendError> {
        resolve(&self.config, &self.tools, request)?;
        self.inner.check(request)
    }

    /// As an [`AgentBackend`] with this configuration would send it.
    fn estimate(&self, request: &LeafRequest) -> LeafEstimate {
        estimate(&self.config, &self.tools, request)
    }

    fn catalog(&self) -> LeafCatalog {
        LeafCatalog::of(&self.config, &self.tools)
    }

    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        self.inner.call(request).await
    }

    async fn call_observed(
        &self,
        request: &LeafRequest,
        observer: &dyn LeafObserver,
    ) -> Result<LeafReply, BackendError> {
        self.inner.call_observed(request, observer).await
    }

    fn replayed(&self, request: &LeafRequest, reply: &LeafReply) {
        self.inner.replayed(request, reply);
    }

    fn run_finished(&self, thread_id: &str) {
        self.inner.run_finished(thread_id);
    }

    fn run_waiting(&self, thread_id: &str, waiting: &crate::Waiting) {
        self.inner.run_waiting(thread_id, waiting);
    }
}

#[async_trait::async_trait]
impl LeafBackend for AgentBackend {
    fn check(&self, request: &LeafRequest) -> Result<(), BackendError> {
        self.resolve(request).map(|_| ())
    }

    fn estimate(&self, request: &LeafRequest) -> LeafEstimate {
        estimate(&self.config, &self.tools, request)
    }

    fn catalog(&self) -> LeafCatalog {
        LeafCatalog::of(&self.config, &self.tools)
    }

    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        self.answer(request, None).await
    }

    async fn call_observed(
        &self,
        request: &LeafRequest,
        observer: &dyn LeafObserver,
    ) -> Result<LeafReply, BackendError> {
        self.answer(request, Some(observer)).await
    }

    fn replayed(&self, request: &LeafRequest, reply: &LeafReply) {
        // A resumed run's journaled leaves never reach `call`; rebuild their conversations so
        // later live calls with the same instance id see them.
        if let Some(history) = self.history(request)
            && let Ok(mut conversation) = history.try_lock()
        {
            conversation.push(Message::User {
                text: render_prompt(&request.prompt),
            });
            conversation.push(Message::Assistant {
                text: answer_text(&reply.value),
                tool_calls: Vec::new(),
            });
        }
    }

    fn run_finished(&self, thread_id: &str) {
        let mut histories = self.histories.lock().unwrap_or_else(|p| p.into_inner());
        histories.retain(|(thread, _), _| thread != thread_id);
    }
}

/// A reply as assistant text in a conversation.
fn answer_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
