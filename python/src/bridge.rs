//! Calls from the runtime's threads into Python code that runs on the caller's event loop.
//!
//! The runtime's tasks never hold the GIL while they wait. A call hands the Python dispatcher
//! (`flowbox._runtime._Dispatcher`) its JSON and a [`Completion`], and awaits the completion;
//! the dispatcher schedules the coroutine on the loop the runs were started from, and settles
//! the completion from there. A call the runtime gives up on (its run ended, hit its deadline
//! or was cancelled) cancels the Python task through the handle the dispatcher returned.

use std::sync::Mutex;

use pyo3::prelude::*;
use tokio::sync::oneshot;

/// What the Python side answered: the reply's JSON text, or why it failed and whether trying
/// again may help.
pub(crate) type Answer = Result<String, Failure>;

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

#[pymethods]
impl Completion {
    /// The call succeeded with this JSON text.
    fn ok(&self, json: String) {
        self.settle(Ok(json));
    }

    /// The call failed.
    #[pyo3(signature = (message, retryable = false))]
    fn err(&self, message: String, retryable: bool) {
        self.settle(Err(Failure { message, retryable }));
    }
}

/// Calls `dispatcher.<method>(*args, completion)` and waits for the completion, cancelling the
/// Python side if this future is dropped first.
pub(crate) async fn call(
    dispatcher: &Py<PyAny>,
    method: &'static str,
    args: (String, String),
) -> Answer {
    let (sender, receiver) = oneshot::channel();
    let completion = Completion {
        sender: Mutex::new(Some(sender)),
    };
    let cancel = Python::attach(|py| {
        dispatcher
            .call_method1(py, method, (args.0, args.1, completion))
            .map_err(|error| Failure {
                message: format!("the Python side could not start the call: {error}"),
                retryable: false,
            })
    })?;
    let mut guard = CancelOnDrop(Some(cancel));
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
struct CancelOnDrop(Option<Py<PyAny>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(cancel) = self.0.take() {
            Python::attach(|py| {
                if let Err(error) = cancel.call0(py) {
                    // A loop that is already closed has nothing left to cancel.
                    error.write_unraisable(py, None);
                }
            });
        }
    }
}
