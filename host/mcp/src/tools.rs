//! The four tools `flowbox mcp` lists: their names, descriptions and input and output schemas.
//! `run_workflow` is the library's own tool (its hard-gated description and its argument
//! schema); the others work on the journal's threads.

use std::sync::Arc;

use flowbox::orchestrator::{WorkflowOutput, WorkflowTool};
use flowbox::tools::Tool as _;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

pub(crate) const RUN_WORKFLOW: &str = flowbox::orchestrator::RUN_WORKFLOW;
pub(crate) const RESUME_WORKFLOW: &str = "resume_workflow";
pub(crate) const LIST_THREADS: &str = "list_threads";
pub(crate) const SHOW_THREAD: &str = "show_thread";

/// Every tool, as `tools/list` returns them.
pub(crate) fn list(workflow: &WorkflowTool) -> Vec<Tool> {
    let spec = workflow.spec();
    vec![
        tool(
            RUN_WORKFLOW,
            spec.description,
            spec.parameters,
            WorkflowOutput::schema(),
            false,
        ),
        tool(
            RESUME_WORKFLOW,
            "Resume a workflow thread that did not finish (cancelled, interrupted, or failed in \
             the journal) from its journal: leaves that finished are not run again; a finished \
             thread returns its recorded outcome. Returns what run_workflow returns."
                .into(),
            thread_id_input("The thread to resume (summary.thread_id of a run)."),
            WorkflowOutput::schema(),
            false,
        ),
        tool(
            LIST_THREADS,
            "List the journaled workflow threads, newest first: id, name, status (running, \
             resumable, succeeded, failed), leaves, tokens, cost, start and duration."
                .into(),
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
            json!({
                "type": "object",
                "properties": {
                    "threads": {"type": "array", "items": {"type": "object"}},
                    "damaged": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["threads", "damaged"]
            }),
            true,
        ),
        tool(
            SHOW_THREAD,
            "Show one workflow thread's journal: its script, args, every journaled leaf and \
             tool call with its result, and its outcome."
                .into(),
            thread_id_input("The thread to show."),
            json!({"type": "object"}),
            true,
        ),
    ]
}

fn tool(
    name: &'static str,
    description: String,
    input: Value,
    output: Value,
    read_only: bool,
) -> Tool {
    let mut tool = Tool::new(name, description, Arc::new(object(input)));
    tool.output_schema = Some(Arc::new(object(output)));
    let mut annotations = ToolAnnotations::default();
    annotations.read_only_hint = Some(read_only);
    annotations.open_world_hint = Some(false);
    tool.annotations = Some(annotations);
    tool
}

/// A schema, which is always a JSON object, as rmcp's map.
pub(crate) fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("the tool schemas are objects"),
    }
}

fn thread_id_input(description: &str) -> Value {
    json!({
        "type": "object",
        "properties": {"thread_id": {"type": "string", "description": description}},
        "required": ["thread_id"],
        "additionalProperties": false
    })
}
