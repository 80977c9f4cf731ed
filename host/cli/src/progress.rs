//! The live progress line on stderr: one consumer of the runtime's event stream.
//!
//! It shows the current phase, leaves running and done, and tokens, and prints the script's
//! log lines above it as they arrive.

use std::io::{IsTerminal, Write};

use flowbox::events::Progress;
use flowbox::{EventKind, EventStream, Runtime};

use flowbox::store::view::terminal_safe;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Awaits `work` (runs, or a root agent's turns) with the live progress display of the
/// runtime's runs on stderr when it is a terminal.
pub(crate) async fn with_progress<T>(runtime: &Runtime, work: impl Future<Output = T>) -> T {
    let display = std::io::stderr()
        .is_terminal()
        .then(|| spawn(runtime.subscribe()));
    let outcome = work.await;
    if let Some(display) = display {
        display.finish().await;
    }
    outcome
}

/// A running progress display.
pub(crate) struct Display {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// Starts drawing progress from `events` on stderr, one run after another.
pub(crate) fn spawn(mut events: EventStream) -> Display {
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut state = State::default();
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => state.apply(event.kind),
                    None => break,
                },
                _ = &mut stopped => {
                    // What was published before the stop (the last log lines) still shows.
                    while let Some(event) = events.try_recv() {
                        state.apply(event.kind);
                    }
                    break;
                }
            }
        }
        state.clear();
    });
    Display { stop, task }
}

impl Display {
    /// Draws what is left of the events published so far, clears the line and stops.
    pub(crate) async fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// What the line shows: the runs' progress, one run after another.
#[derive(Debug, Default, PartialEq)]
struct State(Progress);

impl State {
    fn apply(&mut self, kind: EventKind) {
        match kind {
            EventKind::Log { message } => {
                self.clear();
                err!("  {}", terminal_safe(&message));
            }
            EventKind::RunFinished { .. } => {
                // A root agent may run several workflows; each starts from a clean line.
                *self = Self::default();
                self.clear();
                return;
            }
            kind => {
                self.0.apply(&kind);
            }
        }
        self.draw();
    }

    fn draw(&self) {
        let progress = &self.0;
        let mut line = String::new();
        if let Some(name) = &progress.name {
            line.push_str(name);
            line.push_str(" · ");
        }
        if let Some(phase) = &progress.phase {
            line.push_str(phase);
            line.push_str(" · ");
        }
        line.push_str(&format!(
            "{} running · {} done",
            progress.running(),
            progress.done
        ));
        if progress.failed > 0 {
            line.push_str(&format!(" ({} failed)", progress.failed));
        }
        line.push_str(&format!(" · {} tokens", progress.tokens));
        if progress.missed > 0 {
            line.push_str(&format!(" · {} events missed", progress.missed));
        }
        let mut stderr = std::io::stderr().lock();
        let _ = write!(
            stderr,
            "\r\x1b[2K{}",
            terminal_safe(&line).replace('\n', " ")
        );
        let _ = stderr.flush();
    }

    fn clear(&self) {
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[2K");
        let _ = stderr.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_run_of_a_root_agent_starts_from_a_clean_line() {
        let mut state = State::default();
        state.apply(EventKind::RunStarted {
            name: Some("first".into()),
            phases: vec![],
        });
        state.apply(EventKind::Phase {
            title: "review".into(),
        });
        state.apply(EventKind::LeafStarted {
            call_id: 1,
            label: None,
            agent_type: None,
            prompt_preview: "x".into(),
            path: vec![],
            model: None,
            waited_ms: 0,
            fed_by: vec![],
        });
        assert_eq!(
            (state.0.running(), state.0.phase.as_deref()),
            (1, Some("review"))
        );
        state.apply(EventKind::RunFinished {
            ok: true,
            summary: Box::default(),
            error: None,
        });
        assert_eq!(state, State::default());
    }
}
