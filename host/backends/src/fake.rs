//! The offline default backend: deterministic replies with no key and no network.
//!
//! The same request always gets the same reply and token count. A text reply quotes the
//! prompt, so a workflow's data flow is visible in its result; a structured reply is valid
//! against the request's schema (see `schema`), or the leaf fails saying why there is
//! none.

use serde_json::Value;

use crate::chat::{ChatModel, ChatRequest, ChatResponse, Message};
use crate::schema::SchemaError;
use crate::{
    BackendError, LeafBackend, LeafReply, LeafRequest, Usage, estimate_tokens, schema, stable_hash,
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
    ///
    /// A structured reply is validated against the request's schema. A schema this backend
    /// cannot satisfy (one that asks for more than a reply may hold, a `pattern` or `format`
    /// it does not produce, an unsatisfiable one) fails the leaf with a terminal error, since
    /// asking again gets the same answer.
    pub fn reply(request: &LeafRequest) -> Result<LeafReply, BackendError> {
        let prompt = request.prompt_text();
        let seed = request_seed(request, &prompt);
        let value = match &request.schema {
            Some(schema) => schema::value_for(schema, seed)
                .map_err(|reason| SchemaError::Unsatisfiable { reason })?,
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
        Ok(LeafReply {
            value,
            usage: Usage {
                input_tokens: estimate_tokens(&prompt) + estimate_tokens(instruction),
                output_tokens: output,
                estimated_tokens: 0,
            },
        })
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
        Self::reply(request)
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
                estimated_tokens: 0,
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
        let first = FakeBackend::reply(&request).unwrap();
        assert_eq!(first.value, json!("[fake reviewer] Review the parser"));
        assert_eq!(first, FakeBackend::reply(&request).unwrap());
        assert!(first.usage.input_tokens > 0 && first.usage.output_tokens > 0);
    }

    #[test]
    fn json_prompts_are_quoted_as_json() {
        let request = LeafRequest::new(1, json!({"file": "ü.rs", "n": 3}));
        let reply = FakeBackend::reply(&request).unwrap();
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
        let reply = FakeBackend::reply(&request).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(validator.is_valid(&reply.value), "{}", reply.value);
    }

    /// The schemas of the hardening review: each fails the leaf quickly, never panics and
    /// never allocates what it asks for.
    #[test]
    fn hostile_schemas_fail_the_leaf_quickly() {
        let wide: serde_json::Map<String, Value> = (0..100)
            .map(|i| (format!("p{i}"), json!({"$ref": "#"})))
            .collect();
        for schema in [
            json!({"type": "string", "minLength": 100_000_000_000u64}),
            json!({"type": "array", "minItems": 1_000_000_000}),
            json!({"type": "object", "properties": wide}),
            json!({"anyOf": [{"$ref": "#"}, {"type": "string"}]}),
            json!({"type": "string", "pattern": "^[0-9]+$"}),
        ] {
            let mut request = LeafRequest::new(1, json!("x"));
            request.schema = Some(schema.clone());
            let start = std::time::Instant::now();
            let err = FakeBackend::reply(&request).unwrap_err();
            assert!(
                start.elapsed() < std::time::Duration::from_secs(1),
                "{schema}: {:?}",
                start.elapsed()
            );
            assert!(
                err.to_string()
                    .starts_with("the fake backend cannot build a reply for this schema: "),
                "{err}"
            );
            assert!(!err.is_retryable() && err.usage() == Usage::default());
        }
    }

    #[test]
    fn bounds_that_saturate_still_give_a_valid_integer() {
        let schema = json!({"type": "integer", "minimum": -1e19, "maximum": 1e19});
        let mut request = LeafRequest::new(1, json!("x"));
        request.schema = Some(schema.clone());
        let reply = FakeBackend::reply(&request).unwrap();
        assert!(
            jsonschema::is_valid(&schema, &reply.value),
            "{}",
            reply.value
        );
    }
}
