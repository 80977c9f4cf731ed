//! One run's events turned into spans: the run, its phases, its `parallel`/`pipeline` groups,
//! its leaves with their model turns and tool calls, and the script's `call_tool`s, named and
//! attributed by the OpenTelemetry GenAI semantic conventions.
//!
//! Ids come from the thread, so every run of a thread (its resumes, and on another engine the
//! workers that carry it) shares one trace: the trace id is a hash of the thread id, and each
//! span id a hash of the thread, the run (the sequence number and time of its `run_started`)
//! and what the span is. A span is handed on when it ends; a group's span, whose end is its last leaf's,
//! when the run ends.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowbox_store::GroupKind;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use sha2::{Digest, Sha256};

use crate::events::{Event, EventKind, Position};

/// The trace id of every run of `thread_id`.
pub(crate) fn trace_id(thread_id: &str) -> TraceId {
    let digest = Sha256::new()
        .chain_update(b"flowbox trace\0")
        .chain_update(thread_id.as_bytes())
        .finalize();
    let mut bytes = [0; 16];
    bytes.copy_from_slice(&digest[..16]);
    TraceId::from_bytes(bytes)
}

/// What a span stands for within one run, hashed into its id.
#[derive(Debug, Clone, Copy)]
enum Part {
    Run,
    Phase(u64),
    Group(u32),
    Call(u64),
    Turn(u64, u64),
}

/// One run's spans in the making.
#[derive(Debug)]
pub(super) struct RunTrace {
    thread_id: String,
    trace_id: TraceId,
    /// The sequence number and time of the run's `run_started`: tells this run's spans from
    /// those of the thread's other runs (a run killed before its events were journaled leaves
    /// the next one numbering from the same place).
    run: (u64, u64),
    name: Option<String>,
    start: SystemTime,
    phase: Option<Open>,
    groups: HashMap<u32, Group>,
    calls: HashMap<u64, Open>,
    /// Each live leaf's prompt and reply, when contents are exported.
    contents: HashMap<u64, (String, String)>,
    scope: InstrumentationScope,
}

/// A span begun and not yet ended.
#[derive(Debug)]
struct Open {
    id: SpanId,
    parent: SpanId,
    /// A call's innermost group.
    group: Option<u32>,
    name: String,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    /// A leaf's tokens, added up from its turns.
    input_tokens: u64,
    output_tokens: u64,
    turns: u64,
}

/// A `parallel` or `pipeline` group: from its first call's start to its last call's end.
#[derive(Debug)]
struct Group {
    id: SpanId,
    parent: SpanId,
    /// The group it is nested in.
    outer: Option<u32>,
    position: Position,
    start: SystemTime,
    end: SystemTime,
    calls: u64,
}

fn time(event: &Event) -> SystemTime {
    event
        .unix_us
        .map_or_else(SystemTime::now, |us| UNIX_EPOCH + Duration::from_micros(us))
}

/// `ms` milliseconds before `at`: when a call that reports its duration at its end began (`at`
/// itself for a duration that would put it before the Unix epoch, which OTLP cannot carry).
fn before(at: SystemTime, ms: u64) -> SystemTime {
    at.checked_sub(Duration::from_millis(ms))
        .filter(|start| *start >= UNIX_EPOCH)
        .unwrap_or(at)
}

fn int(n: u64) -> Value {
    Value::I64(i64::try_from(n).unwrap_or(i64::MAX))
}

impl RunTrace {
    pub(super) fn new(event: &Event, name: Option<String>, scope: InstrumentationScope) -> Self {
        Self {
            thread_id: event.thread_id.clone(),
            trace_id: trace_id(&event.thread_id),
            run: (event.seq, event.unix_us.unwrap_or_default()),
            name,
            start: time(event),
            phase: None,
            groups: HashMap::new(),
            calls: HashMap::new(),
            contents: HashMap::new(),
            scope,
        }
    }

    fn span_id(&self, part: Part) -> SpanId {
        let mut hash = Sha256::new()
            .chain_update(b"flowbox span\0")
            .chain_update(self.thread_id.as_bytes())
            .chain_update(self.run.0.to_le_bytes())
            .chain_update(self.run.1.to_le_bytes());
        hash = match part {
            Part::Run => hash.chain_update(b"run"),
            Part::Phase(seq) => hash.chain_update(b"phase").chain_update(seq.to_le_bytes()),
            Part::Group(group) => hash
                .chain_update(b"group")
                .chain_update(group.to_le_bytes()),
            Part::Call(call) => hash.chain_update(b"call").chain_update(call.to_le_bytes()),
            Part::Turn(call, n) => hash
                .chain_update(b"turn")
                .chain_update(call.to_le_bytes())
                .chain_update(n.to_le_bytes()),
        };
        let digest = hash.finalize();
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&digest[..8]);
        SpanId::from_bytes(bytes)
    }

    fn root(&self) -> SpanId {
        self.span_id(Part::Run)
    }

    /// The span a call or a group opened now sits in: the current phase's, or the run's.
    fn outer(&self) -> SpanId {
        self.phase
            .as_ref()
            .map_or_else(|| self.root(), |phase| phase.id)
    }

    /// The span of the innermost group of `path`, each group opened at `at` when first seen.
    fn parent(&mut self, path: &[Position], at: SystemTime) -> SpanId {
        let mut parent = self.outer();
        let mut outer = None;
        for position in path {
            let id = self.span_id(Part::Group(position.group));
            let group = self.groups.entry(position.group).or_insert(Group {
                id,
                parent,
                outer,
                position: *position,
                start: at,
                end: at,
                calls: 0,
            });
            group.calls += 1;
            parent = group.id;
            outer = Some(position.group);
        }
        parent
    }

    fn span(&self, open: Open, end: SystemTime, status: Status) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                self.trace_id,
                open.id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: open.parent,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Owned(open.name),
            start_time: open.start,
            end_time: end.max(open.start),
            attributes: open.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        }
    }

    fn open(&self, part: Part, parent: SpanId, name: String, start: SystemTime) -> Open {
        Open {
            id: self.span_id(part),
            parent,
            name,
            start,
            group: None,
            attributes: vec![KeyValue::new("flowbox.thread_id", self.thread_id.clone())],
            input_tokens: 0,
            output_tokens: 0,
            turns: 0,
        }
    }

    /// Keeps a live leaf's prompt and reply for its span.
    pub(super) fn contents(&mut self, call_id: u64, prompt: String, reply: String) {
        self.contents.insert(call_id, (prompt, reply));
    }

    /// Takes in one event of the run; `end` receives each span that ends with it. Returns
    /// whether the run ended.
    pub(super) fn event(&mut self, event: &Event, end: &mut impl FnMut(SpanData)) -> bool {
        let at = time(event);
        match &event.kind {
            EventKind::Phase { title } => {
                self.end_phase(at, end);
                let mut phase = self.open(
                    Part::Phase(event.seq),
                    self.root(),
                    format!("phase {title}"),
                    at,
                );
                phase
                    .attributes
                    .push(KeyValue::new("flowbox.phase", title.clone()));
                self.phase = Some(phase);
            }
            EventKind::LeafStarted {
                call_id,
                label,
                agent_type,
                path,
                model,
                waited_ms,
                fed_by,
                ..
            } => {
                let parent = self.parent(path, at);
                let agent = label
                    .as_deref()
                    .or(agent_type.as_deref())
                    .unwrap_or("leaf")
                    .to_owned();
                let mut leaf = self.open(
                    Part::Call(*call_id),
                    parent,
                    format!("invoke_agent {agent}"),
                    at,
                );
                leaf.attributes.extend([
                    KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                    KeyValue::new("gen_ai.agent.name", agent),
                    KeyValue::new("flowbox.call_id", int(*call_id)),
                    KeyValue::new("flowbox.waited_ms", int(*waited_ms)),
                ]);
                if !fed_by.is_empty() {
                    let calls = fed_by
                        .iter()
                        .map(|call| i64::try_from(*call).unwrap_or(i64::MAX))
                        .collect();
                    leaf.attributes.push(KeyValue::new(
                        "flowbox.fed_by",
                        Value::Array(opentelemetry::Array::I64(calls)),
                    ));
                }
                if let Some(kind) = agent_type {
                    leaf.attributes
                        .push(KeyValue::new("flowbox.agent_type", kind.clone()));
                }
                if let Some(model) = model {
                    leaf.attributes
                        .push(KeyValue::new("gen_ai.request.model", model.clone()));
                }
                push_position(&mut leaf.attributes, path);
                leaf.group = path.last().map(|position| position.group);
                self.calls.insert(*call_id, leaf);
            }
            EventKind::LeafTurn {
                call_id,
                model,
                input_tokens,
                output_tokens,
                duration_ms,
                retries,
                error,
            } => {
                if let Some(leaf) = self.calls.get_mut(call_id) {
                    leaf.input_tokens = leaf.input_tokens.saturating_add(*input_tokens);
                    leaf.output_tokens = leaf.output_tokens.saturating_add(*output_tokens);
                }
                let mut attributes = vec![
                    KeyValue::new("gen_ai.operation.name", "chat"),
                    KeyValue::new("gen_ai.request.model", model.clone()),
                    KeyValue::new("gen_ai.usage.input_tokens", int(*input_tokens)),
                    KeyValue::new("gen_ai.usage.output_tokens", int(*output_tokens)),
                ];
                if *retries > 0 {
                    attributes.push(KeyValue::new("flowbox.retries", i64::from(*retries)));
                }
                let name = format!("chat {model}");
                let ended = (at, *duration_ms);
                if let Some(span) =
                    self.leaf_step(*call_id, name, attributes, ended, error.as_deref())
                {
                    end(span);
                }
            }
            EventKind::LeafToolFinished {
                call_id,
                name,
                duration_ms,
                error,
                ..
            } => {
                let attributes = vec![
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", name.clone()),
                ];
                let name = format!("execute_tool {name}");
                let ended = (at, *duration_ms);
                if let Some(span) =
                    self.leaf_step(*call_id, name, attributes, ended, error.as_deref())
                {
                    end(span);
                }
            }
            EventKind::LeafFinished {
                call_id,
                tokens,
                replayed,
                error,
                cost_usd,
                ..
            } => {
                let Some(mut leaf) = self.calls.remove(call_id) else {
                    return false;
                };
                leaf.attributes.extend([
                    KeyValue::new("flowbox.tokens", int(*tokens)),
                    KeyValue::new("flowbox.replayed", *replayed),
                ]);
                if let Some(cost) = cost_usd {
                    leaf.attributes
                        .push(KeyValue::new("flowbox.cost_usd", *cost));
                }
                if leaf.turns > 0 {
                    leaf.attributes.extend([
                        KeyValue::new("gen_ai.usage.input_tokens", int(leaf.input_tokens)),
                        KeyValue::new("gen_ai.usage.output_tokens", int(leaf.output_tokens)),
                    ]);
                }
                if let Some((prompt, reply)) = self.contents.remove(call_id) {
                    leaf.attributes.extend([
                        KeyValue::new("gen_ai.input.messages", prompt),
                        KeyValue::new("gen_ai.output.messages", reply),
                    ]);
                }
                let status = failed(&mut leaf.attributes, error.as_deref());
                self.ended(leaf.group, at);
                end(self.span(leaf, at, status));
            }
            EventKind::ToolCalled {
                call_id,
                name,
                path,
            } => {
                let parent = self.parent(path, at);
                let mut tool = self.open(
                    Part::Call(*call_id),
                    parent,
                    format!("execute_tool {name}"),
                    at,
                );
                tool.attributes.extend([
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", name.clone()),
                    KeyValue::new("flowbox.call_id", int(*call_id)),
                ]);
                push_position(&mut tool.attributes, path);
                tool.group = path.last().map(|position| position.group);
                self.calls.insert(*call_id, tool);
            }
            EventKind::ToolFinished {
                call_id,
                replayed,
                error,
                ..
            } => {
                let Some(mut tool) = self.calls.remove(call_id) else {
                    return false;
                };
                tool.attributes
                    .push(KeyValue::new("flowbox.replayed", *replayed));
                let status = failed(&mut tool.attributes, error.as_deref());
                self.ended(tool.group, at);
                end(self.span(tool, at, status));
            }
            EventKind::RunFinished { summary, error, .. } => {
                let mut run = self.close(at, end);
                run.attributes.extend([
                    KeyValue::new("flowbox.leaves", int(summary.leaves.into())),
                    KeyValue::new("flowbox.tools_called", int(summary.tools_called.into())),
                    KeyValue::new("flowbox.fuel_used", int(summary.fuel_used)),
                    KeyValue::new("flowbox.tokens", int(summary.tokens_spent)),
                    KeyValue::new("gen_ai.usage.input_tokens", int(summary.input_tokens)),
                    KeyValue::new("gen_ai.usage.output_tokens", int(summary.output_tokens)),
                ]);
                if let Some(name) = &self.name {
                    run.attributes
                        .push(KeyValue::new("flowbox.name", name.clone()));
                }
                if let Some(cost) = summary.cost_usd {
                    run.attributes.push(KeyValue::new("flowbox.cost_usd", cost));
                }
                let status = match error {
                    Some(error) => {
                        let kind = error.kind.as_str();
                        run.attributes.extend([
                            KeyValue::new("error.type", kind),
                            KeyValue::new("flowbox.error.kind", kind),
                        ]);
                        Status::error(error.message.clone())
                    }
                    None => Status::Ok,
                };
                end(self.span(run, at, status));
                return true;
            }
            _ => {}
        }
        false
    }

    /// Ends what is still open at `at` — the phase, the calls (cut off with the run), the
    /// groups — and returns the run's span, to be ended by the caller.
    fn close(&mut self, at: SystemTime, end: &mut impl FnMut(SpanData)) -> Open {
        self.end_phase(at, end);
        for (_, call) in std::mem::take(&mut self.calls) {
            end(self.span(call, at, Status::error("the run ended first")));
        }
        let mut groups: Vec<Group> = self.groups.drain().map(|(_, g)| g).collect();
        groups.sort_by_key(|group| group.position.group);
        for group in groups {
            let span = self.group_span(group);
            end(span);
        }
        let name = self.name.as_deref().map_or_else(
            || "run_workflow".to_owned(),
            |n| format!("run_workflow {n}"),
        );
        self.open(Part::Run, SpanId::INVALID, name, self.start)
    }

    /// The run stopped without its end (cancelled, or its engine let go of it): what is open
    /// ends now, the run's span with an error saying so.
    pub(super) fn abandon(mut self, end: &mut impl FnMut(SpanData)) {
        let at = SystemTime::now();
        let mut run = self.close(at, end);
        run.attributes
            .push(KeyValue::new("error.type", "flowbox.run_stopped"));
        let status = Status::error("the run stopped before its end (cancelled, or let go of)");
        end(self.span(run, at, status));
    }

    /// A model turn or tool call of leaf `call_id`'s own loop, which ended at `ended.0` after
    /// `ended.1` milliseconds: a span under the leaf's, numbered in the leaf's order of steps.
    fn leaf_step(
        &mut self,
        call_id: u64,
        name: String,
        attributes: Vec<KeyValue>,
        ended: (SystemTime, u64),
        error: Option<&str>,
    ) -> Option<SpanData> {
        let leaf = self.calls.get_mut(&call_id)?;
        leaf.turns += 1;
        let (parent, step) = (leaf.id, leaf.turns);
        let (at, duration_ms) = ended;
        let mut span = self.open(
            Part::Turn(call_id, step),
            parent,
            name,
            before(at, duration_ms),
        );
        span.attributes.extend(attributes);
        let status = failed(&mut span.attributes, error);
        Some(self.span(span, at, status))
    }

    /// A call in `group` ended at `at`: the groups it sits in end no earlier.
    fn ended(&mut self, mut group: Option<u32>, at: SystemTime) {
        while let Some(number) = group {
            let Some(open) = self.groups.get_mut(&number) else {
                return;
            };
            open.end = open.end.max(at);
            group = open.outer;
        }
    }

    fn group_span(&self, group: Group) -> SpanData {
        let kind = match group.position.kind {
            Some(GroupKind::Parallel) => "parallel",
            Some(GroupKind::Pipeline) => "pipeline",
            None => "group",
        };
        let mut open = self.open(
            Part::Group(group.position.group),
            group.parent,
            format!("{kind} {}", group.position.group),
            group.start,
        );
        open.attributes.extend([
            KeyValue::new("flowbox.group", int(group.position.group.into())),
            KeyValue::new("flowbox.group.kind", kind),
            KeyValue::new("flowbox.group.size", int(group.position.size.into())),
            KeyValue::new("flowbox.group.calls", int(group.calls)),
        ]);
        self.span(open, group.end, Status::Unset)
    }

    fn end_phase(&mut self, at: SystemTime, end: &mut impl FnMut(SpanData)) {
        if let Some(phase) = self.phase.take() {
            end(self.span(phase, at, Status::Unset));
        }
    }
}

/// Where a call sits: its innermost group's item and stage.
fn push_position(attributes: &mut Vec<KeyValue>, path: &[Position]) {
    if let Some(position) = path.last() {
        attributes.push(KeyValue::new("flowbox.index", int(position.index.into())));
        if let Some(stage) = position.stage {
            attributes.push(KeyValue::new("flowbox.stage", int(stage.into())));
        }
    }
}

/// The span's status for `error`, with its `error.type` attribute.
fn failed(attributes: &mut Vec<KeyValue>, error: Option<&str>) -> Status {
    match error {
        Some(message) => {
            attributes.push(KeyValue::new("error.type", "flowbox.call_failed"));
            Status::error(message.to_owned())
        }
        None => Status::Unset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, unix_us: u64, kind: EventKind) -> Event {
        Event {
            thread_id: "t".into(),
            seq,
            unix_us: Some(unix_us),
            kind,
        }
    }

    fn started(call_id: u64, path: Vec<Position>) -> EventKind {
        EventKind::LeafStarted {
            call_id,
            label: None,
            agent_type: None,
            prompt_preview: String::new(),
            path,
            model: None,
            waited_ms: 0,
            fed_by: vec![],
        }
    }

    #[test]
    fn a_run_stopped_without_its_end_ends_what_is_open_under_an_error() {
        let first = event(
            1,
            1_000,
            EventKind::RunStarted {
                name: Some("n".into()),
                phases: vec![],
            },
        );
        let mut run = RunTrace::new(&first, Some("n".into()), InstrumentationScope::default());
        let mut spans = Vec::new();
        let position = Position {
            group: 1,
            kind: Some(GroupKind::Parallel),
            index: 0,
            size: 2,
            stage: None,
        };
        let phase = EventKind::Phase { title: "p".into() };
        assert!(!run.event(&event(2, 2_000, phase), &mut |s| spans.push(s)));
        assert!(
            !run.event(&event(3, 3_000, started(1, vec![position])), &mut |s| spans
                .push(s))
        );
        assert!(spans.is_empty(), "nothing has ended yet");
        run.abandon(&mut |s| spans.push(s));
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "phase p",
                "invoke_agent leaf",
                "parallel 1",
                "run_workflow n"
            ]
        );
        let root = spans.last().unwrap();
        assert_eq!(root.parent_span_id, SpanId::INVALID);
        assert!(matches!(root.status, Status::Error { .. }));
        assert!(
            matches!(spans[1].status, Status::Error { .. }),
            "the leaf was cut off"
        );
        // Every span is of the thread's trace, and the leaf sits in its group, in the phase.
        assert!(
            spans
                .iter()
                .all(|s| s.span_context.trace_id() == trace_id("t"))
        );
        assert_eq!(spans[1].parent_span_id, spans[2].span_context.span_id());
        assert_eq!(spans[2].parent_span_id, spans[0].span_context.span_id());
        assert_eq!(spans[0].parent_span_id, root.span_context.span_id());
    }

    #[test]
    fn a_call_that_reports_a_duration_longer_than_the_epoch_starts_at_its_end() {
        let at = UNIX_EPOCH + Duration::from_millis(5);
        assert_eq!(before(at, 3), UNIX_EPOCH + Duration::from_millis(2));
        assert_eq!(
            before(at, u64::MAX),
            at,
            "never before the epoch, never a panic"
        );
    }
}
