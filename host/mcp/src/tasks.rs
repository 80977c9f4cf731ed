//! The tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) for clients of the
//! stateless 2026-07-28 revision that declare it: `run_workflow` and `resume_workflow` answer
//! at once with a task handle, the run going on in the background; `tasks/get` reports where
//! it is (the progress line as its status message, the batch of sampling requests when its
//! leaves wait for the client's model, the tool result once it ended), `tasks/update` brings
//! the answers of such a batch, and `tasks/cancel` cancels the run, whose thread stays
//! resumable.
//!
//! A task's id is its thread's id, so the journal answers for a task this server no longer
//! holds in memory (it restarted, or the task left memory): a finished thread is a completed
//! task with its recorded result until the TTL after it finished has passed, then an expired
//! one; an unfinished thread that a call of its own (not a task) is running is a working task,
//! and one nothing runs (the server stopped mid-run) a cancelled task, which `resume_workflow`
//! continues. In memory the server keeps the tasks running and at most
//! [`KEPT`] finished ones, each for the TTL after it finished. The server side of a call run
//! as a task is in [`crate::server`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowbox::store::{UtcTime, now_unix_ms};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, InputRequests, InputResponses, JsonObject,
    Task, TaskPayload, TaskStatus,
};
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use crate::progress::StatusLine;
use crate::stateless::{Answers, Pending};

/// How long a finished task is kept by default (`--task-ttl`), in seconds: long enough for a
/// client that polls now and then, short enough that memory does not fill up.
pub(crate) const DEFAULT_TTL_SECS: u64 = 3600;

/// How often a client should poll, in milliseconds.
const POLL_INTERVAL_MS: u64 = 250;

/// The most finished tasks kept in memory; past it the oldest are dropped (the journal still
/// answers for them until their TTL passes).
const KEPT: usize = 256;

/// The tasks of this server, by id (their thread's id).
#[derive(Debug)]
pub(crate) struct Tasks {
    ttl: Duration,
    tasks: Mutex<HashMap<String, Arc<Entry>>>,
}

/// One task held in memory.
#[derive(Debug)]
pub(crate) struct Entry {
    id: String,
    created_ms: u64,
    /// The run's latest progress message, while it works.
    status: StatusLine,
    state: Mutex<State>,
    abort: Mutex<Option<AbortHandle>>,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    updated_ms: u64,
    /// When it reached a terminal status.
    finished: Option<(Instant, u64)>,
}

#[derive(Debug)]
enum Phase {
    Working,
    InputRequired {
        requests: InputRequests,
        pending: Pending,
        reply: Option<oneshot::Sender<Answers>>,
    },
    Completed(JsonObject),
    Failed(JsonObject),
    Cancelled,
}

impl Phase {
    fn status(&self) -> TaskStatus {
        match self {
            Self::Working => TaskStatus::Working,
            Self::InputRequired { .. } => TaskStatus::InputRequired,
            Self::Completed(_) => TaskStatus::Completed,
            Self::Failed(_) => TaskStatus::Failed,
            Self::Cancelled => TaskStatus::Cancelled,
        }
    }
}

impl Tasks {
    /// Tasks kept for `ttl` after they finish.
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            tasks: Mutex::default(),
        }
    }

    /// The TTL of finished tasks.
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new working task for the thread `id`, replacing a finished one of the same thread;
    /// `None` when a task of that thread is still running.
    pub(crate) fn create(&self, id: &str) -> Option<Arc<Entry>> {
        let mut tasks = self.lock();
        self.prune(&mut tasks);
        if tasks.get(id).is_some_and(|entry| !entry.terminal()) {
            return None;
        }
        let now = now_unix_ms();
        let entry = Arc::new(Entry {
            id: id.to_owned(),
            created_ms: now,
            status: StatusLine::default(),
            state: Mutex::new(State {
                phase: Phase::Working,
                updated_ms: now,
                finished: None,
            }),
            abort: Mutex::default(),
        });
        tasks.insert(id.to_owned(), Arc::clone(&entry));
        Some(entry)
    }

    /// The task `id` held in memory, if it is.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Entry>> {
        let mut tasks = self.lock();
        self.prune(&mut tasks);
        tasks.get(id).cloned()
    }

    /// Drops the finished tasks whose TTL has passed, and the oldest finished ones past
    /// [`KEPT`].
    fn prune(&self, tasks: &mut HashMap<String, Arc<Entry>>) {
        tasks.retain(|_, entry| {
            entry
                .lock()
                .finished
                .is_none_or(|(at, _)| at.elapsed() < self.ttl)
        });
        let mut finished: Vec<(Instant, String)> = tasks
            .values()
            .filter_map(|entry| Some((entry.lock().finished?.0, entry.id.clone())))
            .collect();
        if finished.len() > KEPT {
            finished.sort();
            for (_, id) in &finished[..finished.len() - KEPT] {
                tasks.remove(id);
            }
        }
    }
}

impl Entry {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where the run keeps its progress line.
    pub(crate) fn status_line(&self) -> StatusLine {
        Arc::clone(&self.status)
    }

    /// Notes the handle that cancels the run.
    pub(crate) fn set_abort(&self, abort: AbortHandle) {
        *self.abort.lock().unwrap_or_else(|p| p.into_inner()) = Some(abort);
    }

    fn terminal(&self) -> bool {
        self.lock().phase.status().is_terminal()
    }

    /// The handle the call answers with.
    pub(crate) fn created(&self, ttl: Duration) -> CreateTaskResult {
        let created = iso8601(self.created_ms);
        let task = Task::new(&self.id, TaskStatus::Working, created.clone(), created)
            .with_ttl_ms(ttl_ms(ttl))
            .with_poll_interval_ms(POLL_INTERVAL_MS);
        CreateTaskResult::new(task)
    }

    /// What `tasks/get` reports.
    pub(crate) fn detailed(&self, ttl: Duration) -> DetailedTask {
        let state = self.lock();
        let message = match &state.phase {
            Phase::Working => self
                .status
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            Phase::InputRequired { requests, .. } => Some(format!(
                "waiting for the client's model: {} sampling request(s); answer them with \
                 tasks/update",
                requests.len()
            )),
            Phase::Cancelled => Some(CANCELLED.to_owned()),
            Phase::Completed(_) | Phase::Failed(_) => None,
        };
        let payload = match &state.phase {
            Phase::Working => TaskPayload::Working,
            Phase::InputRequired { requests, .. } => TaskPayload::InputRequired {
                input_requests: requests.clone(),
            },
            Phase::Completed(result) => TaskPayload::Completed {
                result: result.clone(),
            },
            Phase::Failed(error) => TaskPayload::Failed {
                error: error.clone(),
            },
            Phase::Cancelled => TaskPayload::Cancelled,
        };
        // The TTL counts from the end; on the wire it counts from creation.
        let ttl = match state.finished {
            Some((_, at)) => ttl_ms(ttl).saturating_add(at.saturating_sub(self.created_ms)),
            None => ttl_ms(ttl),
        };
        let mut task = Task::new(
            &self.id,
            payload.status(),
            iso8601(self.created_ms),
            iso8601(state.updated_ms),
        )
        .with_ttl_ms(ttl)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
        task.status_message = message;
        DetailedTask::new(task, payload)
    }

    /// The run's leaves wait for the client's model: the task is `input_required` with
    /// `requests` until a `tasks/update` answers them, which the returned receiver brings.
    pub(crate) fn input_required(
        &self,
        requests: InputRequests,
        pending: Pending,
    ) -> oneshot::Receiver<Answers> {
        let (reply, answered) = oneshot::channel();
        let mut state = self.lock();
        if !state.phase.status().is_terminal() {
            state.phase = Phase::InputRequired {
                requests,
                pending,
                reply: Some(reply),
            };
            state.updated_ms = now_unix_ms();
        }
        answered
    }

    /// `tasks/update`: answers the requests of an `input_required` task.
    pub(crate) fn update(&self, responses: &InputResponses) -> Result<(), ErrorData> {
        let mut state = self.lock();
        let status = state.phase.status();
        let Phase::InputRequired { pending, reply, .. } = &mut state.phase else {
            return Err(ErrorData::invalid_params(
                format!(
                    "task {} is {}, not input_required: it asks for no input",
                    self.id,
                    status_name(status)
                ),
                None,
            ));
        };
        let answers = pending.answers(responses)?;
        if let Some(reply) = reply.take() {
            let _ = reply.send(answers);
        }
        state.phase = Phase::Working;
        state.updated_ms = now_unix_ms();
        Ok(())
    }

    /// `tasks/cancel`: cancels the run, unless it has already ended.
    pub(crate) fn cancel(&self) -> Result<(), ErrorData> {
        let mut state = self.lock();
        let status = state.phase.status();
        if status.is_terminal() {
            return Err(ErrorData::invalid_params(
                format!(
                    "task {} is already {}: there is nothing to cancel",
                    self.id,
                    status_name(status)
                ),
                None,
            ));
        }
        if let Some(abort) = self.abort.lock().unwrap_or_else(|p| p.into_inner()).take() {
            // Dropping the run's future cancels it: what finished stays in the journal.
            abort.abort();
        }
        Self::finish(&mut state, Phase::Cancelled);
        Ok(())
    }

    /// The run ended with `result` (a tool result, or the protocol error of the call).
    pub(crate) fn ended(&self, result: Result<CallToolResult, ErrorData>) {
        let mut state = self.lock();
        if state.phase.status().is_terminal() {
            return;
        }
        let phase = match result {
            Ok(result) => Phase::Completed(object(&result)),
            Err(error) => Phase::Failed(object(&error)),
        };
        Self::finish(&mut state, phase);
    }

    /// The client went away and the run was cancelled.
    pub(crate) fn cancelled(&self) {
        let mut state = self.lock();
        if !state.phase.status().is_terminal() {
            Self::finish(&mut state, Phase::Cancelled);
        }
    }

    fn finish(state: &mut State, phase: Phase) {
        let now = now_unix_ms();
        state.phase = phase;
        state.updated_ms = now;
        state.finished = Some((Instant::now(), now));
    }
}

/// The status message of a cancelled task.
pub(crate) const CANCELLED: &str = "cancelled: the thread stays in the journal, and \
resume_workflow with its thread id (the task id) continues it without paying again for the \
leaves that finished";

/// What the journal says of a task this server does not hold in memory.
pub(crate) enum Journaled {
    /// The thread finished at `finished_ms` with `result`.
    Finished {
        created_ms: u64,
        finished_ms: u64,
        result: Box<CallToolResult>,
    },
    /// The thread has not finished, and no task of this server runs it; a call of its own
    /// may (`running`).
    Unfinished { created_ms: u64, running: bool },
}

/// The `tasks/get` answer for task `id` from the journal, or the error of one whose TTL has
/// passed.
pub(crate) fn from_journal(
    id: &str,
    journaled: Journaled,
    ttl: Duration,
) -> Result<DetailedTask, ErrorData> {
    let task = |status, created, updated| {
        Task::new(id, status, iso8601(created), iso8601(updated))
            .with_poll_interval_ms(POLL_INTERVAL_MS)
    };
    Ok(match journaled {
        Journaled::Finished {
            created_ms,
            finished_ms,
            result,
        } => {
            if is_expired(finished_ms, ttl) {
                return Err(expired(id, ttl));
            }
            let ttl = ttl_ms(ttl).saturating_add(finished_ms.saturating_sub(created_ms));
            let task = task(TaskStatus::Completed, created_ms, finished_ms).with_ttl_ms(ttl);
            DetailedTask::new(
                task,
                TaskPayload::Completed {
                    result: object(&*result),
                },
            )
        }
        Journaled::Unfinished {
            created_ms,
            running: true,
        } => {
            let task = task(TaskStatus::Working, created_ms, created_ms)
                .with_ttl_ms(ttl_ms(ttl))
                .with_status_message(
                    "running as a call of its own, not as a task: that call gets its result, \
                     and tasks/get reports it completed once it ends",
                );
            DetailedTask::new(task, TaskPayload::Working)
        }
        Journaled::Unfinished {
            created_ms,
            running: false,
        } => {
            let task = task(TaskStatus::Cancelled, created_ms, created_ms)
                .with_ttl_ms(ttl_ms(ttl))
                .with_status_message(format!(
                    "not running on this server (it was interrupted, or ran as a call of its \
                     own); {CANCELLED}"
                ));
            DetailedTask::new(task, TaskPayload::Cancelled)
        }
    })
}

/// Whether a task that finished at `finished_ms` is past its TTL.
pub(crate) fn is_expired(finished_ms: u64, ttl: Duration) -> bool {
    now_unix_ms().saturating_sub(finished_ms) >= ttl_ms(ttl)
}

/// The error of a task id that names no task.
pub(crate) fn unknown(id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "no task {id:?}: a task id is the thread id a run_workflow or resume_workflow \
             task handle gave, and list_threads lists the threads there are"
        ),
        None,
    )
}

/// The error of a task whose TTL has passed.
pub(crate) fn expired(id: &str, ttl: Duration) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "task {id:?} has expired (it finished more than {} s ago): its thread is still in \
             the journal, where show_thread and resume_workflow find it",
            ttl.as_secs()
        ),
        None,
    )
}

/// The error of a `tasks/update` or `tasks/cancel` (`method`) for a task that is not running.
pub(crate) fn not_running(id: &str, finished: bool, method: &str) -> ErrorData {
    let why = if finished {
        "its thread has already finished"
    } else {
        "its thread is not running as a task of this server"
    };
    ErrorData::invalid_params(
        format!("{method} of task {id:?}: {why}, so it waits for nothing"),
        None,
    )
}

fn status_name(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Working => "working",
        TaskStatus::InputRequired => "input_required",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        _ => "cancelled",
    }
}

fn object(value: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

/// `ms` since the Unix epoch as ISO 8601, as tasks' times are written.
fn iso8601(ms: u64) -> String {
    UtcTime::from_unix_millis(ms).iso8601()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_iso_8601_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_007), "2000-02-29T00:00:00.007Z");
        assert_eq!(iso8601(1_796_150_005_123), "2026-12-01T18:33:25.123Z");
    }

    #[test]
    fn a_running_task_is_not_replaced_and_a_finished_one_expires() {
        let tasks = Tasks::new(Duration::ZERO);
        let entry = tasks.create("t").expect("a new task");
        assert!(tasks.create("t").is_none(), "t is running");
        assert_eq!(entry.detailed(tasks.ttl()).status(), TaskStatus::Working);
        entry.ended(Ok(CallToolResult::structured(
            serde_json::json!({"ok": true}),
        )));
        assert!(
            entry
                .cancel()
                .unwrap_err()
                .message
                .contains("already completed")
        );
        // With a TTL of zero it leaves memory at once; the journal answers from then on.
        assert!(tasks.get("t").is_none());
        assert!(tasks.create("t").is_some());
    }

    #[test]
    fn finished_tasks_past_the_cap_leave_memory_oldest_first() {
        let tasks = Tasks::new(Duration::from_secs(3600));
        for i in 0..=KEPT {
            let entry = tasks.create(&format!("t{i}")).expect("a new task");
            entry.cancelled();
        }
        let running = tasks.create("running").expect("a new task");
        assert!(
            tasks.get("t0").is_none(),
            "the oldest finished task is dropped"
        );
        assert!(tasks.get(&format!("t{KEPT}")).is_some());
        assert_eq!(running.detailed(tasks.ttl()).status(), TaskStatus::Working);
    }

    #[test]
    fn an_update_needs_an_input_required_task_and_the_asked_keys() {
        let tasks = Tasks::new(Duration::from_secs(60));
        let entry = tasks.create("t").expect("a new task");
        let error = entry.update(&InputResponses::new()).unwrap_err();
        assert!(error.message.contains("not input_required"), "{error:?}");
        let journaled = Journaled::Finished {
            created_ms: 0,
            finished_ms: 1,
            result: Box::new(CallToolResult::structured(serde_json::json!({}))),
        };
        let error = from_journal("t", journaled, Duration::from_secs(60)).unwrap_err();
        assert!(error.message.contains("has expired"), "{error:?}");
        for (running, status) in [(true, TaskStatus::Working), (false, TaskStatus::Cancelled)] {
            let journaled = Journaled::Unfinished {
                created_ms: 0,
                running,
            };
            let task = from_journal("t", journaled, Duration::from_secs(60)).unwrap();
            assert_eq!(task.status(), status);
            assert!(task.task.status_message.is_some());
        }
    }
}
