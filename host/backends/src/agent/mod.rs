//! The leaf agent: one `agent(...)` call as a small agent loop over a [`ChatModel`].
//!
//! System prompt = the leaf's base prompt (its template's, or the default) + a short leaf
//! addendum + the call's `instruction`; the user message is the prompt. The loop runs tool
//! calls until the model gives a final answer, bounded by `max_turns`. With a schema, the
//! answer is validated with a real JSON Schema validator and gets one repair turn; providers
//! that cannot combine tools and structured output get the tool phase first and then a
//! tool-free structured turn over its evidence. Calls that share an `instance_id` within a run
//! share one conversation, one at a time.
//!
//! `config` holds the configuration, what a request resolves to and the prompts it is sent
//! with, `catalog` what that configuration offers scripts, `backend` the leaf backends,
//! `conversation` the turns and their accounting, `tool_loop` the tool and structured turns.

mod backend;
mod catalog;
mod config;
mod conversation;
mod tool_loop;

pub use backend::{AgentBackend, CheckedBackend};
pub use catalog::LeafCatalog;
pub use config::{
    AgentConfig, AgentTemplate, DEFAULT_BASE_PROMPT, LEAF_ADDENDUM, ModelProfile, render_prompt,
};
pub use conversation::Conversation;

#[cfg(test)]
mod tests;
