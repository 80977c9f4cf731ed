//! Host tools: what a leaf agent may call while it works, and what a script may call directly
//! with `call_tool` when the host registers the tool as code-callable.
//!
//! A [`Tool`] declares its name, description and a JSON Schema of its arguments; a [`ToolSet`]
//! checks arguments against that schema before the tool runs, so a tool only ever sees
//! arguments of the shape it declared.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::schema::schema_errors;

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
    /// [`ToolError::InvalidSchema`] when its argument schema is not a valid JSON Schema.
    pub fn insert(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolError> {
        let spec = tool.spec();
        let validator =
            jsonschema::validator_for(&spec.parameters).map_err(|e| ToolError::InvalidSchema {
                tool: spec.name.clone(),
                message: e.to_string(),
            })?;
        self.tools.insert(
            spec.name.clone(),
            Entry {
                tool,
                spec,
                validator: Arc::new(validator),
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
