//! Leaves answered by Python code: any `async def leaf(request) -> reply`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use flowbox::backends::{APPROXIMATE_BYTES_PER_TOKEN, reply_problems};
use flowbox::{BackendError, LeafBackend, LeafReply, LeafRequest, Usage};
use pyo3::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::bridge::{self, Bridge, Request};

/// A leaf backend whose calls go to the Python dispatcher's `leaf`, which awaits the user's
/// leaf function on the caller's event loop. It keeps each instance's conversation (the
/// prompts and replies so far of the calls that share an `instance_id`) to hand the next call.
pub(crate) struct PythonLeaf {
    bridge: Arc<Py<Bridge>>,
    conversations: Mutex<HashMap<(String, String), Vec<Value>>>,
}

impl std::fmt::Debug for PythonLeaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonLeaf").finish_non_exhaustive()
    }
}

/// What the Python side hands back for a leaf.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    value: Value,
    usage: Option<Usage>,
}

impl PythonLeaf {
    pub(crate) fn new(bridge: Arc<Py<Bridge>>) -> Self {
        Self {
            bridge,
            conversations: Mutex::new(HashMap::new()),
        }
    }

    fn conversation_key(request: &LeafRequest) -> Option<(String, String)> {
        let instance = request.instance_id.clone()?;
        Some((request.thread_id.clone(), instance))
    }

    fn conversation(&self, request: &LeafRequest) -> Vec<Value> {
        let Some(key) = Self::conversation_key(request) else {
            return Vec::new();
        };
        let conversations = self.conversations.lock().expect("conversations lock");
        conversations.get(&key).cloned().unwrap_or_default()
    }

    fn remember(&self, request: &LeafRequest, reply: &LeafReply) {
        let Some(key) = Self::conversation_key(request) else {
            return;
        };
        let reply_text = match &reply.value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let mut conversations = self.conversations.lock().expect("conversations lock");
        let turns = conversations.entry(key).or_default();
        turns.push(json!({"role": "user", "content": request.prompt_text()}));
        turns.push(json!({"role": "assistant", "content": reply_text}));
    }

    /// The reply the Python side gave, held to the request: text without a schema, a value
    /// that matches it with one.
    fn reply(request: &LeafRequest, answer: bridge::Reply) -> Result<LeafReply, BackendError> {
        let reply = match answer {
            bridge::Reply::Text(text) => Reply {
                value: Value::String(text),
                usage: None,
            },
            bridge::Reply::Json(text) => serde_json::from_str(&text).map_err(|error| {
                BackendError::terminal(format!(
                    "the Python leaf's reply could not be read: {error}"
                ))
            })?,
        };
        match &request.schema {
            None if !reply.value.is_string() => {
                return Err(BackendError::terminal(format!(
                    "a leaf without a schema replies with text (a str), not {}",
                    kind_of(&reply.value)
                )));
            }
            None => {}
            Some(schema) => {
                let problems = reply_problems(schema, &reply.value)
                    .map_err(|error| BackendError::terminal(error.to_string()))?;
                if let Some(problems) = problems {
                    return Err(BackendError::terminal(format!(
                        "the leaf's reply does not match its schema: {problems}"
                    )));
                }
            }
        }
        let usage = reply.usage.unwrap_or_else(|| {
            let tokens = |bytes: usize| (bytes as u64).div_ceil(APPROXIMATE_BYTES_PER_TOKEN);
            let output = match &reply.value {
                Value::String(text) => text.len(),
                other => other.to_string().len(),
            };
            Usage::estimated(tokens(request.prompt_text().len()), tokens(output))
        });
        Ok(LeafReply {
            value: reply.value,
            usage,
        })
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "None",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a str",
        Value::Array(_) => "a list",
        Value::Object(_) => "a dict",
    }
}

#[flowbox::async_trait]
impl LeafBackend for PythonLeaf {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        let conversation = self.conversation(request);
        let conversation = (!conversation.is_empty())
            .then(|| serde_json::to_string(&conversation).expect("conversations serialise"));
        let answer = bridge::call(
            &self.bridge,
            Request::Leaf(Box::new(request.clone()), conversation),
        )
        .await
        .map_err(|failure| BackendError::failed(failure.message, failure.retryable))?;
        let reply = Self::reply(request, answer)?;
        self.remember(request, &reply);
        Ok(reply)
    }

    fn replayed(&self, request: &LeafRequest, reply: &LeafReply) {
        self.remember(request, reply);
    }

    fn run_finished(&self, thread_id: &str) {
        let mut conversations = self.conversations.lock().expect("conversations lock");
        conversations.retain(|(thread, _), _| thread != thread_id);
    }
}
