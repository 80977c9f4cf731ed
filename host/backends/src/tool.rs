//! Host tools: what a leaf agent may call while it works, and what a script may call directly
//! with `call_tool` when the host registers the tool as code-callable.
//!
//! A [`Tool`] declares its name, description and a JSON Schema of its arguments; a [`ToolSet`]
//! checks arguments against that schema before the tool runs, so a tool only ever sees
//! arguments of the shape it declared. A tool may also say that it only reads
//! ([`Tool::read_only`]) and what shape its result has ([`Tool::result_schema`]): a plan calls
//! the read-only ones for real and answers the others with a placeholder of that shape
//! ([`ToolSet::placeholder`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::schema::{self, schema_errors};
use crate::stable_hash;

/// Why a tool call failed; the message is shown to the model or the script.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// No tool has this name here.
    #[error("there is no tool named {name:?}; available: {available}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are, comma-separated (or "none").
        available: String,
    },
    /// The arguments do not match the tool's schema.
    #[error("invalid arguments for {tool}: {message}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What the schema validator said.
        message: String,
    },
    /// A tool's own argument schema is not a valid JSON Schema (a host bug, found when the
    /// tool is added to a [`ToolSet`]).
    #[error("tool {tool}: its argument schema is invalid: {message}")]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// What the schema compiler said.
        message: String,
    },
    /// A tool's declared result schema ([`Tool::result_schema`]) is not a usable JSON Schema
    /// (a host bug, found when the tool is added to a [`ToolSet`]).
    #[error("tool {tool}: its result schema is invalid: {message}")]
    InvalidResultSchema {
        /// The tool.
        tool: String,
        /// What the schema check said.
        message: String,
    },
    /// `read_file` was asked for something that is not a regular file (a FIFO, a device):
    /// opening it could block for ever or never end.
    #[error("{path} is not a regular file")]
    NotARegularFile {
        /// The path asked for.
        path: String,
    },
    /// A directory to grant read access to does not exist or is not a directory.
    #[error("cannot grant {path}: not a directory")]
    NotADirectory {
        /// The directory asked for.
        path: String,
    },
    /// Two granted directories have the same name, so a path could not say which it means.
    #[error("two granted directories are both named {name:?}; grant differently named directories")]
    DuplicateRoot {
        /// Their name.
        name: String,
    },
    /// A directory to grant could not be opened.
    #[error("cannot grant {path}: {message}")]
    CannotGrant {
        /// The directory asked for.
        path: String,
        /// What the operating system said.
        message: String,
    },
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// A JSON Schema of its arguments (an object schema).
    pub parameters: Value,
}

/// Something the host can do on a model's or a script's behalf.
#[async_trait::async_trait]
pub trait Tool: Send + Sync + fmt::Debug {
    /// The tool's name, description and argument schema.
    fn spec(&self) -> ToolSpec;

    /// Whether the tool only reads: a call changes nothing anywhere, and the same arguments
    /// give the same result for as long as a run lasts (`read_file` and `list_dir` do). A plan
    /// calls a read-only tool for real, so it sees what the run will see; it calls no other
    /// tool. `false` unless the tool says otherwise.
    fn read_only(&self) -> bool {
        false
    }

    /// A JSON Schema of the tool's result, when it declares one. A plan answers a call of a
    /// tool that is not [read-only](Self::read_only) with a placeholder valid against it, so a
    /// script can index the answer as it would the real one; without a schema the placeholder
    /// is `null`. `None` unless the tool says otherwise.
    fn result_schema(&self) -> Option<Value> {
        None
    }

    /// Runs the tool with arguments that already match its schema.
    async fn call(&self, arguments: Value) -> Result<Value, ToolError>;
}

/// A set of tools by name, each with its compiled argument validator.
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: BTreeMap<String, Entry>,
}

#[derive(Clone)]
struct Entry {
    tool: Arc<dyn Tool>,
    spec: ToolSpec,
    validator: Arc<jsonschema::Validator>,
    read_only: bool,
    result_schema: Option<Arc<Value>>,
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool; a tool with the same name is replaced. Fails with
    /// [`ToolError::InvalidSchema`] when its argument schema is not a valid JSON Schema, and
    /// with [`ToolError::InvalidResultSchema`] when the result schema it declares is not one
    /// (or is too costly to use).
    pub fn insert(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolError> {
        let spec = tool.spec();
        let validator =
            jsonschema::validator_for(&spec.parameters).map_err(|e| ToolError::InvalidSchema {
                tool: spec.name.clone(),
                message: e.to_string(),
            })?;
        let result_schema = tool.result_schema();
        if let Some(result) = &result_schema {
            schema::check(result).map_err(|e| ToolError::InvalidResultSchema {
                tool: spec.name.clone(),
                message: e.to_string(),
            })?;
        }
        self.tools.insert(
            spec.name.clone(),
            Entry {
                read_only: tool.read_only(),
                tool,
                spec,
                validator: Arc::new(validator),
                result_schema: result_schema.map(Arc::new),
            },
        );
        Ok(())
    }

    /// Whether the set has no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Whether a tool has this name.
    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// The tools' names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// The specs of the tools, sorted by name, for offering them to a model.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .values()
            .map(|entry| entry.spec.clone())
            .collect()
    }

    /// The subset named by `names`; an unknown name is an error naming what exists.
    pub fn select(&self, names: &[String]) -> Result<ToolSet, ToolError> {
        let mut selected = ToolSet::new();
        for name in names {
            let entry = self.tools.get(name).ok_or_else(|| self.unknown(name))?;
            selected.tools.insert(name.clone(), entry.clone());
        }
        Ok(selected)
    }

    /// Checks `arguments` against the tool's schema and runs it.
    pub async fn call(&self, name: &str, arguments: Value) -> Result<Value, ToolError> {
        let entry = self.check(name, &arguments)?;
        entry.tool.call(arguments).await
    }

    /// The tool named `name`, after checking `arguments` against its schema.
    fn check(&self, name: &str, arguments: &Value) -> Result<&Entry, ToolError> {
        let entry = self.tools.get(name).ok_or_else(|| self.unknown(name))?;
        match schema_errors(&entry.validator, arguments) {
            None => Ok(entry),
            Some(message) => Err(ToolError::InvalidArguments {
                tool: name.to_owned(),
                message,
            }),
        }
    }

    /// Checks `arguments` without running the tool.
    pub fn validate(&self, name: &str, arguments: &Value) -> Result<(), ToolError> {
        self.check(name, arguments).map(|_| ())
    }

    /// Whether the tool named `name` only reads ([`Tool::read_only`]); an unknown name does
    /// not.
    pub fn is_read_only(&self, name: &str) -> bool {
        self.tools.get(name).is_some_and(|entry| entry.read_only)
    }

    /// The names of the read-only tools, sorted.
    pub fn read_only_names(&self) -> Vec<&str> {
        self.tools
            .iter()
            .filter(|(_, entry)| entry.read_only)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// What a plan answers a call of `name` with instead of running it: a value valid against
    /// the tool's declared result schema, the same for the same arguments, or `null` when it
    /// declares none. Fails when the tool is unknown, or when no value can be built for its
    /// schema (one the offline backends cannot satisfy either, such as a `pattern`).
    pub fn placeholder(&self, name: &str, arguments: &Value) -> Result<Value, ToolError> {
        let entry = self.tools.get(name).ok_or_else(|| self.unknown(name))?;
        let Some(result) = &entry.result_schema else {
            return Ok(Value::Null);
        };
        let seed = stable_hash(&[name, &arguments.to_string()]);
        schema::value_for(result, seed).map_err(|reason| {
            ToolError::Failed(format!(
                "a plan cannot build a placeholder for {name}'s declared result schema: {reason}"
            ))
        })
    }

    fn unknown(&self, name: &str) -> ToolError {
        let names = self.names();
        ToolError::Unknown {
            name: name.to_owned(),
            available: if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Debug)]
    struct Echo;

    #[async_trait::async_trait]
    impl Tool for Echo {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "echo".into(),
                description: "Echoes its text.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                    "additionalProperties": false
                }),
            }
        }

        async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
            Ok(arguments["text"].clone())
        }
    }

    fn set() -> ToolSet {
        let mut set = ToolSet::new();
        set.insert(Arc::new(Echo)).unwrap();
        set
    }

    #[tokio::test]
    async fn calls_check_arguments_against_the_schema() {
        let set = set();
        assert_eq!(
            set.call("echo", json!({"text": "hi"})).await.unwrap(),
            json!("hi")
        );
        let err = set.call("echo", json!({"text": 5})).await.unwrap_err();
        assert!(
            matches!(&err, ToolError::InvalidArguments { message, .. } if message.contains("/text")),
            "{err}"
        );
        let err = set
            .call("echo", json!({"text": "a", "x": 1}))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("invalid arguments for echo"),
            "{err}"
        );
        let err = set.call("nope", json!({})).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "there is no tool named \"nope\"; available: echo"
        );
    }

    /// A tool whose argument schema is no JSON Schema.
    #[derive(Debug)]
    struct Broken;

    #[async_trait::async_trait]
    impl Tool for Broken {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "broken".into(),
                description: String::new(),
                parameters: json!({"type": "banana"}),
            }
        }

        async fn call(&self, _: Value) -> Result<Value, ToolError> {
            unreachable!("never added")
        }
    }

    #[test]
    fn a_tool_with_an_invalid_argument_schema_is_refused() {
        let mut set = ToolSet::new();
        let err = set.insert(Arc::new(Broken)).unwrap_err();
        assert!(
            matches!(&err, ToolError::InvalidSchema { tool, .. } if tool == "broken"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("tool broken: its argument schema is invalid: "),
            "{err}"
        );
        assert!(set.is_empty());
    }

    /// A read-only lookup declaring the shape of its result.
    #[derive(Debug)]
    struct Lookup {
        result: Value,
    }

    #[async_trait::async_trait]
    impl Tool for Lookup {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "lookup".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }
        }

        fn read_only(&self) -> bool {
            true
        }

        fn result_schema(&self) -> Option<Value> {
            Some(self.result.clone())
        }

        async fn call(&self, _: Value) -> Result<Value, ToolError> {
            Ok(json!({"hits": []}))
        }
    }

    #[test]
    fn only_tools_that_say_so_are_read_only() {
        let mut set = set();
        set.insert(Arc::new(Lookup {
            result: json!({"type": "object"}),
        }))
        .unwrap();
        assert!(set.is_read_only("lookup"));
        assert!(!set.is_read_only("echo"), "not read-only unless it says so");
        assert!(!set.is_read_only("nope"));
        assert_eq!(set.read_only_names(), ["lookup"]);
    }

    #[test]
    fn a_placeholder_fits_the_declared_result_schema_or_is_null() {
        let result = json!({
            "type": "object",
            "properties": {"hits": {"type": "array", "items": {
                "type": "object",
                "properties": {"title": {"type": "string"}, "score": {"type": "number"}},
                "required": ["title", "score"]
            }}},
            "required": ["hits"]
        });
        let mut set = set();
        set.insert(Arc::new(Lookup {
            result: result.clone(),
        }))
        .unwrap();
        let arguments = json!({"q": "x"});
        let placeholder = set.placeholder("lookup", &arguments).unwrap();
        assert!(jsonschema::is_valid(&result, &placeholder), "{placeholder}");
        assert_eq!(placeholder, set.placeholder("lookup", &arguments).unwrap());
        // Without a declared result schema: null, as before tools could declare one.
        assert_eq!(
            set.placeholder("echo", &json!({"text": "hi"})).unwrap(),
            Value::Null
        );
        let err = set.placeholder("nope", &json!({})).unwrap_err();
        assert!(matches!(err, ToolError::Unknown { .. }), "{err}");
    }

    #[test]
    fn a_result_schema_no_placeholder_satisfies_fails_the_placeholder_saying_why() {
        let mut set = ToolSet::new();
        set.insert(Arc::new(Lookup {
            result: json!({"type": "string", "pattern": "^[0-9]+$"}),
        }))
        .unwrap();
        let err = set.placeholder("lookup", &json!({})).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "a plan cannot build a placeholder for lookup's declared result schema: "
            ),
            "{err}"
        );
    }

    #[test]
    fn a_tool_with_an_invalid_result_schema_is_refused() {
        let mut set = ToolSet::new();
        for result in [json!({"type": "banana"}), json!([1, 2])] {
            let err = set.insert(Arc::new(Lookup { result })).unwrap_err();
            assert!(
                matches!(&err, ToolError::InvalidResultSchema { tool, .. } if tool == "lookup"),
                "{err:?}"
            );
            assert!(
                err.to_string()
                    .starts_with("tool lookup: its result schema is invalid: "),
                "{err}"
            );
        }
        assert!(set.is_empty());
    }

    #[test]
    fn selecting_names_narrows_or_fails() {
        let set = set();
        assert_eq!(set.select(&[]).unwrap().names(), Vec::<&str>::new());
        assert_eq!(set.select(&["echo".into()]).unwrap().names(), vec!["echo"]);
        let err = set.select(&["echo".into(), "rm".into()]).unwrap_err();
        assert!(err.to_string().contains("\"rm\""), "{err}");
        assert_eq!(
            ToolSet::new()
                .select(&["x".into()])
                .unwrap_err()
                .to_string(),
            "there is no tool named \"x\"; available: none"
        );
    }
}
