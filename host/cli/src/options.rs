//! Flags shared by the subcommands that run scripts: the backend and the limits.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use flowbox::{FakeBackend, LeafBackend, Limits, ScriptedBackend};

/// Which backend answers leaf calls.
#[derive(Debug, Clone)]
pub(crate) enum BackendChoice {
    /// Deterministic offline replies.
    Fake,
    /// Replies from a scripted-backend JSON file.
    Scripted(PathBuf),
}

impl FromStr for BackendChoice {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "fake" => Ok(Self::Fake),
            _ => match value.strip_prefix("scripted:") {
                Some(path) if !path.is_empty() => Ok(Self::Scripted(PathBuf::from(path))),
                _ => Err(format!(
                    "unknown backend {value:?}; use `fake` or `scripted:FILE`"
                )),
            },
        }
    }
}

/// Backend and limit flags.
#[derive(Debug, Args)]
pub(crate) struct RunOptions {
    /// The leaf backend: `fake` (offline, deterministic) or `scripted:FILE`.
    #[arg(long, default_value = "fake", value_name = "BACKEND")]
    pub backend: BackendChoice,
    /// Load limits from a JSON file (any subset of the fields; flags below override it).
    #[arg(long, value_name = "FILE")]
    pub limits: Option<PathBuf>,
    /// Most leaves in flight at once [default: 16].
    #[arg(long, value_name = "N")]
    pub max_concurrency: Option<usize>,
    /// Most leaves one run may start [default: 1000].
    #[arg(long, value_name = "N")]
    pub max_agents: Option<u32>,
    /// Token budget for the run [default: none].
    #[arg(long, value_name = "TOKENS")]
    pub budget: Option<u64>,
    /// Fuel (CPU) for the run [default: 20000000000].
    #[arg(long, value_name = "N")]
    pub fuel: Option<u64>,
    /// Memory cap in MiB [default: 128].
    #[arg(long, value_name = "MIB")]
    pub memory_mib: Option<u64>,
    /// Wall-clock deadline in seconds [default: 600].
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
}

impl RunOptions {
    /// The limits: defaults, then the `--limits` file, then the flags.
    pub(crate) fn limits(&self) -> anyhow::Result<Limits> {
        let mut limits = match &self.limits {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read limits file {}", path.display()))?;
                serde_json::from_str(&text)
                    .with_context(|| format!("invalid limits file {}", path.display()))?
            }
            None => Limits::default(),
        };
        if let Some(n) = self.max_concurrency {
            limits = limits.with_max_concurrency(n);
        }
        if let Some(n) = self.max_agents {
            limits = limits.with_max_agents(n);
        }
        if let Some(n) = self.budget {
            limits = limits.with_budget_tokens(Some(n));
        }
        if let Some(n) = self.fuel {
            limits = limits.with_fuel(n);
        }
        if let Some(mib) = self.memory_mib {
            limits = limits.with_memory_bytes(mib.saturating_mul(1 << 20));
        }
        if let Some(secs) = self.timeout {
            let timeout = Duration::try_from_secs_f64(secs)
                .map_err(|e| anyhow::anyhow!("invalid --timeout {secs}: {e}"))?;
            limits = limits.with_timeout(timeout);
        }
        Ok(limits)
    }

    /// The backend the flags name.
    pub(crate) fn backend(&self) -> anyhow::Result<Arc<dyn LeafBackend>> {
        Ok(match &self.backend {
            BackendChoice::Fake => Arc::new(FakeBackend::new()),
            BackendChoice::Scripted(path) => Arc::new(ScriptedBackend::from_file(path)?),
        })
    }
}
