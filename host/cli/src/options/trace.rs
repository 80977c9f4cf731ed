//! The flags that export a trace of every run to an OpenTelemetry collector.

use clap::Args;
use flowbox::Runtime;
use flowbox::trace::Otlp;

use crate::Failure;

/// Where the runs' traces go: `--otlp-endpoint`, or the standard OpenTelemetry variables.
#[derive(Debug, Args)]
pub(crate) struct TraceOptions {
    /// Export a trace of every run to the OpenTelemetry collector at URL, over OTLP/HTTP
    /// (`/v1/traces` is added) [default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
    /// OTEL_EXPORTER_OTLP_ENDPOINT, when set]. OTEL_EXPORTER_OTLP_HEADERS and
    /// OTEL_SERVICE_NAME apply.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Put the leaves' prompts and replies into their spans (off by default: they can hold
    /// secrets).
    #[arg(long)]
    otlp_contents: bool,
}

impl TraceOptions {
    /// Whether a trace flag was given on the command line.
    pub(crate) fn given(&self) -> bool {
        self.otlp_endpoint.is_some() || self.otlp_contents
    }

    /// The export the flags and the environment ask for, if any; an endpoint that is not an
    /// HTTP URL is an input error naming the flag.
    pub(crate) fn otlp(&self) -> Result<Option<Otlp>, Failure> {
        let otlp = match &self.otlp_endpoint {
            Some(endpoint) => Some(Otlp::endpoint(endpoint)),
            None => Otlp::from_env(),
        };
        match &otlp {
            Some(otlp) => otlp
                .check()
                .map_err(|error| Failure::input(anyhow::anyhow!("--otlp-endpoint: {error}")))?,
            None if self.otlp_contents => {
                return Err(Failure::input(anyhow::anyhow!(
                    "--otlp-contents puts prompts and replies into traces, but no traces are \
                     exported: give --otlp-endpoint URL (or set OTEL_EXPORTER_OTLP_ENDPOINT)"
                )));
            }
            None => {}
        }
        Ok(otlp.map(|otlp| otlp.contents(self.otlp_contents)))
    }
}

/// Exports what the runs left and says on stderr what could not be: before a one-shot command
/// exits.
pub(crate) fn flush_traces(runtime: &Runtime) {
    runtime.flush_traces();
    if let Some(stats) = runtime.traces()
        && stats.dropped + stats.waiting > 0
    {
        err!(
            "flowbox: {} trace span(s) not exported{}",
            stats.dropped + stats.waiting,
            stats
                .last_error
                .map(|error| format!(": {error}"))
                .unwrap_or_default()
        );
    }
}
