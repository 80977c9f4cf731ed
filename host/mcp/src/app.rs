//! The run view `flowbox mcp` offers hosts that support MCP Apps (the
//! `io.modelcontextprotocol/ui` extension): a UI resource that `run_workflow` and
//! `resume_workflow` name in their `_meta.ui.resourceUri`, which such a host renders in a
//! sandboxed frame beside the call, and `thread_events`, a tool only that view calls (its
//! visibility is `app`), which reads the call's events from the journal to draw its timeline.
//! A host without the extension sees none of it: the tools as they always were.

use std::sync::Arc;

use rmcp::model::{
    ClientCapabilities, MetaObject, ReadResourceResult, Resource, ResourceContents, Tool,
    ToolAnnotations,
};
use serde_json::{Value, json};

use crate::tools::{RESUME_WORKFLOW, RUN_WORKFLOW, object};

/// The extension's id in the client's `capabilities.extensions`.
const EXTENSION: &str = "io.modelcontextprotocol/ui";
/// The resource's MIME type: HTML for an MCP App.
pub(crate) const MIME_TYPE: &str = "text/html;profile=mcp-app";
/// The view's URI.
pub(crate) const VIEW_URI: &str = "ui://flowbox/run-view.html";
/// The tool only the view calls.
pub(crate) const THREAD_EVENTS: &str = "thread_events";

const SCRIPT: &str = include_str!("../assets/view.js");
const STYLE: &str = include_str!("../assets/view.css");

/// Whether the client renders MCP Apps' HTML views.
pub(crate) fn supported(capabilities: Option<&ClientCapabilities>) -> bool {
    capabilities
        .and_then(|capabilities| capabilities.extensions.as_ref())
        .and_then(|extensions| extensions.get(EXTENSION))
        .is_some_and(|ui| {
            // A client that lists MIME types must list this one; one that lists none takes it.
            ui.get("mimeTypes")
                .and_then(Value::as_array)
                .is_none_or(|types| types.iter().any(|t| t == MIME_TYPE))
        })
}

/// The tools for a client that renders the view: `run_workflow` and `resume_workflow` name
/// it, and `thread_events` is added for it.
pub(crate) fn tools(tools: &[Tool]) -> Vec<Tool> {
    let mut tools: Vec<Tool> = tools
        .iter()
        .cloned()
        .map(|mut tool| {
            if [RUN_WORKFLOW, RESUME_WORKFLOW].contains(&tool.name.as_ref()) {
                let mut meta = tool.meta.take().unwrap_or_default();
                // The key hosts read, and the flat one earlier hosts read.
                meta.0.insert("ui".into(), json!({"resourceUri": VIEW_URI}));
                meta.0.insert("ui/resourceUri".into(), json!(VIEW_URI));
                tool.meta = Some(meta);
            }
            tool
        })
        .collect();
    let input = json!({
        "type": "object",
        "properties": {
            "thread_id": {"type": "string", "description": "The thread."},
            "after": {"type": "integer", "minimum": 0,
                      "description": "Only events after this sequence number (0: all)."}
        },
        "required": ["thread_id"],
        "additionalProperties": false
    });
    let mut events = Tool::new(
        THREAD_EVENTS,
        "The run view's own tool: a thread's events after a sequence number (at most 1000), its \
         status, and whether its run has ended.",
        Arc::new(object(input)),
    );
    let mut annotations = ToolAnnotations::default();
    annotations.read_only_hint = Some(true);
    annotations.open_world_hint = Some(false);
    events.annotations = Some(annotations);
    let mut meta = MetaObject::default();
    meta.0.insert(
        "ui".into(),
        json!({"resourceUri": VIEW_URI, "visibility": ["app"]}),
    );
    events.meta = Some(meta);
    tools.push(events);
    tools
}

/// The view, as `resources/list` lists it.
pub(crate) fn resource() -> Resource {
    Resource::new(VIEW_URI, "run-view")
        .with_title("flowbox run")
        .with_description("The live timeline of a workflow run.")
        .with_mime_type(MIME_TYPE)
        .with_meta(view_meta())
}

/// The view's HTML: one file, its script and style inline, the run timeline of `flowbox
/// serve` in it. It asks for no network (no CSP domains) and no permissions.
pub(crate) fn read() -> ReadResourceResult {
    let html = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>flowbox run</title>\n<style>\n{}\n{STYLE}</style>\n</head>\n<body>\n\
         <main id=\"view\"><p class=\"muted\">Waiting for the run…</p></main>\n\
         <script>\n{}\n{SCRIPT}</script>\n</body>\n</html>\n",
        flowbox_web::TIMELINE_STYLE,
        flowbox_web::TIMELINE_SCRIPT,
    );
    ReadResourceResult::new(vec![ResourceContents::TextResourceContents {
        uri: VIEW_URI.into(),
        mime_type: Some(MIME_TYPE.into()),
        text: html,
        meta: Some(view_meta()),
    }])
}

/// No domains to reach and a border around it: the strictest policy a host applies.
fn view_meta() -> MetaObject {
    let mut meta = MetaObject::default();
    meta.0
        .insert("ui".into(), json!({"csp": {}, "prefersBorder": true}));
    meta
}
