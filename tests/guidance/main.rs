//! The guidance check: realistic tasks a root model is given, each a folder
//! `tests/guidance/NAME/` with
//!
//! - `task.md` — the task, as the root model would get it;
//! - `host.json` — the host it runs on: `profiles` and `agent_types` (as `--profiles` and
//!   `--agent-types` files take them), `files` (path → text, each path's first part a granted
//!   directory), `limits` (any subset of `Limits`) and `preview` (`true`: the script's plan must
//!   start as many leaves as its run, as a preview the guidance asks for would show); all
//!   optional;
//! - `workflow.py` — the reference script, written from that host's guidance alone; or, for a
//!   task the guidance says to answer without a workflow, `direct.md`, the direct answer;
//! - `args.json` — the script's args (default `{}`).
//!
//! Each case renders the guidance for its host, checks that every profile, template and tool
//! the script names is one the guidance names, that the script passes `check`, and that it
//! runs on the fake backend (held to the host's profiles, templates and tools) to a result with
//! no failed branch and no warning. So the guidance, the contract and the host cannot drift
//! apart: a script written from the guidance that stops working fails here.
//!
//! `cargo test --release -p flowbox-tests --test guidance -- NAME` runs the cases whose names
//! contain NAME; with `FLOWBOX_SHOW_GUIDANCE=1` (and `--nocapture`) each case prints the
//! guidance its script is to be written from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flowbox::backends::{AgentConfig, AgentTemplate, CheckedBackend, FakeBackend, ModelProfile};
use flowbox::orchestrator::Guidance;
use flowbox::tools::ReadRoots;
use flowbox::{Limits, RunRequest, Runtime};
use flowbox_tests::{case_name, read_case_json, root};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::{Value, json};

/// The ten tasks; fewer folders means the cases were not found.
const AT_LEAST: usize = 10;

/// A case's host.
#[derive(Debug, Default)]
struct Host {
    profiles: BTreeMap<String, ModelProfile>,
    agent_types: BTreeMap<String, AgentTemplate>,
    files: BTreeMap<String, String>,
    limits: Limits,
    preview: bool,
}

impl Host {
    /// The host of `host.json`; a key it does not know is an error.
    fn read(case: &Path) -> Result<Self, Failed> {
        let Some(Value::Object(mut fields)) = read_case_json(&case.join("host.json"))? else {
            return Ok(Self::default());
        };
        macro_rules! part {
            ($key:literal) => {
                match fields.remove($key) {
                    None => Default::default(),
                    Some(value) => serde_json::from_value(value)
                        .map_err(|e| format!("host.json {}: {e}", $key))?,
                }
            };
        }
        let host = Self {
            profiles: part!("profiles"),
            agent_types: part!("agent_types"),
            files: part!("files"),
            limits: part!("limits"),
            preview: part!("preview"),
        };
        match fields.keys().next() {
            Some(key) => Err(format!("host.json: unknown key {key:?}").into()),
            None => Ok(host),
        }
    }
}

fn main() {
    let arguments = Arguments::from_args();
    let show = std::env::var_os("FLOWBOX_SHOW_GUIDANCE").is_some();
    let dir = root().join("tests").join("guidance");
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/guidance lists")
        .map(|entry| entry.expect("a readable entry").path())
        .filter(|path| path.join("task.md").is_file())
        .collect();
    folders.sort();
    let count = folders.len();
    let mut trials = vec![Trial::test(
        "guidance::the_folder_holds_the_tasks",
        move || {
            if count >= AT_LEAST {
                Ok(())
            } else {
                Err(format!("expected at least {AT_LEAST} tasks, found {count}").into())
            }
        },
    )];
    trials.extend(folders.into_iter().map(|folder| {
        Trial::test(format!("guidance::{}", case_name(&folder)), move || {
            check(&folder, show)
        })
    }));
    libtest_mimic::run(&arguments, trials).exit();
}

/// The runtime a case's host describes, with its granted directories under `base`.
fn runtime(host: Host, base: &Path) -> Result<Runtime, Failed> {
    let mut roots = Vec::new();
    for (path, text) in &host.files {
        let file = base.join(path);
        let root = path.split('/').next().unwrap_or_default();
        if !roots.contains(&base.join(root)) {
            roots.push(base.join(root));
        }
        std::fs::create_dir_all(file.parent().expect("a file has a parent"))
            .and_then(|()| std::fs::write(&file, text))
            .map_err(|e| format!("{path}: {e}"))?;
    }
    let tools = ReadRoots::open(&roots)
        .map_err(|e| format!("files: {e}"))?
        .tools();
    let config = AgentConfig {
        profiles: host.profiles,
        templates: host.agent_types,
        ..AgentConfig::default()
    };
    let leaves = CheckedBackend::new(Arc::new(FakeBackend::new()), config, tools.clone());
    Runtime::builder()
        .backend(leaves)
        .code_tools(tools)
        .limits(host.limits)
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .map_err(|e| format!("the runtime: {e}").into())
}

/// The names a script gives `model=`, `agent_type=` and `call_tool(...)` as string literals.
fn named(script: &str) -> Vec<String> {
    let mut names = Vec::new();
    for marker in ["model=\"", "agent_type=\"", "call_tool(\""] {
        for rest in script.split(marker).skip(1) {
            names.push(rest.split('"').next().unwrap_or_default().to_owned());
        }
    }
    names
}

fn check(case: &Path, show: bool) -> Result<(), Failed> {
    let read = |name: &str| std::fs::read_to_string(case.join(name));
    let host = Host::read(case)?;
    let preview = host.preview;
    let base = tempfile::tempdir().map_err(|e| e.to_string())?;
    let runtime = runtime(host, base.path())?;
    let guidance = Guidance::new(&runtime);
    let guidance = guidance.text();
    if show {
        println!("=== {}\n{guidance}\n", case.display());
    }
    let Ok(script) = read("workflow.py") else {
        // A task the guidance says not to write a workflow for.
        read("direct.md").map_err(|_| "a case has workflow.py or direct.md")?;
        for gate in [
            "Answer directly whenever you can.",
            "Do not use\nit for a single question",
        ] {
            if !guidance.contains(gate) {
                return Err(format!("the guidance no longer says {gate:?}").into());
            }
        }
        return Ok(());
    };
    for name in named(&script) {
        // A profile or template is named as `fast`, a tool by its signature, `read_file(...)`.
        if !guidance.contains(&format!("`{name}`")) && !guidance.contains(&format!("`{name}(")) {
            return Err(format!("the script names {name:?}, which the guidance does not").into());
        }
    }
    let args = read_case_json(&case.join("args.json"))?.unwrap_or_else(|| json!({}));
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let outcome = tokio.block_on(async {
        runtime
            .check(&script)
            .await
            .map_err(|e| format!("check: {e}"))?;
        let plan = if preview {
            let plan = runtime
                .plan(RunRequest::new(script.clone()).args(args.clone()))
                .await
                .map_err(|e| format!("plan: {e}"))?;
            Some(plan.leaves)
        } else {
            None
        };
        let outcome = runtime
            .run_request(RunRequest::new(script).args(args))
            .await;
        Ok::<_, String>((plan, outcome))
    })?;
    let (planned, outcome) = outcome;
    if let Some(planned) = planned
        && planned != outcome.summary.leaves
    {
        return Err(format!(
            "the preview planned {planned} leaves, the run started {}",
            outcome.summary.leaves
        )
        .into());
    }
    let summary = &outcome.summary;
    match &outcome.result {
        Err(error) => Err(format!("the run failed: {error}\nlogs: {:?}", summary.logs).into()),
        Ok(result) if result.is_null() => Err("the script returned None".into()),
        Ok(_) if !summary.failed_branches.is_empty() || !summary.warnings.is_empty() => {
            Err(format!(
                "failed branches {:?}, warnings {:?}",
                summary.failed_branches, summary.warnings
            )
            .into())
        }
        Ok(result) => {
            if show {
                println!("=== result\n{result}\n");
            }
            Ok(())
        }
    }
}
