//! An agent's conversation with a model: each turn sent with its own idempotency key and
//! counted against `max_turns`, its tokens added up, a reply cut off at the output limit
//! refused. The tool loop and the structured turn that drive it are in `tool_loop`.

use crate::chat::{ChatModel, ChatRequest, ChatResponse, Message};
use crate::{BackendError, BackendErrorKind, LeafObserver, Usage};

/// An agent's conversation with a model: turns of tool calls until a final answer, counting
/// turns and tokens. Leaves run on it, and so does the orchestrator's root agent.
#[derive(Debug)]
pub struct Conversation<'a> {
    pub(super) model: &'a dyn ChatModel,
    pub(super) chat: ChatRequest,
    /// The conversation's idempotency key; each turn sends `{key}/{turn}`.
    pub(super) key: Option<String>,
    pub(super) usage: Usage,
    pub(super) turns: u32,
    pub(super) max_turns: u32,
    /// Told of every model turn and tool call, when set.
    pub(super) observer: Option<&'a dyn LeafObserver>,
}

impl<'a> Conversation<'a> {
    /// A conversation that starts from `chat` and may take at most `max_turns` model turns.
    ///
    /// Each turn is a different provider request, so it gets its own idempotency key: turn `n`
    /// (from 1) sends `{key}/{n}` for `chat.idempotency_key` = `key`. A de-duplicating
    /// provider then never answers one turn with another's reply, while a retried or resumed
    /// turn sends its key again.
    pub fn new(model: &'a dyn ChatModel, mut chat: ChatRequest, max_turns: u32) -> Self {
        Self {
            model,
            key: chat.idempotency_key.take(),
            chat,
            usage: Usage::default(),
            turns: 0,
            max_turns,
            observer: None,
        }
    }

    /// Tells `observer` of every model turn and tool call the conversation makes.
    pub fn observed(mut self, observer: &'a dyn LeafObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Tokens used so far, including those a failed turn's error reported.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Model turns taken so far.
    pub fn turns(&self) -> u32 {
        self.turns
    }

    /// The messages so far (the model's and the tools' included).
    pub fn messages(&self) -> &[Message] {
        &self.chat.messages
    }

    pub(super) async fn send(&mut self) -> Result<ChatResponse, BackendError> {
        if self.turns >= self.max_turns {
            return Err(BackendErrorKind::TurnsExhausted {
                turns: self.max_turns,
            }
            .into());
        }
        self.turns += 1;
        self.chat.idempotency_key = self.key.as_ref().map(|key| format!("{key}/{}", self.turns));
        let started = std::time::Instant::now();
        let result = self.model.complete(&self.chat).await;
        if let Some(observer) = self.observer {
            let (usage, retries, error) = match &result {
                Ok(response) => (response.usage, response.retries, None),
                Err(error) => (error.usage(), error.retries(), Some(error.to_string())),
            };
            observer.model_turn(
                &self.chat.model,
                usage,
                started.elapsed(),
                retries,
                error.as_deref(),
            );
        }
        match result {
            Ok(response) => {
                self.usage = self.usage.saturating_add(response.usage);
                if response.truncated {
                    // Sampling again would most likely be cut off again: fail with the remedy.
                    return Err(BackendError::new(BackendErrorKind::Truncated {
                        max_tokens: self.chat.max_tokens,
                    })
                    .with_usage(response.usage));
                }
                Ok(response)
            }
            Err(error) => {
                self.usage = self.usage.saturating_add(error.usage());
                Err(error)
            }
        }
    }
}
