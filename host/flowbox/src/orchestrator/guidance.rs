//! The guidance a root model gets to write workflow scripts: generated from the script
//! contract the guest enforces (`contract/script.json`: modules, primitives, builtins) and
//! the runtime's limits, with a library of runnable patterns.

use serde::Deserialize;

use crate::Limits;

/// The patterns, as runnable scripts (in the crate's `patterns/`, each run by the tests).
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

/// The text a root agent's system prompt gets to learn the script contract: appended to the
/// embedder's own prompt, never replacing it, and optional.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guidance {
    text: String,
}

impl Guidance {
    /// The default guidance for runs under `limits`, with the pattern library.
    pub fn new(limits: &Limits) -> Self {
        let mut text = guidance_text(limits);
        text.push_str("\n\n## Patterns\n");
        for (title, script) in PATTERNS {
            text.push_str(&format!(
                "\n### {title}\n```python\n{}\n```\n",
                script.trim_end()
            ));
        }
        Self { text }
    }

    /// The default guidance without the pattern library (about a quarter of the length).
    pub fn without_patterns(limits: &Limits) -> Self {
        Self {
            text: guidance_text(limits),
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
/// primitives and builtins.
const CONTRACT: &str = include_str!("../../contract/script.json");

/// What the guidance needs of the contract.
#[derive(Debug, Deserialize)]
struct Contract {
    modules: Vec<String>,
    primitives: Vec<Primitive>,
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
    literal_attribute_name: serde_json::Map<String, serde_json::Value>,
    /// Builtins the guard refuses, with the reason.
    refused: serde_json::Map<String, serde_json::Value>,
}

fn contract() -> Contract {
    serde_json::from_str(CONTRACT).expect("contract/script.json is valid (a unit test reads it)")
}

fn guidance_text(limits: &Limits) -> String {
    let contract = contract();
    let budget = limits.budget_tokens.map_or(
        "no token ceiling unless the host sets one".to_owned(),
        |b| format!("a budget of {b} tokens"),
    );
    let primitives: String = contract
        .primitives
        .iter()
        .map(|p| format!("- `{}`: {}\n", p.signature, p.description))
        .collect();
    let names = |map: &serde_json::Map<String, serde_json::Value>| {
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

Write either `meta = {{"name": ..., "description": ..., "phases": [{{"title": ...}}]}}` (literal
values only, the first assignment) followed by `async def main():` returning the result, or a
plain body that uses `await` at top level and ends with `return result`. The result must be
JSON (dicts, lists, strings, numbers, booleans, None). Every Python builtin that cannot reach
outside the sandbox is available, all exception classes included; these are rejected before the
script runs: {refused}. {literal} take the attribute name as a string literal only. Dunder names
and private or frame attributes are rejected too. Keep scripts as orchestration glue: the leaves
do the thinking.

Limits per run: {max_agents} leaf agents at most, {concurrency} at a time, {budget}, a
{timeout} s deadline, a {script_kib} KiB script. The tool returns `{{"ok": true, "result": ...,
"summary": ...}}`, or `{{"ok": false, "error": {{"kind", "message", "line", "hint"}}}}` — read the
error and hint, fix the script and call the tool again. Results larger than the host's cap come
back truncated with a marker: return only what you need.

Before a wide fan-out (more than {concurrency} leaves, or one leaf per item of a list you did not
write), call `run_workflow` with `"preview": true` first: it returns the plan (leaves, widest
fan-out, estimated tokens and dollars per phase and model profile, warnings) and runs nothing.
Use a cheaper model profile (`model=`) for sweeps over many items and keep the strongest for the
synthesis. A run the host's gate refuses comes back as `gate_refused` with its plan: narrow the
fan-out, choose a cheaper profile, or ask the user to approve it."#,
        modules = contract.modules.join(", "),
        refused = names(&contract.builtins.refused),
        literal = names(&contract.builtins.literal_attribute_name),
        max_agents = limits.max_agents,
        concurrency = limits.max_concurrency,
        timeout = limits.timeout.as_secs(),
        script_kib = limits.max_script_bytes / 1024,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The root model is told to preview wide fan-outs, to sweep on cheaper profiles, and what
    /// a gate refusal means.
    #[test]
    fn the_guidance_asks_for_a_preview_of_wide_fan_outs() {
        let text = Guidance::without_patterns(&Limits::default().with_max_concurrency(12))
            .text()
            .to_owned();
        assert!(text.contains("more than 12 leaves"), "{text}");
        assert!(text.contains(r#"`"preview": true`"#), "{text}");
        assert!(text.contains("cheaper model profile"), "{text}");
        assert!(text.contains("`gate_refused`"), "{text}");
    }

    /// The guidance says what the guest enforces: every module, primitive and refused builtin
    /// of the contract, and nothing the contract leaves out.
    #[test]
    fn the_guidance_is_the_contract() {
        let contract = contract();
        let text = Guidance::without_patterns(&Limits::default())
            .text()
            .to_owned();
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
        for name in contract.builtins.refused.keys() {
            assert!(text.contains(&format!("`{name}`")), "{name}");
        }
        // Modules the guest does not preload are never offered.
        assert!(!text.contains(" os,") && !text.contains("subprocess"));
    }
}
