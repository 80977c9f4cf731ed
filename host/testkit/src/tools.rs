//! A host tool whose work is a function, for tests that need a tool without a type of its own.

use std::fmt;
use std::sync::Arc;

use flowbox_backends::{Tool, ToolError, ToolSpec};
use serde_json::Value;

type Work = dyn Fn(Value) -> Result<Value, ToolError> + Send + Sync;

/// A [`Tool`] named `name` with argument schema `parameters` that answers with `work`; not
/// read-only and with no result schema unless [`FnTool::as_read_only`] and [`FnTool::returning`]
/// say so.
#[derive(Clone)]
pub struct FnTool {
    spec: ToolSpec,
    work: Arc<Work>,
    read_only: bool,
    result_schema: Option<Value>,
}

impl FnTool {
    /// A tool that runs `work` on arguments matching `parameters`.
    pub fn new(
        name: &str,
        description: &str,
        parameters: Value,
        work: impl Fn(Value) -> Result<Value, ToolError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            spec: ToolSpec {
                name: name.to_owned(),
                description: description.to_owned(),
                parameters,
            },
            work: Arc::new(work),
            read_only: false,
            result_schema: None,
        }
    }

    /// Marks the tool read-only ([`Tool::read_only`]).
    pub fn as_read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Declares the tool's result schema ([`Tool::result_schema`]).
    pub fn returning(mut self, schema: Value) -> Self {
        self.result_schema = Some(schema);
        self
    }
}

impl fmt::Debug for FnTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool")
            .field("name", &self.spec.name)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl Tool for FnTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn result_schema(&self) -> Option<Value> {
        self.result_schema.clone()
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        (self.work)(arguments)
    }
}
