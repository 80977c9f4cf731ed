//! Host tools written in Python (`@flowbox.tool`).

use std::sync::Arc;

use flowbox::tools::{Tool, ToolError, ToolSpec};
use pyo3::prelude::*;
use serde::Deserialize;
use serde_json::Value;

use crate::bridge::{self, Bridge, Request};

/// How the Python package describes one tool.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolConfig {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) parameters: Value,
    pub(crate) result_schema: Option<Value>,
    pub(crate) read_only: bool,
    /// Scripts may call it with `call_tool`.
    pub(crate) script: bool,
    /// Leaf agents may call it in their own loop.
    pub(crate) leaves: bool,
}

/// A tool whose calls go to the Python dispatcher's `tool`, which runs the function on the
/// caller's event loop (a plain function in a worker thread).
pub(crate) struct PythonTool {
    config: ToolConfig,
    bridge: Arc<Py<Bridge>>,
}

impl std::fmt::Debug for PythonTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonTool")
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}

impl PythonTool {
    pub(crate) fn new(config: ToolConfig, bridge: Arc<Py<Bridge>>) -> Self {
        Self { config, bridge }
    }
}

#[flowbox::async_trait]
impl Tool for PythonTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.config.name.clone(),
            description: self.config.description.clone(),
            parameters: self.config.parameters.clone(),
        }
    }

    fn read_only(&self) -> bool {
        self.config.read_only
    }

    fn result_schema(&self) -> Option<Value> {
        self.config.result_schema.clone()
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let arguments = serde_json::to_string(&arguments).expect("arguments serialise");
        let request = Request::Tool(self.config.name.clone(), arguments);
        let answer = bridge::call(&self.bridge, request)
            .await
            .map_err(|failure| ToolError::Failed(failure.message))?;
        let (bridge::Reply::Json(text) | bridge::Reply::Text(text)) = answer;
        serde_json::from_str(&text).map_err(|error| {
            ToolError::Failed(format!(
                "tool {}: its result could not be read: {error}",
                self.config.name
            ))
        })
    }
}
