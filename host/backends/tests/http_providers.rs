//! The HTTP chat providers against a loopback server that speaks each wire protocol as the
//! providers document it: request shapes, reply parsing, usage, retries and every failure a
//! provider or the network produces, and leaf agents (structured output with its repair turn,
//! tool use) driven over both. Live tests against the real APIs run only when
//! `FLOWBOX_LIVE_TESTS=1` and `OPENAI_API_KEY` / `ANTHROPIC_API_KEY` are set.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowbox_backends::http::{AnthropicChat, MAX_RESPONSE_BYTES, OpenAiChat, RetryPolicy};
use flowbox_backends::{
    AgentBackend, AgentConfig, BackendError, BackendErrorKind, ChatModel, ChatRequest,
    ChatResponse, LeafBackend, LeafRequest, Message, StructuredOutput, ToolCall, ToolSet, ToolSpec,
    TransportCause, Usage,
};
use flowbox_testkit::server::anthropic_reply;
use flowbox_testkit::{FnTool, Protocol, Recorded, Reply, TestServer};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

/// An API key that a 401 body echoes back; it must never reach an error message.
const KEY: &str = "sk-test-SECRET-7f3a9c2e";
const IDEMPOTENCY_KEY: &str = "thread-7/call-3";

/// Fast backoff so that a wait of a second can only come from `Retry-After`.
fn policy() -> RetryPolicy {
    RetryPolicy::default()
        .with_initial_backoff(Duration::from_millis(10))
        .with_max_backoff(Duration::from_secs(2))
        .with_request_timeout(Duration::from_secs(5))
}

fn hello() -> ChatRequest {
    ChatRequest {
        model: "test-model".into(),
        system: "Be brief.".into(),
        messages: vec![Message::User {
            text: "Say hi".into(),
        }],
        tools: vec![],
        structured: None,
        max_tokens: 256,
        idempotency_key: Some(IDEMPOTENCY_KEY.into()),
    }
}

fn weather_tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Current weather in a city.".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        },
        ToolSpec {
            name: "get_time".into(),
            description: "Local time in a city.".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        },
    ]
}

/// A question for which the model needs both of [`weather_tools`].
fn weather_question() -> ChatRequest {
    let mut request = hello();
    request.tools = weather_tools();
    request.messages = vec![Message::User {
        text: "Weather and time in Paris?".into(),
    }];
    request
}

/// The conversation after the model said `text`, asked for both tools and they answered (one
/// failed).
fn after_tools(text: &str, calls: Vec<ToolCall>) -> ChatRequest {
    let mut request = weather_question();
    request.messages.extend([
        Message::Assistant {
            text: text.into(),
            tool_calls: calls,
        },
        Message::Tool {
            call_id: "call_1".into(),
            content: r#"{"temp_c": 18}"#.into(),
            is_error: false,
        },
        Message::Tool {
            call_id: "call_2".into(),
            content: "clock unavailable".into(),
            is_error: true,
        },
    ]);
    request
}

fn two_calls() -> Vec<ToolCall> {
    vec![
        ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}),
        },
        ToolCall {
            id: "call_2".into(),
            name: "get_time".into(),
            arguments: json!({"city": "Paris"}),
        },
    ]
}

fn review_schema() -> Value {
    json!({"type": "object", "properties": {"verdict": {"type": "string"}}, "required": ["verdict"]})
}

/// [`hello`], asking for a structured `review` reply.
fn review() -> ChatRequest {
    let mut request = hello();
    request.structured = Some(StructuredOutput {
        name: "review".into(),
        schema: review_schema(),
    });
    request
}

fn message_of(error: &BackendError) -> String {
    error.to_string()
}

/// The fields of an `Http` error: status, provider code, `Retry-After`, attempts.
fn http_failure(error: &BackendError) -> (u16, Option<&str>, Option<Duration>, u32) {
    match error.kind() {
        BackendErrorKind::Http {
            status,
            provider_code,
            retry_after,
            attempts,
            ..
        } => (*status, provider_code.as_deref(), *retry_after, *attempts),
        other => panic!("not an HTTP failure: {other:?}"),
    }
}

/// The cause and attempts of a `Transport` error.
fn transport_failure(error: &BackendError) -> (TransportCause, u32) {
    match error.kind() {
        BackendErrorKind::Transport {
            cause, attempts, ..
        } => (*cause, *attempts),
        other => panic!("not a transport failure: {other:?}"),
    }
}

/// The gap between two recorded requests.
fn gap(requests: &[Recorded], first: usize) -> Duration {
    requests[first + 1].at - requests[first].at
}

// ---------------------------------------------------------------------------------------------
// OpenAI-compatible Chat Completions only

/// OpenAI's newer models refuse `max_tokens`; the client switches to `max_completion_tokens`
/// once told, and stays with it.
#[tokio::test]
async fn openai_newer_models_get_max_completion_tokens() {
    let server = TestServer::start();
    server.push(Reply::json(
        400,
        json!({"error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. \
                        Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter",
        }}),
    ));
    server.push(Reply::json(200, Protocol::OpenAi.text("first")));
    server.push(Reply::json(200, Protocol::OpenAi.text("second")));
    let model = Provider::OpenAi.model(&server, policy());
    let first = model.complete(&hello()).await.unwrap();
    assert_eq!(
        (first.text.as_str(), first.retries),
        ("first", 0),
        "the refusal is no retry"
    );
    let second = model.complete(&hello()).await.unwrap();
    assert_eq!((second.text.as_str(), second.retries), ("second", 0));
    let requests = server.requests();
    let sent: Vec<Value> = requests.iter().map(Recorded::json).collect();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[0]["max_tokens"], 256);
    // The request sent again has a body of its own, so a key of its own.
    let keys: Vec<_> = requests
        .iter()
        .map(|r| r.header("idempotency-key"))
        .collect();
    let retried = format!("{IDEMPOTENCY_KEY}/max_completion_tokens");
    assert_eq!(
        keys,
        [
            Some(IDEMPOTENCY_KEY),
            Some(retried.as_str()),
            Some(IDEMPOTENCY_KEY)
        ]
    );
    for later in &sent[1..] {
        assert_eq!(later["max_completion_tokens"], 256, "{later}");
        assert!(later.get("max_tokens").is_none(), "{later}");
    }
    // Any other refusal is the caller's to see, and is not sent again.
    server.push(Reply::json(
        400,
        json!({"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}),
    ));
    let other = Provider::OpenAi
        .complete(&server, &hello())
        .await
        .unwrap_err();
    assert!(message_of(&other).contains("max_tokens is too large"));
    assert_eq!(
        http_failure(&other),
        (400, Some("invalid_request_error"), None, 1)
    );
    assert_eq!(server.requests().len(), 4);
}

/// What a benchmark against a local server does: plain HTTP, no key, no idempotency key.
#[tokio::test]
async fn openai_without_a_key_talks_plain_http_to_a_local_server() {
    let server = TestServer::start();
    server.push(Reply::json(200, Protocol::OpenAi.text("local")));
    let model = OpenAiChat::new(format!("{}/v1", server.url()), None, policy()).unwrap();
    let mut request = hello();
    request.idempotency_key = None;
    request.system = String::new();
    assert_eq!(model.complete(&request).await.unwrap().text, "local");
    let [sent] = server.requests().try_into().unwrap();
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.header("idempotency-key"), None);
    assert_eq!(
        sent.json()["messages"],
        json!([{"role": "user", "content": "Say hi"}])
    );
}

/// Anthropic's tool input is a JSON object on the wire; OpenAI's arguments are text the model
/// wrote, which may not parse.
#[tokio::test]
async fn openai_tool_arguments_that_are_not_json_fail_clearly() {
    let server = TestServer::start();
    server.push(Reply::json(
        200,
        json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": Paris"}},
        ]}}]}),
    ));
    let error = Provider::OpenAi
        .complete(&server, &hello())
        .await
        .unwrap_err();
    let message = message_of(&error);
    assert!(
        message.contains("arguments for tool `get_weather` are not valid JSON"),
        "{message}"
    );
    // A new sample may be valid JSON, so the caller may try again; the client itself did not.
    assert!(error.is_retryable());
    assert!(
        matches!(error.kind(), BackendErrorKind::MalformedToolArguments { tool, .. } if tool == "get_weather"),
        "{error:?}"
    );
    assert!(message.ends_with("(retryable)"), "{message}");
    assert_eq!(server.requests().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages only

/// Cached prompt tokens are reported apart from `input_tokens`; all of them were read.
#[tokio::test]
async fn anthropic_cache_writes_and_reads_count_as_input_tokens() {
    let server = TestServer::start();
    let mut reply = Protocol::Anthropic.text("Hi!");
    reply["usage"]["cache_creation_input_tokens"] = json!(50);
    reply["usage"]["cache_read_input_tokens"] = json!(100);
    server.push(Reply::json(200, reply));
    let reply = Provider::Anthropic
        .complete(&server, &hello())
        .await
        .unwrap();
    assert_eq!(reply.text, "Hi!");
    assert_eq!(reply.usage, Usage::reported(30 + 50 + 100, 7));
}

#[tokio::test]
async fn anthropic_version_header_can_be_changed() {
    let server = TestServer::start();
    server.push(Reply::json(200, Protocol::Anthropic.text("ok")));
    let model = AnthropicChat::new(server.url(), KEY.into(), policy())
        .unwrap()
        .with_version("2099-01-01")
        .unwrap();
    model.complete(&hello()).await.unwrap();
    assert_eq!(
        server.requests()[0].header("anthropic-version"),
        Some("2099-01-01")
    );
    let error = AnthropicChat::new(server.url(), KEY.into(), policy())
        .unwrap()
        .with_version("bad\nversion")
        .unwrap_err();
    assert!(!error.is_retryable());
    assert!(message_of(&error).ends_with("(not retryable)"), "{error}");
    assert_eq!(error.kind().name(), "setup");
    let error = AnthropicChat::new(server.url(), String::new(), policy()).unwrap_err();
    assert!(message_of(&error).contains("API key is empty"), "{error}");
    assert!(
        matches!(error.kind(), BackendErrorKind::Setup { .. }),
        "{error:?}"
    );
}

/// The forced tool is how the structured reply comes back; a finished reply without it is an
/// error, not an empty value.
#[tokio::test]
async fn anthropic_structured_reply_without_the_forced_tool_is_an_error() {
    let server = TestServer::start();
    server.push(Reply::json(200, Protocol::Anthropic.text("Well")));
    let error = Provider::Anthropic
        .complete(&server, &review())
        .await
        .unwrap_err();
    let message = message_of(&error);
    assert!(
        message.contains("no `review` tool call") && message.contains("end_turn"),
        "{message}"
    );
    assert!(
        matches!(error.kind(), BackendErrorKind::BadReply { .. }),
        "{error:?}"
    );
    assert!(!error.is_retryable());
}

#[tokio::test]
async fn anthropic_structured_output_for_a_non_object_schema_is_wrapped() {
    let server = TestServer::start();
    server.push(Reply::json(
        200,
        anthropic_reply(
            json!([{"type": "tool_use", "id": "toolu_1", "name": "items", "input": {"value": ["a", "b"]}}]),
            "tool_use",
        ),
    ));
    let schema = json!({"type": "array", "items": {"type": "string"}});
    let mut request = hello();
    request.structured = Some(StructuredOutput {
        name: "items".into(),
        schema: schema.clone(),
    });
    let reply = Provider::Anthropic
        .complete(&server, &request)
        .await
        .unwrap();
    assert_eq!(reply.structured, Some(json!(["a", "b"])));
    assert_eq!(
        server.requests()[0].json()["tools"][0]["input_schema"],
        json!({"type": "object", "properties": {"value": schema}, "required": ["value"]})
    );
}

#[tokio::test]
async fn anthropic_overloaded_529_is_retried() {
    let server = TestServer::start();
    server.push(Reply::json(
        529,
        Protocol::Anthropic.error("overloaded_error", "Overloaded"),
    ));
    server.push(Reply::json(200, Protocol::Anthropic.text("back")));
    let reply = Provider::Anthropic
        .complete(&server, &hello())
        .await
        .unwrap();
    assert_eq!((reply.text.as_str(), reply.retries), ("back", 1));
    assert_eq!(server.requests().len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Both providers: one check each, run once per provider

/// A provider under test: how its client is built, and the bodies it is sent and answers with
/// where the two protocols differ.
#[derive(Debug, Clone, Copy)]
enum Provider {
    OpenAi,
    Anthropic,
}

impl Provider {
    /// Its wire protocol, whose bodies the test server answers with.
    fn protocol(self) -> Protocol {
        match self {
            Self::OpenAi => Protocol::OpenAi,
            Self::Anthropic => Protocol::Anthropic,
        }
    }

    /// A client of this provider at `server`, sending [`KEY`].
    fn model(self, server: &TestServer, policy: RetryPolicy) -> Box<dyn ChatModel> {
        self.model_at(&server.url(), policy)
    }

    /// Sends `request` to a new client of this provider at `server`.
    async fn complete(
        self,
        server: &TestServer,
        request: &ChatRequest,
    ) -> Result<ChatResponse, BackendError> {
        self.model(server, policy()).complete(request).await
    }

    /// A client of this provider's API at `origin` (`http://127.0.0.1:PORT`), sending [`KEY`].
    fn model_at(self, origin: &str, policy: RetryPolicy) -> Box<dyn ChatModel> {
        match self {
            // The trailing slash is the client's to drop.
            Self::OpenAi => Box::new(
                OpenAiChat::new(format!("{origin}/v1/"), Some(KEY.into()), policy).unwrap(),
            ),
            Self::Anthropic => Box::new(AnthropicChat::new(origin, KEY.into(), policy).unwrap()),
        }
    }

    /// How its error messages begin.
    fn label(self) -> &'static str {
        match self {
            Self::OpenAi => "OpenAI-compatible API at http://127.0.0.1:",
            Self::Anthropic => "Anthropic API at http://127.0.0.1:",
        }
    }

    fn text(self, text: &str) -> Value {
        self.protocol().text(text)
    }

    /// An error body in the provider's documented shape.
    fn error(self, kind: &str, message: &str) -> Value {
        self.protocol().error(kind, message)
    }

    /// Tokens each reply of [`Self::text`] and [`Self::structured`] reports.
    fn usage(self) -> Usage {
        self.protocol().usage()
    }

    /// A reply carrying `value` as the structured answer `name`: JSON text for OpenAI's
    /// `response_format`, the forced tool's input for Anthropic.
    fn structured(self, name: &str, value: Value) -> Value {
        match self {
            Self::OpenAi => self.text(&value.to_string()),
            Self::Anthropic => self.protocol().tool_calls(
                "",
                &[ToolCall {
                    id: "toolu_9".into(),
                    name: name.into(),
                    arguments: value,
                }],
            ),
        }
    }

    /// The text and structured value the client returns for [`Self::structured`]: OpenAI's JSON
    /// comes back as text, for the agent loop to parse and validate.
    fn structured_answer(self, value: Value) -> (String, Option<Value>) {
        match self {
            Self::OpenAi => (value.to_string(), None),
            Self::Anthropic => (String::new(), Some(value)),
        }
    }

    /// Whether one turn may both offer tools and ask for a structured reply (Anthropic's forced
    /// tool rules out the others).
    fn combines_tools_and_structure(self) -> bool {
        match self {
            Self::OpenAi => true,
            Self::Anthropic => false,
        }
    }

    /// The fields of a request body that ask for a structured reply `name` matching `schema`.
    fn sent_structure(self, name: &str, schema: &Value) -> Vec<(&'static str, Value)> {
        match self {
            Self::OpenAi => vec![(
                "response_format",
                json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": false}}),
            )],
            Self::Anthropic => vec![
                ("tool_choice", json!({"type": "tool", "name": name})),
                (
                    "tools",
                    json!([{"name": name,
                        "description": "Give your final answer by calling this tool; its input is the answer.",
                        "input_schema": schema}]),
                ),
            ],
        }
    }

    /// The headers that carry the key and the API version, and what each should be.
    fn key_headers(self) -> [(&'static str, Option<String>); 3] {
        match self {
            Self::OpenAi => [
                ("authorization", Some(format!("Bearer {KEY}"))),
                ("x-api-key", None),
                ("anthropic-version", None),
            ],
            Self::Anthropic => [
                ("authorization", None),
                ("x-api-key", Some(KEY.into())),
                ("anthropic-version", Some("2023-06-01".into())),
            ],
        }
    }

    /// [`hello`] as sent.
    fn sent_hello(self) -> Value {
        match self {
            Self::OpenAi => json!({
                "model": "test-model",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Say hi"},
                ],
                "max_tokens": 256,
            }),
            Self::Anthropic => json!({
                "model": "test-model",
                "max_tokens": 256,
                "system": "Be brief.",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hi"}]}],
            }),
        }
    }

    /// [`weather_tools`] as sent.
    fn sent_weather_tools(self) -> Value {
        match self {
            Self::OpenAi => json!([
                {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
                {"type": "function", "function": {"name": "get_time", "description": "Local time in a city.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
            ]),
            Self::Anthropic => json!([
                {"name": "get_weather", "description": "Current weather in a city.",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                {"name": "get_time", "description": "Local time in a city.",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
            ]),
        }
    }

    /// The messages of `after_tools("Let me look.", two_calls())` as sent. OpenAI has no error
    /// flag on a tool result, so the text says it; Anthropic wants every result of one turn in
    /// the one user turn after it.
    fn sent_after_tools(self) -> Value {
        match self {
            Self::OpenAi => json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather and time in Paris?"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{\"city\":\"Paris\"}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 18}"},
                {"role": "tool", "tool_call_id": "call_2", "content": "Error: clock unavailable"},
            ]),
            Self::Anthropic => json!([
                {"role": "user", "content": [{"type": "text", "text": "Weather and time in Paris?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {"city": "Paris"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "{\"temp_c\": 18}", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "clock unavailable", "is_error": true},
                ]},
            ]),
        }
    }

    /// The assistant turn of `after_tools("", two_calls())` as sent: a turn that only called
    /// tools has null content for OpenAI and no empty text block for Anthropic (its API
    /// rejects those).
    fn sent_tool_only_turn(self) -> Value {
        match self {
            Self::OpenAi => json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{\"city\":\"Paris\"}"}},
            ]}),
            Self::Anthropic => json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {"city": "Paris"}},
            ]}),
        }
    }

    /// The result `content` of tool call `id` as sent, in a message of its own.
    fn sent_tool_result(self, id: &str, content: &str) -> Value {
        match self {
            Self::OpenAi => json!({"role": "tool", "tool_call_id": id, "content": content}),
            Self::Anthropic => json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": content, "is_error": false},
            ]}),
        }
    }

    /// The names of the tools a request body offers.
    fn tool_names(self, body: &Value) -> Vec<String> {
        let Some(tools) = body["tools"].as_array() else {
            return Vec::new();
        };
        tools
            .iter()
            .map(|tool| match self {
                Self::OpenAi => &tool["function"]["name"],
                Self::Anthropic => &tool["name"],
            })
            .map(|name| name.as_str().unwrap().to_owned())
            .collect()
    }

    /// The text of the last user message of a request as the provider received it.
    fn last_user_text(self, request: &Recorded) -> String {
        let body = request.json();
        let messages = body["messages"].as_array().unwrap();
        let last = messages.last().unwrap();
        assert_eq!(last["role"], "user", "{body}");
        match self {
            Self::OpenAi => last["content"].as_str().unwrap().to_owned(),
            Self::Anthropic => last["content"].to_string(),
        }
    }

    /// A reply that ran out of its 64 output tokens halfway through a call of `length`.
    fn cut_off_mid_call(self) -> Value {
        match self {
            Self::OpenAi => json!({
                "choices": [{"index": 0, "finish_reason": "length", "message": {
                    "role": "assistant", "content": "The answer is",
                    "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "length", "arguments": "{\"text\": \"flo"}}],
                }}],
                "usage": {"prompt_tokens": 21, "completion_tokens": 64},
            }),
            Self::Anthropic => json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
                "content": [{"type": "text", "text": "The answer is"},
                            {"type": "tool_use", "id": "toolu_1", "name": "length", "input": {}}],
                "stop_reason": "max_tokens", "stop_sequence": null,
                "usage": {"input_tokens": 30, "output_tokens": 64},
            }),
        }
    }

    /// A leaf agent over this provider at `server`, without tools.
    fn agent(self, server: &TestServer) -> AgentBackend {
        self.agent_with(server, AgentConfig::default(), ToolSet::new())
    }

    /// A leaf agent over this provider at `server` with `tools`, using the model
    /// `leaf-model` and otherwise `config`.
    fn agent_with(self, server: &TestServer, config: AgentConfig, tools: ToolSet) -> AgentBackend {
        let config = AgentConfig {
            model: "leaf-model".into(),
            ..config
        };
        AgentBackend::new(Arc::from(self.model(server, policy())), config, tools)
    }
}

/// Runs each listed check once per provider, as `openai::NAME` and `anthropic::NAME`.
macro_rules! for_both_providers {
    ($($check:ident),* $(,)?) => {
        mod openai {
            $(#[tokio::test]
            async fn $check() {
                super::$check(super::Provider::OpenAi).await;
            })*
        }
        mod anthropic {
            $(#[tokio::test]
            async fn $check() {
                super::$check(super::Provider::Anthropic).await;
            })*
        }
    };
}

for_both_providers!(
    plain_text_reply_and_request_shape,
    two_tool_calls_then_both_results,
    structured_output_is_asked_for_and_read_back,
    structured_reply_cut_off_at_max_tokens_carries_no_value,
    https_goes_through_rustls,
    rate_limit_waits_for_retry_after,
    retry_after_beyond_max_backoff_gives_up_at_once,
    server_error_then_success_keeps_the_idempotency_key,
    retries_exhausted_is_retryable_and_names_the_status,
    malformed_json_fails_without_retry,
    truncated_body_is_retried,
    unanswered_request_times_out,
    oversized_body_fails_without_retry,
    body_of_exactly_the_limit_is_read,
    retry_after_with_a_huge_http_date_is_ignored,
    bad_request_fails_at_once_with_the_provider_message,
    unauthorized_fails_fast_and_never_shows_the_key,
    echoed_headers_and_url_credentials_never_show,
    a_key_across_the_quoted_part_of_a_body_leaves_no_part_behind,
    refused_connection_is_retryable,
    leaf_structured_reply_valid_at_once,
    leaf_structured_reply_invalid_then_repaired,
    leaf_structured_reply_invalid_twice_fails,
    leaf_runs_a_tool_then_answers,
    leaf_reply_cut_off_at_max_tokens_fails_clearly,
    leaf_uses_a_tool_then_gives_a_structured_reply,
);

async fn plain_text_reply_and_request_shape(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::json(200, provider.text("Hi!")));
    let reply = provider.complete(&server, &hello()).await.unwrap();
    assert_eq!(reply.text, "Hi!");
    assert!(reply.tool_calls.is_empty());
    assert_eq!(reply.structured, None);
    assert_eq!(reply.usage, provider.usage());

    let [request] = server.requests().try_into().unwrap();
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, provider.protocol().path());
    for (name, value) in provider.key_headers() {
        assert_eq!(request.header(name), value.as_deref(), "{name}");
    }
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("idempotency-key"), Some(IDEMPOTENCY_KEY));
    assert_eq!(request.json(), provider.sent_hello());
}

async fn two_tool_calls_then_both_results(provider: Provider) {
    let server = TestServer::start();
    let protocol = provider.protocol();
    server.push(Reply::json(
        200,
        protocol.tool_calls("Let me look.", &two_calls()),
    ));
    server.push(Reply::json(
        200,
        protocol.text("18 °C; the time is unknown."),
    ));
    let model = provider.model(&server, policy());

    let reply = model.complete(&weather_question()).await.unwrap();
    assert_eq!(reply.text, "Let me look.");
    assert_eq!(reply.tool_calls, two_calls());
    assert_eq!(reply.usage, provider.usage());

    let reply = model
        .complete(&after_tools(&reply.text, reply.tool_calls))
        .await
        .unwrap();
    assert_eq!(reply.text, "18 °C; the time is unknown.");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let first = requests[0].json();
    assert_eq!(first["tools"], provider.sent_weather_tools());
    // Offering tools forces none of them.
    assert_eq!(first.get("tool_choice"), None);
    let second = requests[1].json();
    assert_eq!(second["tools"], provider.sent_weather_tools());
    assert_eq!(second["messages"], provider.sent_after_tools());

    // A turn that only calls tools says nothing, and is sent back without text.
    server.push(Reply::json(200, protocol.tool_calls("", &two_calls())));
    server.push(Reply::json(200, protocol.text("ok")));
    let reply = model.complete(&weather_question()).await.unwrap();
    assert_eq!(reply.text, "");
    assert_eq!(reply.tool_calls, two_calls());
    model
        .complete(&after_tools(&reply.text, reply.tool_calls))
        .await
        .unwrap();
    let sent = server.requests()[3].json();
    let assistant = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["role"] == "assistant")
        .unwrap();
    assert_eq!(*assistant, provider.sent_tool_only_turn());
}

/// A structured reply is asked for in the protocol's own form (OpenAI's `response_format`, a
/// forced tool for Anthropic) and read back from it.
async fn structured_output_is_asked_for_and_read_back(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::json(
        200,
        provider.structured("review", json!({"verdict": "ok"})),
    ));
    let model = provider.model(&server, policy());
    assert_eq!(
        model.combines_tools_and_structure(),
        provider.combines_tools_and_structure()
    );
    let reply = model.complete(&review()).await.unwrap();
    assert_eq!(
        (reply.text, reply.structured),
        provider.structured_answer(json!({"verdict": "ok"}))
    );
    assert!(reply.tool_calls.is_empty(), "{:?}", reply.tool_calls);

    let [sent] = server.requests().try_into().unwrap();
    let sent = sent.json();
    for (field, expected) in provider.sent_structure("review", &review_schema()) {
        assert_eq!(sent[field], expected, "{field}");
    }
}

/// A reply cut off by `max_tokens` says so and carries no value (the agent loop fails it).
async fn structured_reply_cut_off_at_max_tokens_carries_no_value(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::json(200, provider.protocol().cut_off("Well")));
    let cut = provider.complete(&server, &review()).await.unwrap();
    assert!(cut.truncated);
    assert_eq!((cut.text.as_str(), cut.structured), ("Well", None));
}

/// rustls with the ring provider is wired in (no process-wide provider needed): an https URL
/// makes the client send a TLS ClientHello.
async fn https_goes_through_rustls(provider: Provider) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("https://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut hello = [0u8; 5];
        stream.read_exact(&mut hello).await.unwrap();
        hello
    });
    let model = provider.model_at(&origin, policy().with_max_retries(0));
    let error = model.complete(&hello()).await.unwrap_err();
    // A TLS record header: handshake (22), version 3.x.
    let record = server.await.unwrap();
    assert_eq!(&record[..2], &[22, 3], "{record:?}");
    assert!(error.is_retryable(), "{error}");
    assert!(!message_of(&error).contains(KEY));
}

/// A host tool for leaves: the length of a text.
fn length() -> Arc<FnTool> {
    Arc::new(FnTool::new(
        "length",
        "Counts the characters of a text.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        |arguments| {
            Ok(json!(
                arguments["text"]
                    .as_str()
                    .unwrap_or_default()
                    .chars()
                    .count()
            ))
        },
    ))
}

async fn leaf_runs_a_tool_then_answers(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::json(200, length_call(provider)));
    server.push(Reply::json(200, provider.text("It has 7 characters.")));
    let mut tools = ToolSet::new();
    tools.insert(length()).unwrap();
    let agent = provider.agent_with(&server, AgentConfig::default(), tools);
    let mut leaf = LeafRequest::new(1, json!("How long is the word flowbox?"));
    leaf.idempotency_key = "t/1".into();
    let reply = agent.call(&leaf).await.unwrap();
    assert_eq!(reply.value, json!("It has 7 characters."));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(provider.tool_names(&requests[0].json()), ["length"]);
    // The tool's result goes back in the provider's own shape.
    let second = requests[1].json();
    let last = second["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(*last, provider.sent_tool_result("call_1", "7"));
}

async fn leaf_reply_cut_off_at_max_tokens_fails_clearly(provider: Provider) {
    let server = TestServer::start();
    // The model ran out of tokens halfway through a tool call: neither the text nor the call
    // may be taken as an answer.
    server.push(Reply::json(200, provider.cut_off_mid_call()));
    let mut tools = ToolSet::new();
    tools.insert(length()).unwrap();
    let config = AgentConfig {
        max_tokens: 64,
        ..AgentConfig::default()
    };
    let agent = provider.agent_with(&server, config, tools);
    let error = agent
        .call(&LeafRequest::new(1, json!("How long is flowbox?")))
        .await
        .unwrap_err();
    let message = message_of(&error);
    assert!(
        message.contains("cut off at its limit of 64 output tokens"),
        "{message}"
    );
    assert!(!error.is_retryable(), "{message}");
    assert_eq!(
        error.kind(),
        &BackendErrorKind::Truncated { max_tokens: 64 }
    );
    // Its tokens were spent all the same, and it was not sent again.
    assert_eq!(error.usage().output_tokens, 64);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].json()["max_tokens"], 64);
}

/// A reply that calls `length` on "flowbox", in the provider's shape.
fn length_call(provider: Provider) -> Value {
    provider.protocol().tool_calls(
        "",
        &[ToolCall {
            id: "call_1".into(),
            name: "length".into(),
            arguments: json!({"text": "flowbox"}),
        }],
    )
}

/// Tools and a schema in one leaf. OpenAI takes both in every turn; Anthropic, whose
/// structured output is a forced tool, gets the tool phase first and then a turn that may only
/// call the `reply` tool, over the evidence.
async fn leaf_uses_a_tool_then_gives_a_structured_reply(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::json(200, length_call(provider)));
    if matches!(provider, Provider::Anthropic) {
        server.push(Reply::json(200, provider.text("flowbox has 7 characters.")));
    }
    server.push(Reply::json(
        200,
        provider.structured("reply", json!({"score": 4})),
    ));
    let mut tools = ToolSet::new();
    tools.insert(length()).unwrap();
    let agent = provider.agent_with(&server, AgentConfig::default(), tools);
    let reply = agent.call(&scored_leaf()).await.unwrap();
    assert_eq!(reply.value, json!({"score": 4}));
    let sent: Vec<Value> = server.requests().iter().map(Recorded::json).collect();
    let schema = scored_leaf().schema.unwrap();
    match provider {
        Provider::OpenAi => {
            assert_eq!(sent.len(), 2);
            for body in &sent {
                assert_eq!(provider.tool_names(body), ["length"], "{body}");
                for (field, expected) in provider.sent_structure("reply", &schema) {
                    assert_eq!(body[field], expected, "{body}");
                }
            }
            let last = sent[1]["messages"].as_array().unwrap().last().unwrap();
            assert_eq!(*last, provider.sent_tool_result("call_1", "7"));
        }
        Provider::Anthropic => {
            assert_eq!(sent.len(), 3);
            // The tool phase: the tool offered, no reply forced.
            for body in &sent[..2] {
                assert_eq!(provider.tool_names(body), ["length"], "{body}");
                assert!(body.get("tool_choice").is_none(), "{body}");
            }
            // The structured turn: only the reply tool, forced, after the evidence.
            let last = &sent[2];
            assert_eq!(provider.tool_names(last), ["reply"], "{last}");
            for (field, expected) in provider.sent_structure("reply", &schema) {
                assert_eq!(last[field], expected, "{last}");
            }
            let asked = provider.last_user_text(&server.requests()[2]);
            assert!(
                asked.contains("Now give your final answer as JSON"),
                "{asked}"
            );
            let messages = last["messages"].as_array().unwrap();
            let evidence = &messages[messages.len() - 2];
            assert_eq!(evidence["role"], "assistant");
            assert!(
                evidence.to_string().contains("flowbox has 7 characters."),
                "{evidence}"
            );
        }
    }
}

fn scored_leaf() -> LeafRequest {
    let mut leaf = LeafRequest::new(3, json!("rate the patch"));
    leaf.thread_id = "thread-7".into();
    leaf.idempotency_key = "thread-7/3".into();
    leaf.schema = Some(json!({
        "type": "object",
        "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["score"],
    }));
    leaf
}

async fn leaf_structured_reply_valid_at_once(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::json(
        200,
        provider.structured("reply", json!({"score": 4})),
    ));
    let reply = provider.agent(&server).call(&scored_leaf()).await.unwrap();
    assert_eq!(reply.value, json!({"score": 4}));
    assert_eq!(reply.usage, provider.usage());
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let sent = requests[0].json();
    assert_eq!(sent["model"], "leaf-model");
    for (field, expected) in provider.sent_structure("reply", &scored_leaf().schema.unwrap()) {
        assert_eq!(sent[field], expected, "{sent}");
    }
}

async fn leaf_structured_reply_invalid_then_repaired(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::json(
        200,
        provider.structured("reply", json!({"score": 9})),
    ));
    server.push(Reply::json(
        200,
        provider.structured("reply", json!({"score": 5})),
    ));
    let reply = provider.agent(&server).call(&scored_leaf()).await.unwrap();
    assert_eq!(reply.value, json!({"score": 5}));
    // Both turns count.
    let once = provider.usage();
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: once.input_tokens * 2,
            output_tokens: once.output_tokens * 2,
            estimated_tokens: 0,
        }
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    // The repair turn shows the model its invalid reply and what is wrong with it.
    let repair = provider.last_user_text(&requests[1]);
    assert!(
        repair.contains("does not match the required JSON Schema") && repair.contains('9'),
        "{repair}"
    );
    // Each turn has its own idempotency key, derived from the leaf's.
    let keys: Vec<_> = requests
        .iter()
        .map(|r| r.header("idempotency-key"))
        .collect();
    assert!(
        keys.iter()
            .all(|k| k.is_some_and(|k| k.starts_with("thread-7/3"))),
        "{keys:?}"
    );
    assert_ne!(keys[0], keys[1]);
}

async fn leaf_structured_reply_invalid_twice_fails(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::json(
        200,
        provider.structured("reply", json!({"score": 9})),
    ));
    server.push(Reply::json(
        200,
        provider.structured("reply", json!({"grade": "A"})),
    ));
    let error = provider
        .agent(&server)
        .call(&scored_leaf())
        .await
        .unwrap_err();
    let message = message_of(&error);
    assert!(message.contains("even after a repair turn"), "{message}");
    assert!(message.contains("score"), "{message}");
    assert!(
        matches!(error.kind(), BackendErrorKind::SchemaMismatch { errors } if errors.contains("score")),
        "{error:?}"
    );
    assert_eq!(
        error.usage().output_tokens,
        provider.usage().output_tokens * 2
    );
    assert_eq!(server.requests().len(), 2);
}

async fn rate_limit_waits_for_retry_after(provider: Provider) {
    let server = TestServer::start();
    server.push(
        Reply::json(
            429,
            provider.error("rate_limit_error", "Rate limit reached"),
        )
        .header("Retry-After", "1"),
    );
    server.push(Reply::json(200, provider.text("after the wait")));
    let reply = provider.complete(&server, &hello()).await.unwrap();
    assert_eq!((reply.text.as_str(), reply.retries), ("after the wait", 1));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    // The policy's own backoff is 5–10 ms, so a second's gap is the header's doing.
    let waited = gap(&requests, 0);
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_millis(1800),
        "{waited:?}"
    );
}

async fn retry_after_beyond_max_backoff_gives_up_at_once(provider: Provider) {
    let server = TestServer::start();
    server.push(
        Reply::json(429, provider.error("rate_limit_error", "Daily quota spent"))
            .header("Retry-After", "3600"),
    );
    let error = provider.complete(&server, &hello()).await.unwrap_err();
    let message = message_of(&error);
    assert!(error.is_retryable(), "{message}");
    assert!(
        message.contains("429") && message.contains("Daily quota spent"),
        "{message}"
    );
    assert!(message.contains("asked to wait 3600 s"), "{message}");
    assert_eq!(
        http_failure(&error),
        (
            429,
            Some("rate_limit_error"),
            Some(Duration::from_secs(3600)),
            1
        )
    );
    assert_eq!(server.requests().len(), 1);
}

async fn oversized_body_fails_without_retry(provider: Provider) {
    let flood = "x".repeat(MAX_RESPONSE_BYTES + 1);
    // Announced by `Content-Length` (refused before reading), then only found out by reading.
    for reply in [
        Reply::raw(200, &flood),
        Reply::Chunked {
            status: 200,
            body: flood.clone(),
        },
        Reply::Chunked {
            status: 500,
            body: flood.clone(),
        },
    ] {
        let server = TestServer::start();
        server.push(reply);
        let error = provider.complete(&server, &hello()).await.unwrap_err();
        let message = message_of(&error);
        assert!(
            message.contains("the body is larger than the 16 MiB a provider reply may be"),
            "{message}"
        );
        assert!(
            matches!(error.kind(), BackendErrorKind::ResponseTooLarge { limit, .. } if *limit == MAX_RESPONSE_BYTES as u64),
            "{error:?}"
        );
        assert!(!error.is_retryable(), "{message}");
        assert_eq!(server.requests().len(), 1);
    }
}

async fn body_of_exactly_the_limit_is_read(provider: Provider) {
    let server = TestServer::start();
    let mut body = provider.text("padded").to_string();
    body.push_str(&" ".repeat(MAX_RESPONSE_BYTES - body.len()));
    server.push(Reply::Chunked { status: 200, body });
    let reply = provider.complete(&server, &hello()).await.unwrap();
    assert_eq!(reply.text, "padded");
}

/// A date past what the arithmetic can hold is no date: the header is ignored and the
/// policy's own backoff applies.
async fn retry_after_with_a_huge_http_date_is_ignored(provider: Provider) {
    let server = TestServer::start();
    server.push(
        Reply::json(429, provider.error("rate_limit_error", "Slow down"))
            .header("Retry-After", "Sun, 06 Nov 9999999999999 08:49:37 GMT"),
    );
    server.push(Reply::json(200, provider.text("after the backoff")));
    let reply = provider.complete(&server, &hello()).await.unwrap();
    assert_eq!(reply.text, "after the backoff");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(gap(&requests, 0) < Duration::from_millis(500));
}

async fn server_error_then_success_keeps_the_idempotency_key(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::json(
        500,
        provider.error("api_error", "Internal error"),
    ));
    server.push(Reply::json(200, provider.text("recovered")));
    let reply = provider.complete(&server, &hello()).await.unwrap();
    assert_eq!(reply.text, "recovered");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(gap(&requests, 0) < Duration::from_millis(500));
    for request in &requests {
        assert_eq!(request.header("idempotency-key"), Some(IDEMPOTENCY_KEY));
    }
    assert_eq!(requests[0].body, requests[1].body);
}

async fn retries_exhausted_is_retryable_and_names_the_status(provider: Provider) {
    let server = TestServer::start();
    for _ in 0..4 {
        server.push(Reply::json(
            503,
            provider.error("overloaded_error", "Try later"),
        ));
    }
    let error = provider.complete(&server, &hello()).await.unwrap_err();
    let message = message_of(&error);
    assert!(error.is_retryable(), "{message}");
    assert!(message.starts_with(provider.label()), "{message}");
    assert!(
        message.contains("HTTP 503 Service Unavailable") && message.contains("Try later"),
        "{message}"
    );
    assert!(message.contains("gave up after 4 attempts"), "{message}");
    assert_eq!(
        http_failure(&error),
        (503, Some("overloaded_error"), None, 4)
    );
    assert_eq!(error.retries(), 3);
    assert_eq!(server.requests().len(), 4);
}

async fn malformed_json_fails_without_retry(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::raw(200, r#"{"choices": [ oops"#));
    let error = provider.complete(&server, &hello()).await.unwrap_err();
    let message = message_of(&error);
    assert!(!error.is_retryable(), "{message}");
    assert!(
        message.contains("HTTP 200 OK, but the body is not the expected JSON")
            && message.contains("oops"),
        "{message}"
    );
    assert_eq!(error.kind().name(), "bad_reply");
    assert_eq!(server.requests().len(), 1);
}

async fn truncated_body_is_retried(provider: Provider) {
    let server = TestServer::start();
    let whole = provider.text("whole").to_string();
    server.push(Reply::Truncated {
        status: 200,
        body: whole[..whole.len() / 2].to_owned(),
    });
    server.push(Reply::json(200, provider.text("whole")));
    let model = provider.model(&server, policy());
    let reply = model.complete(&hello()).await.unwrap();
    assert_eq!((reply.text.as_str(), reply.retries), ("whole", 1));
    assert_eq!(server.requests().len(), 2);

    server.push(Reply::Truncated {
        status: 200,
        body: whole[..10].to_owned(),
    });
    let once = provider.model(&server, policy().with_max_retries(0));
    let error = once.complete(&hello()).await.unwrap_err();
    let message = message_of(&error);
    assert!(error.is_retryable(), "{message}");
    assert!(message.contains("body was cut short"), "{message}");
    assert_eq!(transport_failure(&error), (TransportCause::CutShort, 1));
    assert_eq!(error.retries(), 0);
    assert!(std::error::Error::source(&error).is_some(), "{error:?}");
}

async fn unanswered_request_times_out(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::Hang);
    server.push(Reply::Hang);
    let policy = policy()
        .with_request_timeout(Duration::from_millis(300))
        .with_max_retries(1);
    let started = Instant::now();
    let error = provider
        .model(&server, policy)
        .complete(&hello())
        .await
        .unwrap_err();
    let message = message_of(&error);
    assert!(error.is_retryable(), "{message}");
    assert!(
        message.contains("timed out") && message.contains("0.3 s"),
        "{message}"
    );
    assert!(message.contains("gave up after 2 attempts"), "{message}");
    assert_eq!(transport_failure(&error), (TransportCause::Timeout, 2));
    assert_eq!(server.requests().len(), 2);
    assert!(started.elapsed() < Duration::from_secs(3));
}

async fn bad_request_fails_at_once_with_the_provider_message(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::json(
        400,
        provider.error(
            "invalid_request_error",
            "max_tokens: 999999 > 8192, the maximum for this model",
        ),
    ));
    let error = provider.complete(&server, &hello()).await.unwrap_err();
    let message = message_of(&error);
    assert!(!error.is_retryable(), "{message}");
    assert!(message.starts_with(provider.label()), "{message}");
    assert!(
        message.contains("HTTP 400 Bad Request")
            && message.contains("max_tokens: 999999 > 8192, the maximum for this model"),
        "{message}"
    );
    assert_eq!(
        http_failure(&error),
        (400, Some("invalid_request_error"), None, 1)
    );
    assert_eq!(server.requests().len(), 1);
}

async fn unauthorized_fails_fast_and_never_shows_the_key(provider: Provider) {
    let server = TestServer::start();
    server.push(Reply::json(
        401,
        provider.error(
            "authentication_error",
            &format!("Incorrect API key provided: {KEY}."),
        ),
    ));
    let model = provider.model(&server, policy());
    let error = model.complete(&hello()).await.unwrap_err();
    let message = message_of(&error);
    assert!(!error.is_retryable(), "{message}");
    assert!(
        message.contains("HTTP 401 Unauthorized")
            && message.contains("Incorrect API key provided: [redacted]."),
        "{message}"
    );
    assert_eq!(
        http_failure(&error),
        (401, Some("authentication_error"), None, 1)
    );
    for shown in [message, format!("{error:?}"), format!("{model:?}")] {
        assert!(!shown.contains(KEY), "{shown}");
    }
    assert_eq!(server.requests().len(), 1);
}

/// A base URL with credentials (`http://user:password@host`), and a server (a proxy, say) that
/// echoes every authentication header it got, in its JSON error and in a body that is not
/// JSON: neither the key, nor the password, nor the `Basic` value reqwest made of them shows in
/// the error, its source or the client's debug output; the URL shows as `[redacted]@host`.
async fn echoed_headers_and_url_credentials_never_show(provider: Provider) {
    const PASSWORD: &str = "pr0xy-PASSWORD-5b1d";
    let server = TestServer::answering(move |request| {
        let echo = ["authorization", "x-api-key"]
            .map(|name| format!("{name}: {}", request.header(name).unwrap_or("-")))
            .join("; ");
        if request.path.starts_with("/elsewhere") {
            Reply::raw(502, &format!("bad gateway; request had {echo}"))
        } else {
            Reply::json(401, provider.error("invalid_auth", &format!("got {echo}")))
        }
    });
    let origin = server
        .url()
        .replace("http://", &format!("http://proxy-user:{PASSWORD}@"));
    // OpenAI's client without a key sends the URL's credentials (with a key, its bearer token
    // replaces them); Anthropic's sends both.
    let client = |path: &str| -> Box<dyn ChatModel> {
        let base = format!("{origin}{path}");
        let policy = policy().with_max_retries(0);
        match provider {
            Provider::OpenAi => Box::new(OpenAiChat::new(base, None, policy).unwrap()),
            Provider::Anthropic => Box::new(AnthropicChat::new(base, KEY.into(), policy).unwrap()),
        }
    };
    let model = client("");
    let unauthorized = model.complete(&hello()).await.unwrap_err();
    let basic = server.requests()[0]
        .header("authorization")
        .and_then(|value| value.strip_prefix("Basic "))
        .expect("the URL's credentials are sent")
        .to_owned();
    let elsewhere = client("/elsewhere");
    let bad_gateway = elsewhere.complete(&hello()).await.unwrap_err();
    let message = message_of(&unauthorized);
    assert!(
        message.contains("got authorization: Basic [redacted]")
            && message.contains("at http://[redacted]@127.0.0.1:"),
        "{message}"
    );
    if matches!(provider, Provider::Anthropic) {
        assert!(message.contains("x-api-key: [redacted]"), "{message}");
    }
    let message = message_of(&bad_gateway);
    assert!(
        message.contains("HTTP 502")
            && message.contains("request had authorization: Basic [redacted]"),
        "{message}"
    );
    for shown in [
        message_of(&unauthorized),
        format!("{unauthorized:?}"),
        message_of(&bad_gateway),
        format!("{bad_gateway:?}"),
        format!("{model:?}"),
        format!("{elsewhere:?}"),
    ] {
        for secret in [KEY, PASSWORD, basic.as_str()] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }
}

/// A key echoed where the quote of a body that is not JSON is cut (500 characters in) leaves
/// not even its beginning behind: the body is redacted before it is cut.
async fn a_key_across_the_quoted_part_of_a_body_leaves_no_part_behind(provider: Provider) {
    let server = TestServer::start();
    let body = format!("{} {KEY} {}", "x".repeat(490), "y".repeat(100));
    server.push(Reply::raw(500, &body));
    let model = provider.model(&server, policy().with_max_retries(0));
    let error = model.complete(&hello()).await.unwrap_err();
    let message = message_of(&error);
    assert!(
        message.contains("HTTP 500") && message.contains(" [redacted…"),
        "{message}"
    );
    assert!(
        !message.contains("sk-") && !message.contains("SECRET"),
        "{message}"
    );
}

async fn refused_connection_is_retryable(provider: Provider) {
    // A port that was free a moment ago: nothing listens there now.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let error = provider
        .model_at(&format!("http://{closed}"), policy())
        .complete(&hello())
        .await
        .unwrap_err();
    let message = message_of(&error);
    assert!(error.is_retryable(), "{message}");
    assert!(
        message.contains("cannot connect") && message.contains("gave up after 4 attempts"),
        "{message}"
    );
    assert_eq!(transport_failure(&error), (TransportCause::Connect, 4));
    // What the operating system said is the error's source, not part of its message.
    assert!(std::error::Error::source(&error).is_some(), "{error:?}");
}

// ---------------------------------------------------------------------------------------------
// Live providers, only with a key in the environment

fn live_request() -> ChatRequest {
    let mut request = hello();
    request.messages = vec![Message::User {
        text: "Reply with the single word: pong".into(),
    }];
    request.max_tokens = 64;
    request.idempotency_key = None;
    request
}

fn live_structured() -> ChatRequest {
    let mut request = live_request();
    request.messages = vec![Message::User {
        text: "Give the capital of France.".into(),
    }];
    request.structured = Some(StructuredOutput {
        name: "capital".into(),
        schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    });
    request
}

/// Whether to call a real provider: only when asked (`FLOWBOX_LIVE_TESTS=1`) and its key is
/// set, so a key that happens to be in the environment never makes `make test` spend money.
fn live(key: &str) -> bool {
    let asked = std::env::var("FLOWBOX_LIVE_TESTS").is_ok_and(|v| v == "1");
    let keyed = std::env::var_os(key).is_some();
    if !(asked && keyed) {
        eprintln!("skipped: set FLOWBOX_LIVE_TESTS=1 and {key} to run against the real API");
    }
    asked && keyed
}

#[tokio::test]
async fn live_openai() {
    if !live("OPENAI_API_KEY") {
        return;
    }
    let model = OpenAiChat::from_env(RetryPolicy::default()).unwrap();
    let mut request = live_request();
    request.model = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into());
    let reply = model.complete(&request).await.unwrap();
    assert!(reply.text.to_lowercase().contains("pong"), "{reply:?}");
    assert!(reply.usage.input_tokens > 0 && reply.usage.output_tokens > 0);

    let mut request = live_structured();
    request.model = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into());
    let reply = model.complete(&request).await.unwrap();
    let value: Value = serde_json::from_str(&reply.text).unwrap();
    assert!(value["city"].as_str().unwrap().contains("Paris"), "{value}");
}

#[tokio::test]
async fn live_anthropic() {
    if !live("ANTHROPIC_API_KEY") {
        return;
    }
    let model = AnthropicChat::from_env(RetryPolicy::default()).unwrap();
    let model_id = std::env::var("ANTHROPIC_MODEL").unwrap_or_else(|_| "claude-haiku-4-5".into());
    let mut request = live_request();
    request.model = model_id.clone();
    let reply = model.complete(&request).await.unwrap();
    assert!(reply.text.to_lowercase().contains("pong"), "{reply:?}");
    assert!(reply.usage.input_tokens > 0 && reply.usage.output_tokens > 0);

    let mut request = live_structured();
    request.model = model_id;
    let reply = model.complete(&request).await.unwrap();
    let city = reply.structured.unwrap()["city"].clone();
    assert!(city.as_str().unwrap().contains("Paris"), "{city}");
}
