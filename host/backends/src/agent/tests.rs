//! The leaf agent over a scripted chat model.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::chat::{ChatModel, ChatRequest, ChatResponse, Message, ToolCall};
use crate::tool::ToolSpec;
use crate::tool::{Tool, ToolError, ToolSet};
use crate::{
    BackendError, BackendErrorKind, LeafBackend, LeafObserver, LeafReply, LeafRequest, Usage,
};

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
                estimated_tokens: 0,
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
            estimated_tokens: 0,
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
            estimated_tokens: 0,
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
            description: None,
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
            output_tokens: 2,
            estimated_tokens: 0
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
        estimated_tokens: 0,
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
            output_tokens: 2,
            estimated_tokens: 0
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
            assert!(text.contains("/score") && text.contains('9'), "{text}");
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
    one.instruction = Some("Write in French.".into());
    backend.call(&one).await.unwrap();
    // The second call repeats no instruction: the conversation keeps the exchange, not the
    // first call's options.
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
    assert!(sent[0].system.contains("Write in French."));
    assert!(!sent[1].system.contains("Write in French."));
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

#[test]
fn an_estimate_counts_what_the_agent_would_send_on_the_model_it_would_use() {
    let mut config = config();
    config.model = "gpt-4o".into();
    config.max_tokens = 500;
    let agent = AgentBackend::new(MockChat::replying(vec![]), config.clone(), tools());
    let checked = CheckedBackend::new(Arc::new(crate::FakeBackend::new()), config, tools());
    let mut leaf = request(json!("Review the parser"));
    let plain = agent.estimate(&leaf);
    assert_eq!(plain, checked.estimate(&leaf));
    assert_eq!((plain.profile, plain.model.as_str()), (None, "gpt-4o"));
    assert_eq!(plain.tokenizer, crate::Tokenizer::O200kBase);
    assert_eq!(plain.max_output_tokens, 500);
    assert_eq!(plain.tools, vec!["upper".to_owned()]);
    // The system prompt and the tool's definition are sent too.
    let system = super::config::system_prompt(&AgentConfig::default(), None, None);
    assert!(plain.input_tokens > crate::Tokenizer::O200kBase.count(&system));
    // A template's model is its profile, resolved to the provider's id; its tools are none.
    leaf.agent_type = Some("critic".into());
    leaf.schema = Some(json!({"enum": ["ship", "hold"]}));
    let critic = agent.estimate(&leaf);
    assert_eq!(critic.profile.as_deref(), Some("fast"));
    assert_eq!(critic.model, "small-model");
    assert_eq!(critic.tokenizer, crate::Tokenizer::Approximate);
    assert!(critic.tools.is_empty());
    assert_eq!(
        (critic.max_output_tokens, critic.output_bounded_by_schema),
        (6, true)
    );
}

#[test]
fn a_profile_is_a_model_id_or_a_described_model() {
    let config: AgentConfig = serde_json::from_value(json!({
        "profiles": {
            "fast": {"model": "small-model", "description": "cheap, for sweeps"},
            "deep": "large-model"
        }
    }))
    .unwrap();
    assert_eq!(
        config.profiles["fast"],
        ModelProfile::new("small-model").with_description("cheap, for sweeps")
    );
    assert_eq!(config.profiles["deep"], ModelProfile::new("large-model"));
    // Written back, each is an object; read again, the same.
    let text = serde_json::to_string(&config).unwrap();
    assert!(text.contains(r#""deep":{"model":"large-model"}"#), "{text}");
    assert_eq!(serde_json::from_str::<AgentConfig>(&text).unwrap(), config);
    for wrong in [
        json!({"profiles": {"fast": {"model": "m", "descripton": "typo"}}}),
        json!({"profiles": {"fast": {"description": "no model"}}}),
        json!({"profiles": {"fast": 5}}),
    ] {
        assert!(
            serde_json::from_value::<AgentConfig>(wrong.clone()).is_err(),
            "{wrong}"
        );
    }
}

#[test]
fn the_catalog_is_the_configuration_a_request_is_checked_against() {
    let mut config = config();
    config.profiles.insert(
        "deep".into(),
        ModelProfile::new("large-model").with_description("slow, for hard calls"),
    );
    let agent = AgentBackend::new(MockChat::replying(vec![]), config.clone(), tools());
    let catalog = agent.catalog();
    assert_eq!(
        catalog.profiles.keys().collect::<Vec<_>>(),
        ["deep", "fast"]
    );
    assert_eq!(
        catalog.profiles["deep"].description.as_deref(),
        Some("slow, for hard calls")
    );
    assert_eq!(catalog.templates.keys().collect::<Vec<_>>(), ["critic"]);
    assert_eq!(
        catalog
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["upper"]
    );
    // An offline backend held to the same configuration offers the same; a bare one nothing.
    let checked = CheckedBackend::new(Arc::new(crate::FakeBackend::new()), config, tools());
    assert_eq!(checked.catalog(), catalog);
    assert_eq!(
        crate::FakeBackend::new().catalog(),
        crate::LeafCatalog::default()
    );
}
