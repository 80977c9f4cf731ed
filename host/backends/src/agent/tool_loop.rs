//! The turns of a conversation: tool calls until a final answer, and a structured answer that
//! validates against the request's schema, with one repair turn. Providers that cannot combine
//! tools and structured output get the tool phase first and then a tool-free structured turn
//! over its evidence.

use serde_json::Value;

use super::conversation::Conversation;
use crate::chat::{ChatResponse, Message, StructuredOutput};
use crate::schema::ReplyValidator;
use crate::tool::ToolSet;
use crate::{BackendError, BackendErrorKind};

impl Conversation<'_> {
    /// Turns until the model answers without calling tools; tool results (or tool errors) go
    /// back to it. With `structured`, every turn asks for a reply matching the schema.
    pub async fn run_tools(
        &mut self,
        tools: &ToolSet,
        structured: Option<&StructuredOutput>,
    ) -> Result<ChatResponse, BackendError> {
        self.chat.structured = structured.cloned();
        loop {
            let response = self.send().await?;
            if response.tool_calls.is_empty() {
                return Ok(response);
            }
            self.chat.messages.push(Message::Assistant {
                text: response.text.clone(),
                tool_calls: response.tool_calls.clone(),
            });
            for call in response.tool_calls {
                if let Some(observer) = self.observer {
                    observer.tool_called(&call.name);
                }
                let started = std::time::Instant::now();
                let (content, is_error) = match tools.call(&call.name, call.arguments).await {
                    Ok(output) => (output.to_string(), false),
                    Err(error) => (error.to_string(), true),
                };
                if let Some(observer) = self.observer {
                    let error = is_error.then_some(content.as_str());
                    observer.tool_finished(&call.name, started.elapsed(), error);
                }
                self.chat.messages.push(Message::Tool {
                    call_id: call.id,
                    content,
                    is_error,
                });
            }
        }
    }

    /// A reply that validates against `schema`, with one repair turn.
    pub(super) async fn structured(
        &mut self,
        tools: &ToolSet,
        schema: &Value,
    ) -> Result<Value, BackendError> {
        // The schema comes from an untrusted script, and the validator has no limits of its own.
        let validator = ReplyValidator::new(schema)?;
        let output = StructuredOutput {
            name: "reply".into(),
            schema: schema.clone(),
        };
        let response = if tools.is_empty() || self.model.combines_tools_and_structure() {
            self.run_tools(tools, Some(&output)).await?
        } else {
            // Tools first, then a tool-free structured turn over what they found.
            let evidence = self.run_tools(tools, None).await?;
            self.chat.messages.push(Message::Assistant {
                text: evidence.text,
                tool_calls: Vec::new(),
            });
            self.chat.messages.push(Message::User {
                text: "Now give your final answer as JSON matching the required schema.".into(),
            });
            self.chat.tools.clear();
            self.run_tools(&ToolSet::new(), Some(&output)).await?
        };
        let problems = match validated(&validator, &response) {
            Ok(value) => return Ok(value),
            Err(problems) => problems,
        };
        self.chat.tools.clear();
        self.chat.messages.push(Message::Assistant {
            text: raw_text(&response),
            tool_calls: Vec::new(),
        });
        self.chat.messages.push(Message::User {
            text: format!(
                "That reply does not match the required JSON Schema: {problems}. Reply again \
                 with only the corrected JSON."
            ),
        });
        let repaired = self.run_tools(&ToolSet::new(), Some(&output)).await?;
        validated(&validator, &repaired)
            .map_err(|errors| BackendErrorKind::SchemaMismatch { errors }.into())
    }
}

/// The response's value if it is JSON that satisfies the schema, else what is wrong with it.
fn validated(validator: &ReplyValidator<'_>, response: &ChatResponse) -> Result<Value, String> {
    let Some(value) = parsed(response) else {
        return Err("the reply is not JSON".into());
    };
    match validator.problems(&value) {
        None => Ok(value),
        Some(problems) => Err(problems),
    }
}

fn raw_text(response: &ChatResponse) -> String {
    match &response.structured {
        Some(value) => value.to_string(),
        None => response.text.clone(),
    }
}

/// The structured value of a response: the provider's value, or its text parsed as JSON.
fn parsed(response: &ChatResponse) -> Option<Value> {
    if let Some(value) = &response.structured {
        return Some(value.clone());
    }
    let text = response.text.trim();
    // Models often fence JSON in a code block although asked not to.
    let body = text
        .strip_prefix("```json")
        .or_else(|| text.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(text)
        .trim();
    serde_json::from_str(body).ok()
}
