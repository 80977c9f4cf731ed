//! How leaf agents are configured (the default model, profiles, templates, turns, output
//! tokens), and what one request resolves to under a configuration: its template, provider
//! model id and tools, or a typed refusal naming what is unknown.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, value::MapAccessDeserializer};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::tool::ToolSet;
use crate::{BackendError, BackendErrorKind, LeafEstimate, LeafRequest};

/// What every leaf is told, whatever its base prompt.
pub const LEAF_ADDENDUM: &str = "You are one step of a larger automated workflow. Answer the \
task you are given directly and concisely. Return only what is asked: no preamble, no offers \
of further help.";

/// The base prompt of leaves without a template.
pub const DEFAULT_BASE_PROMPT: &str = "You are a careful, capable assistant.";

/// A model profile a script names with `model=`: the provider model id it stands for, and
/// what the operator says it is for, which the root model's guidance shows.
///
/// In JSON (a profiles file, an [`AgentConfig`]) a profile is either the model id alone,
/// `"gpt-4o-mini"`, or `{"model": "gpt-4o-mini", "description": "cheap, for sweeps"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelProfile {
    /// The provider model id.
    pub model: String,
    /// What the profile is for, in a line (`cheap, for sweeps`); `None` when the operator
    /// gave none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl ModelProfile {
    /// A profile for the provider model `model`, without a description.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            description: None,
        }
    }

    /// This profile, described as `description`.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

impl From<&str> for ModelProfile {
    fn from(model: &str) -> Self {
        Self::new(model)
    }
}

impl From<String> for ModelProfile {
    fn from(model: String) -> Self {
        Self::new(model)
    }
}

/// A profile's object form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFields {
    model: String,
    #[serde(default)]
    description: Option<String>,
}

impl<'de> Deserialize<'de> for ModelProfile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Form;
        impl<'de> de::Visitor<'de> for Form {
            type Value = ModelProfile;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a provider model id, or {"model", "description"?}"#)
            }

            fn visit_str<E: de::Error>(self, model: &str) -> Result<ModelProfile, E> {
                Ok(ModelProfile::new(model))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ModelProfile, A::Error> {
                let fields = ProfileFields::deserialize(MapAccessDeserializer::new(map))?;
                Ok(ModelProfile {
                    model: fields.model,
                    description: fields.description,
                })
            }
        }
        deserializer.deserialize_any(Form)
    }
}

/// A named leaf template a script selects with `agent_type=`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentTemplate {
    /// What the template is for, in a line, for the root model's guidance; without one, the
    /// guidance quotes the start of the base prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
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
    /// Model profiles scripts may name with `model=`, by name. Only these names are accepted;
    /// a script cannot name a provider model directly.
    pub profiles: BTreeMap<String, ModelProfile>,
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

/// What a request resolves to: its template, provider model id and tools.
pub(super) struct Resolved<'a> {
    pub template: Option<&'a AgentTemplate>,
    pub model: String,
    pub tools: ToolSet,
}

/// The template, model id and tools a request resolves to under `config` and `tools`; errors
/// name what is unknown.
pub(super) fn resolve<'a>(
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
        (Some(profile), _) => config
            .profiles
            .get(profile)
            .map(|p| p.model.clone())
            .ok_or_else(|| BackendErrorKind::UnknownProfile {
                name: profile.clone(),
                profiles: config.profiles.keys().cloned().collect(),
            })?,
        // A template is the host's own configuration, so it may name a model id directly.
        (None, Some(model)) => config
            .profiles
            .get(model)
            .map_or_else(|| model.clone(), |p| p.model.clone()),
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

/// The system prompt of a leaf: its template's base prompt (else `config`'s), the leaf
/// addendum, and the call's instruction.
pub(super) fn system_prompt(
    config: &AgentConfig,
    template: Option<&AgentTemplate>,
    instruction: Option<&str>,
) -> String {
    let base = template.map_or(config.base_prompt.as_str(), |t| t.base_prompt.as_str());
    let mut system = format!("{base}\n\n{LEAF_ADDENDUM}");
    if let Some(instruction) = instruction.filter(|i| !i.trim().is_empty()) {
        system.push_str("\n\n");
        system.push_str(instruction);
    }
    system
}

/// What a leaf agent under `config` and `tools` would send for `request` on its first turn,
/// and its output ceiling (`max_tokens`, or the schema's longest reply). A request `resolve`
/// refuses never starts, so it gets the generic estimate.
pub(super) fn estimate(
    config: &AgentConfig,
    tools: &ToolSet,
    request: &LeafRequest,
) -> LeafEstimate {
    let Ok(resolved) = resolve(config, tools, request) else {
        return LeafEstimate::generic(request);
    };
    let profile = request
        .model
        .clone()
        .or_else(|| resolved.template.and_then(|t| t.model.clone()));
    let system = system_prompt(config, resolved.template, request.instruction.as_deref());
    let prompt = render_prompt(&request.prompt);
    let specs = resolved.tools.specs();
    let tool_text = if specs.is_empty() {
        String::new()
    } else {
        serde_json::to_string(&specs).unwrap_or_default()
    };
    let schema = request
        .schema
        .as_ref()
        .map(|s| s.to_string())
        .unwrap_or_default();
    let names = resolved
        .tools
        .names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    LeafEstimate::new(
        profile,
        resolved.model,
        &[&system, &prompt, &tool_text, &schema],
        u64::from(config.max_tokens),
        request.schema.as_ref(),
        names,
    )
}

/// The prompt as the user message: text as is, JSON values pretty-printed.
pub fn render_prompt(prompt: &Value) -> String {
    match prompt {
        Value::String(text) => text.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}
