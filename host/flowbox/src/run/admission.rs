//! Admitting a run: its input checked and, with a journal, its thread started, resumed or
//! answered from its record — under the thread's claim, so one thread runs in one place.

use std::sync::Arc;

use serde_json::Value;

use flowbox_store::{Claim, StoredThread, ThreadHeader};

use crate::calls::Checkpoints;
use crate::error::JournalError;
use crate::events::RunEvents;
use crate::instance::context::RunSetup;
use crate::journal::{JournalWriter, LeafCache, Replay, journal_error};
use crate::run::shared::Shared;
use crate::{Limits, RunError, RunOutcome, RunRequest, Summary};
use flowbox_store::{now_unix_ms, now_unix_nanos, sha256_hex};

/// What `prepare` decided.
pub(crate) enum Prepared {
    /// Run the guest with this plan and these args, holding the thread's claim when journaled.
    Run(RunSetup, String, Option<Claim>),
    /// The thread already finished; this is its recorded outcome.
    Finished(RunOutcome),
}

/// Checks the input and, with a journal, starts the thread or picks up where it stopped. A
/// resumed thread runs with the limits and guard it started with, unless the request sets
/// limits of its own. A run that `starts` its thread reads nothing back.
pub(crate) async fn prepare(
    shared: &Shared,
    request: &RunRequest,
    thread_id: String,
    starts: bool,
    events: Arc<RunEvents>,
) -> Result<Prepared, RunError> {
    let now = now_unix_nanos();
    let mut setup = RunSetup {
        thread_id,
        events,
        limits: request
            .limits
            .clone()
            .unwrap_or_else(|| shared.limits.clone()),
        guard: request.guard,
        start_unix_nanos: now,
        checkpoints: Checkpoints::default(),
    };
    let Some(store) = &shared.store else {
        if request.reuse_leaves_from.is_some() {
            return Err(RunError::Journal(JournalError::NotConfigured(
                "reusing leaves",
            )));
        }
        let args_text = check_input(
            &request.script,
            &request.args,
            &setup.limits,
            priced(shared),
        )?;
        return Ok(Prepared::Run(setup, args_text, None));
    };
    if let Some(from) = &request.reuse_leaves_from {
        let earlier = store
            .load(from)
            .await
            .map_err(journal_error)?
            .ok_or_else(|| RunError::UnknownThread(from.clone()))?;
        setup.checkpoints.cache = Some(LeafCache::new(earlier.entries));
    }
    let priced = priced(shared);
    if !starts {
        // A refused or finished thread is answered before it is claimed, so it leaves no
        // lease.
        let existing = store.load(&setup.thread_id).await.map_err(journal_error)?;
        if let Admission::Finished(outcome) = admit(&mut setup, request, existing.as_ref(), priced)?
        {
            return Ok(Prepared::Finished(*outcome));
        }
    }
    let claim = store.claim(&setup.thread_id).await.map_err(journal_error)?;
    // Read again under the claim: another run may have moved the thread on meanwhile. A run
    // that starts its thread (under an id drawn for it: its time, this process and a counter,
    // hashed) has nothing to read, and `begin` refuses the id should the thread exist.
    let existing = if starts {
        None
    } else {
        store.load(&setup.thread_id).await.map_err(journal_error)?
    };
    let args_text = match admit(&mut setup, request, existing.as_ref(), priced)? {
        Admission::Finished(outcome) => return Ok(Prepared::Finished(*outcome)),
        Admission::Run(args_text) => args_text,
    };
    match existing {
        None => {
            let header = ThreadHeader {
                thread_id: setup.thread_id.clone(),
                script: request.script.clone(),
                script_sha256: sha256_hex(request.script.as_bytes()),
                args: request.args.clone(),
                args_sha256: sha256_hex(args_text.as_bytes()),
                start_unix_nanos: now,
                limits: serde_json::to_value(&setup.limits).unwrap_or(Value::Null),
                guard: setup.guard,
                created_unix_ms: now_unix_ms(),
            };
            store.begin(&header).await.map_err(journal_error)?;
            setup.events.record(Arc::clone(store), 0);
            setup.checkpoints.journal = Some(JournalWriter::new(
                Arc::clone(store),
                setup.thread_id.clone(),
                &[],
            ));
        }
        Some(run) => {
            setup.start_unix_nanos = run.header.start_unix_nanos;
            // A resumed run goes on with the thread's history.
            let last_event = store
                .last_event_seq(&setup.thread_id)
                .await
                .map_err(journal_error)?;
            setup.events.record(Arc::clone(store), last_event);
            setup.checkpoints.journal = Some(JournalWriter::new(
                Arc::clone(store),
                setup.thread_id.clone(),
                &run.entries,
            ));
            setup.checkpoints.replay = Some(Replay::new(run.entries));
        }
    }
    Ok(Prepared::Run(setup, args_text, Some(claim)))
}

/// Whether a journaled request may run.
enum Admission {
    /// Yes, with these args (as JSON text).
    Run(String),
    /// The thread already finished: this is its recorded outcome.
    Finished(Box<RunOutcome>),
}

/// Checks a request against its thread as journaled (`None`: a new thread): a resumed thread
/// takes the limits (unless the request sets its own) and guard it started with, and must be
/// given the same script and args.
fn admit(
    setup: &mut RunSetup,
    request: &RunRequest,
    existing: Option<&StoredThread>,
    priced: bool,
) -> Result<Admission, RunError> {
    let Some(run) = existing else {
        return check_input(&request.script, &request.args, &setup.limits, priced)
            .map(Admission::Run);
    };
    let header = &run.header;
    if request.limits.is_none() {
        setup.limits = serde_json::from_value(header.limits.clone()).map_err(|e| {
            RunError::Journal(JournalError::Corrupt {
                thread_id: setup.thread_id.clone(),
                detail: format!("the limits it started with are unreadable: {e}"),
            })
        })?;
    }
    setup.guard = header.guard;
    let args_text = check_input(&request.script, &request.args, &setup.limits, priced)?;
    if header.script_sha256 != sha256_hex(request.script.as_bytes()) {
        return Err(RunError::Divergence(format!(
            "the script is not the one thread {} started with",
            setup.thread_id
        )));
    }
    if header.args_sha256 != sha256_hex(args_text.as_bytes()) {
        return Err(RunError::Divergence(format!(
            "the args are not the ones thread {} started with",
            setup.thread_id
        )));
    }
    Ok(match &run.end {
        Some(end) => Admission::Finished(Box::new(RunOutcome::from_record(
            &setup.thread_id,
            end.outcome.clone(),
        ))),
        None => Admission::Run(args_text),
    })
}

/// The outcome of a run refused before it started.
pub(crate) fn rejected(thread_id: &str, error: RunError) -> RunOutcome {
    RunOutcome {
        result: Err(error),
        summary: Summary::new(thread_id),
        recorded: false,
    }
}

/// Whether the runtime prices leaves.
fn priced(shared: &Shared) -> bool {
    shared.prices.is_some()
}

/// Checks a run's limits (dollar ones need `priced`), script size and args; returns the args
/// as JSON text.
pub(crate) fn check_input(
    script: &str,
    args: &Value,
    limits: &Limits,
    priced: bool,
) -> Result<String, RunError> {
    limits.check()?;
    if let Some(field) = limits.needs_prices()
        && !priced
    {
        return Err(RunError::InvalidLimits(crate::InvalidLimit {
            field,
            value: format!(
                "{:?}",
                limits.budget_usd.or(limits.gate_usd).unwrap_or_default()
            ),
            range: "given only to a runtime with a price table (RuntimeBuilder::prices)".into(),
        }));
    }
    if script.len() > limits.max_script_bytes {
        return Err(RunError::ScriptTooLarge {
            size: script.len(),
            limit: limits.max_script_bytes,
        });
    }
    check_numbers(args)?;
    let args_text = args.to_string();
    if args_text.len() > limits.max_message_bytes {
        return Err(RunError::InvalidArgs(format!(
            "the args are {} bytes of JSON; the limit is {} bytes",
            args_text.len(),
            limits.max_message_bytes
        )));
    }
    Ok(args_text)
}

/// The most digits Python converts to an `int` (its `sys.get_int_max_str_digits()`): a longer
/// integer in the args could not reach the script.
const MAX_INT_DIGITS: usize = 4300;

/// Refuses the numbers in `args` that could not cross into the script with their meaning: an
/// integer longer than Python converts, or a number past the largest float, which would arrive
/// as `inf`. Every other number crosses: integers exactly, the rest as the nearest float.
fn check_numbers(args: &Value) -> Result<(), RunError> {
    let mut stack = vec![args];
    while let Some(value) = stack.pop() {
        match value {
            Value::Number(number) => {
                if let Some(problem) = uncrossable(number.as_str()) {
                    let path = path_to(args, number).unwrap_or_else(|| "args".into());
                    return Err(RunError::InvalidArgs(format!("{path} {problem}")));
                }
            }
            Value::Array(items) => stack.extend(items),
            Value::Object(entries) => stack.extend(entries.values()),
            Value::Null | Value::Bool(_) | Value::String(_) => {}
        }
    }
    Ok(())
}

/// Why the number written `text` cannot cross into a script, if it cannot.
fn uncrossable(text: &str) -> Option<String> {
    let digits = text.trim_start_matches('-');
    if digits.bytes().all(|b| b.is_ascii_digit()) {
        (digits.len() > MAX_INT_DIGITS).then(|| {
            format!(
                "is an integer of {} digits; Python converts at most {MAX_INT_DIGITS}: pass it \
                 as a string",
                digits.len()
            )
        })
    } else {
        text.parse::<f64>().is_ok_and(f64::is_infinite).then(|| {
            format!(
                "is {text}, past the largest float (about 1.8e308), and would reach the script \
                 as infinity: pass it as a string"
            )
        })
    }
}

/// Where `target` (by address) is in `args`, written as the script reads it:
/// `args["a"][2]`.
fn path_to(args: &Value, target: &serde_json::Number) -> Option<String> {
    let mut stack = vec![(args, String::from("args"))];
    while let Some((value, path)) = stack.pop() {
        match value {
            Value::Number(number) if std::ptr::eq(number, target) => return Some(path),
            Value::Array(items) => stack.extend(
                items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| (item, format!("{path}[{index}]"))),
            ),
            Value::Object(entries) => stack.extend(
                entries
                    .iter()
                    .map(|(key, item)| (item, format!("{path}[{}]", Value::from(key.as_str())))),
            ),
            _ => {}
        }
    }
    None
}
