//! An event as a person reads it: one line, terminal-safe, with where a leaf sits in the
//! script's groups.

use flowbox_store::GroupKind;
use flowbox_store::view::{preview, terminal_safe};

use super::{Event, EventKind, Position};

/// Where a leaf sits, for a person: " in pipeline 1 item 0 stage 2 › parallel 2 branch 1", or
/// nothing outside any group.
fn place(path: &[Position]) -> String {
    let steps: Vec<String> = path
        .iter()
        .map(|p| match (p.kind, p.stage) {
            (Some(GroupKind::Pipeline), stage) => {
                let stage = stage.map(|s| format!(" stage {s}")).unwrap_or_default();
                format!("pipeline {} item {}{stage}", p.group, p.index)
            }
            (Some(GroupKind::Parallel), _) => format!("parallel {} branch {}", p.group, p.index),
            // Recorded before kinds were.
            (None, _) => format!("group {} item {}", p.group, p.index),
        })
        .collect();
    if steps.is_empty() {
        String::new()
    } else {
        format!(" in {}", steps.join(" › "))
    }
}

impl Event {
    /// The event as one line for a person, terminal-safe: its number and what happened, such
    /// as `#7     leaf 3 done 120 tok 45 ms` (what `flowbox show --follow` prints).
    pub fn line(&self) -> String {
        line(self)
    }
}

fn line(event: &Event) -> String {
    let what = match &event.kind {
        EventKind::RunStarted { name, phases } => format!(
            "run started{}{}",
            name.as_ref().map(|n| format!(" {n}")).unwrap_or_default(),
            if phases.is_empty() {
                String::new()
            } else {
                format!(
                    " (phases: {})",
                    phases
                        .iter()
                        .map(|p| p.title.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ),
        EventKind::Phase { title } => format!("phase {title}"),
        EventKind::Log { message } => format!("log {message}"),
        EventKind::LeafStarted {
            call_id,
            label,
            prompt_preview,
            path,
            fed_by,
            ..
        } => format!(
            "leaf {call_id} started {}{}{}",
            label.clone().unwrap_or_else(|| preview(prompt_preview, 60)),
            place(path),
            if fed_by.is_empty() {
                String::new()
            } else {
                let calls: Vec<String> = fed_by.iter().map(u64::to_string).collect();
                format!(", fed by leaf {}", calls.join(", "))
            }
        ),
        EventKind::LeafFinished {
            call_id,
            ok,
            tokens,
            duration_ms,
            replayed,
            error,
            ..
        } => format!(
            "leaf {call_id} {} {tokens} tok {duration_ms} ms{}{}",
            if *ok { "done" } else { "failed" },
            if *replayed { " (replayed)" } else { "" },
            error
                .as_ref()
                .map(|e| format!(": {}", preview(e, 80)))
                .unwrap_or_default()
        ),
        EventKind::LeafTurn {
            call_id,
            model,
            input_tokens,
            output_tokens,
            duration_ms,
            retries,
            error,
        } => format!(
            "leaf {call_id} turn {model} {input_tokens}+{output_tokens} tok {duration_ms} ms{}{}",
            match retries {
                0 => String::new(),
                1 => " after 1 retry".to_owned(),
                n => format!(" after {n} retries"),
            },
            error
                .as_ref()
                .map(|e| format!(": {}", preview(e, 80)))
                .unwrap_or_default()
        ),
        EventKind::LeafToolCalled { call_id, name } => format!("leaf {call_id} calls {name}"),
        EventKind::LeafToolFinished {
            call_id, name, ok, ..
        } => format!(
            "leaf {call_id} {name} {}",
            if *ok { "returned" } else { "failed" }
        ),
        EventKind::ToolCalled { call_id, name, .. } => format!("tool {call_id} {name} called"),
        EventKind::ToolFinished { call_id, ok, .. } => {
            format!("tool {call_id} {}", if *ok { "returned" } else { "failed" })
        }
        EventKind::BudgetWarning { spent, total } => {
            format!("budget {spent} of {total} tokens spent")
        }
        EventKind::RunFinished { ok, summary, error } => format!(
            "run {} ({} leaves, {} tokens, {} ms){}",
            if *ok { "succeeded" } else { "failed" },
            summary.leaves,
            summary.tokens_spent,
            summary.duration_ms,
            error
                .as_ref()
                .map(|e| format!(": {}", e.message))
                .unwrap_or_default()
        ),
        EventKind::Gap { missed } => format!("{missed} events missed"),
    };
    terminal_safe(&format!("#{:<5} {what}", event.seq)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_names_each_group_its_item_and_stage() {
        let position = |kind, stage| Position {
            group: 2,
            kind,
            index: 1,
            size: 3,
            stage,
        };
        assert_eq!(place(&[]), "");
        assert_eq!(
            place(&[
                position(Some(GroupKind::Pipeline), Some(2)),
                position(Some(GroupKind::Parallel), None)
            ]),
            " in pipeline 2 item 1 stage 2 › parallel 2 branch 1"
        );
        assert_eq!(place(&[position(None, None)]), " in group 2 item 1");
    }

    #[test]
    fn a_fed_leaf_names_the_leaves_feeding_it_and_a_turn_its_retries() {
        let started = |fed_by| Event {
            thread_id: "t".into(),
            seq: 4,
            unix_us: None,
            kind: EventKind::LeafStarted {
                call_id: 3,
                label: Some("join".into()),
                agent_type: None,
                prompt_preview: String::new(),
                path: vec![],
                model: None,
                waited_ms: 0,
                fed_by,
            },
        };
        assert_eq!(line(&started(vec![])), "#4     leaf 3 started join");
        let turn = |retries| Event {
            thread_id: "t".into(),
            seq: 5,
            unix_us: None,
            kind: EventKind::LeafTurn {
                call_id: 3,
                model: "m".into(),
                input_tokens: 11,
                output_tokens: 5,
                duration_ms: 9,
                retries,
                error: None,
            },
        };
        assert_eq!(line(&turn(0)), "#5     leaf 3 turn m 11+5 tok 9 ms");
        assert_eq!(
            line(&turn(1)),
            "#5     leaf 3 turn m 11+5 tok 9 ms after 1 retry"
        );
        assert_eq!(
            line(&turn(2)),
            "#5     leaf 3 turn m 11+5 tok 9 ms after 2 retries"
        );
        assert_eq!(
            line(&started(vec![1, 2])),
            "#4     leaf 3 started join, fed by leaf 1, 2"
        );
    }
}
