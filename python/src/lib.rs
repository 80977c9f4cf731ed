//! The native half of the `flowbox` Python package: a [`flowbox::Runtime`] on its own tokio
//! threads, driven from Python through JSON text and callbacks.
//!
//! Every method that does work returns at once; the work runs on the runtime's threads, never
//! holding the GIL, and ends by calling the `done` callback it was given with one JSON object
//! (`{"ok": true, ...}` or `{"ok": false, "error": {...}}`). The pure-Python half
//! (`python/flowbox`) turns those into awaitables, typed results and exceptions; JSON crosses
//! as text, so numbers keep their exact value and objects their key order.

mod bridge;
mod config;
mod leaf;
mod tool;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowbox::orchestrator::{Guidance, RUN_WORKFLOW_DESCRIPTION};
use flowbox::store::view::ThreadRecord;
use flowbox::{ErrorInfo, RunError, RunOutcome};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};
use serde_json::{Value, json};
use tokio::task::AbortHandle;

use crate::bridge::Bridge;
use crate::config::{Config, RequestConfig};

/// A flowbox runtime: the engine, the compiled guest, the backend and the journal.
#[pyclass(module = "flowbox._native", frozen)]
struct Runtime {
    runtime: Arc<flowbox::Runtime>,
    /// The bridge the runtime's Python leaves and tools are called through (also held inside
    /// `runtime`), so the garbage collector can see the cycle a leaf that holds its runtime makes.
    bridge: Arc<Py<Bridge>>,
    /// Where work is spawned; it refuses work once the executor is closed.
    spawner: tokio::runtime::Handle,
    /// The threads that run the work, until `close` (or the drop) shuts them down.
    executor: Mutex<Option<tokio::runtime::Runtime>>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let Some(executor) = self.executor.get_mut().ok().and_then(Option::take) else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Dropped on one of its own threads, which cannot wait for the others.
            executor.shutdown_background();
            return;
        }
        // Wait without the GIL for the threads to drop their work: one may be finishing a call
        // into Python, and must not still be doing so when the interpreter exits.
        Python::attach(|py| py.detach(|| executor.shutdown_timeout(CLOSE_TIMEOUT)));
    }
}

/// How long dropping a runtime waits for its threads to drop the work in flight.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A piece of work in flight, which `cancel` stops.
#[pyclass(module = "flowbox._native", frozen)]
struct Handle {
    abort: AbortHandle,
}

#[pymethods]
impl Handle {
    /// Stops the work; its `done` callback is not called. A run stopped this way stays open
    /// in its journal, to resume.
    fn cancel(&self) {
        self.abort.abort();
    }
}

#[pymethods]
impl Runtime {
    /// Builds a runtime from the package's configuration (JSON text) and the dispatcher its
    /// Python leaves and tools are called through. The first build of a new guest compiles it
    /// (seconds); the GIL is released meanwhile.
    #[new]
    fn new(py: Python<'_>, config: &str, dispatcher: Py<PyAny>) -> PyResult<Self> {
        let config: Config = serde_json::from_str(config)
            .map_err(|error| PyValueError::new_err(format!("invalid configuration: {error}")))?;
        let threads = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("flowbox")
            .build()
            .map_err(|error| {
                PyValueError::new_err(format!("cannot start the runtime's threads: {error}"))
            })?;
        let bridge = Bridge::new(dispatcher.clone_ref(py), threads.handle().clone());
        let bridge = Arc::new(Py::new(py, bridge)?);
        py.detach(|| {
            let runtime = {
                let _context = threads.enter();
                config.build(Arc::clone(&bridge))?
            };
            Ok(Self {
                runtime: Arc::new(runtime),
                bridge,
                spawner: threads.handle().clone(),
                executor: Mutex::new(Some(threads)),
            })
        })
        .map_err(|message: String| PyValueError::new_err(message))
    }

    /// Runs a script: `request` is `{"script", "args", "thread_id", "limits"}` as JSON text;
    /// `done` gets the outcome (`RunOutcome::to_json`, with the error's hint).
    fn run(&self, request: &str, done: Py<PyAny>) -> PyResult<Handle> {
        let request = RequestConfig::parse(request)?.into_request()?;
        let runtime = Arc::clone(&self.runtime);
        Ok(self.spawn(done, async move {
            outcome_json(runtime.run_request(request).await)
        }))
    }

    /// Resumes a journaled thread; `limits` is JSON text or `None` for the runtime's.
    #[pyo3(signature = (thread_id, limits, done))]
    fn resume(&self, thread_id: String, limits: Option<&str>, done: Py<PyAny>) -> PyResult<Handle> {
        let limits = limits.map(config::limits).transpose()?;
        let runtime = Arc::clone(&self.runtime);
        Ok(self.spawn(done, async move {
            outcome_json(runtime.resume(&thread_id, limits).await)
        }))
    }

    /// Checks a script without running it: `{"ok": true, "meta": ...}` or its error.
    fn check(&self, script: String, done: Py<PyAny>) -> Handle {
        let runtime = Arc::clone(&self.runtime);
        self.spawn(done, async move {
            match runtime.check(&script).await {
                Ok(meta) => json!({"ok": true, "meta": meta}),
                Err(error) => error_json(&error),
            }
        })
    }

    /// What a run would do and cost, without running its leaves: `{"ok": true, "plan": ...}`.
    fn plan(&self, request: &str, done: Py<PyAny>) -> PyResult<Handle> {
        let request = RequestConfig::parse(request)?.into_request()?;
        let runtime = Arc::clone(&self.runtime);
        Ok(self.spawn(done, async move {
            match runtime.plan(request).await {
                Ok(plan) => json!({"ok": true, "plan": plan}),
                Err(error) => error_json(&error),
            }
        }))
    }

    /// The journal's threads, newest first: `{"ok": true, "threads": [...], "damaged": [...]}`.
    fn threads(&self, done: Py<PyAny>) -> Handle {
        let runtime = Arc::clone(&self.runtime);
        self.spawn(done, async move {
            let Some(store) = runtime.store() else {
                return json!({"ok": true, "threads": [], "damaged": []});
            };
            match store.list().await {
                Ok(listing) => json!({
                    "ok": true,
                    "threads": listing.threads,
                    "damaged": listing.damaged.iter().map(ToString::to_string).collect::<Vec<_>>(),
                }),
                Err(error) => error_json(&RunError::Journal(error.into())),
            }
        })
    }

    /// One journaled thread: `{"ok": true, "thread": {"header", "name", "status", "entries",
    /// "outcome"}}`, as `flowbox show --json` prints it.
    fn show(&self, thread_id: String, done: Py<PyAny>) -> Handle {
        let runtime = Arc::clone(&self.runtime);
        self.spawn(done, async move {
            let unknown = || error_json(&RunError::UnknownThread(thread_id.clone()));
            let Some(store) = runtime.store() else {
                return unknown();
            };
            match store.load(&thread_id).await {
                Ok(Some(thread)) => json!({"ok": true, "thread": ThreadRecord::from(&thread)}),
                Ok(None) => unknown(),
                Err(error) => error_json(&RunError::Journal(error.into())),
            }
        })
    }

    /// Calls `on_event` with each event's JSON text as runs publish them, until the returned
    /// handle is cancelled. A lossless subscription gets every event and holds scripts' `log`
    /// and `phase` back while it falls behind; otherwise a slow reader gets a counted gap.
    fn subscribe(&self, lossless: bool, on_event: Py<PyAny>) -> Handle {
        let mut events = if lossless {
            self.runtime.subscribe_lossless()
        } else {
            self.runtime.subscribe()
        };
        let task = self.spawner.spawn(async move {
            while let Some(event) = events.recv().await {
                let text = serde_json::to_string(&event).expect("events serialise");
                let delivered = Python::attach(|py| on_event.call1(py, (text,)).map(drop));
                if let Err(error) = delivered {
                    Python::attach(|py| error.write_unraisable(py, None));
                    break;
                }
            }
        });
        Handle {
            abort: task.abort_handle(),
        }
    }

    /// Stops the runtime's threads, waiting (without the GIL) up to `timeout_secs` for the
    /// work in flight to be dropped: its runs end as if their process had stopped, open to
    /// resume. The package calls it at interpreter exit, before Python starts to finalise, so
    /// no thread of the runtime calls into Python after that.
    fn close(&self, py: Python<'_>, timeout_secs: f64) {
        let executor = self.executor.lock().ok().and_then(|mut slot| slot.take());
        if let Some(executor) = executor {
            if tokio::runtime::Handle::try_current().is_ok() {
                // Called on one of its own threads (an event callback), which cannot wait.
                executor.shutdown_background();
                return;
            }
            let timeout = Duration::try_from_secs_f64(timeout_secs).unwrap_or(Duration::ZERO);
            py.detach(|| executor.shutdown_timeout(timeout));
        }
    }

    /// Re-arms the bridge for the event loop the runtime's runs now start from (the package
    /// calls it when that loop changes): a wake sent to the previous loop is never served.
    fn rearm(&self) {
        Bridge::rearm(&self.bridge);
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&*self.bridge)
    }

    /// The guidance that teaches a root model the script contract and what this runtime has
    /// (its limits, leaf options and tools), with or without the pattern library.
    fn guidance(&self, patterns: bool) -> String {
        let guidance = if patterns {
            Guidance::new(&self.runtime)
        } else {
            Guidance::without_patterns(&self.runtime)
        };
        guidance.text().to_owned()
    }

    /// The warm pool's state as JSON text (`{"capacity", "ready", "memory_bytes",
    /// "prefaulted_bytes", "hits", "misses"}`), or `None` without a pool.
    fn warm_pool(&self) -> Option<String> {
        self.runtime.warm_pool().map(|pool| {
            json!({
                "capacity": pool.capacity,
                "ready": pool.ready,
                "memory_bytes": pool.memory_bytes,
                "prefaulted_bytes": pool.prefaulted_bytes,
                "hits": pool.hits,
                "misses": pool.misses,
            })
            .to_string()
        })
    }

    /// The SHA-256 of the guest component this runtime runs.
    fn guest_sha256(&self) -> &'static str {
        self.runtime.guest_sha256()
    }

    /// The runtime's default limits, as JSON text.
    fn limits(&self) -> String {
        serde_json::to_string(self.runtime.limits()).expect("limits serialise")
    }
}

impl Runtime {
    /// Runs `work` on the runtime's threads and hands its JSON to `done` — or, if the work is
    /// dropped before it ends (the runtime closed, the engine failed), an error that says so.
    fn spawn(&self, done: Py<PyAny>, work: impl Future<Output = Value> + Send + 'static) -> Handle {
        let done = Done(Some(done));
        let task = self.spawner.spawn(async move {
            let text = work.await.to_string();
            done.call(text);
        });
        Handle {
            abort: task.abort_handle(),
        }
    }
}

/// The callback a piece of work ends with, called exactly once.
struct Done(Option<Py<PyAny>>);

impl Done {
    fn call(mut self, text: String) {
        if let Some(done) = self.0.take() {
            Python::attach(|py| {
                if let Err(error) = done.call1(py, (text,)) {
                    error.write_unraisable(py, None);
                }
            });
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        if self.0.is_some() {
            let error = RunError::Host(
                "the work stopped before it ended: the runtime was closed, or the engine failed \
                 (a journaled thread stays open to resume)"
                    .into(),
            );
            Done(self.0.take()).call(error_json(&error).to_string());
        }
    }
}

/// A run's outcome as JSON, its error with the hint a model or a person acts on.
fn outcome_json(outcome: RunOutcome) -> Value {
    let mut json = outcome.to_json();
    json["recorded"] = outcome.recorded.into();
    if let Err(error) = &outcome.result {
        json["error"]["hint"] = hint_of(&ErrorInfo::from(error)).into();
    }
    json
}

fn error_json(error: &RunError) -> Value {
    let info = ErrorInfo::from(error);
    let mut json = json!({"ok": false, "error": info});
    json["error"]["hint"] = hint_of(&info).into();
    json
}

fn hint_of(info: &ErrorInfo) -> &'static str {
    flowbox::orchestrator::hint(info.kind, info.exception.as_deref())
}

/// The native module, `flowbox._native`.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Runtime>()?;
    module.add_class::<Handle>()?;
    module.add_class::<bridge::Completion>()?;
    module.add_class::<Bridge>()?;
    module.add("RUN_WORKFLOW_DESCRIPTION", RUN_WORKFLOW_DESCRIPTION)?;
    module.add(
        "InvalidLimits",
        module.py().get_type::<config::InvalidLimits>(),
    )?;
    Ok(())
}
