//! What a running tool call tells its client: progress notifications (when the request
//! carried a progress token) as leaves start and finish and phases change, and the script's
//! `log()` lines as MCP log messages. One consumer of the runtime's live event stream per
//! call, so a slow client never stalls the run: past the stream's capacity it misses events
//! (and says so in the next message) instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use flowbox::events::Progress;
use flowbox::{EventKind, EventStream};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long a finished call waits for its last notifications to reach the client before it
/// answers without them.
const FLUSH: Duration = Duration::from_secs(1);

/// The least severe log level the client asked for (`logging/setLevel`), as a number from
/// [`level_rank`]; the script's `log()` lines are `info` (rank 1).
#[derive(Debug, Default)]
pub(crate) struct LogLevel(AtomicU8);

impl LogLevel {
    #[expect(deprecated, reason = "MCP logging is what 2025-11-25 clients show")]
    pub(crate) fn set(&self, level: rmcp::model::LoggingLevel) {
        self.0.store(level_rank(level), Ordering::Relaxed);
    }

    fn allows_info(&self) -> bool {
        self.0.load(Ordering::Relaxed) <= 1
    }
}

#[expect(deprecated, reason = "MCP logging is what 2025-11-25 clients show")]
fn level_rank(level: rmcp::model::LoggingLevel) -> u8 {
    use rmcp::model::LoggingLevel as L;
    match level {
        L::Debug => 0,
        L::Info => 1,
        L::Notice => 2,
        L::Warning => 3,
        L::Error => 4,
        L::Critical => 5,
        L::Alert => 6,
        L::Emergency => 7,
    }
}

/// Where a call run as a task keeps its latest progress message, for `tasks/get` to report.
pub(crate) type StatusLine = Arc<std::sync::Mutex<Option<String>>>;

/// The notifications of one call, running.
pub(crate) struct Forwarder {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// Starts forwarding the events of `thread_id`'s run from `events` to `peer`.
pub(crate) fn spawn(
    mut events: EventStream,
    thread_id: String,
    token: Option<ProgressToken>,
    peer: Peer<RoleServer>,
    level: Arc<LogLevel>,
    status: Option<StatusLine>,
) -> Forwarder {
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut state = State::default();
        let send = Sender {
            peer,
            token,
            level,
            status,
        };
        loop {
            let event = tokio::select! {
                event = events.recv() => event,
                _ = &mut stopped => {
                    // What the run published before it ended still goes out.
                    while let Some(event) = events.try_recv() {
                        if event.thread_id == thread_id || matches!(event.kind, EventKind::Gap { .. }) {
                            send.apply(&mut state, event.kind).await;
                        }
                    }
                    break;
                }
            };
            let Some(event) = event else { break };
            if event.thread_id == thread_id || matches!(event.kind, EventKind::Gap { .. }) {
                send.apply(&mut state, event.kind).await;
            }
        }
    });
    Forwarder { stop, task }
}

impl Forwarder {
    /// Sends what is left of the run's events (waiting at most [`FLUSH`]) and stops.
    pub(crate) async fn finish(self) {
        let _ = self.stop.send(());
        let mut task = self.task;
        if tokio::time::timeout(FLUSH, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// What the call's progress messages say: the run's progress, and how many notifications
/// went out (the progress value, which must grow with each one).
#[derive(Debug, Default, PartialEq)]
struct State {
    progress: Progress,
    sent: u64,
}

impl State {
    /// The progress message: `review · 3/8 leaves · 2 140 tokens`.
    fn message(&self) -> String {
        let progress = &self.progress;
        let mut line = String::new();
        if let Some(phase) = &progress.phase {
            line.push_str(phase);
            line.push_str(" · ");
        }
        line.push_str(&format!("{}/{} leaves", progress.done, progress.started));
        if progress.failed > 0 {
            line.push_str(&format!(" ({} failed)", progress.failed));
        }
        line.push_str(&format!(" · {} tokens", grouped(progress.tokens)));
        if progress.missed > 0 {
            line.push_str(&format!(" · {} events missed", progress.missed));
        }
        line
    }
}

/// `n` with its digits in groups of three: `2 140`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(digit);
    }
    out
}

struct Sender {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    level: Arc<LogLevel>,
    status: Option<StatusLine>,
}

impl Sender {
    async fn apply(&self, state: &mut State, kind: EventKind) {
        match kind {
            EventKind::Log { message } => {
                self.log(message).await;
                return;
            }
            // The name is the call's own; the run's start changes nothing it shows.
            EventKind::RunStarted { .. } => return,
            kind => {
                if !state.progress.apply(&kind) {
                    return;
                }
            }
        }
        if let Some(status) = &self.status {
            *status.lock().unwrap_or_else(|p| p.into_inner()) = Some(state.message());
        }
        let Some(token) = &self.token else { return };
        state.sent += 1;
        let param = ProgressNotificationParam::new(token.clone(), state.sent as f64)
            .with_message(state.message());
        // A client that has gone is noticed by the service loop, which cancels the call.
        let _ = self.peer.notify_progress(param).await;
    }

    #[expect(deprecated, reason = "MCP logging is what 2025-11-25 clients show")]
    async fn log(&self, message: String) {
        if !self.level.allows_info() {
            return;
        }
        let param = rmcp::model::LoggingMessageNotificationParam::new(
            rmcp::model::LoggingLevel::Info,
            serde_json::Value::String(message),
        )
        .with_logger("flowbox");
        let _ = self.peer.notify_logging_message(param).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_phase_the_leaves_and_the_tokens() {
        let mut progress = Progress::default();
        progress.phase = Some("review".into());
        (progress.started, progress.done, progress.tokens) = (8, 3, 2140);
        let state = State { progress, sent: 0 };
        assert_eq!(state.message(), "review · 3/8 leaves · 2 140 tokens");
        let mut progress = Progress::default();
        (progress.started, progress.done, progress.failed) = (2, 2, 1);
        (progress.tokens, progress.missed) = (1_234_567, 4);
        let state = State { progress, sent: 0 };
        assert_eq!(
            state.message(),
            "2/2 leaves (1 failed) · 1 234 567 tokens · 4 events missed"
        );
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1 000");
    }
}
