//! Decoding what the guest asks for: the one place untrusted guest data becomes our types.
//!
//! The guest is untrusted code. Every request is checked here for size and shape before any
//! backend sees it; a bad request becomes a [`CallFailure`] the script receives as an
//! exception, never a host panic.

use flowbox_backends::{BackendError, BackendErrorKind, LeafRequest};
use flowbox_store::{CallErrorKind, EntryOutcome, GroupKind};
use serde_json::Value;

use crate::Limits;
use crate::bindings::host::{AgentOptions, Position as WitPosition};
use crate::events::Position;

/// A call that failed, as the script will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallFailure {
    pub kind: CallErrorKind,
    pub message: String,
    /// Whether the same call may succeed if made again.
    pub retryable: bool,
    /// The backend's word for the failure, when it gave one.
    pub cause: Option<String>,
}

impl CallFailure {
    /// A failure that making the call again would not change.
    pub(crate) fn new(kind: CallErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retryable: false,
            cause: None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(CallErrorKind::InvalidRequest, message)
    }

    /// A backend's or tool's failure as the script receives it: `kind` for a call of that
    /// kind, the message with its causes. The one place a [`BackendError`] becomes a call
    /// failure; its `kind()` and `is_retryable()` are at hand here for the script's view.
    pub(crate) fn backend(kind: CallErrorKind, error: &BackendError) -> Self {
        // A plain failure has no word of its own beyond the call's kind.
        let cause = match error.kind() {
            BackendErrorKind::Failed { .. } => None,
            other => Some(other.name().to_owned()),
        };
        Self {
            retryable: error.is_retryable(),
            cause,
            ..Self::new(kind, message_with_causes(error))
        }
    }
}

/// A completion's outcome as the journal keeps it.
pub(crate) fn entry_outcome(outcome: &Result<String, CallFailure>) -> EntryOutcome {
    match outcome {
        Ok(value) => EntryOutcome::Ok {
            value: value.clone(),
        },
        Err(failure) => EntryOutcome::Err {
            kind: failure.kind,
            message: failure.message.clone(),
            retryable: failure.retryable,
            cause: failure.cause.clone(),
        },
    }
}

/// A journaled outcome as the completion the guest receives.
pub(crate) fn completion_outcome(outcome: EntryOutcome) -> Result<String, CallFailure> {
    match outcome {
        EntryOutcome::Ok { value } => Ok(value),
        EntryOutcome::Err {
            kind,
            message,
            retryable,
            cause,
        } => Err(CallFailure {
            kind,
            message,
            retryable,
            cause,
        }),
    }
}

/// An error's message followed by its sources', `: `-separated.
pub(crate) fn message_with_causes(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// An `agent(...)` request after checking: the backend request and its tree position.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DecodedAgent {
    pub leaf: LeafRequest,
    pub path: Vec<Position>,
}

/// Longest label, agent type, model name, instance id or tool name accepted.
const MAX_NAME_BYTES: usize = 256;
/// Most tool names in one `tools=[...]`.
const MAX_TOOLS: usize = 256;
/// Deepest `parallel`/`pipeline` nesting accepted.
const MAX_PATH_DEPTH: usize = 64;

/// Checks and converts one `agent(...)` request (the call id is filled in by the caller).
pub(crate) fn decode_agent(
    prompt: &str,
    options: Option<AgentOptions>,
    path: Vec<WitPosition>,
    limits: &Limits,
) -> Result<DecodedAgent, CallFailure> {
    let prompt = parse_json("prompt", prompt, limits.max_message_bytes)?;
    let mut leaf = LeafRequest::new(0, prompt);
    let path = decode_path(path)?;
    let Some(request) = options else {
        return Ok(DecodedAgent { leaf, path });
    };
    let schema = match &request.schema {
        Some(text) => Some(check_schema(parse_json(
            "schema",
            text,
            limits.max_schema_bytes,
        )?)?),
        None => None,
    };
    leaf.schema = schema;
    leaf.agent_type = check_name("agent_type", request.agent_type)?;
    leaf.label = check_name("label", request.label)?;
    leaf.model = check_name("model", request.model)?;
    leaf.instance_id = check_name("instance_id", request.instance_id)?;
    leaf.instruction = match request.instruction {
        Some(text) if text.len() > limits.max_message_bytes => {
            return Err(too_large(
                "instruction",
                text.len(),
                limits.max_message_bytes,
            ));
        }
        other => other,
    };
    leaf.tools = match request.tools {
        Some(tools) if tools.len() > MAX_TOOLS => {
            return Err(CallFailure::invalid(format!(
                "tools lists {} names; at most {MAX_TOOLS} are accepted",
                tools.len()
            )));
        }
        Some(tools) => Some(
            tools
                .into_iter()
                .map(|name| check_name("tool name", Some(name)).map(Option::unwrap_or_default))
                .collect::<Result<_, _>>()?,
        ),
        None => None,
    };
    Ok(DecodedAgent { leaf, path })
}

/// Checks a `call_tool` request's arguments: a JSON object within the message limit.
pub(crate) fn decode_tool_arguments(
    name: &str,
    arguments: &str,
    limits: &Limits,
) -> Result<Value, CallFailure> {
    check_name("tool name", Some(name.to_owned()))?;
    let arguments = parse_json("tool arguments", arguments, limits.max_message_bytes)?;
    if !arguments.is_object() {
        return Err(CallFailure::invalid("tool arguments must be a JSON object"));
    }
    Ok(arguments)
}

/// Converts a group path, bounding its depth; a pipeline position names its stage (from 1), a
/// parallel one none.
pub(crate) fn decode_path(path: Vec<WitPosition>) -> Result<Vec<Position>, CallFailure> {
    if path.len() > MAX_PATH_DEPTH {
        return Err(CallFailure::invalid(format!(
            "groups are nested {} deep; at most {MAX_PATH_DEPTH} levels are accepted",
            path.len()
        )));
    }
    path.into_iter()
        .map(|(group, index, size, stage)| {
            let kind = match stage {
                None => GroupKind::Parallel,
                Some(stage) if stage > 0 => GroupKind::Pipeline,
                Some(_) => {
                    return Err(CallFailure::invalid(format!(
                        "group {group} has stage 0: a pipeline's stages count from 1"
                    )));
                }
            };
            Ok(Position {
                group,
                kind: Some(kind),
                index,
                size,
                stage,
            })
        })
        .collect()
}

fn parse_json(what: &str, text: &str, limit: usize) -> Result<Value, CallFailure> {
    if text.len() > limit {
        return Err(too_large(what, text.len(), limit));
    }
    // serde_json refuses nesting deeper than 128 levels, so hostile depth is an error here
    // rather than a stack overflow.
    serde_json::from_str(text)
        .map_err(|e| CallFailure::invalid(format!("{what} is not valid JSON: {e}")))
}

/// A schema must be a JSON Schema the backends can use (see `flowbox_backends::schema`).
fn check_schema(schema: Value) -> Result<Value, CallFailure> {
    flowbox_backends::schema::check(&schema)
        .map_err(|error| CallFailure::invalid(error.to_string()))?;
    Ok(schema)
}

fn check_name(what: &str, name: Option<String>) -> Result<Option<String>, CallFailure> {
    match name {
        Some(name) if name.len() > MAX_NAME_BYTES => {
            Err(too_large(what, name.len(), MAX_NAME_BYTES))
        }
        Some(name) if name.chars().any(char::is_control) => Err(CallFailure::invalid(format!(
            "{what} contains control characters"
        ))),
        other => Ok(other),
    }
}

fn too_large(what: &str, size: usize, limit: usize) -> CallFailure {
    CallFailure::invalid(format!(
        "{what} is {size} bytes; the limit is {limit} bytes"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request as the guest sends it: the prompt, every option, the path.
    #[derive(Debug)]
    struct Request {
        prompt: String,
        options: AgentOptions,
        path: Vec<WitPosition>,
    }

    fn request(prompt: &str) -> Request {
        Request {
            prompt: prompt.into(),
            options: AgentOptions {
                schema: None,
                agent_type: None,
                label: None,
                instruction: None,
                model: None,
                tools: None,
                instance_id: None,
            },
            path: vec![],
        }
    }

    fn decode(request: Request, limits: &Limits) -> Result<DecodedAgent, CallFailure> {
        decode_agent(&request.prompt, Some(request.options), request.path, limits)
    }

    fn failure(request: Request) -> String {
        decode(request, &Limits::default()).unwrap_err().message
    }

    #[test]
    fn a_request_without_options_decodes() {
        let decoded = decode_agent("\"hi\"", None, vec![], &Limits::default()).unwrap();
        assert_eq!(decoded.leaf.prompt, serde_json::json!("hi"));
        assert!(decoded.leaf.schema.is_none() && decoded.path.is_empty());
    }

    #[test]
    fn a_full_request_decodes() {
        let mut r = request(r#"{"file": "ü.rs"}"#);
        r.options.schema = Some(r#"{"type": "object", "required": ["a"]}"#.into());
        r.options.label = Some("rev".into());
        r.options.tools = Some(vec!["read_file".into()]);
        r.path = vec![(1, 4, 5, Some(2)), (2, 0, 3, None)];
        let decoded = decode(r, &Limits::default()).unwrap();
        assert_eq!(decoded.leaf.prompt, serde_json::json!({"file": "ü.rs"}));
        assert_eq!(decoded.leaf.tools, Some(vec!["read_file".to_owned()]));
        assert_eq!(
            decoded.path,
            vec![
                Position {
                    group: 1,
                    kind: Some(GroupKind::Pipeline),
                    index: 4,
                    size: 5,
                    stage: Some(2)
                },
                Position {
                    group: 2,
                    kind: Some(GroupKind::Parallel),
                    index: 0,
                    size: 3,
                    stage: None
                }
            ]
        );
    }

    #[test]
    fn garbage_deep_and_huge_json_are_invalid_requests() {
        assert!(failure(request("{nope")).contains("prompt is not valid JSON"));
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(failure(request(&deep)).contains("recursion limit"));
        let limits = Limits::default().with_max_message_bytes(10);
        let err = decode(request(r#""a long prompt""#), &limits).unwrap_err();
        assert!(
            err.message.contains("prompt is 15 bytes; the limit is 10"),
            "{}",
            err.message
        );
    }

    #[test]
    fn schemas_must_be_valid_json_schemas() {
        for (schema, expected) in [
            ("[1, 2]", "must be a JSON Schema object"),
            (r#"{"type": "banana"}"#, "not a valid JSON Schema"),
            (r#"{"minLength": -1}"#, "not a valid JSON Schema"),
        ] {
            let mut r = request("\"x\"");
            r.options.schema = Some(schema.into());
            assert!(failure(r).contains(expected), "{schema}");
        }
        let mut r = request("\"x\"");
        r.options.schema = Some(format!(r#"{{"description": "{}"}}"#, "d".repeat(70_000)));
        assert!(failure(r).contains("schema is"));
    }

    #[test]
    fn schemas_that_would_exhaust_the_validator_are_refused() {
        for schema in [
            r##"{"anyOf": [{"$ref": "#"}, {"type": "string"}]}"##.to_owned(),
            format!(
                r##"{{"$defs": {{{}}}, "$ref": "#/$defs/d0"}}"##,
                (0..600)
                    .map(|i| format!(r##""d{i}": {{"$ref": "#/$defs/d{}"}}"##, i + 1))
                    .chain(std::iter::once(r#""d600": {"type": "string"}"#.to_owned()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ] {
            let mut r = request("\"x\"");
            r.options.schema = Some(schema);
            let message = failure(r);
            assert!(message.contains("too costly"), "{message}");
        }
        let deep = (0..120).fold(r#"{"type": "string"}"#.to_owned(), |inner, _| {
            format!(r#"{{"type": "object", "properties": {{"x": {inner}}}}}"#)
        });
        let mut r = request("\"x\"");
        r.options.schema = Some(deep);
        // Deep but honest: accepted, or refused with a message — never a crash.
        let _ = decode(r, &Limits::default());
    }

    #[test]
    fn names_tools_and_paths_are_bounded() {
        let mut r = request("\"x\"");
        r.options.label = Some("l".repeat(300));
        assert!(failure(r).contains("label is 300 bytes"));
        let mut r = request("\"x\"");
        r.options.model = Some("fast\u{7}".into());
        assert!(failure(r).contains("control characters"));
        let mut r = request("\"x\"");
        r.options.tools = Some(vec!["t".into(); 300]);
        assert!(failure(r).contains("at most 256"));
        let mut r = request("\"x\"");
        r.path = vec![(1, 0, 1, None); 65];
        assert!(failure(r).contains("nested 65 deep"));
        let mut r = request("\"x\"");
        r.path = vec![(1, 0, 1, Some(1)), (2, 0, 1, Some(0))];
        assert_eq!(
            failure(r),
            "group 2 has stage 0: a pipeline's stages count from 1"
        );
    }

    #[test]
    fn tool_arguments_must_be_an_object() {
        let limits = Limits::default();
        assert!(decode_tool_arguments("t", "{}", &limits).is_ok());
        let err = decode_tool_arguments("t", "[1]", &limits).unwrap_err();
        assert_eq!(err.kind, CallErrorKind::InvalidRequest);
        assert!(decode_tool_arguments("t", "{", &limits).is_err());
    }

    /// Fuzzing the decoder: any request the guest can express is either accepted within the
    /// limits or refused with an invalid-request error, never a panic. `make test` runs the
    /// default number of cases; `make fuzz` runs many more.
    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        /// JSON-ish text: valid JSON of every shape, near-misses, deep nesting and garbage.
        fn json_text() -> impl Strategy<Value = String> {
            let leaf = prop_oneof![
                Just("null".to_owned()),
                any::<bool>().prop_map(|b| b.to_string()),
                any::<f64>().prop_map(|f| f.to_string()),
                any::<i64>().prop_map(|i| i.to_string()),
                ".*".prop_map(|s| serde_json::Value::String(s).to_string()),
                ".{0,40}",
            ];
            let nested = leaf.prop_recursive(6, 64, 8, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..8)
                        .prop_map(|v| format!("[{}]", v.join(","))),
                    prop::collection::vec((".{0,8}", inner), 0..8).prop_map(|v| {
                        let fields: Vec<String> = v
                            .into_iter()
                            .map(|(k, v)| format!("{}:{v}", serde_json::Value::String(k)))
                            .collect();
                        format!("{{{}}}", fields.join(","))
                    }),
                ]
            });
            prop_oneof![
                nested,
                (1usize..400).prop_map(|depth| format!(
                    "{}{}",
                    "[".repeat(depth),
                    "]".repeat(depth)
                )),
                (1usize..400).prop_map(|depth| "{\"a\":".repeat(depth)),
            ]
        }

        fn name() -> impl Strategy<Value = Option<String>> {
            prop::option::of(prop_oneof![".{0,20}", "[a-z]{250,300}", "\\PC*"])
        }

        fn position() -> impl Strategy<Value = WitPosition> {
            (
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                prop::option::of(0u32..4),
            )
        }

        fn request() -> impl Strategy<Value = Request> {
            (
                json_text(),
                prop::option::of(json_text()),
                (name(), name(), name(), name(), name()),
                prop::option::of(prop::collection::vec(".{0,12}", 0..300)),
                prop::collection::vec(position(), 0..80),
            )
                .prop_map(
                    |(
                        prompt,
                        schema,
                        (agent_type, label, instruction, model, instance_id),
                        tools,
                        path,
                    )| {
                        Request {
                            prompt,
                            options: AgentOptions {
                                schema,
                                agent_type,
                                label,
                                instruction,
                                model,
                                tools,
                                instance_id,
                            },
                            path,
                        }
                    },
                )
        }

        proptest! {
            #[test]
            fn decoding_never_panics_and_accepts_only_what_fits(request in request()) {
                let limits = Limits::default().with_max_message_bytes(4096).with_max_schema_bytes(2048);
                let prompt_len = request.prompt.len();
                match decode(request, &limits) {
                    Ok(decoded) => {
                        prop_assert!(prompt_len <= 4096);
                        prop_assert!(decoded.path.len() <= MAX_PATH_DEPTH);
                        for position in &decoded.path {
                            let pipeline = position.kind == Some(GroupKind::Pipeline);
                            prop_assert_eq!(pipeline, position.stage.is_some_and(|s| s > 0));
                        }
                        for name in [&decoded.leaf.label, &decoded.leaf.model, &decoded.leaf.agent_type]
                            .into_iter()
                            .flatten()
                        {
                            prop_assert!(name.len() <= MAX_NAME_BYTES);
                            prop_assert!(!name.chars().any(char::is_control));
                        }
                        if let Some(schema) = &decoded.leaf.schema {
                            prop_assert!(jsonschema::meta::is_valid(schema));
                        }
                    }
                    Err(failure) => prop_assert_eq!(failure.kind, CallErrorKind::InvalidRequest),
                }
            }

            #[test]
            fn tool_arguments_decode_or_fail_cleanly(name in ".{0,300}", arguments in json_text()) {
                match decode_tool_arguments(&name, &arguments, &Limits::default()) {
                    Ok(value) => prop_assert!(value.is_object()),
                    Err(failure) => prop_assert_eq!(failure.kind, CallErrorKind::InvalidRequest),
                }
            }
        }
    }
}
