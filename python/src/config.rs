//! The package's configuration of a runtime and of a run, as the Python half sends it.

use std::path::PathBuf;
use std::sync::Arc;

use flowbox::backends::{AgentBackend, AgentConfig, CheckedBackend, FakeBackend, ScriptedBackend};
use flowbox::chat::ChatModel;
use flowbox::http::{AnthropicChat, OpenAiChat, RetryPolicy};
use flowbox::plan::PriceTable;
use flowbox::store::SqliteStore;
use flowbox::tools::ToolSet;
use flowbox::{LeafBackend, Limits, RunRequest};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde::Deserialize;
use serde_json::Value;

use crate::bridge::Bridge;
use crate::leaf::PythonLeaf;
use crate::tool::{PythonTool, ToolConfig};

pyo3::create_exception!(
    _native,
    InvalidLimits,
    PyValueError,
    "Limits that are out of range or unknown."
);

/// A runtime's configuration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    backend: BackendConfig,
    tools: Vec<ToolConfig>,
    limits: Option<Value>,
    /// The SQLite journal's path; `None` keeps no journal.
    journal: Option<PathBuf>,
    warm_pool: usize,
    /// A price table file (`flowbox run --prices`).
    prices: Option<PathBuf>,
    /// Where the compiled guest is cached; `None` for the default.
    cache_dir: Option<PathBuf>,
}

/// What answers the leaves.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum BackendConfig {
    /// The package's Python leaf function.
    Python,
    Fake,
    Scripted {
        path: PathBuf,
    },
    /// Leaf agents on an OpenAI-compatible Chat Completions endpoint (key from the environment).
    Openai {
        model: String,
        base_url: Option<String>,
    },
    /// Leaf agents on Anthropic's Messages API (key from the environment).
    Anthropic {
        model: String,
        base_url: Option<String>,
    },
}

impl Config {
    /// The runtime this configuration describes; Python leaves and tools are called through
    /// `bridge`.
    pub(crate) fn build(self, bridge: Arc<Py<Bridge>>) -> Result<flowbox::Runtime, String> {
        let mut script_tools = ToolSet::new();
        let mut leaf_tools = ToolSet::new();
        for tool in self.tools {
            let (script, leaves) = (tool.script, tool.leaves);
            let tool = Arc::new(PythonTool::new(tool, Arc::clone(&bridge)));
            for (wanted, set) in [(script, &mut script_tools), (leaves, &mut leaf_tools)] {
                if wanted {
                    set.insert(tool.clone())
                        .map_err(|error| error.to_string())?;
                }
            }
        }
        let backend = self.backend.build(bridge, leaf_tools)?;
        let mut builder = flowbox::Runtime::builder()
            .shared_backend(backend)
            .code_tools(script_tools)
            .warm_pool(self.warm_pool);
        if let Some(limits) = self.limits {
            builder = builder.limits(parse_limits(&limits)?);
        }
        if let Some(path) = self.journal {
            let store = SqliteStore::open(&path)
                .map_err(|error| format!("cannot open the journal {}: {error}", path.display()))?;
            builder = builder.store(store);
        }
        if let Some(path) = self.prices {
            builder = builder.prices(PriceTable::load(&path).map_err(|error| error.to_string())?);
        }
        if let Some(dir) = self.cache_dir {
            builder = builder.cache_dir(dir);
        }
        builder.build().map_err(|error| error.to_string())
    }
}

impl BackendConfig {
    fn build(
        self,
        bridge: Arc<Py<Bridge>>,
        tools: ToolSet,
    ) -> Result<Arc<dyn LeafBackend>, String> {
        // Offline backends refuse what a real agent would: unknown profiles, tools, types.
        let checked = |inner: Arc<dyn LeafBackend>, tools: ToolSet| -> Arc<dyn LeafBackend> {
            Arc::new(CheckedBackend::new(inner, AgentConfig::default(), tools))
        };
        let agent = |chat: Arc<dyn ChatModel>, model: String, tools: ToolSet| {
            let config = AgentConfig {
                model,
                ..AgentConfig::default()
            };
            Arc::new(AgentBackend::new(chat, config, tools)) as Arc<dyn LeafBackend>
        };
        Ok(match self {
            Self::Python => Arc::new(PythonLeaf::new(bridge)),
            Self::Fake => checked(Arc::new(FakeBackend::new()), tools),
            Self::Scripted { path } => {
                let scripted = ScriptedBackend::from_file(&path).map_err(|e| e.to_string())?;
                checked(Arc::new(scripted), tools)
            }
            Self::Openai { model, base_url } => {
                let chat = OpenAiChat::from_env_at(base_url.as_deref(), RetryPolicy::default())
                    .map_err(|error| error.to_string())?;
                agent(Arc::new(chat), model, tools)
            }
            Self::Anthropic { model, base_url } => {
                let chat = AnthropicChat::from_env_at(base_url.as_deref(), RetryPolicy::default())
                    .map_err(|error| error.to_string())?;
                agent(Arc::new(chat), model, tools)
            }
        })
    }
}

/// One run's request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RequestConfig {
    script: String,
    args: Value,
    thread_id: Option<String>,
    limits: Option<Value>,
}

impl RequestConfig {
    pub(crate) fn parse(text: &str) -> PyResult<Self> {
        serde_json::from_str(text)
            .map_err(|error| PyValueError::new_err(format!("invalid run request: {error}")))
    }

    pub(crate) fn into_request(self) -> PyResult<RunRequest> {
        let mut request = RunRequest::new(self.script).args(self.args);
        if let Some(thread_id) = self.thread_id {
            request = request.thread_id(thread_id);
        }
        if let Some(limits) = self.limits {
            request = request.limits(parse_limits(&limits).map_err(InvalidLimits::new_err)?);
        }
        Ok(request)
    }
}

/// Limits from JSON text.
pub(crate) fn limits(text: &str) -> PyResult<Limits> {
    serde_json::from_str(text)
        .map_err(|error| InvalidLimits::new_err(format!("invalid limits: {error}")))
}

/// Limits from a JSON value, read from its text so every number reads as written.
fn parse_limits(value: &Value) -> Result<Limits, String> {
    serde_json::from_str(&value.to_string()).map_err(|error| format!("invalid limits: {error}"))
}
