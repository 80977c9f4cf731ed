//! OpenTelemetry traces of every run of a runtime (feature `otlp`): one trace per thread, with
//! a span for each run, phase, `parallel`/`pipeline` group, leaf (its model turns and tool
//! calls as children) and `call_tool`, exported as OTLP/HTTP protobuf.
//!
//! Configure it with [`Otlp`] on [`RuntimeBuilder::otlp`](crate::RuntimeBuilder::otlp). Export
//! never holds up a run: the runtime's observer builds each span as its run publishes the
//! event that ends it and hands it to the OpenTelemetry SDK's batch processor, whose own
//! thread sends batches; past [`Otlp::max_queue`] spans waiting, new spans are dropped and
//! counted ([`TraceStats::dropped`]), and so are the batches a collector does not take.

mod spans;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanExporter, SpanProcessor,
};
use serde_json::Value;

use crate::events::{Event, EventKind, Observer};
use spans::RunTrace;

/// The trace id (32 hex digits) of every run of `thread_id`: where to find a thread's runs in
/// the tracing tool.
pub fn trace_id(thread_id: &str) -> String {
    spans::trace_id(thread_id).to_string()
}

/// The standard variable naming the collector's base URL (`/v1/traces` is added).
pub const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The standard variable naming the traces endpoint itself (used as it is).
pub const TRACES_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";

/// Where and how a runtime exports its traces.
#[derive(Debug, Clone)]
pub struct Otlp {
    /// The endpoint as given, and the traces' URL made of it.
    given: Option<String>,
    endpoint: Option<String>,
    headers: Vec<(String, String)>,
    contents: bool,
    timeout: Duration,
    max_queue: usize,
}

impl Otlp {
    /// Traces sent to the collector at `endpoint`: a base URL such as
    /// `http://127.0.0.1:4318`, to which `/v1/traces` is added (a URL that already ends with
    /// it is used as it is).
    pub fn endpoint(endpoint: impl Into<String>) -> Self {
        let given = endpoint.into();
        let endpoint = if given.trim_end_matches('/').ends_with("/v1/traces") {
            given.clone()
        } else {
            format!("{}/v1/traces", given.trim_end_matches('/'))
        };
        Self {
            given: Some(given),
            endpoint: Some(endpoint),
            ..Self::from_variables()
        }
    }

    /// Traces sent where the standard variables say, when one of
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` and `OTEL_EXPORTER_OTLP_ENDPOINT` is set;
    /// `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_SERVICE_NAME` apply too, to this and to
    /// [`Self::endpoint`].
    pub fn from_env() -> Option<Self> {
        let set = |name| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
        (set(TRACES_ENDPOINT_VAR) || set(ENDPOINT_VAR)).then(Self::from_variables)
    }

    fn from_variables() -> Self {
        Self {
            given: None,
            endpoint: None,
            headers: Vec::new(),
            contents: false,
            timeout: Duration::from_secs(5),
            max_queue: 16_384,
        }
    }

    /// Whether the endpoint, when one was given, is an `http://` or `https://` URL with a host
    /// (the variables' endpoints are checked when the runtime is built).
    pub fn check(&self) -> Result<(), OtlpError> {
        let Some(endpoint) = &self.given else {
            return Ok(());
        };
        match reqwest::Url::parse(endpoint) {
            Ok(url) if ["http", "https"].contains(&url.scheme()) && url.has_host() => Ok(()),
            Ok(_) => Err(OtlpError(format!(
                "the endpoint must be an http:// or https:// URL with a host, not {endpoint:?}"
            ))),
            Err(error) => Err(OtlpError(format!(
                "the endpoint {endpoint:?} is not a URL: {error}"
            ))),
        }
    }

    /// Also sends this header with every export (an API key, say).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Whether leaves' prompts and replies go into their spans (`gen_ai.input.messages`,
    /// `gen_ai.output.messages`, each cut at 16 KiB): off by default, since they can hold
    /// secrets.
    pub fn contents(mut self, on: bool) -> Self {
        self.contents = on;
        self
    }

    /// How long one export may take before it counts as failed (5 s by default).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many ended spans may wait for export before new ones are dropped (16 384 by
    /// default).
    pub fn max_queue(mut self, spans: usize) -> Self {
        self.max_queue = spans.max(1);
        self
    }
}

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot export traces over OTLP: {0}")]
pub struct OtlpError(String);

/// What a runtime's traces have come to so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// Spans the collector took.
    pub exported: u64,
    /// Spans dropped: past the queue's bound, or in a batch the collector did not take.
    pub dropped: u64,
    /// Spans ended and not yet exported or dropped.
    pub waiting: u64,
    /// Why the last batch that failed did.
    pub last_error: Option<String>,
}

#[derive(Debug, Default)]
struct Counts {
    /// Handed to the processor, not yet exported or dropped.
    waiting: AtomicU64,
    exported: AtomicU64,
    dropped: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// The OTLP exporter, counting what it sends and what it loses.
#[derive(Debug)]
struct Counted {
    inner: opentelemetry_otlp::SpanExporter,
    counts: Arc<Counts>,
}

impl SpanExporter for Counted {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        self.counts.waiting.fetch_sub(spans, Ordering::Relaxed);
        match &result {
            Ok(()) => self.counts.exported.fetch_add(spans, Ordering::Relaxed),
            Err(error) => {
                *self
                    .counts
                    .last_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(error.to_string());
                self.counts.dropped.fetch_add(spans, Ordering::Relaxed)
            }
        };
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Turns every run's events into spans and hands them to the batch processor.
#[derive(Debug)]
pub(crate) struct Tracer {
    processor: BatchSpanProcessor,
    /// The runs under way, by their publisher's id.
    runs: Mutex<HashMap<u64, RunTrace>>,
    contents: bool,
    scope: InstrumentationScope,
    counts: Arc<Counts>,
    max_queue: u64,
}

impl Tracer {
    pub(crate) fn start(config: Otlp) -> Result<Self, OtlpError> {
        config.check()?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(http_client(config.timeout)?)
            .with_protocol(Protocol::HttpBinary)
            .with_timeout(config.timeout)
            // Two more tries, 0.1 s and 0.2 s later: a collector that is down costs a
            // one-shot command's last flush little.
            .with_retry_policy(
                RetryPolicy::recommended()
                    .with_max_retries(2)
                    .with_max_delay(Duration::from_millis(400)),
            );
        if let Some(endpoint) = &config.endpoint {
            exporter = exporter.with_endpoint(endpoint.clone());
        }
        if !config.headers.is_empty() {
            exporter = exporter.with_headers(config.headers.into_iter().collect());
        }
        let exporter = exporter
            .build()
            .map_err(|error| OtlpError(error.to_string()))?;
        let counts = Arc::new(Counts::default());
        let service = std::env::var("OTEL_SERVICE_NAME")
            .ok()
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| "flowbox".to_owned());
        let resource = Resource::builder().with_service_name(service).build();
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(config.max_queue)
            .with_max_export_batch_size(1024.min(config.max_queue))
            .with_scheduled_delay(Duration::from_millis(500))
            .build();
        let mut processor = BatchSpanProcessor::builder(Counted {
            inner: exporter,
            counts: Arc::clone(&counts),
        })
        .with_batch_config(batch)
        .build();
        processor.set_resource(&resource);
        Ok(Self {
            processor,
            runs: Mutex::new(HashMap::new()),
            contents: config.contents,
            scope: InstrumentationScope::builder("flowbox")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            counts,
            max_queue: config.max_queue as u64,
        })
    }

    /// Sends what has ended and waits for it, at most 5 s (the SDK's bound).
    pub(crate) fn flush(&self) {
        let _ = self.processor.force_flush();
    }

    pub(crate) fn stats(&self) -> TraceStats {
        TraceStats {
            exported: self.counts.exported.load(Ordering::Relaxed),
            dropped: self.counts.dropped.load(Ordering::Relaxed),
            waiting: self.counts.waiting.load(Ordering::Relaxed),
            last_error: self
                .counts
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    fn send(&self, span: SpanData) {
        let counts = &self.counts;
        if counts.waiting.fetch_add(1, Ordering::Relaxed) >= self.max_queue {
            counts.waiting.fetch_sub(1, Ordering::Relaxed);
            counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.processor.on_end(span);
    }
}

/// The most bytes of a prompt or a reply a span carries: collectors refuse requests of a few
/// MiB, and a batch holds up to 1024 spans.
const MAX_CONTENT_BYTES: usize = 16 << 10;

/// `text` cut to [`MAX_CONTENT_BYTES`] at a character boundary, saying how much was cut.
fn capped(mut text: String) -> String {
    if text.len() <= MAX_CONTENT_BYTES {
        return text;
    }
    let mut end = MAX_CONTENT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("… ({cut} more bytes)"));
    text
}

/// The blocking client the exporter sends with, on the batch processor's thread: rustls with
/// the leaf providers' TLS settings. It is built on a thread of its own, as a blocking client
/// cannot be built on an async runtime's.
fn http_client(timeout: Duration) -> Result<reqwest::blocking::Client, OtlpError> {
    let tls = flowbox_backends::http::tls_config()
        .map_err(|error| OtlpError(format!("cannot set up TLS: {error}")))?;
    std::thread::spawn(move || {
        reqwest::blocking::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(timeout)
            .build()
    })
    .join()
    .map_err(|_| OtlpError("building the HTTP client panicked".into()))?
    .map_err(|error| OtlpError(format!("cannot build the HTTP client: {error}")))
}

impl Observer for Tracer {
    fn event(&self, run: u64, event: &Event) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let EventKind::RunStarted { name, .. } = &event.kind {
            let trace = RunTrace::new(event, name.clone(), self.scope.clone());
            runs.insert(run, trace);
            return;
        }
        let Some(trace) = runs.get_mut(&run) else {
            return;
        };
        if trace.event(event, &mut |span| self.send(span)) {
            runs.remove(&run);
        }
    }

    fn wants_contents(&self) -> bool {
        self.contents
    }

    fn ended(&self, run: u64) {
        self.abandoned(run);
    }

    fn contents(&self, run: u64, call_id: u64, prompt: &Value, reply: Result<&Value, &str>) {
        // Written out before taking the lock every run's events go through.
        let prompt = capped(prompt.to_string());
        let reply = capped(match reply {
            Ok(value) => value.to_string(),
            Err(error) => error.to_owned(),
        });
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(run) = runs.get_mut(&run) {
            run.contents(call_id, prompt, reply);
        }
    }
}

impl Tracer {
    /// Ends the spans of a run that stopped without its end.
    fn abandoned(&self, run: u64) {
        let run = self
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&run);
        if let Some(run) = run {
            run.abandon(&mut |span| self.send(span));
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.processor.shutdown_with_timeout(Duration::from_secs(2));
    }
}
