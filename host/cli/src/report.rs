//! A run's outcome printed: one JSON object with `--json`, else the pretty result on stdout
//! (and a summary line on a terminal), and the exit code it maps to — for local runs and runs
//! on Restate alike.

use std::io::IsTerminal;

use flowbox::RunOutcome;

use crate::Failure;

/// Prints an outcome: one JSON object with `json`, else the pretty result (and a summary line
/// on a terminal); returns the exit code.
pub(crate) fn report(outcome: RunOutcome, json: bool) -> Result<u8, Failure> {
    if json {
        out!("{}", outcome.to_json());
        return Ok(match &outcome.result {
            Ok(_) => 0,
            Err(error) => crate::exit_code(error),
        });
    }
    let summary = &outcome.summary;
    match outcome.result {
        Ok(result) => {
            out!(
                "{}",
                serde_json::to_string_pretty(&result).expect("JSON values serialise")
            );
            if std::io::stderr().is_terminal() {
                let estimated = match summary.estimated_tokens {
                    0 => String::new(),
                    n => format!(" ({n} estimated)"),
                };
                err!(
                    "thread {} · {} leaves · {} tokens{estimated} · {} fuel · {} ms",
                    summary.thread_id,
                    summary.leaves,
                    summary.tokens_spent,
                    summary.fuel_used,
                    summary.duration_ms
                );
            }
            Ok(0)
        }
        Err(error) => Err(Failure::run(error)),
    }
}
