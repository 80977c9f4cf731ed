//! An OTLP/HTTP trace receiver for the tests (tests/otlp/receiver.py): a real decoder of the
//! OpenTelemetry project's protobuf definitions, installed by `make otlp-receiver` into
//! target/otlp-venv.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowbox_testkit::restate::workspace_root;
use serde_json::Value;

use super::wait_until;

/// The receiver, serving until dropped; the spans it decoded, as JSON.
pub(crate) struct Receiver {
    child: Child,
    pub(crate) url: String,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    pub(crate) fn start(extra: &[&str]) -> Self {
        let python = workspace_root().join("target/otlp-venv/bin/python");
        assert!(
            python.exists(),
            "the OTLP receiver is not installed at {}: run `make otlp-receiver` (`make test` \
             does)",
            python.display()
        );
        let mut child = Command::new(python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the receiver starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("the receiver prints its port").unwrap();
        let port = first.strip_prefix("listening ").expect("`listening PORT`");
        let spans = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&spans);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock()
                    .unwrap()
                    .push(serde_json::from_str(&line).unwrap());
            }
        });
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            spans,
        }
    }

    pub(crate) fn spans(&self) -> Vec<Value> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans of `trace`, once one named `root` has arrived.
    pub(crate) fn trace(&self, trace: &str, root: &str) -> Vec<Value> {
        let of_trace = || -> Vec<Value> {
            self.spans()
                .into_iter()
                .filter(|span| span["trace_id"] == trace)
                .collect()
        };
        wait_until(Duration::from_secs(30), "the run's span", || {
            of_trace().iter().any(|span| span["name"] == root)
        });
        of_trace()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The trace id of every run of `thread`.
pub(crate) fn trace_id(thread: &str) -> String {
    flowbox::trace::trace_id(thread)
}
