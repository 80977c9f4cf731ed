//! Calls from the runtime's threads into Python code that runs on the caller's event loop.
//!
//! The runtime's tasks never hold the GIL while they wait, and mostly never take it: a call is
//! queued here with its JSON and a [`Completion`], and the Python dispatcher
//! (`flowbox._runtime._Dispatcher`) is woken once per batch. On the event loop, it takes every
//! queued message at once, starts each call as a task, and settles its completion from there.
//! A call the runtime gives up on (its run ended, hit its deadline or was cancelled) queues a
//! cancellation the same way.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use flowbox::LeafRequest;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::{PyTraverseError, PyVisit};
use serde_json::Value;
use tokio::sync::oneshot;

/// What the Python side answered: its reply, or why it failed and whether trying again may
/// help.
pub(crate) type Answer = Result<Reply, Failure>;

/// A successful answer.
#[derive(Debug)]
pub(crate) enum Reply {
    /// JSON text (a leaf's `{"value", "usage"}`, a tool's result).
    Json(String),
    /// A leaf's plain-text reply, with no usage reported.
    Text(String),
}

/// A failed Python call.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) retryable: bool,
}

/// The one-shot answer slot of a call in flight, settled once from the event loop.
#[pyclass(module = "flowbox._native", frozen)]
pub(crate) struct Completion {
    sender: Mutex<Option<oneshot::Sender<Answer>>>,
}

impl Completion {
    fn settle(&self, answer: Answer) {
        let sender = self.sender.lock().map(|mut slot| slot.take());
        if let Ok(Some(sender)) = sender {
            // The runtime may have stopped waiting (the run ended): nothing to tell then.
            let _ = sender.send(answer);
        }
    }
}

/// What a call asks of the Python side.
pub(crate) enum Request {
    /// Answer a leaf: the request, and its instance's conversation so far (JSON), if any.
    Leaf(Box<LeafRequest>, Option<String>),
    /// Call a tool: its name and its arguments (JSON).
    Tool(String, String),
}

/// A message for the Python side.
enum Message {
    /// Start call `id`.
    Call {
        id: u64,
        request: Request,
        completion: Completion,
    },
    /// Call `id` is no longer waited for.
    Cancel { id: u64 },
}

/// The queue between the runtime's threads and the Python dispatcher.
#[pyclass(module = "flowbox._native", frozen)]
pub(crate) struct Bridge {
    /// Cleared by the garbage collector (`__clear__`) when the bridge, its runtime and the
    /// dispatcher's leaf are a cycle nothing else reaches: the leaf may hold its runtime.
    dispatcher: Mutex<Option<Py<PyAny>>>,
    /// Where answers are delivered from, so that the calls waiting for a batch of them are
    /// woken from the runtime's own threads (cheaply) rather than one by one from the loop's.
    spawner: tokio::runtime::Handle,
    queue: Mutex<Vec<Message>>,
    /// The dispatcher has been woken and has not taken the queue since.
    woken: AtomicBool,
    next_id: AtomicU64,
}

#[pymethods]
impl Bridge {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // A lock held elsewhere means the dispatcher is in use, so not garbage.
        if let Ok(dispatcher) = self.dispatcher.try_lock() {
            visit.call(dispatcher.as_ref())?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        if let Ok(mut dispatcher) = self.dispatcher.lock() {
            dispatcher.take();
        }
    }

    /// Settles a batch of calls from the event loop: `(completion, kind, payload, retryable)`
    /// each, where `kind` is `"json"`, `"text"` or `"error"` (its payload the message). The
    /// dispatcher calls it once per turn of the loop.
    fn settle(&self, answers: Vec<(Py<Completion>, String, String, bool)>) {
        let answers: Vec<_> = answers
            .into_iter()
            .filter_map(|(completion, kind, payload, retryable)| {
                let sender = completion.get().sender.lock().ok()?.take()?;
                let answer = match kind.as_str() {
                    "json" => Ok(Reply::Json(payload)),
                    "text" => Ok(Reply::Text(payload)),
                    _ => Err(Failure {
                        message: payload,
                        retryable,
                    }),
                };
                Some((sender, answer))
            })
            .collect();
        self.spawner.spawn(async move {
            for (sender, answer) in answers {
                // The runtime may have stopped waiting (the run ended): nothing to tell then.
                let _ = sender.send(answer);
            }
        });
    }

    /// Every queued message, oldest first: `("leaf", id, completion, fields)` (`fields` as
    /// `flowbox.LeafRequest` takes them, with the prompt, schema and conversation as JSON text
    /// unless the prompt is a string), `("tool", id, completion, (name, arguments))` or
    /// `("cancel", id)`. Called by the dispatcher on the event loop when woken.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        // Cleared before taking: a message queued after the take wakes the dispatcher again.
        self.woken.store(false, Ordering::SeqCst);
        let messages = std::mem::take(&mut *self.queue.lock().expect("bridge queue lock"));
        messages
            .into_iter()
            .map(|message| match message {
                Message::Call {
                    id,
                    request,
                    completion,
                } => {
                    let completion = Py::new(py, completion)?.into_bound(py).into_any();
                    let (kind, fields) = match request {
                        Request::Leaf(request, conversation) => {
                            ("leaf", leaf_fields(py, &request, conversation)?)
                        }
                        Request::Tool(name, arguments) => {
                            ("tool", (name, arguments).into_pyobject(py)?.into_any())
                        }
                    };
                    (kind, id, completion, fields).into_pyobject(py)
                }
                Message::Cancel { id } => ("cancel", id).into_pyobject(py),
            })
            .collect()
    }
}

/// A leaf request as the Python dispatcher builds its `LeafRequest` from: `(thread_id, call_id,
/// idempotency_key, prompt, prompt_is_json, schema_json, agent_type, label, instruction, model,
/// tools, instance_id, conversation_json)`.
fn leaf_fields<'py>(
    py: Python<'py>,
    request: &LeafRequest,
    conversation: Option<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let (prompt, prompt_is_json) = match &request.prompt {
        Value::String(text) => (text.clone(), false),
        other => (other.to_string(), true),
    };
    let schema = request.schema.as_ref().map(Value::to_string);
    let head = (
        request.thread_id.as_str(),
        request.call_id,
        request.idempotency_key.as_str(),
        prompt,
        prompt_is_json,
        schema,
    );
    let tail = (
        request.agent_type.as_deref(),
        request.label.as_deref(),
        request.instruction.as_deref(),
        request.model.as_deref(),
        request.tools.clone(),
        request.instance_id.as_deref(),
        conversation,
    );
    Ok((head, tail).into_pyobject(py)?.into_any())
}

impl Bridge {
    /// Forgets that the dispatcher was woken, and wakes it again if calls are queued: for a
    /// runtime whose runs moved to another event loop, where a wake sent to the old one would
    /// never be served.
    pub(crate) fn rearm(bridge: &Py<Bridge>) {
        let queue = bridge.get();
        queue.woken.store(false, Ordering::SeqCst);
        let waiting = !queue.queue.lock().expect("bridge queue lock").is_empty();
        if waiting && !queue.woken.swap(true, Ordering::SeqCst) {
            wake(bridge);
        }
    }

    pub(crate) fn new(dispatcher: Py<PyAny>, spawner: tokio::runtime::Handle) -> Self {
        Self {
            dispatcher: Mutex::new(Some(dispatcher)),
            spawner,
            queue: Mutex::new(Vec::new()),
            woken: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
        }
    }
}

/// Queues `message`, waking the dispatcher (`dispatcher.wake(bridge)`, so that it holds no
/// reference to the bridge between wakes) unless it is already awake.
fn send(bridge: &Py<Bridge>, message: Message) {
    let queue = bridge.get();
    queue.queue.lock().expect("bridge queue lock").push(message);
    if !queue.woken.swap(true, Ordering::SeqCst) {
        wake(bridge);
    }
}

/// Calls `dispatcher.wake(bridge)`; a dispatcher that cannot be woken (its event loop closed)
/// fails every call in the queue.
fn wake(bridge: &Py<Bridge>) {
    let queue = bridge.get();
    let woke = Python::attach(|py| {
        // Cloned out, so the lock is not held while Python runs (it may release the GIL).
        let dispatcher = queue
            .dispatcher
            .lock()
            .expect("dispatcher lock")
            .as_ref()
            .map(|d| d.clone_ref(py));
        let Some(dispatcher) = dispatcher else {
            return Err(PyRuntimeError::new_err("the runtime was collected"));
        };
        dispatcher
            .call_method1(py, "wake", (bridge.clone_ref(py),))
            .map(drop)
    });
    if let Err(error) = woke {
        queue.woken.store(false, Ordering::SeqCst);
        let queued = std::mem::take(&mut *queue.queue.lock().expect("bridge queue lock"));
        for message in queued {
            if let Message::Call { completion, .. } = message {
                completion.settle(Err(Failure {
                    message: format!("the Python side could not start the call: {error}"),
                    retryable: false,
                }));
            }
        }
    }
}

/// Hands `request` to the Python side and waits for its answer, cancelling the Python side if
/// this future is dropped first.
pub(crate) async fn call(bridge: &Arc<Py<Bridge>>, request: Request) -> Answer {
    let id = bridge.get().next_id.fetch_add(1, Ordering::Relaxed);
    let (sender, receiver) = oneshot::channel();
    let completion = Completion {
        sender: Mutex::new(Some(sender)),
    };
    send(
        bridge,
        Message::Call {
            id,
            request,
            completion,
        },
    );
    let mut guard = CancelOnDrop(Some((Arc::clone(bridge), id)));
    let answer = receiver.await.unwrap_or_else(|_| {
        Err(Failure {
            message: "the Python call ended without an answer (was its event loop closed?)".into(),
            retryable: false,
        })
    });
    guard.0 = None;
    answer
}

/// Cancels a Python call when the runtime stops waiting for it.
struct CancelOnDrop(Option<(Arc<Py<Bridge>>, u64)>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some((bridge, id)) = self.0.take() {
            send(&bridge, Message::Cancel { id });
        }
    }
}
