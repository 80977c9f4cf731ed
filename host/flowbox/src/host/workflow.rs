//! The `flowbox:workflow/host` interface: what a running script can ask the host for.
//!
//! Each function converts between the generated WIT types and ours and delegates: requests
//! are checked in `request`, calls are run by `calls`. Breaching an output limit ends the run
//! (a trap carrying a [`RunError`]); a bad request is an error value the script sees.

use flowbox_store::{BranchFailure, CallErrorKind, GroupKind, Summary};
use serde_json::Value;

use crate::RunError;
use crate::bindings::host::{self, BudgetState, CallError, Completion};
use crate::calls::decode::{self, CallFailure};
use crate::error::MAX_EXCEPTION_NAME_BYTES;
use crate::events::{EventKind, MetaPhase};
use crate::instance::context::RunCtx;
use crate::journal::journal_error;

/// The longest message of a failed branch a summary keeps: enough to act on, while a
/// hundred of them still fit a root model's context.
const MAX_BRANCH_MESSAGE_BYTES: usize = 1 << 10;
/// The most warnings a summary keeps (see [`Summary::warnings`]).
const MAX_WARNINGS: usize = 20;

impl host::Host for RunCtx {
    async fn started(&mut self, meta: Option<String>) -> wasmtime::Result<()> {
        let meta: Value = match meta {
            Some(text) => serde_json::from_str(&text).unwrap_or(Value::Null),
            None => Value::Null,
        };
        let name = meta.get("name").and_then(Value::as_str).map(str::to_owned);
        let phases: Vec<MetaPhase> = meta
            .get("phases")
            .and_then(|phases| serde_json::from_value(phases.clone()).ok())
            .unwrap_or_default();
        if let (Some(name), Some(store)) = (&name, &self.store) {
            store
                .set_name(&self.thread_id, name)
                .await
                .map_err(|e| wasmtime::Error::new(journal_error(e)))?;
        }
        self.record.name.clone_from(&name);
        if meta.get("phases").is_some() {
            self.record.declared_phases = Some(phases.iter().map(|p| p.title.clone()).collect());
        }
        self.events.emit(|| EventKind::RunStarted { name, phases });
        Ok(())
    }

    fn start_agent(
        &mut self,
        prompt: String,
        options: Option<host::AgentOptions>,
        path: host::Path,
    ) -> wasmtime::Result<host::CallStart> {
        let decoded = match decode::decode_agent(&prompt, options, path, &self.limits) {
            Ok(decoded) => decoded,
            Err(failure) => return Ok(refused(failure)),
        };
        let started = self
            .calls
            .start_agent(decoded)
            .map_err(wasmtime::Error::new)?;
        Ok(call_start(started))
    }

    fn start_tool(
        &mut self,
        name: String,
        arguments: String,
        path: host::Path,
    ) -> wasmtime::Result<host::CallStart> {
        let checked = decode::decode_tool_arguments(&name, &arguments, &self.limits)
            .and_then(|arguments| Ok((arguments, decode::decode_path(path)?)));
        let (arguments, path) = match checked {
            Ok(checked) => checked,
            Err(failure) => return Ok(refused(failure)),
        };
        let started = self
            .calls
            .start_tool(name, arguments, path)
            .map_err(wasmtime::Error::new)?;
        Ok(call_start(started))
    }

    async fn await_next(&mut self) -> wasmtime::Result<Result<Vec<Completion>, CallError>> {
        // A script that only starts and awaits calls is paced too: it waits here, before its
        // next batch, while a lossless subscriber is full.
        self.events.room().await;
        let batch = self
            .calls
            .await_next()
            .await
            .map_err(wasmtime::Error::new)?
            .map_err(to_wit);
        Ok(batch.map(|completions| {
            completions
                .into_iter()
                .map(|c| match c.outcome {
                    Ok(reply) => {
                        let (reply, text) = guest_reply(reply);
                        (c.handle, reply, None, text)
                    }
                    Err(failure) => (c.handle, String::new(), Some(to_wit(failure)), false),
                })
                .collect()
        }))
    }

    // `phase` and `log` are the script's own writes: a lossless subscriber that falls behind
    // makes them wait (the guest's fiber is suspended; leaves go on).
    async fn phase(&mut self, title: String) -> wasmtime::Result<()> {
        let title = self.clip(title);
        self.count_output(title.len())?;
        self.warn_if_undeclared(&title);
        self.record.phases.push(title.clone());
        self.calls.set_phase(&title);
        self.events.emit_paced(|| EventKind::Phase { title }).await;
        Ok(())
    }

    async fn log(&mut self, message: String) -> wasmtime::Result<()> {
        let message = self.clip(message);
        self.count_output(message.len())?;
        self.record.logs.push(message.clone());
        self.events.emit_paced(|| EventKind::Log { message }).await;
        Ok(())
    }

    fn branch_failed(&mut self, failure: host::BranchFailure) -> wasmtime::Result<()> {
        self.record.failed_branch_count = self.record.failed_branch_count.saturating_add(1);
        if self.record.failed_branches.len() < Summary::MAX_FAILED_BRANCHES {
            self.record.failed_branches.push(BranchFailure {
                group: match failure.group {
                    host::GroupKind::Parallel => GroupKind::Parallel,
                    host::GroupKind::Pipeline => GroupKind::Pipeline,
                },
                index: failure.index,
                stage: failure.stage,
                exception: crate::text::clip(failure.exception, MAX_EXCEPTION_NAME_BYTES),
                message: crate::text::clip(failure.message, MAX_BRANCH_MESSAGE_BYTES),
                line: failure.line,
            });
        }
        Ok(())
    }

    fn placeholder_path(
        &mut self,
        call: host::Handle,
        constructs: Vec<u32>,
    ) -> wasmtime::Result<()> {
        self.calls.project_placeholder_path(call, constructs);
        Ok(())
    }

    fn budget(&mut self) -> wasmtime::Result<BudgetState> {
        let (total_usd, spent_usd) = self.calls.dollars();
        Ok(BudgetState {
            total: self.calls.budget(),
            spent: self.calls.spent().total(),
            total_usd,
            spent_usd,
        })
    }

    fn sleep(&mut self, nanoseconds: u64) -> wasmtime::Result<()> {
        self.time.advance(nanoseconds);
        Ok(())
    }
}

impl RunCtx {
    /// Warns, once per title, about a phase that `meta` declares phases without.
    fn warn_if_undeclared(&mut self, title: &str) {
        let Some(declared) = &self.record.declared_phases else {
            return;
        };
        if declared.iter().any(|d| d == title) || self.record.phases.iter().any(|p| p == title) {
            return;
        }
        let warnings = &mut self.record.warnings;
        if warnings.len() < MAX_WARNINGS {
            let declared = declared
                .iter()
                .map(|d| format!("{d:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            warnings.push(format!(
                "phase({title:?}) is not one of the phases meta declares ({declared})"
            ));
        }
    }

    /// A log line or phase title within the message limit.
    fn clip(&self, text: String) -> String {
        crate::text::clip(text, self.limits.max_message_bytes)
    }

    /// Counts log and phase text against the output limit; past it, the run ends. Every
    /// line costs at least one byte, so a flood of empty lines is bounded too.
    fn count_output(&mut self, bytes: usize) -> wasmtime::Result<()> {
        self.record.output_bytes = self.record.output_bytes.saturating_add(bytes.max(1));
        if self.record.output_bytes > self.limits.max_output_bytes {
            return Err(wasmtime::Error::new(RunError::OutputTooLarge {
                limit: self.limits.max_output_bytes,
            }));
        }
        Ok(())
    }
}

/// A reply's JSON text as the guest receives it, with whether it is text (see the WIT
/// `completion`): a JSON string becomes the string itself, so that the guest need not decode
/// the usual reply of a leaf; any other value stays JSON text. Text that does not decode to a
/// string (a lone surrogate's escape, which no reply of ours holds) stays JSON text too, for
/// the guest to read as it always could.
fn guest_reply(json: String) -> (String, bool) {
    if json.starts_with('"')
        && let Ok(text) = serde_json::from_str::<String>(&json)
    {
        return (text, true);
    }
    (json, false)
}

/// A started call's handle, or a refusal, as the WIT's `call-start`.
fn call_start(started: Result<host::Handle, CallFailure>) -> host::CallStart {
    match started {
        Ok(handle) => (handle, None),
        Err(failure) => refused(failure),
    }
}

/// A refused start: handle 0, which no call has (they are numbered from 1), and why.
fn refused(failure: CallFailure) -> host::CallStart {
    (0, Some(to_wit(failure)))
}

/// A call failure as the WIT type: the one place our call-error kind becomes the generated
/// one.
fn to_wit(failure: CallFailure) -> CallError {
    use host::ErrorKind as Wit;
    CallError {
        kind: match failure.kind {
            CallErrorKind::AgentFailed => Wit::AgentFailed,
            CallErrorKind::BudgetExceeded => Wit::BudgetExceeded,
            CallErrorKind::AgentCapExceeded => Wit::AgentCapExceeded,
            CallErrorKind::ToolFailed => Wit::ToolFailed,
            CallErrorKind::InvalidRequest => Wit::InvalidRequest,
            CallErrorKind::ToolCapExceeded => Wit::ToolCapExceeded,
        },
        message: failure.message,
        retryable: failure.retryable,
        cause: failure.cause,
    }
}

#[cfg(test)]
mod tests {
    use super::guest_reply;

    #[test]
    fn a_json_string_reaches_the_guest_as_its_text_and_anything_else_as_json() {
        let text = |json: &str| guest_reply(json.to_owned());
        assert_eq!(text(r#""plain""#), ("plain".to_owned(), true));
        assert_eq!(
            text(r#""a \"quote\", a\ttab, \u00e9 and \ud83d\ude00""#),
            ("a \"quote\", a\ttab, \u{e9} and \u{1f600}".to_owned(), true)
        );
        assert_eq!(text(r#""""#), (String::new(), true));
        for json in [r#"{"a": "b"}"#, r#"["x"]"#, "1.50", "null", "true"] {
            assert_eq!(text(json), (json.to_owned(), false));
        }
        // Not a string any Rust value can hold: the guest decodes it as it always could.
        assert_eq!(text(r#""\ud800""#), (r#""\ud800""#.to_owned(), false));
    }
}
