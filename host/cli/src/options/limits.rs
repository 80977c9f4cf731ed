//! The limit flags: a `--limits` file and one flag per field of [`Limits`], each stating the
//! default it overrides (a test holds those texts equal to [`Limits::default`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use flowbox::Limits;

/// The limit flags.
#[derive(Debug, Args)]
pub(crate) struct LimitOptions {
    /// Load limits from a JSON file (any subset of the fields; flags below override it).
    #[arg(long = "limits", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Most leaves in flight at once [default: 16].
    #[arg(long, value_name = "N")]
    pub max_concurrency: Option<usize>,
    /// Most leaves one run may start [default: 1000].
    #[arg(long, value_name = "N")]
    pub max_agents: Option<u32>,
    /// Most host tool calls (`call_tool`) one run may make [default: 1000].
    #[arg(long, value_name = "N")]
    pub max_tool_calls: Option<u32>,
    /// Token budget for the run [default: none].
    #[arg(long, value_name = "TOKENS")]
    pub budget: Option<u64>,
    /// Dollar budget for the run, with --prices: a leaf whose worst case would pass it (with
    /// what is spent and in flight) is refused before it starts [default: none].
    #[arg(long, value_name = "USD")]
    pub budget_usd: Option<f64>,
    /// Refuse a new run, before any leaf starts, when its plan starts more leaves than this
    /// [default: none].
    #[arg(long, value_name = "N")]
    pub gate_leaves: Option<u32>,
    /// Refuse a new run, before any leaf starts, when its plan may cost more dollars than this
    /// (with --prices) [default: none].
    #[arg(long, value_name = "USD")]
    pub gate_usd: Option<f64>,
    /// Fuel (CPU) for the run [default: 20000000000].
    #[arg(long, value_name = "N")]
    pub fuel: Option<u64>,
    /// Memory cap in MiB [default: 128].
    #[arg(long, value_name = "MIB")]
    pub memory_mib: Option<u64>,
    /// Wall-clock deadline in seconds [default: 600].
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Largest script accepted, in bytes [default: 65536].
    #[arg(long, value_name = "BYTES")]
    pub max_script_bytes: Option<usize>,
    /// Most `log`/`print` output per run, in bytes [default: 1048576].
    #[arg(long, value_name = "BYTES")]
    pub max_output_bytes: Option<usize>,
    /// Largest result JSON, in bytes [default: 1048576].
    #[arg(long, value_name = "BYTES")]
    pub max_result_bytes: Option<usize>,
    /// Largest single prompt, reply or log line crossing into or out of the guest, in bytes
    /// [default: 1048576].
    #[arg(long, value_name = "BYTES")]
    pub max_message_bytes: Option<usize>,
    /// Largest JSON Schema passed to `agent`, in bytes [default: 65536].
    #[arg(long, value_name = "BYTES")]
    pub max_schema_bytes: Option<usize>,
    /// Python's recursion limit in the guest [default: 1000].
    #[arg(long, value_name = "N")]
    pub recursion_limit: Option<u32>,
}

impl LimitOptions {
    /// Whether any limit was given on the command line.
    pub(crate) fn sets_limits(&self) -> bool {
        self.file.is_some()
            || self.max_concurrency.is_some()
            || self.max_agents.is_some()
            || self.max_tool_calls.is_some()
            || self.budget.is_some()
            || self.budget_usd.is_some()
            || self.gate_leaves.is_some()
            || self.gate_usd.is_some()
            || self.fuel.is_some()
            || self.memory_mib.is_some()
            || self.timeout.is_some()
            || self.max_script_bytes.is_some()
            || self.max_output_bytes.is_some()
            || self.max_result_bytes.is_some()
            || self.max_message_bytes.is_some()
            || self.max_schema_bytes.is_some()
            || self.recursion_limit.is_some()
    }

    /// The limits: defaults, then the `--limits` file, then the flags.
    pub(crate) fn limits(&self) -> anyhow::Result<Limits> {
        self.limits_over(Limits::default())
    }

    /// The limits: `base` (or the `--limits` file), then the flags.
    pub(crate) fn limits_over(&self, base: Limits) -> anyhow::Result<Limits> {
        let mut limits = match &self.file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read limits file {}", path.display()))?;
                serde_json::from_str(&text)
                    .with_context(|| format!("invalid limits file {}", path.display()))?
            }
            None => base,
        };
        if let Some(n) = self.max_concurrency {
            limits = limits.with_max_concurrency(n);
        }
        if let Some(n) = self.max_agents {
            limits = limits.with_max_agents(n);
        }
        if let Some(n) = self.max_tool_calls {
            limits = limits.with_max_tool_calls(n);
        }
        if let Some(n) = self.budget {
            limits = limits.with_budget_tokens(Some(n));
        }
        if let Some(usd) = self.budget_usd {
            limits = limits.with_budget_usd(Some(usd));
        }
        if let Some(n) = self.gate_leaves {
            limits = limits.with_gate_leaves(Some(n));
        }
        if let Some(usd) = self.gate_usd {
            limits = limits.with_gate_usd(Some(usd));
        }
        if let Some(n) = self.fuel {
            limits = limits.with_fuel(n);
        }
        if let Some(mib) = self.memory_mib {
            if !(1..=MAX_MEMORY_MIB).contains(&mib) {
                anyhow::bail!("--memory-mib must be from 1 to {MAX_MEMORY_MIB}; it is {mib}");
            }
            limits = limits.with_memory_bytes(mib << 20);
        }
        if let Some(bytes) = self.max_script_bytes {
            limits = limits.with_max_script_bytes(bytes);
        }
        if let Some(bytes) = self.max_output_bytes {
            limits = limits.with_max_output_bytes(bytes);
        }
        if let Some(bytes) = self.max_result_bytes {
            limits = limits.with_max_result_bytes(bytes);
        }
        if let Some(bytes) = self.max_message_bytes {
            limits = limits.with_max_message_bytes(bytes);
        }
        if let Some(bytes) = self.max_schema_bytes {
            limits = limits.with_max_schema_bytes(bytes);
        }
        if let Some(n) = self.recursion_limit {
            limits = limits.with_recursion_limit(n);
        }
        if let Some(secs) = self.timeout {
            let timeout = Duration::try_from_secs_f64(secs)
                .map_err(|e| anyhow::anyhow!("invalid --timeout {secs}: {e}"))?;
            limits = limits.with_timeout(timeout);
        }
        if let Err(invalid) = limits.check() {
            anyhow::bail!(
                "{} must be {}; it is {}",
                flag(invalid.field),
                invalid.range,
                invalid.value
            );
        }
        Ok(limits)
    }
}

/// The most memory a guest can address, in MiB (`--memory-mib`'s range is checked in MiB,
/// before the bytes `Limits` holds).
const MAX_MEMORY_MIB: u64 = 4096;

/// The flag that sets a field of [`Limits`].
fn flag(field: &str) -> String {
    match field {
        "memory_bytes" => "--memory-mib".into(),
        "budget_tokens" => "--budget".into(),
        field => format!("--{}", field.replace('_', "-")),
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};
    use serde_json::Value;

    use super::*;

    /// The limit flags alone, as a command.
    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        limits: LimitOptions,
    }

    /// The limits `flowbox run FLAGS…` would use.
    fn limits_with(flags: &[&str]) -> Limits {
        let argv = std::iter::once("flowbox").chain(flags.iter().copied());
        let flags = Flags::try_parse_from(argv).unwrap_or_else(|e| panic!("{flags:?}: {e}"));
        flags.limits.limits().expect("valid limits")
    }

    /// The fields of `limits` whose values differ from the defaults'.
    fn changed_fields(limits: &Limits) -> Vec<String> {
        let (Value::Object(defaults), Value::Object(given)) = (
            serde_json::to_value(Limits::default()).expect("serialisable"),
            serde_json::to_value(limits).expect("serialisable"),
        ) else {
            panic!("limits serialise as objects");
        };
        defaults
            .keys()
            .filter(|field| defaults.get(*field) != given.get(*field))
            .cloned()
            .collect()
    }

    /// `--help` cannot drift from `Limits::default()`: each limit flag's help ends in
    /// `[default: D]`, and passing D to the flag gives exactly the default limits (or, for
    /// `none`, the field it sets is unset by default); another value changes exactly one
    /// field, and every field of `Limits` has its flag.
    #[test]
    fn each_limit_flag_documents_the_default_of_limits_default() {
        let defaults = serde_json::to_value(Limits::default()).expect("serialisable");
        let mut covered = Vec::new();
        let command = Flags::command();
        let flags: Vec<_> = command
            .get_arguments()
            .filter_map(|arg| Some((arg.get_long()?, arg)))
            .filter(|(long, _)| *long != "limits")
            .collect();
        assert!(flags.len() >= 10, "the limit flags were not found");
        for (long, arg) in flags {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let documented = help
                .split_once("[default: ")
                .and_then(|(_, rest)| rest.split_once(']'))
                .map(|(value, _)| value.to_owned())
                .unwrap_or_else(|| panic!("--{long}: the help states no default: {help:?}"));
            let flag = format!("--{long}");
            let other = match documented.as_str() {
                "none" => "1".to_owned(),
                value => {
                    let number: u64 = value
                        .parse()
                        .unwrap_or_else(|e| panic!("{flag}: default {value:?}: {e}"));
                    (number + 1).to_string()
                }
            };
            let changed = changed_fields(&limits_with(&[&flag, &other]));
            let [field] = changed.as_slice() else {
                panic!("{flag} {other} changed {changed:?}, not one field");
            };
            if documented == "none" {
                assert_eq!(
                    defaults[field.as_str()],
                    Value::Null,
                    "{flag}: the help says `none`, but Limits::default() sets {field}"
                );
            } else {
                assert_eq!(
                    limits_with(&[&flag, &documented]),
                    Limits::default(),
                    "{flag}: the help says {documented}, but Limits::default() has {field} = {}",
                    defaults[field.as_str()]
                );
            }
            covered.push(field.clone());
        }
        let Value::Object(fields) = &defaults else {
            panic!("limits serialise as an object");
        };
        for field in fields.keys() {
            assert!(
                covered.contains(field),
                "Limits::{field} has no flag whose help states its default"
            );
        }
    }
}
