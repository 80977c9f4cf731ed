//! [`Progress`]: what a run's events add up to so far — its name and phase, its leaves started,
//! done and failed, their tokens, and the events a live subscriber missed. The one fold every
//! progress display renders: the terminal's line and MCP's progress notifications.

use super::EventKind;

/// A run's progress, folded from its events one by one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// `meta.name`, once the run started.
    pub name: Option<String>,
    /// The phase the script entered last.
    pub phase: Option<String>,
    /// Leaves started.
    pub started: u64,
    /// Leaves finished, failed ones included.
    pub done: u64,
    /// Leaves that failed.
    pub failed: u64,
    /// Tokens of the finished leaves.
    pub tokens: u64,
    /// Events a live subscriber missed (from [`EventKind::Gap`]s).
    pub missed: u64,
}

impl Progress {
    /// Adds one event; returns whether it changed the progress (a log line, a tool call or the
    /// run's end does not: what a display does with those is its own).
    pub fn apply(&mut self, kind: &EventKind) -> bool {
        match kind {
            EventKind::RunStarted { name, .. } => self.name.clone_from(name),
            EventKind::Phase { title } => self.phase = Some(title.clone()),
            EventKind::LeafStarted { .. } => self.started += 1,
            EventKind::LeafFinished { ok, tokens, .. } => {
                self.done += 1;
                self.failed += u64::from(!ok);
                self.tokens += tokens;
            }
            EventKind::Gap { missed } => self.missed += missed,
            _ => return false,
        }
        true
    }

    /// Leaves started and not finished.
    pub fn running(&self) -> u64 {
        self.started.saturating_sub(self.done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_phases_tokens_and_gaps_add_up() {
        let mut progress = Progress::default();
        let started = |call_id| EventKind::LeafStarted {
            call_id,
            label: None,
            agent_type: None,
            prompt_preview: String::new(),
            path: vec![],
            model: None,
            waited_ms: 0,
            fed_by: vec![],
        };
        let finished = |call_id, ok, tokens| EventKind::LeafFinished {
            call_id,
            ok,
            tokens,
            duration_ms: 1,
            replayed: false,
            error: None,
            cost_usd: None,
        };
        assert!(progress.apply(&EventKind::RunStarted {
            name: Some("review".into()),
            phases: vec![],
        }));
        assert!(progress.apply(&EventKind::Phase {
            title: "fan".into()
        }));
        for call_id in 1..=3 {
            assert!(progress.apply(&started(call_id)));
        }
        assert!(progress.apply(&finished(1, true, 10)));
        assert!(progress.apply(&finished(2, false, 5)));
        assert!(progress.apply(&EventKind::Gap { missed: 4 }));
        assert!(!progress.apply(&EventKind::Log {
            message: "x".into()
        }));
        assert_eq!(
            progress,
            Progress {
                name: Some("review".into()),
                phase: Some("fan".into()),
                started: 3,
                done: 2,
                failed: 1,
                tokens: 15,
                missed: 4,
            }
        );
        assert_eq!(progress.running(), 1);
    }
}
