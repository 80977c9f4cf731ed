//! What a leaf backend offers the scripts it answers — the model profiles `model=` may name,
//! the templates `agent_type=` may name, the tools a leaf may use — so that the guidance a
//! root model writes scripts from names exactly what this host has.

use std::collections::BTreeMap;

use super::config::{AgentConfig, AgentTemplate, ModelProfile};
use crate::tool::ToolSet;
use crate::tool::ToolSpec;

/// The choices a backend offers an `agent(...)` call, as [`LeafBackend::catalog`] reports
/// them. Build one with `..LeafCatalog::default()` for the parts a backend does not have.
///
/// [`LeafBackend::catalog`]: crate::LeafBackend::catalog
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeafCatalog {
    /// The profiles `model=` may name, by name.
    pub profiles: BTreeMap<String, ModelProfile>,
    /// The templates `agent_type=` may name, by name.
    pub templates: BTreeMap<String, AgentTemplate>,
    /// The host tools a leaf may use, sorted by name: all of them unless its call or its
    /// template narrows them.
    pub tools: Vec<ToolSpec>,
}

impl LeafCatalog {
    /// What leaves configured by `config`, with `tools`, offer.
    pub fn of(config: &AgentConfig, tools: &ToolSet) -> Self {
        Self {
            profiles: config.profiles.clone(),
            templates: config.templates.clone(),
            tools: tools.specs(),
        }
    }
}
