//! Every bound a run is held to, in one serde-loadable type.
//!
//! Each limit has one mechanism and one typed error (see [`crate::RunError`]); the defaults
//! below are documented with the reason for each value, and the limits table of
//! `docs/limits.md` repeats them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The bounds of one run. Build with [`Limits::default`] and the `with_*` setters, or load from
/// JSON/TOML with serde (missing fields keep their defaults; unknown fields are an error, and
/// so is a value outside its range — see [`Limits::check`]). A run whose limits fail the check
/// is refused before anything runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Limits {
    /// WebAssembly fuel for the whole run (interpreter start, parsing, the script's own code).
    pub fuel: u64,
    /// The most linear memory the guest may hold, in bytes.
    pub memory_bytes: u64,
    /// Wall-clock deadline for the whole run, leaves included.
    #[serde(with = "flowbox_backends::serde_secs")]
    pub timeout: Duration,
    /// The most leaf agents one run may start over its lifetime.
    pub max_agents: u32,
    /// The most host tool calls (`call_tool`) one run may make over its lifetime.
    pub max_tool_calls: u32,
    /// The most leaves (and tool calls) of one run in flight at once.
    pub max_concurrency: usize,
    /// The run's token ceiling; `None` for no ceiling.
    pub budget_tokens: Option<u64>,
    /// The run's dollar ceiling; `None` for none. A leaf is refused before it starts when the
    /// dollars spent, plus the worst case of the leaves in flight and its own (input estimate
    /// and output ceiling at its model's price), would pass it. Needs a price table
    /// ([`RuntimeBuilder::prices`](crate::RuntimeBuilder::prices)).
    pub budget_usd: Option<f64>,
    /// The pre-launch gate on leaves: a new run whose plan starts more leaves than this is
    /// refused before any leaf runs ([`RunError::GateRefused`](crate::RunError::GateRefused),
    /// carrying the plan); `None` for no gate.
    pub gate_leaves: Option<u32>,
    /// The pre-launch gate on dollars: a new run whose plan may cost more than this (or whose
    /// cost the price table cannot tell) is refused before any leaf runs; `None` for no gate.
    /// Needs a price table.
    pub gate_usd: Option<f64>,
    /// The largest script source accepted, in bytes.
    pub max_script_bytes: usize,
    /// The most bytes of `log`/`print` output one run may write, in total.
    pub max_output_bytes: usize,
    /// The largest result JSON a run may return, in bytes.
    pub max_result_bytes: usize,
    /// The largest single message crossing the guest/host boundary (a prompt, a reply, a log
    /// line, the args), in bytes.
    pub max_message_bytes: usize,
    /// The largest JSON Schema a script may pass to `agent`, in bytes.
    pub max_schema_bytes: usize,
    /// Python's recursion limit inside the guest.
    pub recursion_limit: u32,
}

impl Default for Limits {
    /// The defaults, and why:
    ///
    /// | limit | default | why |
    /// |---|---|---|
    /// | `fuel` | 20 000 000 000 | ≈ 2–3 s of pure-Python compute here (≈ 8.5e9 fuel per CPU-second); scripts are glue, a 1000-leaf fan-out needs < 1e9 |
    /// | `memory_bytes` | 128 MiB | the interpreter needs ≈ 17 MiB; the rest holds plenty of leaf replies, while 100 runs at once still fit a small machine |
    /// | `timeout` | 600 s | long enough for several rounds of slow hosted models, short enough that a stuck run is noticed |
    /// | `max_agents` | 1000 | a generous fan-out; a runaway loop of `agent` calls stops long before it costs real money |
    /// | `max_tool_calls` | 1000 | tools are cheap but not free (a read is up to 256 KiB); a loop of them is a bug |
    /// | `max_concurrency` | 16 | leaves are I/O-bound, so this does not follow the CPU count; it follows what providers tolerate |
    /// | `budget_tokens` | none | token ceilings are the embedder's policy; flowbox enforces one when given |
    /// | `budget_usd` | none | so are dollar ceilings; they need the embedder's price table |
    /// | `gate_leaves`, `gate_usd` | none | what a run may cost before someone approves it is the operator's call |
    /// | `max_script_bytes` | 64 KiB | orchestration scripts are short; a model writing more is writing the work itself |
    /// | `max_output_bytes` | 1 MiB | logs are for people and the summary, not a data channel |
    /// | `max_result_bytes` | 1 MiB | the result goes back into a root model's context |
    /// | `max_message_bytes` | 1 MiB | one prompt or reply larger than this is a bug, not a leaf |
    /// | `max_schema_bytes` | 64 KiB | real structured-output schemas are a few KiB |
    /// | `recursion_limit` | 1000 | CPython's own default; the guest's 4 MiB wasm stack holds it even for recursion through C code |
    fn default() -> Self {
        Self {
            fuel: 20_000_000_000,
            memory_bytes: 128 << 20,
            timeout: Duration::from_secs(600),
            max_agents: 1000,
            max_tool_calls: 1000,
            max_concurrency: 16,
            budget_tokens: None,
            budget_usd: None,
            gate_leaves: None,
            gate_usd: None,
            max_script_bytes: 64 << 10,
            max_output_bytes: 1 << 20,
            max_result_bytes: 1 << 20,
            max_message_bytes: 1 << 20,
            max_schema_bytes: 64 << 10,
            recursion_limit: 1000,
        }
    }
}

/// The range of each limit, as [`Limits::check`] enforces it: `(field, least, most)`.
/// Beyond these a value cannot work (no leaf could ever start, the guest could not address it,
/// CPython refuses it), so it is a mistake to report, not a bound to apply.
const RANGES: &[(&str, u64, u64)] = &[
    ("fuel", 1, u64::MAX),
    // A 32-bit guest addresses at most 4 GiB.
    ("memory_bytes", 1, 4 << 30),
    ("max_agents", 0, u32::MAX as u64),
    ("max_tool_calls", 0, u32::MAX as u64),
    // Above this a semaphore cannot hold the permits.
    ("max_concurrency", 1, MAX_CONCURRENCY),
    ("budget_tokens", 1, u64::MAX),
    ("max_script_bytes", 1, 4 << 30),
    ("max_output_bytes", 0, 4 << 30),
    ("max_result_bytes", 1, 4 << 30),
    ("max_message_bytes", 1, 4 << 30),
    ("max_schema_bytes", 1, 4 << 30),
    // `sys.setrecursionlimit` takes a C int.
    ("recursion_limit", 1, i32::MAX as u64),
    ("gate_leaves", 1, u32::MAX as u64),
];

/// The most leaves in flight at once that a run may ask for.
const MAX_CONCURRENCY: u64 = 1 << 20;

/// The largest dollar budget or gate: a billion dollars, far past any run, and small enough
/// that costs in pico-dollars cannot overflow.
const MAX_USD: f64 = 1e9;

/// The longest wall-clock deadline, in seconds: a year.
const MAX_TIMEOUT_SECS: u64 = 365 * 24 * 3600;

/// A limit outside its range (see [`Limits::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the limit {field} must be {range}; it is {value}")]
pub struct InvalidLimit {
    /// The field of [`Limits`], as serde names it (`max_concurrency`).
    pub field: &'static str,
    /// The value given, as text.
    pub value: String,
    /// The range it must lie in, in words (`at least 1`, `from 1 to 4294967296`).
    pub range: String,
}

impl Limits {
    /// Checks every limit against its range: at least one unit of fuel, memory, concurrency,
    /// script, result, message and schema bytes and recursion depth, and a timeout of more
    /// than 0 s; memory and sizes at most 4 GiB (what a 32-bit guest addresses), concurrency
    /// at most 1 048 576, the timeout at most a year, the recursion limit at most 2³¹ − 1; a
    /// leaf gate of at least 1, and dollar budgets and gates more than 0 and at most 10⁹.
    pub fn check(&self) -> Result<(), InvalidLimit> {
        for (field, usd) in [("budget_usd", self.budget_usd), ("gate_usd", self.gate_usd)] {
            if let Some(usd) = usd
                && !(usd > 0.0 && usd <= MAX_USD)
            {
                return Err(InvalidLimit {
                    field,
                    value: format!("{usd}"),
                    range: "more than 0 and at most 1000000000 (dollars)".into(),
                });
            }
        }
        let timeout = self.timeout;
        if timeout.is_zero() || timeout > std::time::Duration::from_secs(MAX_TIMEOUT_SECS) {
            return Err(InvalidLimit {
                field: "timeout",
                value: format!("{} s", timeout.as_secs_f64()),
                range: format!("more than 0 and at most {MAX_TIMEOUT_SECS} s"),
            });
        }
        let size = |bytes: usize| u64::try_from(bytes).unwrap_or(u64::MAX);
        let values = [
            Some(self.fuel),
            Some(self.memory_bytes),
            Some(u64::from(self.max_agents)),
            Some(u64::from(self.max_tool_calls)),
            Some(size(self.max_concurrency)),
            self.budget_tokens,
            Some(size(self.max_script_bytes)),
            Some(size(self.max_output_bytes)),
            Some(size(self.max_result_bytes)),
            Some(size(self.max_message_bytes)),
            Some(size(self.max_schema_bytes)),
            Some(u64::from(self.recursion_limit)),
            self.gate_leaves.map(u64::from),
        ];
        for (&(field, least, most), value) in RANGES.iter().zip(values) {
            let Some(value) = value else { continue };
            if value < least || value > most {
                let range = match most {
                    u64::MAX => format!("at least {least}"),
                    _ => format!("from {least} to {most}"),
                };
                return Err(InvalidLimit {
                    field,
                    value: value.to_string(),
                    range,
                });
            }
        }
        Ok(())
    }

    /// Sets the run's fuel.
    pub fn with_fuel(mut self, fuel: u64) -> Self {
        self.fuel = fuel;
        self
    }

    /// Sets the memory cap in bytes.
    pub fn with_memory_bytes(mut self, bytes: u64) -> Self {
        self.memory_bytes = bytes;
        self
    }

    /// Sets the wall-clock deadline.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the lifetime cap on leaf agents.
    pub fn with_max_agents(mut self, max_agents: u32) -> Self {
        self.max_agents = max_agents;
        self
    }

    /// Sets the lifetime cap on host tool calls.
    pub fn with_max_tool_calls(mut self, max_tool_calls: u32) -> Self {
        self.max_tool_calls = max_tool_calls;
        self
    }

    /// Sets how many leaves may be in flight at once (at least 1).
    pub fn with_max_concurrency(mut self, max_concurrency: usize) -> Self {
        self.max_concurrency = max_concurrency;
        self
    }

    /// Sets the token ceiling (`None` for none).
    pub fn with_budget_tokens(mut self, budget: Option<u64>) -> Self {
        self.budget_tokens = budget;
        self
    }

    /// Sets the dollar ceiling (`None` for none).
    pub fn with_budget_usd(mut self, usd: Option<f64>) -> Self {
        self.budget_usd = usd;
        self
    }

    /// Sets the pre-launch gate on the plan's leaves (`None` for none).
    pub fn with_gate_leaves(mut self, leaves: Option<u32>) -> Self {
        self.gate_leaves = leaves;
        self
    }

    /// Sets the pre-launch gate on the plan's dollars (`None` for none).
    pub fn with_gate_usd(mut self, usd: Option<f64>) -> Self {
        self.gate_usd = usd;
        self
    }

    /// Whether these limits price leaves (a dollar budget or gate), which needs a price table.
    pub(crate) fn needs_prices(&self) -> Option<&'static str> {
        if self.budget_usd.is_some() {
            Some("budget_usd")
        } else if self.gate_usd.is_some() {
            Some("gate_usd")
        } else {
            None
        }
    }

    /// Whether a new run must pass the pre-launch gate first.
    pub(crate) fn gated(&self) -> bool {
        self.gate_leaves.is_some() || self.gate_usd.is_some()
    }

    /// Sets the largest accepted script.
    pub fn with_max_script_bytes(mut self, bytes: usize) -> Self {
        self.max_script_bytes = bytes;
        self
    }

    /// Sets the total `log`/`print` output cap.
    pub fn with_max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// Sets the largest result.
    pub fn with_max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = bytes;
        self
    }

    /// Sets the largest single guest/host message.
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Sets the largest JSON Schema passed to `agent`.
    pub fn with_max_schema_bytes(mut self, bytes: usize) -> Self {
        self.max_schema_bytes = bytes;
        self
    }

    /// Sets Python's recursion limit in the guest.
    pub fn with_recursion_limit(mut self, limit: u32) -> Self {
        self.recursion_limit = limit;
        self
    }
}

/// Loading limits checks them, so a limits file with a value out of range is refused where it
/// is read, naming the field.
impl<'de> Deserialize<'de> for Limits {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let limits = Limits::deserialize(deserializer)?;
        limits.check().map_err(serde::de::Error::custom)?;
        Ok(limits)
    }
}

impl Serialize for Limits {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Limits::serialize(self, serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_json_keeps_defaults_and_rejects_unknown_fields() {
        let limits: Limits =
            serde_json::from_str(r#"{"fuel": 5, "timeout": 1.5, "budget_tokens": 100}"#).unwrap();
        assert_eq!(limits.fuel, 5);
        assert_eq!(limits.timeout, Duration::from_millis(1500));
        assert_eq!(limits.budget_tokens, Some(100));
        assert_eq!(limits.max_agents, Limits::default().max_agents);
        let err = serde_json::from_str::<Limits>(r#"{"fuel_limit": 5}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let err = serde_json::from_str::<Limits>(r#"{"timeout": -1}"#).unwrap_err();
        assert!(err.to_string().contains("invalid duration -1"), "{err}");
    }

    #[test]
    fn every_limit_in_range_is_accepted_and_one_outside_is_refused_naming_it() {
        assert_eq!(Limits::default().check(), Ok(()));
        let edges = Limits::default()
            .with_fuel(1)
            .with_memory_bytes(4 << 30)
            .with_max_agents(0)
            .with_max_concurrency(1)
            .with_budget_tokens(Some(1))
            .with_budget_usd(Some(1e9))
            .with_gate_leaves(Some(1))
            .with_gate_usd(Some(0.01))
            .with_max_output_bytes(0)
            .with_recursion_limit(i32::MAX as u32)
            .with_timeout(Duration::from_secs(MAX_TIMEOUT_SECS));
        assert_eq!(edges.check(), Ok(()));
        let refused = [
            (Limits::default().with_fuel(0), "fuel", "at least 1"),
            (
                Limits::default().with_memory_bytes((4 << 30) + 1),
                "memory_bytes",
                "from 1 to 4294967296",
            ),
            (
                Limits::default().with_max_concurrency(0),
                "max_concurrency",
                "from 1 to 1048576",
            ),
            (
                Limits::default().with_budget_tokens(Some(0)),
                "budget_tokens",
                "at least 1",
            ),
            (
                Limits::default().with_max_result_bytes(0),
                "max_result_bytes",
                "from 1 to 4294967296",
            ),
            (
                Limits::default().with_recursion_limit(0),
                "recursion_limit",
                "from 1 to 2147483647",
            ),
            (
                Limits::default().with_recursion_limit(u32::MAX),
                "recursion_limit",
                "from 1 to 2147483647",
            ),
            (
                Limits::default().with_budget_usd(Some(0.0)),
                "budget_usd",
                "more than 0 and at most 1000000000 (dollars)",
            ),
            (
                Limits::default().with_gate_usd(Some(f64::NAN)),
                "gate_usd",
                "more than 0 and at most 1000000000 (dollars)",
            ),
            (
                Limits::default().with_gate_leaves(Some(0)),
                "gate_leaves",
                "from 1 to 4294967295",
            ),
            (
                Limits::default().with_timeout(Duration::ZERO),
                "timeout",
                "more than 0 and at most 31536000 s",
            ),
        ];
        for (limits, field, range) in refused {
            let error = limits.check().unwrap_err();
            assert_eq!((error.field, error.range.as_str()), (field, range));
        }
    }

    #[test]
    fn loading_limits_refuses_a_value_out_of_range_naming_the_field() {
        let error = serde_json::from_str::<Limits>(r#"{"max_concurrency": 0}"#).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("the limit max_concurrency must be from 1 to 1048576; it is 0"),
            "{error}"
        );
        let error = serde_json::from_str::<Limits>(r#"{"timeout": 0}"#).unwrap_err();
        assert!(error.to_string().contains("the limit timeout"), "{error}");
    }

    #[test]
    fn round_trips_through_json() {
        let limits = Limits::default()
            .with_max_concurrency(3)
            .with_budget_tokens(Some(7))
            .with_budget_usd(Some(0.1))
            .with_gate_leaves(Some(50));
        let text = serde_json::to_string(&limits).unwrap();
        assert_eq!(serde_json::from_str::<Limits>(&text).unwrap(), limits);
    }
}
