//! A backend driven by a JSON file: canned replies, latency and failures, for demos, tests and
//! benchmarks.
//!
//! Rules are tried in order; the first whose regexes all match the request answers it. Latency
//! jitter and injected failures are derived from a seed and the call, so a run behaves the same
//! every time. An optional call log gets one JSON line per real call, written when the call
//! starts, which is how tests prove a resumed run did not call a leaf twice.
//!
//! The same file can also play a root agent's model (`flowbox ask` offline): its `root` list
//! holds the model's turns, answered in order by [`ScriptedChat`], each request logged too.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::chat::{ChatModel, ChatRequest, ChatResponse, ToolCall};
use crate::{
    BackendError, FakeBackend, LeafBackend, LeafReply, LeafRequest, Usage, estimate_tokens,
    preview, stable_hash,
};

/// A leaf backend whose behaviour comes from a JSON file.
///
/// ```json
/// {
///   "seed": 7,
///   "latency_ms": 20, "jitter_ms": 10,
///   "failure_rate": 0.1,
///   "fallback": "fake",
///   "call_log": "calls.jsonl",
///   "rules": [
///     {"label": "^reviewer", "text": "Looks fine: {prompt}", "tokens": {"input": 50, "output": 12}},
///     {"prompt": "(?i)summar", "json": {"summary": "ok"}, "latency_ms": 100},
///     {"prompt": "explode", "error": "provider unavailable", "retryable": true}
///   ],
///   "root": [
///     {"tool_calls": [{"name": "run_workflow", "arguments": {"script": "return await agent('hi')"}}]},
///     {"text": "The workflow said hi."}
///   ]
/// }
/// ```
#[derive(Debug)]
pub struct ScriptedBackend {
    rules: Vec<Rule>,
    seed: u64,
    latency_ms: u64,
    jitter_ms: u64,
    failure_rate: f64,
    failure_message: String,
    fallback: Fallback,
    call_log: Option<Arc<Mutex<File>>>,
    root: Vec<RootTurn>,
}

/// A scripted backend file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptedConfigError {
    /// The file could not be read.
    #[error("cannot read scripted backend file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid configuration.
    #[error("invalid scripted backend configuration: {0}")]
    Invalid(String),
    /// The call log could not be opened for appending.
    #[error("cannot open call log {path}: {source}")]
    CallLog {
        /// The log file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    latency_ms: u64,
    #[serde(default)]
    jitter_ms: u64,
    #[serde(default)]
    failure_rate: f64,
    #[serde(default)]
    failure_message: Option<String>,
    #[serde(default)]
    fallback: Fallback,
    #[serde(default)]
    call_log: Option<PathBuf>,
    #[serde(default)]
    rules: Vec<RuleConfig>,
    #[serde(default)]
    root: Vec<RootTurn>,
}

/// One turn of a scripted root model.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RootTurn {
    #[serde(default)]
    text: String,
    #[serde(default)]
    tool_calls: Vec<RootToolCall>,
    #[serde(default)]
    tokens: Option<Usage>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RootToolCall {
    name: String,
    #[serde(default)]
    arguments: Value,
}

/// What happens to a request no rule matches.
#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Fallback {
    /// The call fails with a message naming the prompt.
    #[default]
    Error,
    /// The call is answered like [`FakeBackend`] would.
    Fake,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleConfig {
    prompt: Option<String>,
    label: Option<String>,
    agent_type: Option<String>,
    text: Option<String>,
    json: Option<Value>,
    error: Option<String>,
    #[serde(default)]
    retryable: bool,
    tokens: Option<Usage>,
    latency_ms: Option<u64>,
    jitter_ms: Option<u64>,
}

#[derive(Debug)]
struct Rule {
    prompt: Option<Regex>,
    label: Option<Regex>,
    agent_type: Option<Regex>,
    answer: Answer,
    tokens: Option<Usage>,
    latency_ms: Option<u64>,
    jitter_ms: Option<u64>,
}

#[derive(Debug)]
enum Answer {
    Text(String),
    Json(Value),
    Error { message: String, retryable: bool },
}

impl ScriptedBackend {
    /// Loads a configuration file; a relative `call_log` is taken relative to the file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScriptedConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ScriptedConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_json_in(&text, base)
    }

    /// Parses a configuration; a relative `call_log` is taken relative to the current directory.
    pub fn from_json(text: &str) -> Result<Self, ScriptedConfigError> {
        Self::from_json_in(text, Path::new("."))
    }

    fn from_json_in(text: &str, base: &Path) -> Result<Self, ScriptedConfigError> {
        let config: Config =
            serde_json::from_str(text).map_err(|e| ScriptedConfigError::Invalid(e.to_string()))?;
        if !(0.0..=1.0).contains(&config.failure_rate) {
            return Err(ScriptedConfigError::Invalid(format!(
                "failure_rate must be between 0 and 1, not {}",
                config.failure_rate
            )));
        }
        let rules = config
            .rules
            .into_iter()
            .enumerate()
            .map(|(index, rule)| Rule::compile(index, rule))
            .collect::<Result<Vec<_>, _>>()?;
        let mut backend = Self {
            rules,
            seed: config.seed,
            latency_ms: config.latency_ms,
            jitter_ms: config.jitter_ms,
            failure_rate: config.failure_rate,
            failure_message: config
                .failure_message
                .unwrap_or_else(|| "injected failure".into()),
            fallback: config.fallback,
            call_log: None,
            root: config.root,
        };
        if let Some(log) = config.call_log {
            backend = backend.with_call_log(base.join(log))?;
        }
        Ok(backend)
    }

    /// Appends one JSON line per call to `path` (created if missing).
    pub fn with_call_log(mut self, path: impl AsRef<Path>) -> Result<Self, ScriptedConfigError> {
        let path = path.as_ref();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| ScriptedConfigError::CallLog {
                path: path.to_owned(),
                source,
            })?;
        self.call_log = Some(Arc::new(Mutex::new(file)));
        Ok(self)
    }

    fn matching_rule(&self, request: &LeafRequest, prompt: &str) -> Option<(usize, &Rule)> {
        self.rules
            .iter()
            .enumerate()
            .find(|(_, rule)| rule.matches(request, prompt))
    }

    /// How long the call waits before its reply: the rule's latency (else the file's) plus
    /// up to its jitter, fixed by the seed and the call.
    fn delay(&self, request: &LeafRequest, prompt: &str, rule: Option<&Rule>) -> Duration {
        let base = rule.and_then(|r| r.latency_ms).unwrap_or(self.latency_ms);
        let jitter = rule.and_then(|r| r.jitter_ms).unwrap_or(self.jitter_ms);
        let millis = base as f64 + jitter as f64 * self.unit(request, prompt, "jitter");
        Duration::from_secs_f64(millis / 1000.0)
    }

    /// A number in [0, 1) fixed by the seed and the call, for jitter and failure injection.
    fn unit(&self, request: &LeafRequest, prompt: &str, salt: &str) -> f64 {
        let seed = self.seed.to_string();
        let call = request.call_id.to_string();
        let hash = stable_hash(&[&seed, &call, prompt, salt]);
        (hash >> 11) as f64 / (1u64 << 53) as f64
    }

    fn log_call(&self, request: &LeafRequest, rule: Option<usize>) {
        append_line(
            &self.call_log,
            &json!({
                "call_id": request.call_id,
                "idempotency_key": request.idempotency_key,
                "label": request.label,
                "prompt": request.prompt,
                "rule": rule,
            }),
        );
    }

    /// The root model this file scripts: its `root` turns, answered in order.
    pub fn root_model(&self) -> ScriptedChat {
        ScriptedChat {
            turns: Mutex::new(self.root.clone().into()),
            call_log: self.call_log.clone(),
            taken: Mutex::new(0),
        }
    }
}

impl Rule {
    fn compile(index: usize, rule: RuleConfig) -> Result<Self, ScriptedConfigError> {
        let regex = |field: &str, pattern: Option<String>| {
            pattern
                .map(|p| {
                    Regex::new(&p).map_err(|e| {
                        ScriptedConfigError::Invalid(format!(
                            "rule {index}: bad {field} regex: {e}"
                        ))
                    })
                })
                .transpose()
        };
        let answer = match (rule.text, rule.json, rule.error) {
            (Some(text), None, None) => Answer::Text(text),
            (None, Some(json), None) => Answer::Json(json),
            (None, None, Some(message)) => Answer::Error {
                message,
                retryable: rule.retryable,
            },
            _ => {
                return Err(ScriptedConfigError::Invalid(format!(
                    "rule {index} must have exactly one of \"text\", \"json\" or \"error\""
                )));
            }
        };
        Ok(Self {
            prompt: regex("prompt", rule.prompt)?,
            label: regex("label", rule.label)?,
            agent_type: regex("agent_type", rule.agent_type)?,
            answer,
            tokens: rule.tokens,
            latency_ms: rule.latency_ms,
            jitter_ms: rule.jitter_ms,
        })
    }

    fn matches(&self, request: &LeafRequest, prompt: &str) -> bool {
        let hit = |regex: &Option<Regex>, text: Option<&str>| {
            regex
                .as_ref()
                .is_none_or(|r| r.is_match(text.unwrap_or("")))
        };
        hit(&self.prompt, Some(prompt))
            && hit(&self.label, request.label.as_deref())
            && hit(&self.agent_type, request.agent_type.as_deref())
    }

    fn reply(&self, request: &LeafRequest, prompt: &str) -> Result<LeafReply, BackendError> {
        let value = match &self.answer {
            Answer::Text(template) => Value::String(
                template
                    .replace("{prompt}", prompt)
                    .replace("{label}", request.label.as_deref().unwrap_or(""))
                    .replace("{call_id}", &request.call_id.to_string()),
            ),
            Answer::Json(value) => value.clone(),
            Answer::Error { message, retryable } => {
                return Err(BackendError::failed(message.clone(), *retryable));
            }
        };
        let usage = self.tokens.unwrap_or_else(|| Usage {
            input_tokens: estimate_tokens(prompt),
            output_tokens: match &value {
                Value::String(text) => estimate_tokens(text),
                other => estimate_tokens(&other.to_string()),
            },
            estimated_tokens: 0,
        });
        Ok(LeafReply { value, usage })
    }
}

#[async_trait::async_trait]
impl LeafBackend for ScriptedBackend {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        let prompt = request.prompt_text();
        let rule = self.matching_rule(request, &prompt);
        self.log_call(request, rule.map(|(index, _)| index));

        let delay = self.delay(request, &prompt, rule.map(|(_, rule)| rule));
        if !delay.is_zero() {
            crate::delay::wait(delay).await;
        }

        if self.failure_rate > 0.0 && self.unit(request, &prompt, "failure") < self.failure_rate {
            return Err(BackendError::failed(self.failure_message.clone(), true));
        }
        match (rule, self.fallback) {
            (Some((_, rule)), _) => rule.reply(request, &prompt),
            (None, Fallback::Fake) => FakeBackend::reply(request),
            (None, Fallback::Error) => Err(BackendError::terminal(format!(
                "the scripted backend has no rule for this call (label {:?}, prompt {:?})",
                request.label.as_deref().unwrap_or(""),
                preview(&prompt, 80)
            ))),
        }
    }
}

/// Appends one JSON line to the call log, if there is one.
fn append_line(log: &Option<Arc<Mutex<File>>>, line: &Value) {
    let Some(log) = log else { return };
    // One write per line keeps lines whole even when several processes append.
    let mut bytes = line.to_string().into_bytes();
    bytes.push(b'\n');
    let mut file = log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // The log is a test aid: a failed write must not fail the call.
    let _ = file.write_all(&bytes);
}

/// A root agent's model scripted by the `root` list of a scripted-backend file: each request
/// gets the next turn (text, tool calls, or both), and is logged to the call log as
/// `{"root_turn": n, "request": ...}` so tests can check what the model was sent.
#[derive(Debug)]
pub struct ScriptedChat {
    turns: Mutex<VecDeque<RootTurn>>,
    call_log: Option<Arc<Mutex<File>>>,
    taken: Mutex<usize>,
}

#[async_trait::async_trait]
impl ChatModel for ScriptedChat {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, BackendError> {
        let (number, turn) = {
            let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
            let turn = self
                .turns
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            *taken += 1;
            (*taken, turn)
        };
        append_line(
            &self.call_log,
            &json!({"root_turn": number, "request": request}),
        );
        let turn = turn.ok_or_else(|| {
            BackendError::terminal(format!(
                "the scripted root model has no turn {number}: add more entries to \"root\""
            ))
        })?;
        let prompt: usize = request
            .messages
            .iter()
            .map(|m| serde_json::to_string(m).map_or(0, |t| t.len()))
            .sum();
        let tool_calls: Vec<ToolCall> = turn
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(index, call)| ToolCall {
                id: format!("root-{number}-{index}"),
                name: call.name,
                arguments: call.arguments,
            })
            .collect();
        Ok(ChatResponse {
            usage: turn.tokens.unwrap_or(Usage {
                input_tokens: (prompt as u64).div_ceil(4),
                output_tokens: estimate_tokens(&turn.text),
                estimated_tokens: 0,
            }),
            text: turn.text,
            tool_calls,
            ..ChatResponse::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(call_id: u64, prompt: &str, label: Option<&str>) -> LeafRequest {
        let mut request = LeafRequest::new(call_id, json!(prompt));
        request.label = label.map(str::to_owned);
        request
    }

    #[tokio::test]
    async fn first_matching_rule_answers_with_templates_and_tokens() {
        let backend = ScriptedBackend::from_json(
            r#"{"rules": [
                {"label": "^rev", "text": "review of {prompt} by {label}", "tokens": {"input_tokens": 5, "output_tokens": 7}},
                {"prompt": "plan", "json": {"steps": [1, 2]}},
                {"text": "anything"}
            ]}"#,
        )
        .unwrap();
        let reply = backend
            .call(&request(1, "main.rs", Some("reviewer")))
            .await
            .unwrap();
        assert_eq!(reply.value, json!("review of main.rs by reviewer"));
        assert_eq!(reply.usage.total(), 12);
        let reply = backend
            .call(&request(2, "make a plan", None))
            .await
            .unwrap();
        assert_eq!(reply.value, json!({"steps": [1, 2]}));
        let reply = backend.call(&request(3, "other", None)).await.unwrap();
        assert_eq!(reply.value, json!("anything"));
    }

    #[tokio::test]
    async fn unmatched_calls_fail_or_fall_back_to_fake() {
        let strict =
            ScriptedBackend::from_json(r#"{"rules": [{"prompt": "x", "text": "y"}]}"#).unwrap();
        let err = strict.call(&request(1, "zzz", None)).await.unwrap_err();
        assert!(err.to_string().contains("no rule"), "{err}");
        assert!(!err.is_retryable());
        let lenient = ScriptedBackend::from_json(r#"{"fallback": "fake"}"#).unwrap();
        let reply = lenient.call(&request(1, "zzz", None)).await.unwrap();
        assert_eq!(reply.value, json!("[fake leaf] zzz"));
        let mut impossible = request(2, "zzz", None);
        impossible.schema = Some(json!({"type": "array", "minItems": 1_000_000_000}));
        let err = lenient.call(&impossible).await.unwrap_err();
        assert!(err.to_string().contains("cannot build a reply"), "{err}");
    }

    #[tokio::test]
    async fn error_rules_say_whether_they_are_retryable() {
        let backend = ScriptedBackend::from_json(
            r#"{"rules": [{"prompt": "a", "error": "down", "retryable": true}, {"error": "no"}]}"#,
        )
        .unwrap();
        let err = backend.call(&request(1, "a", None)).await.unwrap_err();
        assert!(err.is_retryable() && err.to_string() == "down");
        assert!(
            !backend
                .call(&request(2, "b", None))
                .await
                .unwrap_err()
                .is_retryable()
        );
    }

    #[tokio::test]
    async fn seeded_failure_rate_is_deterministic_and_near_the_rate() {
        let config = r#"{"seed": 3, "failure_rate": 0.3, "fallback": "fake"}"#;
        let a = ScriptedBackend::from_json(config).unwrap();
        let b = ScriptedBackend::from_json(config).unwrap();
        let mut failures = 0;
        for id in 0..400 {
            let r = request(id, "p", None);
            let (x, y) = (a.call(&r).await, b.call(&r).await);
            assert_eq!(x.is_err(), y.is_err());
            failures += usize::from(x.is_err());
        }
        assert!((80..160).contains(&failures), "{failures} of 400");
    }

    #[test]
    fn a_call_waits_its_rules_latency_plus_up_to_its_jitter_fixed_by_the_call() {
        let backend = ScriptedBackend::from_json(
            r#"{"latency_ms": 50, "jitter_ms": 10, "fallback": "fake", "rules": [{"prompt": "slow", "text": "s", "latency_ms": 1000, "jitter_ms": 0}]}"#,
        )
        .unwrap();
        let delay = |id: u64, prompt: &str| {
            let request = request(id, prompt, None);
            let prompt = request.prompt_text();
            let rule = backend
                .matching_rule(&request, &prompt)
                .map(|(_, rule)| rule);
            backend.delay(&request, &prompt, rule)
        };
        let quick: Vec<Duration> = (1..=50).map(|id| delay(id, "quick")).collect();
        assert!(
            quick
                .iter()
                .all(|d| (Duration::from_millis(50)..Duration::from_millis(60)).contains(d)),
            "{quick:?}"
        );
        assert!(
            quick.iter().any(|d| *d != quick[0]),
            "the jitter varies by call"
        );
        assert_eq!(
            delay(1, "quick"),
            quick[0],
            "and is the same for the same call"
        );
        assert_eq!(delay(2, "slow"), Duration::from_millis(1000));
    }

    #[tokio::test]
    async fn the_reply_comes_after_the_delay() {
        let backend =
            ScriptedBackend::from_json(r#"{"latency_ms": 30, "fallback": "fake"}"#).unwrap();
        let start = std::time::Instant::now();
        backend.call(&request(1, "p", None)).await.unwrap();
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[tokio::test]
    async fn the_call_log_gets_one_line_per_call() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("backend.json");
        std::fs::write(
            &config,
            r#"{"call_log": "calls.jsonl", "fallback": "fake"}"#,
        )
        .unwrap();
        let backend = ScriptedBackend::from_file(&config).unwrap();
        backend.call(&request(1, "one", Some("a"))).await.unwrap();
        backend.call(&request(2, "two", None)).await.unwrap();
        let log = std::fs::read_to_string(dir.path().join("calls.jsonl")).unwrap();
        let lines: Vec<Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["prompt"], json!("one"));
        assert_eq!(lines[0]["label"], json!("a"));
        assert_eq!(lines[1]["call_id"], json!(2));
    }

    #[tokio::test]
    async fn the_root_list_plays_a_model_turn_by_turn() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls.jsonl");
        let backend = ScriptedBackend::from_json(&format!(
            r#"{{"call_log": {log:?}, "root": [
                {{"tool_calls": [{{"name": "run_workflow", "arguments": {{"script": "return 1"}}}}]}},
                {{"text": "done", "tokens": {{"input": 3, "output": 1}}}}
            ]}}"#
        ))
        .unwrap();
        let model = backend.root_model();
        let request = ChatRequest {
            model: "m".into(),
            system: "s".into(),
            messages: vec![crate::Message::User { text: "q".into() }],
            tools: vec![],
            structured: None,
            max_tokens: 10,
            idempotency_key: None,
        };
        let first = model.complete(&request).await.unwrap();
        assert_eq!(first.tool_calls[0].name, "run_workflow");
        assert_eq!(first.tool_calls[0].arguments, json!({"script": "return 1"}));
        let second = model.complete(&request).await.unwrap();
        assert_eq!((second.text.as_str(), second.usage.total()), ("done", 4));
        let err = model.complete(&request).await.unwrap_err();
        assert!(err.to_string().contains("no turn 3"), "{err}");
        let logged: Vec<Value> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(logged.len(), 3);
        assert_eq!(logged[0]["request"]["messages"][0]["text"], "q");
    }

    #[test]
    fn bad_configurations_are_clear_errors() {
        for (config, expected) in [
            (r#"{"rules": [{"text": "a", "json": 1}]}"#, "exactly one"),
            (
                r#"{"rules": [{"prompt": "(", "text": "a"}]}"#,
                "bad prompt regex",
            ),
            (r#"{"failure_rate": 2}"#, "between 0 and 1"),
            (r#"{"latency": 5}"#, "unknown field"),
            (r#"{"fallback": "maybe"}"#, "unknown variant"),
        ] {
            let err = ScriptedBackend::from_json(config).unwrap_err().to_string();
            assert!(err.contains(expected), "{config}: {err}");
        }
        let err = ScriptedBackend::from_file("/nonexistent/backend.json").unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
    }
}
