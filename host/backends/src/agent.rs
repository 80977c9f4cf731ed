//! The leaf agent: one `agent(...)` call as a small agent loop over a [`ChatModel`].
//!
//! System prompt = the leaf's base prompt (its template's, or the default) + a short leaf
//! addendum + the call's `instruction`; the user message is the prompt. The loop runs tool
//! calls until the model gives a final answer, bounded by `max_turns`. With a schema, the
//! answer is validated with a real JSON Schema validator and gets one repair turn; providers
//! that cannot combine tools and structured output get the tool phase first and then a
//! tool-free structured turn over its evidence. Calls that share an `instance_id` within a run
//! share one conversation, one at a time.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chat::{ChatModel, ChatRequest, ChatResponse, Message, StructuredOutput};
use crate::schema::ReplyValidator;
use crate::tool::ToolSet;
use crate::{
    BackendError, BackendErrorKind, LeafBackend, LeafObserver, LeafReply, LeafRequest, Usage,
};

/// What every leaf is told, whatever its base prompt.
pub const LEAF_ADDENDUM: &str = "You are one step of a larger automated workflow. Answer the \
task you are given directly and concisely. Return only what is asked: no preamble, no offers \
of further help.";

/// The base prompt of leaves without a template.
pub const DEFAULT_BASE_PROMPT: &str = "You are a careful, capable assistant.";

/// A named leaf template a script selects with `agent_type=`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentTemplate {
    /// Its base prompt (instead of the default one).
    pub base_prompt: String,
    /// Its model: a profile name or a provider model id; `None` for the default model.
    #[serde(default)]
    pub model: Option<String>,
    /// The host tools it may use; `None` for all of them.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

/// How leaf agents behave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// The provider model id leaves use when neither the call nor its template names one.
    pub model: String,
    /// Model profiles scripts may name with `model=`: profile name → provider model id. Only
    /// these names are accepted; a script cannot name a provider model directly.
    pub profiles: BTreeMap<String, String>,
    /// Leaf templates by `agent_type`.
    pub templates: BTreeMap<String, AgentTemplate>,
    /// The base prompt of leaves without a template.
    pub base_prompt: String,
    /// Most model turns one leaf may take (tool calls included) before it fails.
    pub max_turns: u32,
    /// The most tokens one model turn may write.
    pub max_tokens: u32,
}

impl Default for AgentConfig {
    /// Defaults: no profiles or templates, [`DEFAULT_BASE_PROMPT`], 8 turns (enough for a few
    /// rounds of tool use; a leaf that needs more is doing too much), 4096 output tokens per
    /// turn, and the model id `default` (set it to what your provider serves).
    fn default() -> Self {
        Self {
            model: "default".into(),
            profiles: BTreeMap::new(),
            templates: BTreeMap::new(),
            base_prompt: DEFAULT_BASE_PROMPT.into(),
            max_turns: 8,
            max_tokens: 4096,
        }
    }
}

type History = Arc<tokio::sync::Mutex<Vec<Message>>>;

/// A [`LeafBackend`] that runs every leaf as an agent loop over a chat model.
#[derive(Debug)]
pub struct AgentBackend {
    model: Arc<dyn ChatModel>,
    config: AgentConfig,
    tools: ToolSet,
    /// Conversations by (thread id, instance id), dropped when the run finishes.
    histories: Mutex<HashMap<(String, String), History>>,
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
        let base = template.map_or(self.config.base_prompt.as_str(), |t| t.base_prompt.as_str());
        let mut system = format!("{base}\n\n{LEAF_ADDENDUM}");
        if let Some(instruction) = instruction.filter(|i| !i.trim().is_empty()) {
            system.push_str("\n\n");
            system.push_str(instruction);
        }
        system
    }
}

struct Resolved<'a> {
    template: Option<&'a AgentTemplate>,
    model: String,
    tools: ToolSet,
}

/// The prompt as the user message: text as is, JSON values pretty-printed.
pub fn render_prompt(prompt: &Value) -> String {
    match prompt {
        Value::String(text) => text.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}

/// The template, model id and tools a request resolves to under `config` and `tools`; errors
/// name what is unknown.
fn resolve<'a>(
    config: &'a AgentConfig,
    tools: &ToolSet,
    request: &LeafRequest,
) -> Result<Resolved<'a>, BackendError> {
    let template =
        match &request.agent_type {
            Some(name) => Some(config.templates.get(name).ok_or_else(|| {
                BackendErrorKind::UnknownAgentType {
                    name: name.clone(),
                    registered: config.templates.keys().cloned().collect(),
                }
            })?),
            None => None,
        };
    let model = match (&request.model, template.and_then(|t| t.model.as_ref())) {
        (Some(profile), _) => config.profiles.get(profile).cloned().ok_or_else(|| {
            BackendErrorKind::UnknownProfile {
                name: profile.clone(),
                profiles: config.profiles.keys().cloned().collect(),
            }
        })?,
        // A template is the host's own configuration, so it may name a model id directly.
        (None, Some(model)) => config
            .profiles
            .get(model)
            .cloned()
            .unwrap_or_else(|| model.clone()),
        (None, None) => config.model.clone(),
    };
    let names = request
        .tools
        .as_ref()
        .or(template.and_then(|t| t.tools.as_ref()));
    let tools = match names {
        Some(names) => tools.select(names)?,
        None => tools.clone(),
    };
    Ok(Resolved {
        template,
        model,
        tools,
    })
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
}

#[async_trait::async_trait]
impl LeafBackend for AgentBackend {
    fn check(&self, request: &LeafRequest) -> Result<(), BackendError> {
        self.resolve(request).map(|_| ())
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

/// An agent's conversation with a model: turns of tool calls until a final answer, counting
/// turns and tokens. Leaves run on it, and so does the orchestrator's root agent.
#[derive(Debug)]
pub struct Conversation<'a> {
    model: &'a dyn ChatModel,
    chat: ChatRequest,
    /// The conversation's idempotency key; each turn sends `{key}/{turn}`.
    key: Option<String>,
    usage: Usage,
    turns: u32,
    max_turns: u32,
    /// Told of every tool call, when set.
    observer: Option<&'a dyn LeafObserver>,
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

    /// Tells `observer` of every tool call the conversation makes.
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

    async fn send(&mut self) -> Result<ChatResponse, BackendError> {
        if self.turns >= self.max_turns {
            return Err(BackendErrorKind::TurnsExhausted {
                turns: self.max_turns,
            }
            .into());
        }
        self.turns += 1;
        self.chat.idempotency_key = self.key.as_ref().map(|key| format!("{key}/{}", self.turns));
        match self.model.complete(&self.chat).await {
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
    async fn structured(&mut self, tools: &ToolSet, schema: &Value) -> Result<Value, BackendError> {
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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::chat::{ToolCall, ToolSpec};
    use crate::tool::{Tool, ToolError};

    /// A chat model that answers from a queue and records every request.
    #[derive(Debug, Default)]
    struct MockChat {
        replies: Mutex<VecDeque<ChatResponse>>,
        requests: Mutex<Vec<ChatRequest>>,
        separate_structure: bool,
        delay: Duration,
        in_flight: AtomicUsize,
        max_in_flight: AtomicUsize,
    }

    impl MockChat {
        fn replying(replies: Vec<ChatResponse>) -> Arc<Self> {
            Arc::new(Self {
                replies: Mutex::new(replies.into()),
                ..Self::default()
            })
        }

        fn requests(&self) -> Vec<ChatRequest> {
            self.requests.lock().unwrap().clone()
        }
    }

    #[async_trait::async_trait]
    impl ChatModel for MockChat {
        async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            self.requests.lock().unwrap().push(request.clone());
            tokio::time::sleep(self.delay).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let reply = self.replies.lock().unwrap().pop_front();
            // Running out is a provider failure that still billed some input.
            reply.ok_or_else(|| {
                BackendError::terminal("the mock ran out of replies").with_usage(Usage {
                    input_tokens: 7,
                    output_tokens: 0,
                })
            })
        }

        fn combines_tools_and_structure(&self) -> bool {
            !self.separate_structure
        }
    }

    fn text(text: &str, input: u64, output: u64) -> ChatResponse {
        ChatResponse {
            text: text.into(),
            usage: Usage {
                input_tokens: input,
                output_tokens: output,
            },
            ..ChatResponse::default()
        }
    }

    fn calls(calls: &[(&str, &str, Value)]) -> ChatResponse {
        ChatResponse {
            tool_calls: calls
                .iter()
                .map(|(id, name, arguments)| ToolCall {
                    id: (*id).into(),
                    name: (*name).into(),
                    arguments: arguments.clone(),
                })
                .collect(),
            usage: Usage {
                input_tokens: 10,
                output_tokens: 2,
            },
            ..ChatResponse::default()
        }
    }

    #[derive(Debug)]
    struct Upper;

    #[async_trait::async_trait]
    impl Tool for Upper {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "upper".into(),
                description: "Upper-cases text.".into(),
                parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            }
        }

        async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
            Ok(json!(
                arguments["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_uppercase()
            ))
        }
    }

    fn tools() -> ToolSet {
        let mut set = ToolSet::new();
        set.insert(Arc::new(Upper)).unwrap();
        set
    }

    fn config() -> AgentConfig {
        let mut config = AgentConfig {
            model: "base-model".into(),
            ..AgentConfig::default()
        };
        config.profiles.insert("fast".into(), "small-model".into());
        config.templates.insert(
            "critic".into(),
            AgentTemplate {
                base_prompt: "You criticise.".into(),
                model: Some("fast".into()),
                tools: Some(vec![]),
            },
        );
        config
    }

    fn request(prompt: Value) -> LeafRequest {
        let mut request = LeafRequest::new(1, prompt);
        request.thread_id = "t".into();
        request.idempotency_key = "t/1".into();
        request
    }

    #[tokio::test]
    async fn a_text_leaf_gets_the_composed_prompt() {
        let model = MockChat::replying(vec![text("done", 5, 2)]);
        let backend = AgentBackend::new(model.clone(), config(), tools());
        let mut leaf = request(json!({"task": "sum", "n": [1, 2]}));
        leaf.instruction = Some("Be terse.".into());
        let reply = backend.call(&leaf).await.unwrap();
        assert_eq!(reply.value, json!("done"));
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 5,
                output_tokens: 2
            }
        );
        let sent = &model.requests()[0];
        assert_eq!(sent.model, "base-model");
        assert_eq!(
            sent.system,
            format!("{DEFAULT_BASE_PROMPT}\n\n{LEAF_ADDENDUM}\n\nBe terse.")
        );
        assert_eq!(
            sent.messages,
            vec![Message::User {
                // Keys in the script's order.
                text: "{\n  \"task\": \"sum\",\n  \"n\": [\n    1,\n    2\n  ]\n}".into()
            }]
        );
        assert_eq!(sent.tools.len(), 1);
        assert_eq!(sent.idempotency_key.as_deref(), Some("t/1/1"));
    }

    fn keys(model: &MockChat) -> Vec<String> {
        model
            .requests()
            .iter()
            .map(|sent| sent.idempotency_key.clone().unwrap_or_default())
            .collect()
    }

    #[tokio::test]
    async fn every_turn_has_its_own_idempotency_key_and_a_resumed_leaf_repeats_them() {
        let turns = || {
            vec![
                calls(&[("c1", "upper", json!({"text": "a"}))]),
                text("{\"score\": 9}", 1, 1),
                text("{\"score\": 3}", 1, 1),
            ]
        };
        let mut leaf = request(json!("rate"));
        leaf.schema = Some(schema());
        let model = MockChat::replying(turns());
        let backend = AgentBackend::new(model.clone(), config(), tools());
        backend.call(&leaf).await.unwrap();
        // A tool turn, the structured answer, the repair turn: three requests, three keys.
        assert_eq!(keys(&model), ["t/1/1", "t/1/2", "t/1/3"]);

        // The same leaf again (resumed after a crash, say) sends the same keys turn by turn,
        // so a de-duplicating provider recognises each turn.
        let again = MockChat::replying(turns());
        let backend = AgentBackend::new(again.clone(), config(), tools());
        backend.call(&leaf).await.unwrap();
        assert_eq!(keys(&again), keys(&model));

        // Without a key (a local server, say) no turn gets one.
        let model = MockChat::replying(vec![text("ok", 1, 1)]);
        let chat = ChatRequest {
            model: "m".into(),
            system: String::new(),
            messages: vec![Message::User { text: "q".into() }],
            tools: vec![],
            structured: None,
            max_tokens: 10,
            idempotency_key: None,
        };
        let mut conversation = Conversation::new(model.as_ref(), chat, 2);
        conversation.run_tools(&ToolSet::new(), None).await.unwrap();
        assert_eq!(model.requests()[0].idempotency_key, None);
    }

    #[tokio::test]
    async fn a_failed_leaf_reports_the_tokens_of_every_turn_it_took() {
        // Still invalid after the repair turn: both turns count.
        let model = MockChat::replying(vec![text("{\"score\": 9}", 3, 1), text("no", 5, 2)]);
        let backend = AgentBackend::new(model, config(), ToolSet::new());
        let mut leaf = request(json!("rate"));
        leaf.schema = Some(schema());
        let err = backend.call(&leaf).await.unwrap_err();
        assert!(
            err.to_string().contains("even after a repair turn"),
            "{err}"
        );
        let both = Usage {
            input_tokens: 8,
            output_tokens: 3,
        };
        assert_eq!(err.usage(), both);

        // Out of turns.
        let model = MockChat::replying(vec![
            calls(&[("c", "upper", json!({"text": "x"}))]),
            calls(&[("c", "upper", json!({"text": "y"}))]),
        ]);
        let mut short = config();
        short.max_turns = 2;
        let backend = AgentBackend::new(model, short, tools());
        let err = backend.call(&request(json!("go"))).await.unwrap_err();
        assert!(err.to_string().contains("all 2 of its turns"), "{err}");
        assert_eq!(err.kind(), &BackendErrorKind::TurnsExhausted { turns: 2 });
        assert_eq!(err.usage().total(), 2 * (10 + 2));

        // A provider error on the second turn: the first turn's tokens, and those the error
        // itself reports.
        let model = MockChat::replying(vec![calls(&[("c", "upper", json!({"text": "x"}))])]);
        let backend = AgentBackend::new(model, config(), tools());
        let err = backend.call(&request(json!("go"))).await.unwrap_err();
        assert!(err.to_string().contains("ran out of replies"), "{err}");
        assert_eq!(
            err.usage(),
            Usage {
                input_tokens: 10 + 7,
                output_tokens: 2
            }
        );
    }

    #[tokio::test]
    async fn tool_calls_run_until_a_final_answer() {
        let model = MockChat::replying(vec![
            calls(&[
                ("c1", "upper", json!({"text": "a"})),
                ("c2", "upper", json!({"bad": 1})),
            ]),
            text("A it is", 20, 3),
        ]);
        let backend = AgentBackend::new(model.clone(), config(), tools());
        let reply = backend.call(&request(json!("go"))).await.unwrap();
        assert_eq!(reply.value, json!("A it is"));
        assert_eq!(reply.usage.total(), 10 + 2 + 20 + 3);
        let second = &model.requests()[1];
        assert_eq!(second.messages.len(), 4);
        assert_eq!(
            second.messages[2],
            Message::Tool {
                call_id: "c1".into(),
                content: "\"A\"".into(),
                is_error: false
            }
        );
        match &second.messages[3] {
            Message::Tool {
                call_id,
                content,
                is_error,
            } => {
                assert_eq!(call_id, "c2");
                assert!(
                    *is_error && content.contains("invalid arguments"),
                    "{content}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// Writes down what a leaf reports.
    #[derive(Debug, Default)]
    struct Notes(Mutex<Vec<String>>);

    impl LeafObserver for Notes {
        fn tool_called(&self, name: &str) {
            self.0.lock().unwrap().push(format!("called {name}"));
        }

        fn tool_finished(&self, name: &str, _: std::time::Duration, error: Option<&str>) {
            let outcome = match error {
                None => "ok".to_owned(),
                Some(error) => format!("failed: {error}"),
            };
            self.0.lock().unwrap().push(format!("{name} {outcome}"));
        }
    }

    #[tokio::test]
    async fn an_observed_leaf_reports_each_tool_call_as_it_happens() {
        let model = MockChat::replying(vec![
            calls(&[
                ("c1", "upper", json!({"text": "a"})),
                ("c2", "upper", json!({"bad": 1})),
            ]),
            text("done", 1, 1),
        ]);
        let backend = AgentBackend::new(model, config(), tools());
        let notes = Notes::default();
        let reply = backend
            .call_observed(&request(json!("go")), &notes)
            .await
            .unwrap();
        assert_eq!(reply.value, json!("done"));
        let notes = notes.0.into_inner().unwrap();
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert_eq!(notes[..3], ["called upper", "upper ok", "called upper"]);
        assert!(notes[3].starts_with("upper failed: ") && notes[3].contains("invalid arguments"));
        // Through the offline wrapper too.
        let model = MockChat::replying(vec![
            calls(&[("c1", "upper", json!({"text": "b"}))]),
            text("x", 1, 1),
        ]);
        let checked = CheckedBackend::new(
            Arc::new(AgentBackend::new(model, config(), tools())),
            config(),
            tools(),
        );
        let notes = Notes::default();
        checked
            .call_observed(&request(json!("go")), &notes)
            .await
            .unwrap();
        assert_eq!(notes.0.into_inner().unwrap(), ["called upper", "upper ok"]);
    }

    #[tokio::test]
    async fn a_leaf_that_never_stops_calling_tools_fails_after_max_turns() {
        let looping: Vec<ChatResponse> = (0..10)
            .map(|_| calls(&[("c", "upper", json!({"text": "x"}))]))
            .collect();
        let model = MockChat::replying(looping);
        let mut config = config();
        config.max_turns = 3;
        let backend = AgentBackend::new(model.clone(), config, tools());
        let err = backend.call(&request(json!("go"))).await.unwrap_err();
        assert!(err.to_string().contains("all 3 of its turns"), "{err}");
        assert_eq!(err.kind().name(), "turns_exhausted");
        assert!(!err.is_retryable());
        assert_eq!(model.requests().len(), 3);
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {"score": {"type": "integer", "maximum": 5}}, "required": ["score"]})
    }

    #[tokio::test]
    async fn structured_replies_are_validated_and_repaired_once() {
        let model = MockChat::replying(vec![text("```json\n{\"score\": 4}\n```", 1, 1)]);
        let backend = AgentBackend::new(model.clone(), config(), ToolSet::new());
        let mut leaf = request(json!("rate"));
        leaf.schema = Some(schema());
        assert_eq!(
            backend.call(&leaf).await.unwrap().value,
            json!({"score": 4})
        );
        assert_eq!(
            model.requests()[0].structured.as_ref().unwrap().schema,
            schema()
        );

        let model = MockChat::replying(vec![
            text("{\"score\": 9}", 1, 1),
            text("{\"score\": 3}", 1, 1),
        ]);
        let backend = AgentBackend::new(model.clone(), config(), ToolSet::new());
        assert_eq!(
            backend.call(&leaf).await.unwrap().value,
            json!({"score": 3})
        );
        let repair = &model.requests()[1];
        match repair.messages.last().unwrap() {
            Message::User { text } => {
                assert!(text.contains("/score") && text.contains('9'), "{text}")
            }
            other => panic!("{other:?}"),
        }

        let model = MockChat::replying(vec![text("{\"score\": 9}", 1, 1), text("not json", 1, 1)]);
        let backend = AgentBackend::new(model.clone(), config(), ToolSet::new());
        let err = backend.call(&leaf).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("even after a repair turn: the reply is not JSON"),
            "{err}"
        );
        assert_eq!(
            err.kind(),
            &BackendErrorKind::SchemaMismatch {
                errors: "the reply is not JSON".into()
            }
        );
        assert!(!err.is_retryable());
    }

    #[tokio::test]
    async fn without_combined_turns_tools_come_first_then_a_structured_turn() {
        let model = Arc::new(MockChat {
            replies: Mutex::new(
                vec![
                    calls(&[("c1", "upper", json!({"text": "x"}))]),
                    text("evidence: X", 1, 1),
                    ChatResponse {
                        structured: Some(json!({"score": 2})),
                        ..ChatResponse::default()
                    },
                ]
                .into(),
            ),
            separate_structure: true,
            ..MockChat::default()
        });
        let backend = AgentBackend::new(model.clone(), config(), tools());
        let mut leaf = request(json!("rate with tools"));
        leaf.schema = Some(schema());
        assert_eq!(
            backend.call(&leaf).await.unwrap().value,
            json!({"score": 2})
        );
        let sent = model.requests();
        assert!(sent[0].structured.is_none() && !sent[0].tools.is_empty());
        assert!(sent[2].structured.is_some() && sent[2].tools.is_empty());
    }

    #[tokio::test]
    async fn an_offline_backend_is_held_to_the_same_allowlists() {
        let backend = CheckedBackend::new(Arc::new(crate::FakeBackend::new()), config(), tools());
        let mut leaf = request(json!("x"));
        leaf.model = Some("gpt-5".into());
        assert_eq!(
            backend.check(&leaf).unwrap_err().to_string(),
            "unknown model profile \"gpt-5\"; profiles: fast"
        );
        leaf.model = None;
        leaf.tools = Some(vec!["rm".into()]);
        assert!(
            backend
                .check(&leaf)
                .unwrap_err()
                .to_string()
                .contains("\"rm\"")
        );
        leaf.tools = None;
        leaf.agent_type = Some("poet".into());
        assert!(backend.check(&leaf).is_err());
        leaf.agent_type = Some("critic".into());
        leaf.model = Some("fast".into());
        leaf.tools = Some(vec!["upper".into()]);
        backend.check(&leaf).unwrap();
        let reply = backend.call(&leaf).await.unwrap();
        assert_eq!(reply, crate::FakeBackend::new().call(&leaf).await.unwrap());
    }

    #[tokio::test]
    async fn profiles_templates_and_tool_lists_are_allowlists() {
        let backend = AgentBackend::new(MockChat::replying(vec![]), config(), tools());
        let mut leaf = request(json!("x"));
        leaf.model = Some("gpt-5".into());
        assert_eq!(
            backend.check(&leaf).unwrap_err().to_string(),
            "unknown model profile \"gpt-5\"; profiles: fast"
        );
        assert_eq!(
            backend.check(&leaf).unwrap_err().kind(),
            &BackendErrorKind::UnknownProfile {
                name: "gpt-5".into(),
                profiles: vec!["fast".into()]
            }
        );
        let mut leaf = request(json!("x"));
        leaf.tools = Some(vec!["rm".into()]);
        assert!(
            backend
                .check(&leaf)
                .unwrap_err()
                .to_string()
                .contains("\"rm\"")
        );
        let mut leaf = request(json!("x"));
        leaf.agent_type = Some("poet".into());
        assert!(
            backend
                .check(&leaf)
                .unwrap_err()
                .to_string()
                .contains("registered: critic")
        );

        let model = MockChat::replying(vec![text("a", 1, 1), text("b", 1, 1), text("c", 1, 1)]);
        let backend = AgentBackend::new(model.clone(), config(), tools());
        let mut fast = request(json!("x"));
        fast.model = Some("fast".into());
        fast.tools = Some(vec![]);
        backend.call(&fast).await.unwrap();
        let mut critic = request(json!("x"));
        critic.agent_type = Some("critic".into());
        backend.call(&critic).await.unwrap();
        let mut narrowed = request(json!("x"));
        narrowed.tools = Some(vec!["upper".into()]);
        backend.call(&narrowed).await.unwrap();
        let sent = model.requests();
        assert_eq!(
            (sent[0].model.as_str(), sent[0].tools.len()),
            ("small-model", 0)
        );
        assert_eq!(sent[1].model, "small-model");
        assert!(sent[1].system.starts_with("You criticise.") && sent[1].tools.is_empty());
        assert_eq!(sent[2].tools.len(), 1);
    }

    #[tokio::test]
    async fn an_instance_id_shares_one_conversation_per_run() {
        let model = MockChat::replying(vec![
            text("first", 1, 1),
            text("second", 1, 1),
            text("other", 1, 1),
        ]);
        let backend = AgentBackend::new(model.clone(), config(), ToolSet::new());
        let mut one = request(json!("q1"));
        one.instance_id = Some("writer".into());
        backend.call(&one).await.unwrap();
        let mut two = request(json!("q2"));
        two.instance_id = Some("writer".into());
        backend.call(&two).await.unwrap();
        let mut elsewhere = two.clone();
        elsewhere.thread_id = "another run".into();
        backend.call(&elsewhere).await.unwrap();
        let sent = model.requests();
        assert_eq!(
            sent[1].messages,
            vec![
                Message::User { text: "q1".into() },
                Message::Assistant {
                    text: "first".into(),
                    tool_calls: vec![]
                },
                Message::User { text: "q2".into() },
            ]
        );
        assert_eq!(sent[2].messages.len(), 1);
        backend.run_finished("t");
        assert!(
            backend
                .histories
                .lock()
                .unwrap()
                .keys()
                .all(|(thread, _)| thread != "t")
        );
    }

    #[tokio::test]
    async fn concurrent_calls_with_one_instance_id_take_turns() {
        let model = Arc::new(MockChat {
            replies: Mutex::new((0..4).map(|i| text(&i.to_string(), 1, 1)).collect()),
            delay: Duration::from_millis(20),
            ..MockChat::default()
        });
        let backend = Arc::new(AgentBackend::new(model.clone(), config(), ToolSet::new()));
        let mut tasks = Vec::new();
        for i in 0..4 {
            let backend = backend.clone();
            tasks.push(tokio::spawn(async move {
                let mut leaf = request(json!(format!("q{i}")));
                leaf.instance_id = Some("same".into());
                backend.call(&leaf).await.unwrap()
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(model.max_in_flight.load(Ordering::SeqCst), 1);
        let last = model.requests().pop().unwrap();
        assert_eq!(last.messages.len(), 7);
    }

    #[tokio::test]
    async fn replayed_leaves_rebuild_the_conversation() {
        let model = MockChat::replying(vec![text("live", 1, 1)]);
        let backend = AgentBackend::new(model.clone(), config(), ToolSet::new());
        let mut journaled = request(json!("earlier"));
        journaled.instance_id = Some("w".into());
        backend.replayed(
            &journaled,
            &LeafReply {
                value: json!("from the journal"),
                usage: Usage::default(),
            },
        );
        let mut live = request(json!("now"));
        live.instance_id = Some("w".into());
        backend.call(&live).await.unwrap();
        assert_eq!(model.requests()[0].messages.len(), 3);
    }
}
