//! The offline default backend: deterministic replies with no key and no network.
//!
//! The same request always gets the same reply and token count. A text reply quotes the
//! prompt, so a workflow's data flow is visible in its result; a structured reply is valid
//! against the request's schema (see `schema_value`).

use serde_json::Value;

use crate::chat::{ChatModel, ChatRequest, ChatResponse, Message};
use crate::{
    BackendError, LeafBackend, LeafReply, LeafRequest, Usage, estimate_tokens, schema_value,
    stable_hash,
};

/// Deterministic offline leaf backend.
#[derive(Debug, Clone, Default)]
pub struct FakeBackend {
    _private: (),
}

impl FakeBackend {
    /// A fake backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// The reply for `request`, computed without waiting.
    pub fn reply(request: &LeafRequest) -> LeafReply {
        let prompt = request.prompt_text();
        let seed = request_seed(request, &prompt);
        let value = match &request.schema {
            Some(schema) => schema_value::value_for(schema, seed),
            None => {
                let who = request
                    .label
                    .as_deref()
                    .or(request.agent_type.as_deref())
                    .unwrap_or("leaf");
                Value::String(format!("[fake {who}] {prompt}"))
            }
        };
        let output = match &value {
            Value::String(text) => estimate_tokens(text),
            other => estimate_tokens(&other.to_string()),
        };
        let instruction = request.instruction.as_deref().unwrap_or("");
        LeafReply {
            value,
            usage: Usage {
                input_tokens: estimate_tokens(&prompt) + estimate_tokens(instruction),
                output_tokens: output,
            },
        }
    }
}

/// Everything that changes the reply goes into the seed, so equal requests agree.
fn request_seed(request: &LeafRequest, prompt: &str) -> u64 {
    let schema = request.schema.as_ref().map(Value::to_string);
    stable_hash(&[
        prompt,
        schema.as_deref().unwrap_or(""),
        request.label.as_deref().unwrap_or(""),
        request.agent_type.as_deref().unwrap_or(""),
        request.instruction.as_deref().unwrap_or(""),
        request.model.as_deref().unwrap_or(""),
    ])
}

#[async_trait::async_trait]
impl LeafBackend for FakeBackend {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        Ok(Self::reply(request))
    }
}

/// A deterministic offline chat model for a root agent: it answers every question directly,
/// quoting it, and never calls a tool.
#[derive(Debug, Clone, Default)]
pub struct FakeChat {
    _private: (),
}

impl FakeChat {
    /// A fake chat model.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait::async_trait]
impl ChatModel for FakeChat {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        let question = request
            .messages
            .iter()
            .rev()
            .find_map(|message| match message {
                Message::User { text } => Some(text.as_str()),
                _ => None,
            })
            .unwrap_or("");
        let text = format!("[fake root] {question}");
        Ok(ChatResponse {
            usage: Usage {
                input_tokens: estimate_tokens(&request.system) + estimate_tokens(question),
                output_tokens: estimate_tokens(&text),
            },
            text,
            ..ChatResponse::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn text_replies_contain_the_prompt_and_are_deterministic() {
        let mut request = LeafRequest::new(1, json!("Review the parser"));
        request.label = Some("reviewer".into());
        let first = FakeBackend::reply(&request);
        assert_eq!(first.value, json!("[fake reviewer] Review the parser"));
        assert_eq!(first, FakeBackend::reply(&request));
        assert!(first.usage.input_tokens > 0 && first.usage.output_tokens > 0);
    }

    #[test]
    fn json_prompts_are_quoted_as_json() {
        let request = LeafRequest::new(1, json!({"file": "ü.rs", "n": 3}));
        let reply = FakeBackend::reply(&request);
        assert_eq!(reply.value, json!(r#"[fake leaf] {"file":"ü.rs","n":3}"#));
    }

    #[test]
    fn structured_replies_follow_the_schema() {
        let schema = json!({
            "type": "object",
            "properties": {"verdict": {"enum": ["ok", "bad"]}, "score": {"type": "integer", "minimum": 1, "maximum": 3}},
            "required": ["verdict", "score"]
        });
        let mut request = LeafRequest::new(1, json!("x"));
        request.schema = Some(schema.clone());
        let reply = FakeBackend::reply(&request);
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(validator.is_valid(&reply.value), "{}", reply.value);
    }
}
