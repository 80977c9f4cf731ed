//! The guidance a root model gets to write workflow scripts: generated from the script
//! contract the guest enforces (`contract/script.json`: modules, primitives, `agent()`
//! options, builtins) and from the runtime it is for — its limits, what its leaf backend
//! offers (profiles, templates, leaf tools) and the tools its scripts may call — with the
//! patterns of the library that fit that host.

use flowbox_backends::{AgentTemplate, LeafCatalog, ToolSpec, preview};
use serde::Deserialize;
use serde_json::Value;

use crate::{Limits, Runtime};

/// The patterns, as runnable scripts (in the crate's `patterns/`, each run by the tests). The
/// guidance shows those that fit its host: one calling `call_tool` only where the host has the
/// tools it calls.
pub const PATTERNS: &[(&str, &str)] = &[
    (
        "fan out, then synthesise",
        include_str!("../../patterns/fan_out_synthesise.py"),
    ),
    (
        "a pipeline over items",
        include_str!("../../patterns/pipeline_over_items.py"),
    ),
    (
        "draft, review, revise in a bounded loop",
        include_str!("../../patterns/draft_review_revise.py"),
    ),
    (
        "plan, execute each step, check with bounded retries",
        include_str!("../../patterns/plan_execute_check.py"),
    ),
    (
        "independent tasks in parallel, errors kept per task",
        include_str!("../../patterns/independent_tasks.py"),
    ),
    (
        "a structured decision with a schema",
        include_str!("../../patterns/structured_decision.py"),
    ),
    (
        "exact facts from call_tool, then a leaf to interpret them",
        include_str!("../../patterns/tool_then_interpret.py"),
    ),
];

/// The text a root agent's system prompt gets to learn the script contract and its host:
/// appended to the embedder's own prompt, never replacing it, and optional.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guidance {
    text: String,
}

impl Guidance {
    /// The guidance for runs on `runtime`, with the patterns that fit it. It names what this
    /// runtime really has: its [`Limits`], the profiles, templates and leaf tools of its
    /// backend ([`LeafBackend::catalog`](crate::LeafBackend::catalog)), and the tools its
    /// scripts may call ([`RuntimeBuilder::code_tools`](crate::RuntimeBuilder::code_tools)),
    /// saying so in one line where there are none.
    pub fn new(runtime: &Runtime) -> Self {
        Self {
            text: HostFacts::of(runtime).render(true),
        }
    }

    /// The guidance for runs on `runtime`, without the pattern library (about a quarter of
    /// the length).
    pub fn without_patterns(runtime: &Runtime) -> Self {
        Self {
            text: HostFacts::of(runtime).render(false),
        }
    }

    /// Guidance of the embedder's own.
    pub fn custom(text: impl Into<String>) -> Self {
        Self { text: text.into() }
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// `system_prompt` with this guidance appended.
    pub fn append_to(&self, system_prompt: &str) -> String {
        if system_prompt.trim().is_empty() {
            self.text.clone()
        } else {
            format!("{}\n\n{}", system_prompt.trim_end(), self.text)
        }
    }
}

/// The script contract the guest enforces, shared with it: the one list of modules,
/// primitives, `agent()` options and builtins.
const CONTRACT: &str = include_str!("../../contract/script.json");

/// What the guidance needs of the contract.
#[derive(Debug, Deserialize)]
struct Contract {
    modules: Vec<String>,
    primitives: Vec<Primitive>,
    /// Each `agent()` keyword option, with what it does and its default.
    agent_options: serde_json::Map<String, Value>,
    builtins: Builtins,
}

#[derive(Debug, Deserialize)]
struct Primitive {
    signature: String,
    description: String,
}

#[derive(Debug, Deserialize)]
struct Builtins {
    /// Builtins taking an attribute name only as a string literal, with the reason.
    literal_attribute_name: serde_json::Map<String, Value>,
    /// Builtins the guard refuses, with the reason.
    refused: serde_json::Map<String, Value>,
}

fn contract() -> Contract {
    serde_json::from_str(CONTRACT).expect("contract/script.json is valid (a unit test reads it)")
}

/// What the guidance says about its host.
struct HostFacts {
    limits: Limits,
    leaves: LeafCatalog,
    /// The tools scripts may call, sorted by name.
    code_tools: Vec<ToolSpec>,
    /// Those of them that only read, which a preview calls for real, sorted by name.
    read_only_tools: Vec<String>,
}

impl HostFacts {
    fn of(runtime: &Runtime) -> Self {
        Self {
            limits: runtime.limits().clone(),
            leaves: runtime.leaf_catalog(),
            code_tools: runtime.code_tools().specs(),
            read_only_tools: runtime
                .code_tools()
                .read_only_names()
                .into_iter()
                .map(str::to_owned)
                .collect(),
        }
    }

    fn render(&self, patterns: bool) -> String {
        let mut text = self.contract_and_host();
        if patterns {
            text.push_str("\n\n## Patterns\n");
            for (title, script) in PATTERNS.iter().filter(|(_, s)| self.fits(s)) {
                text.push_str(&format!(
                    "\n### {title}\n```python\n{}\n```\n",
                    script.trim_end()
                ));
            }
        }
        text
    }

    /// Whether every tool a pattern calls with `call_tool` is one this host's scripts may call.
    fn fits(&self, pattern: &str) -> bool {
        pattern.split("call_tool(\"").skip(1).all(|rest| {
            let name = rest.split('"').next().unwrap_or_default();
            self.code_tools.iter().any(|tool| tool.name == name)
        })
    }

    fn contract_and_host(&self) -> String {
        let contract = contract();
        let primitives: String = contract
            .primitives
            .iter()
            .map(|p| format!("- `{}`: {}\n", p.signature, p.description))
            .collect();
        let options: String = contract
            .agent_options
            .iter()
            .map(|(name, text)| format!("- `{name}`: {}\n", text.as_str().unwrap_or_default()))
            .collect();
        let names = |map: &serde_json::Map<String, Value>| {
            map.keys()
                .map(|name| format!("`{name}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            r#"## Workflows (the `run_workflow` tool)

Answer directly whenever you can. Use `run_workflow` only when a task genuinely needs several
coordinated leaf agents: many independent items, distinct perspectives to combine, a draft that
must be reviewed and revised, or a plan whose steps must each be executed and checked. Do not use
it for a single question, for arithmetic or lookups you can do yourself, or to "think harder".

A workflow is a short Python script that runs in a sandbox: no files, no network, no imports
except these pure modules: {modules}. Everything else is injected; never import it:

{primitives}
Give `parallel` callables such as `lambda x=x: agent(...)`, so each branch keeps its own item.

`agent()` options (each None unless given):
{options}
### This host

{profiles}

{templates}

{tools}

{limits}

Write either `meta = {{"name": ..., "description": ..., "phases": [{{"title": ...}}]}}` (literal
values only, the first assignment) followed by `async def main():` returning the result, or a
plain body that uses `await` at top level and ends with `return result`. The result must be
JSON (dicts, lists, strings, numbers, booleans, None). Every Python builtin that cannot reach
outside the sandbox is available, all exception classes included; these are rejected before the
script runs: {refused}. {literal} take the attribute name as a string literal only. Dunder names
and private or frame attributes are rejected too. Keep scripts as orchestration glue: the leaves
do the thinking.

The tool returns `{{"ok": true, "result": ..., "summary": ...}}`. Each branch that raised and
became None is in `summary.failed_branches` (`group`, `index`, `stage`, `exception`, `message`,
`line`); `summary.warnings` says what looked wrong: read both before trusting a result with gaps.
A failed run returns `{{"ok": false, "error": {{"kind", "message", "line", "hint"}}}}`: fix the
script as the hint says and call again. Results over the host's cap come back truncated: return
only what you need.

Preview a fan-out wider than the {concurrency} leaves that run at once (its widest
`parallel`/`pipeline`, not the total) or over a list you did not write: `"preview": true` returns
its plan (leaves, tokens, dollars) and runs no leaf{preview_tools}; show a user its
`expected_usd`, the likely cost (`usd` is the ceiling gates and budgets check). Sweep on a cheaper
model profile (`model=`). Show the user the plan and wait, rather than run, when they asked to
approve costs or a `gate_refused` error came back (it carries the plan): narrow the fan-out, pick
a cheaper profile, or ask them."#,
            modules = contract.modules.join(", "),
            refused = names(&contract.builtins.refused),
            literal = names(&contract.builtins.literal_attribute_name),
            profiles = self.profiles(),
            templates = self.templates(),
            tools = self.tools(),
            limits = self.limits(),
            concurrency = self.limits.max_concurrency,
            preview_tools = self.preview_tools(),
        )
    }

    /// What a preview does with `call_tool`: runs the read-only tools for real, gives the
    /// others a placeholder; nothing when scripts have no tools.
    fn preview_tools(&self) -> String {
        let names: Vec<String> = self
            .read_only_tools
            .iter()
            .map(|name| format!("`{name}`"))
            .collect();
        let others = self.code_tools.len() > names.len();
        let placeholder = "a placeholder (of the tool's declared result shape, else None)";
        match (names.is_empty(), others) {
            (true, false) => String::new(),
            (true, true) => format!("; `call_tool` gets {placeholder}"),
            (false, false) => format!(
                "; `call_tool` runs {} for real (they only read)",
                names.join(", ")
            ),
            (false, true) => format!(
                "; `call_tool` runs {} for real (they only read) and gives other tools {placeholder}",
                names.join(", ")
            ),
        }
    }

    fn profiles(&self) -> String {
        let profiles = &self.leaves.profiles;
        if profiles.is_empty() {
            return "Model profiles: none, so leave `model=` out (every leaf uses the host's \
                    default model)."
                .into();
        }
        let mut text = String::from(
            "Model profiles for `model=` (without it, leaves use the host's default model):",
        );
        for (name, profile) in profiles {
            match &profile.description {
                Some(description) => text.push_str(&format!("\n- `{name}`: {description}")),
                None => text.push_str(&format!("\n- `{name}`: the model {}", profile.model)),
            }
        }
        text
    }

    fn templates(&self) -> String {
        let templates = &self.leaves.templates;
        if templates.is_empty() {
            return "Leaf templates: none, so leave `agent_type=` out.".into();
        }
        let mut text = String::from("Leaf templates for `agent_type=`:");
        for (name, template) in templates {
            text.push_str(&format!("\n- `{name}`: {}", self.template_line(template)));
        }
        text
    }

    /// A template's description (or the start of its base prompt), its model and its tools.
    fn template_line(&self, template: &AgentTemplate) -> String {
        let mut line = match &template.description {
            Some(description) => description.clone(),
            None => preview(template.base_prompt.lines().next().unwrap_or_default(), 100),
        };
        let mut details = Vec::new();
        if let Some(model) = &template.model {
            details.push(if self.leaves.profiles.contains_key(model) {
                format!("profile `{model}`")
            } else {
                "a model of its own".to_owned()
            });
        }
        match &template.tools {
            Some(tools) if tools.is_empty() => details.push("no tools".to_owned()),
            Some(tools) => details.push(format!("tools {}", tools.join(", "))),
            None => {}
        }
        if !details.is_empty() {
            line.push_str(&format!(" ({})", details.join("; ")));
        }
        line
    }

    fn tools(&self) -> String {
        let leaf = |name: &str| self.leaves.tools.iter().any(|t| t.name == name);
        let code = |name: &str| self.code_tools.iter().any(|t| t.name == name);
        let mut all: Vec<&ToolSpec> = self.leaves.tools.iter().collect();
        all.extend(self.code_tools.iter().filter(|t| !leaf(&t.name)));
        all.sort_by(|a, b| a.name.cmp(&b.name));
        if all.is_empty() {
            return "Host tools: none: leaves work from their prompt alone (leave `tools=` out) \
                    and `call_tool` has nothing to call."
                .into();
        }
        let mut text = String::from(
            "Host tools (`leaves`: a leaf may use it unless `tools=` says otherwise; \
             `call_tool`: the script may call it):",
        );
        for tool in all {
            let users = match (leaf(&tool.name), code(&tool.name)) {
                (true, true) => "leaves, call_tool",
                (true, false) => "leaves",
                _ => "call_tool",
            };
            text.push_str(&format!(
                "\n- `{}` [{users}]: {}",
                signature(tool),
                tool.description
            ));
        }
        if self.leaves.tools.is_empty() {
            text.push_str("\nLeaves have no tools: leave `tools=` out.");
        } else if self.code_tools.iter().any(|t| leaf(&t.name)) {
            text.push_str(
                "\nLeaves (a template's too) give a tool the same arguments and paths as \
                 `call_tool`.",
            );
        }
        if self.code_tools.is_empty() {
            text.push_str("\nScripts have no tools: do not use `call_tool`.");
        }
        text
    }

    fn limits(&self) -> String {
        let limits = &self.limits;
        let budget = limits.budget_tokens.map_or_else(
            || "no token budget".to_owned(),
            |b| format!("a budget of {b} tokens"),
        );
        format!(
            "Limits per run: {} leaf agents and {} tool calls in all, {} at a time (the rest \
             wait), {budget}, a {} s deadline, a {} script, {} of result JSON, {} per prompt or \
             reply, {} of log output.",
            limits.max_agents,
            limits.max_tool_calls,
            limits.max_concurrency,
            limits.timeout.as_secs(),
            size(limits.max_script_bytes),
            size(limits.max_result_bytes),
            size(limits.max_message_bytes),
            size(limits.max_output_bytes),
        )
    }
}

/// A tool as a call signature from its argument schema: `read_file(path: string)`, with `?`
/// after an optional argument.
fn signature(tool: &ToolSpec) -> String {
    let required: Vec<&str> = tool.parameters["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let arguments: Vec<String> = match tool.parameters["properties"].as_object() {
        Some(properties) => properties
            .iter()
            .map(|(name, schema)| {
                let optional = if required.contains(&name.as_str()) {
                    ""
                } else {
                    "?"
                };
                format!("{name}{optional}: {}", type_of(schema))
            })
            .collect(),
        None => vec!["**arguments".to_owned()],
    };
    format!("{}({})", tool.name, arguments.join(", "))
}

/// A JSON Schema's type in a word or two: `string`, `integer|null`, `"a"|"b"`, `any`.
fn type_of(schema: &Value) -> String {
    if let Some(values) = schema["enum"].as_array() {
        return values
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("|");
    }
    match &schema["type"] {
        Value::String(name) => name.clone(),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("|"),
        _ => "any".to_owned(),
    }
}

/// A byte count as people say it: `64 KiB`, `1 MiB`, `300 bytes`.
fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use flowbox_backends::{
        AgentConfig, AgentTemplate, ModelProfile, ReadRoots, Tool, ToolError, ToolSet,
    };
    use serde_json::json;

    use super::*;

    /// A directory to grant: the crate's patterns, named `patterns`.
    fn granted() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("patterns")
    }

    fn bare() -> HostFacts {
        HostFacts {
            limits: Limits::default(),
            leaves: LeafCatalog::default(),
            code_tools: Vec::new(),
            read_only_tools: Vec::new(),
        }
    }

    /// A host with two profiles, two templates, `read_file`/`list_dir` for leaves and scripts
    /// and a `search` tool only scripts may call.
    fn equipped(granted: &std::path::Path) -> HostFacts {
        let mut config = AgentConfig::default();
        config.profiles.insert(
            "fast".into(),
            ModelProfile::new("small-model").with_description("cheap, for sweeps"),
        );
        config
            .profiles
            .insert("deep".into(), ModelProfile::new("large-model"));
        config.templates.insert(
            "critic".into(),
            AgentTemplate {
                description: Some("finds the weak points of a draft".into()),
                base_prompt: "You criticise.".into(),
                model: Some("deep".into()),
                tools: Some(vec![]),
            },
        );
        config.templates.insert(
            "reader".into(),
            AgentTemplate {
                description: None,
                base_prompt: "You read files and quote them exactly.\nNever guess.".into(),
                model: Some("vendor-model-7".into()),
                tools: Some(vec!["read_file".into()]),
            },
        );
        let files = ReadRoots::open(&[granted.to_owned()]).unwrap().tools();
        let mut code = files.clone();
        code.insert(Arc::new(Search)).unwrap();
        HostFacts {
            limits: Limits::default()
                .with_max_agents(200)
                .with_budget_tokens(Some(50_000))
                .with_max_concurrency(4),
            leaves: LeafCatalog::of(&config, &files),
            code_tools: code.specs(),
            read_only_tools: names(code.read_only_names()),
        }
    }

    #[derive(Debug)]
    struct Search;

    #[async_trait::async_trait]
    impl Tool for Search {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "search".into(),
                description: "Search the index; returns {\"hits\": [{\"title\", \"url\"}]}.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "query": {"type": "string"},
                        "limit": {"type": ["integer", "null"]},
                        "order": {"enum": ["new", "relevant"]}
                    },
                    "required": ["query"]
                }),
            }
        }

        async fn call(&self, _: Value) -> Result<Value, ToolError> {
            Ok(json!({"hits": []}))
        }
    }

    fn names(names: Vec<&str>) -> Vec<String> {
        names.into_iter().map(str::to_owned).collect()
    }

    /// The root model is told to preview wide fan-outs — wide meaning the most leaves started
    /// together against the host's concurrency, not the total —, which of a plan's dollar
    /// figures to show a user, to sweep on cheaper profiles, and when to stop and show the plan.
    #[test]
    fn the_guidance_asks_for_a_preview_of_wide_fan_outs() {
        let text = bare().render(false).replace('\n', " ");
        for part in [
            "Preview a fan-out wider than the 16 leaves that run at once (its widest \
             `parallel`/`pipeline`, not the total) or over a list you did not write: \
             `\"preview\": true` returns its plan (leaves, tokens, dollars) and runs no leaf; show \
             a user its `expected_usd`, the likely cost (`usd` is the ceiling gates and budgets \
             check).",
            "cheaper model profile",
            "Show the user the plan and wait, rather than run, when they asked to approve costs \
             or a `gate_refused` error came back",
        ] {
            assert!(text.contains(part), "{part}\n---\n{text}");
        }
        // Scripts without tools hear nothing of what a preview does with them.
        assert!(!text.contains("for real"), "{text}");
        let text = equipped(&granted()).render(false);
        assert!(
            text.contains("wider than the 4 leaves that run at once"),
            "{text}"
        );
    }

    /// The guidance says which tools a preview runs for real (this host's read-only ones, by
    /// name) and that the others get a placeholder.
    #[test]
    fn the_guidance_says_what_a_preview_does_with_tools() {
        let text = equipped(&granted()).render(false);
        let part = "runs no leaf; `call_tool` runs `list_dir`, `read_file` for real (they only \
                    read) and gives other tools a placeholder (of the tool's declared result \
                    shape, else None); show";
        assert!(
            text.replace('\n', " ").contains(part),
            "{part}\n---\n{text}"
        );
        let files = ReadRoots::open(&[granted()]).unwrap().tools();
        let only_reads = HostFacts {
            code_tools: files.specs(),
            read_only_tools: names(files.read_only_names()),
            ..bare()
        };
        let text = only_reads.render(false).replace('\n', " ");
        assert!(
            text.contains(
                "runs no leaf; `call_tool` runs `list_dir`, `read_file` for real (they only read); show"
            ),
            "{text}"
        );
        let mut search = ToolSet::new();
        search.insert(Arc::new(Search)).unwrap();
        let none_read_only = HostFacts {
            code_tools: search.specs(),
            ..bare()
        };
        let text = none_read_only.render(false).replace('\n', " ");
        assert!(
            text.contains("runs no leaf; `call_tool` gets a placeholder (of the tool's declared result shape, else None); show"),
            "{text}"
        );
    }

    /// The guidance says what the guest enforces: every module, primitive, `agent()` option
    /// and refused builtin of the contract, and nothing the contract leaves out.
    #[test]
    fn the_guidance_is_the_contract() {
        let contract = contract();
        let text = bare().render(false);
        assert!(!contract.modules.is_empty() && !contract.primitives.is_empty());
        for module in &contract.modules {
            assert!(
                text.contains(&format!(" {module},")) || text.contains(&format!(" {module}.")),
                "{module}"
            );
        }
        for primitive in &contract.primitives {
            assert!(
                text.contains(&format!("`{}`", primitive.signature)),
                "{}",
                primitive.signature
            );
            assert!(
                text.contains(&primitive.description),
                "{}",
                primitive.description
            );
        }
        assert_eq!(contract.agent_options.len(), 7);
        for (option, explanation) in &contract.agent_options {
            let line = format!("- `{option}`: {}", explanation.as_str().unwrap());
            assert!(text.contains(&line), "{line}");
        }
        for name in contract.builtins.refused.keys() {
            assert!(text.contains(&format!("`{name}`")), "{name}");
        }
        // Modules the guest does not preload are never offered.
        assert!(!text.contains(" os,") && !text.contains("subprocess"));
    }

    /// Every option is explained in a sentence: what `instruction` is for, what `instance_id`
    /// shares, `tools=None` against `tools=[]`, what `model=` can and cannot name, and where a
    /// failed branch and the budget's in-flight leaves are accounted.
    #[test]
    fn the_options_and_the_failure_reports_are_explained() {
        let text = bare().render(false);
        for part in [
            "appended to its system prompt",
            "share one conversation",
            "None: the template's tools, else every tool this host gives leaves; []: no tools",
            "never a provider model id",
            "summary.failed_branches",
            "summary.warnings",
            "never leaves still in flight",
        ] {
            assert!(text.contains(part), "{part}");
        }
    }

    #[test]
    fn a_bare_host_says_in_one_line_each_that_it_has_nothing_to_offer() {
        let text = bare().render(true);
        let lines = [
            "Model profiles: none, so leave `model=` out (every leaf uses the host's default \
             model).",
            "Leaf templates: none, so leave `agent_type=` out.",
            "Host tools: none: leaves work from their prompt alone (leave `tools=` out) and \
             `call_tool` has nothing to call.",
        ];
        for line in lines {
            assert!(text.contains(line), "{line}");
        }
        // No pattern shows tools this host does not have.
        assert!(!text.contains("call_tool(\"list_dir\""), "{text}");
        assert!(!text.contains("read_file("));
        assert!(text.contains(
            "Limits per run: 1000 leaf agents and 1000 tool calls in all, 16 at a time (the rest \
             wait), no token budget, a 600 s deadline, a 64 KiB script, 1 MiB of result JSON, \
             1 MiB per prompt or reply, 1 MiB of log output."
        ));
    }

    #[test]
    fn an_equipped_host_names_exactly_what_it_has() {
        let text = equipped(&granted()).render(true);
        for part in [
            "Model profiles for `model=` (without it, leaves use the host's default model):\n\
             - `deep`: the model large-model\n- `fast`: cheap, for sweeps\n\n",
            "Leaf templates for `agent_type=`:\n\
             - `critic`: finds the weak points of a draft (profile `deep`; no tools)\n\
             - `reader`: You read files and quote them exactly. (a model of its own; tools \
             read_file)\n\n",
            "- `list_dir(path: string)` [leaves, call_tool]: List a directory, one level (it does \
             not recurse). `path` is \".\" for the granted directories (patterns)",
            "- `read_file(path: string)` [leaves, call_tool]: Read a UTF-8 text file. `path` \
             starts with a granted directory's name (patterns), such as \"patterns/notes.md\"",
            "- `search(query: string, limit?: integer|null, order?: \"new\"|\"relevant\")` \
             [call_tool]: Search the index; returns {\"hits\": [{\"title\", \"url\"}]}.\n\
             Leaves (a template's too) give a tool the same arguments and paths as `call_tool`.\n\n",
            "200 leaf agents and 1000 tool calls in all, 4 at a time (the rest wait), a budget \
             of 50000 tokens,",
            // The pattern that reads files fits this host.
            "call_tool(\"list_dir\"",
        ] {
            assert!(text.contains(part), "{part}\n---\n{text}");
        }
        for absent in ["none, so leave", "Host tools: none", "have no tools"] {
            assert!(!text.contains(absent), "{absent}");
        }
        // Provider model ids of templates are the host's business; profiles' are shown.
        assert!(!text.contains("vendor-model-7"));
    }

    #[test]
    fn tools_only_for_leaves_or_only_for_scripts_say_so() {
        let files = ReadRoots::open(&[granted()]).unwrap().tools();
        let leaves_only = HostFacts {
            leaves: LeafCatalog::of(&AgentConfig::default(), &files),
            ..bare()
        };
        let text = leaves_only.render(true);
        assert!(text.contains("[leaves]: Read a UTF-8"), "{text}");
        assert!(text.contains("Scripts have no tools: do not use `call_tool`."));
        assert!(!text.contains("call_tool(\"list_dir\""));
        let scripts_only = HostFacts {
            code_tools: ToolSet::specs(&files),
            ..bare()
        };
        let text = scripts_only.render(false);
        assert!(text.contains("[call_tool]: Read a UTF-8"), "{text}");
        assert!(text.contains("Leaves have no tools: leave `tools=` out."));
    }

    /// The guidance a host with nothing to offer gets stays about the size it had before it
    /// described its host (15 934 bytes with patterns, 3 744 without): it gained the options,
    /// the host, the failure reports, the preview of wide fan-outs, which of a plan's dollar
    /// figures to show a user and when to stop at a plan, and the answers models had to guess
    /// (each `e.kind` and whether it is retryable, what a conversation keeps, who sets the
    /// budget and what spends it), and left out the pattern of tools it lacks.
    #[test]
    fn the_default_guidance_stays_the_size_it_was() {
        let full = bare().render(true).len();
        let short = bare().render(false).len();
        assert!(full <= 17_400, "{full} bytes");
        assert!(short * 2 < full, "{short} of {full} bytes");
    }

    #[test]
    fn sizes_read_as_people_say_them() {
        assert_eq!(size(64 << 10), "64 KiB");
        assert_eq!(size(1 << 20), "1 MiB");
        assert_eq!(size(3 << 19), "1536 KiB");
        assert_eq!(size(1000), "1000 bytes");
    }
}
