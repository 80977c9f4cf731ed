//! The backend flags: which backend answers leaf calls, the provider's model, profiles and
//! retries, agent types, and the tools granted.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use flowbox::LeafBackend;
use flowbox::backends::{
    AgentBackend, AgentConfig, AgentTemplate, CheckedBackend, FakeBackend, ModelProfile,
    ScriptedBackend,
};
use flowbox::chat::{ChatModel, FakeChat};
use flowbox::http::{AnthropicChat, OpenAiChat, RetryPolicy};
use flowbox::plan::{FanoutProfile, PriceTable};
use flowbox::tools::{ReadRoots, ToolSet};

/// Which backend answers leaf calls.
#[derive(Debug, Clone)]
pub(crate) enum BackendChoice {
    /// Deterministic offline replies.
    Fake,
    /// Replies from a scripted-backend JSON file.
    Scripted(PathBuf),
    /// An OpenAI-compatible Chat Completions server.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

impl FromStr for BackendChoice {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "fake" => Ok(Self::Fake),
            "openai" => Ok(Self::OpenAi),
            "anthropic" => Ok(Self::Anthropic),
            _ => match value.strip_prefix("scripted:") {
                Some(path) if !path.is_empty() => Ok(Self::Scripted(PathBuf::from(path))),
                _ => Err(format!(
                    "unknown backend {value:?}; use `fake`, `scripted:FILE`, `openai` or `anthropic`"
                )),
            },
        }
    }
}

/// A `--profile NAME=MODEL[:DESCRIPTION]` flag.
#[derive(Debug, Clone)]
pub(crate) struct Profile {
    name: String,
    profile: ModelProfile,
}

impl FromStr for Profile {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        let (name, rest) = value.split_once('=').unwrap_or((value, ""));
        let (model, description) = match rest.split_once(':') {
            Some((model, description)) => (model, Some(description.trim())),
            None => (rest, None),
        };
        if name.is_empty() || model.is_empty() {
            return Err(format!(
                "expected NAME=MODEL or NAME=MODEL:DESCRIPTION, such as \
                 fast=gpt-4o-mini:\"cheap, for sweeps\", not {value:?}"
            ));
        }
        check_name("a profile", name)?;
        check_name("a model id", model)?;
        let mut profile = ModelProfile::new(model);
        if let Some(description) = description.filter(|d| !d.is_empty()) {
            profile = profile.with_description(description);
        }
        Ok(Self {
            name: name.to_owned(),
            profile,
        })
    }
}

/// Refuses a profile, agent type or model name that is empty or has a control character in
/// it: the same rules for the flags and the files.
fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        Err(format!("{what} cannot be empty"))
    } else if name.chars().any(char::is_control) {
        Err(format!(
            "{what} cannot contain control characters, as {name:?} does"
        ))
    } else {
        Ok(())
    }
}

/// What the backend flags build: the leaf backend, the tools, and a root agent's model.
pub(crate) struct Backends {
    /// Answers `agent(...)`.
    pub leaf: Arc<dyn LeafBackend>,
    /// The granted tools: what `call_tool(...)` may call, and what agents may use.
    pub tools: ToolSet,
    /// The model a root agent (`flowbox ask`) talks to: the provider's, the scripted file's
    /// `root` turns, or a fake that answers directly.
    pub root: Arc<dyn ChatModel>,
    /// The provider model id of the root agent.
    pub root_model_id: String,
    /// The prices leaves are costed at (`--prices`).
    pub prices: Option<PriceTable>,
    /// The default profile of wide fan-outs (`--fanout-profile`).
    pub fanout: Option<FanoutProfile>,
}

/// The backend flags: which backend answers leaves, its provider settings, and the tools.
#[derive(Debug, Args)]
pub(crate) struct BackendOptions {
    /// The leaf backend: `fake` (offline, deterministic), `scripted:FILE`, `openai`
    /// (OPENAI_BASE_URL, OPENAI_API_KEY) or `anthropic` (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY).
    #[arg(long, default_value = "fake", value_name = "BACKEND")]
    pub backend: BackendChoice,
    /// The provider's base URL (openai and anthropic backends) [default: OPENAI_BASE_URL or
    /// ANTHROPIC_BASE_URL, else the provider's own]. API keys come only from the environment,
    /// so they never show in shell history or the process list.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The provider model leaves use by default, and the root agent of `ask` (openai and
    /// anthropic backends; offline backends plan and price leaves as this model) [default for
    /// offline backends: default].
    #[arg(long, value_name = "MODEL", env = "FLOWBOX_MODEL")]
    pub model: Option<String>,
    /// A model profile scripts may name with `model=NAME` (repeatable), with what it is for
    /// after a colon: `fast=gpt-4o-mini:"cheap, for sweeps"`. The root model's guidance lists
    /// the profiles and their descriptions; scripts can only name profiles, never provider
    /// models directly. A model id with a colon in it goes in a --profiles file.
    #[arg(long = "profile", value_name = "NAME=MODEL[:DESCRIPTION]")]
    pub profiles: Vec<Profile>,
    /// Model profiles from a JSON file mapping each NAME to a provider model id or to
    /// {"model", "description"?}; a --profile of the same name replaces the file's.
    #[arg(long = "profiles", value_name = "FILE")]
    pub profiles_file: Option<PathBuf>,
    /// Leaf templates scripts select with `agent_type=NAME`: a JSON file mapping each NAME to
    /// {"base_prompt", "description"? (what it is for, shown in the root model's guidance),
    /// "model"? (a profile or a provider model), "tools"? (granted tools)}.
    #[arg(long, value_name = "FILE")]
    pub agent_types: Option<PathBuf>,
    /// Grant read access to a directory (repeatable): `read_file` and `list_dir` then work for
    /// leaves and for scripts' `call_tool`, confined to it.
    #[arg(long = "allow-read", value_name = "DIR")]
    pub allow_read: Vec<PathBuf>,
    /// Most tokens one model turn may write, for leaves and the root agent of `ask` (openai and
    /// anthropic backends) [default: 4096]. A reply cut off at this limit fails the leaf.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_output_tokens: Option<u32>,
    /// Most model turns one leaf agent may take, tool calls included (openai and anthropic
    /// backends) [default: 8].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_turns: Option<u32>,
    /// Attempts after the first for a failed provider request (429, 5xx, timeouts) [default: 3].
    #[arg(long, value_name = "N")]
    pub retries: Option<u32>,
    /// Deadline of one provider request, in seconds [default: 120].
    #[arg(long, value_name = "SECS")]
    pub request_timeout: Option<f64>,
    /// Longest wait between two attempts of a provider request, and the longest
    /// `Retry-After` obeyed (a longer one fails the call at once), in seconds [default: 60].
    #[arg(long, value_name = "SECS")]
    pub max_backoff: Option<f64>,
}

impl BackendOptions {
    /// The backend and tools the flags name.
    pub(crate) fn backends(&self) -> anyhow::Result<Backends> {
        let tools = ReadRoots::open(&self.allow_read)
            .map_err(anyhow::Error::msg)?
            .tools();
        let (leaf, root, root_model_id): (Arc<dyn LeafBackend>, Arc<dyn ChatModel>, String) =
            match &self.backend {
                BackendChoice::Fake => (
                    self.offline(Arc::new(FakeBackend::new()), &tools)?,
                    Arc::new(FakeChat::new()),
                    "fake".into(),
                ),
                BackendChoice::Scripted(path) => {
                    let scripted = ScriptedBackend::from_file(path)?;
                    let root = Arc::new(scripted.root_model());
                    (
                        self.offline(Arc::new(scripted), &tools)?,
                        root,
                        "scripted".into(),
                    )
                }
                BackendChoice::OpenAi | BackendChoice::Anthropic => {
                    let model = self.chat_model()?;
                    let config = self.agent_config(&tools)?;
                    let id = config.model.clone();
                    let leaf = AgentBackend::new(Arc::clone(&model), config, tools.clone());
                    (Arc::new(leaf), model, id)
                }
            };
        Ok(Backends {
            leaf,
            tools,
            root,
            root_model_id,
            prices: None,
            fanout: None,
        })
    }

    /// Every provider model the flags name, with what uses it: the default model, the
    /// profiles, and the agent types' own models.
    pub(crate) fn models(&self) -> anyhow::Result<Vec<(String, String)>> {
        let config = AgentConfig {
            model: self.default_model(),
            ..AgentConfig::default()
        };
        let mut models = vec![(config.model, "the default model (--model)".to_owned())];
        let profiles = self.profile_map()?;
        for (name, profile) in &profiles {
            models.push((profile.model.clone(), format!("--profile {name}")));
        }
        for (name, template) in self.templates_unchecked()? {
            if let Some(model) = template.model {
                let model = profiles.get(&model).map_or(model, |p| p.model.clone());
                models.push((model, format!("agent type {name}")));
            }
        }
        Ok(models)
    }

    /// Whether `--profile NAME=...` or the `--profiles` file names a profile `name`.
    pub(crate) fn names_profile(&self, name: &str) -> anyhow::Result<bool> {
        Ok(self.profile_map()?.contains_key(name))
    }

    /// The default model: `--model`, else (offline backends only) `default`.
    fn default_model(&self) -> String {
        self.model
            .clone()
            .unwrap_or_else(|| AgentConfig::default().model)
    }

    /// An offline leaf backend that refuses what a real one would: profiles not given with
    /// `--profile`, tools not granted, agent types not in `--agent-types`.
    fn offline(
        &self,
        backend: Arc<dyn LeafBackend>,
        tools: &ToolSet,
    ) -> anyhow::Result<Arc<dyn LeafBackend>> {
        let defaults = AgentConfig::default();
        let config = AgentConfig {
            model: self.default_model(),
            profiles: self.profile_map()?,
            templates: self.templates(tools)?,
            max_turns: self.max_turns.unwrap_or(defaults.max_turns),
            max_tokens: self.max_output_tokens.unwrap_or(defaults.max_tokens),
            ..defaults
        };
        Ok(Arc::new(CheckedBackend::new(
            backend,
            config,
            tools.clone(),
        )))
    }

    /// The `--agent-types` file's templates, their tool lists checked against `tools`. Being
    /// the host's own configuration, a template may name a provider model directly.
    fn templates(&self, tools: &ToolSet) -> anyhow::Result<BTreeMap<String, AgentTemplate>> {
        let templates = self.templates_unchecked()?;
        for (name, template) in &templates {
            if let Some(names) = &template.tools {
                tools
                    .select(names)
                    .with_context(|| format!("agent type {name:?} names a tool not granted"))?;
            }
        }
        Ok(templates)
    }

    /// The `--agent-types` file's templates as written.
    fn templates_unchecked(&self) -> anyhow::Result<BTreeMap<String, AgentTemplate>> {
        let Some(path) = &self.agent_types else {
            return Ok(BTreeMap::new());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --agent-types {}", path.display()))?;
        let templates: BTreeMap<String, AgentTemplate> = serde_json::from_str(&text)
            .with_context(|| format!("--agent-types {} is not valid", path.display()))?;
        for (name, template) in &templates {
            check_name("an agent type", name)
                .and_then(|()| {
                    template
                        .model
                        .as_deref()
                        .map_or(Ok(()), |model| check_name("a model", model))
                })
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("--agent-types {} is not valid", path.display()))?;
        }
        Ok(templates)
    }

    /// The `--profiles` file's profiles, then the `--profile` flags', by name.
    fn profile_map(&self) -> anyhow::Result<BTreeMap<String, ModelProfile>> {
        let mut profiles = match &self.profiles_file {
            None => BTreeMap::new(),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read --profiles {}", path.display()))?;
                let profiles: BTreeMap<String, ModelProfile> = serde_json::from_str(&text)
                    .with_context(|| format!("--profiles {} is not valid", path.display()))?;
                for (name, profile) in &profiles {
                    check_name("a profile", name)
                        .and_then(|()| check_name("a model id", &profile.model))
                        .map_err(anyhow::Error::msg)
                        .with_context(|| format!("--profiles {} is not valid", path.display()))?;
                }
                profiles
            }
        };
        for profile in &self.profiles {
            profiles.insert(profile.name.clone(), profile.profile.clone());
        }
        Ok(profiles)
    }

    /// The provider's chat model, from the environment.
    fn chat_model(&self) -> anyhow::Result<Arc<dyn ChatModel>> {
        let mut retry = RetryPolicy::default();
        if let Some(retries) = self.retries {
            retry = retry.with_max_retries(retries);
        }
        if let Some(secs) = self.request_timeout {
            let timeout = Duration::try_from_secs_f64(secs)
                .map_err(|e| anyhow::anyhow!("invalid --request-timeout {secs}: {e}"))?;
            retry = retry.with_request_timeout(timeout);
        }
        if let Some(secs) = self.max_backoff {
            let backoff = Duration::try_from_secs_f64(secs)
                .map_err(|e| anyhow::anyhow!("invalid --max-backoff {secs}: {e}"))?;
            retry = retry.with_max_backoff(backoff);
        }
        let base_url = self.base_url.as_deref();
        Ok(match self.backend {
            BackendChoice::Anthropic => Arc::new(AnthropicChat::from_env_at(base_url, retry)?),
            _ => Arc::new(OpenAiChat::from_env_at(base_url, retry)?),
        })
    }

    /// The leaf agents' model, profiles and templates.
    fn agent_config(&self, tools: &ToolSet) -> anyhow::Result<AgentConfig> {
        let model = self.model.clone().ok_or_else(|| {
            anyhow::anyhow!("the openai and anthropic backends need --model (or FLOWBOX_MODEL)")
        })?;
        self.agent_config_for(model, tools)
    }

    /// The agent loop's settings for leaves on another chat model (`mcp --leaves sampling`),
    /// whose default model is `--model`, else `default_model`.
    pub(crate) fn agent_config_on(
        &self,
        default_model: &str,
        tools: &ToolSet,
    ) -> anyhow::Result<AgentConfig> {
        let model = self
            .model
            .clone()
            .unwrap_or_else(|| default_model.to_owned());
        self.agent_config_for(model, tools)
    }

    fn agent_config_for(&self, model: String, tools: &ToolSet) -> anyhow::Result<AgentConfig> {
        let defaults = AgentConfig::default();
        Ok(AgentConfig {
            model,
            profiles: self.profile_map()?,
            templates: self.templates(tools)?,
            max_turns: self.max_turns.unwrap_or(defaults.max_turns),
            max_tokens: self.max_output_tokens.unwrap_or(defaults.max_tokens),
            ..defaults
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(flag: &str) -> Result<(String, ModelProfile), String> {
        flag.parse::<Profile>().map(|p| (p.name, p.profile))
    }

    #[test]
    fn a_profile_flag_names_a_model_and_may_say_what_it_is_for() {
        assert_eq!(
            profile("fast=gpt-4o-mini").unwrap(),
            ("fast".into(), ModelProfile::new("gpt-4o-mini"))
        );
        assert_eq!(
            profile("fast=gpt-4o-mini:cheap, for sweeps").unwrap(),
            (
                "fast".into(),
                ModelProfile::new("gpt-4o-mini").with_description("cheap, for sweeps")
            )
        );
        // The description starts at the first colon and may hold more.
        assert_eq!(
            profile("deep=o3: slow: for hard calls").unwrap().1,
            ModelProfile::new("o3").with_description("slow: for hard calls")
        );
        assert_eq!(profile("fast=m:").unwrap().1, ModelProfile::new("m"));
        for wrong in ["fast", "=m", "fast=", "fast=:cheap"] {
            let error = profile(wrong).unwrap_err();
            assert!(error.contains("NAME=MODEL:DESCRIPTION"), "{error}");
        }
    }
}
