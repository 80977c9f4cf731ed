//! One run, start to end: admitted, the guest's `run` export called in a fresh store (or in
//! one from the warm pool, instantiated ahead but never run), the outcome journaled and
//! published.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use wasmtime::Store;

use flowbox_store::RunEnd;

use crate::admission::{Prepared, check_input, prepare};
use crate::bindings::Workflow;
use crate::calls::Checkpoints;
use crate::clock::{millis, unix_millis, unix_nanos};
use crate::error;
use crate::events::{EventKind, RunEvents};
use crate::journal::journal_error;
use crate::pool::WarmPool;
use crate::run_ctx::{Plan, RunCtx, new_store};
use crate::shared::Shared;
use crate::{
    ErrorInfo, Limits, RunError, RunOutcome, RunRequest, ScriptError, ScriptErrorKind, Summary,
};

/// Runs one request to its outcome. Never panics on guest behaviour.
pub(crate) async fn execute(shared: &Shared, request: RunRequest) -> RunOutcome {
    let started = Instant::now();
    let (thread_id, generated) = match &request.thread_id {
        Some(id) => (id.clone(), false),
        None => (crate::thread::new_thread_id(), true),
    };
    let mut summary = Summary::new(thread_id.clone());
    let events = Arc::new(RunEvents::new(
        thread_id.clone(),
        Arc::clone(&shared.events),
    ));

    let prepared = match crate::thread::check_thread_id(&thread_id) {
        Ok(()) => prepare(shared, &request, thread_id, generated, Arc::clone(&events)).await,
        Err(error) => Err(error),
    };
    // The claim on the thread lasts until its end is journaled.
    let (plan, args_text, _claim) = match prepared {
        Ok(Prepared::Run(plan, args_text, claim)) => (plan, args_text, claim),
        Ok(Prepared::Finished(outcome)) => {
            publish_end(&events, &outcome.summary, &outcome.result);
            return outcome;
        }
        Err(error) => {
            // Rejected before a store existed: publish the end of the run all the same.
            let result = Err(error);
            summary.duration_ms = millis(started.elapsed());
            publish_end(&events, &summary, &result);
            return RunOutcome {
                result,
                summary,
                recorded: false,
            };
        }
    };
    let journaled = plan.checkpoints.journal.is_some();
    let limits = plan.limits.clone();
    // Whatever happens below — even if the caller drops this future — the backend hears
    // that the run ended, so it can let go of what it kept for it.
    let _ended = RunEnded {
        backend: shared.backend.as_ref(),
        thread_id: &summary.thread_id.clone(),
    };
    // The warm pool refills between runs rather than next to them.
    let _running = shared.pool.as_ref().map(WarmPool::run_started);
    let mut result = match start(shared, plan) {
        Err(error) => Err(error),
        Ok((mut store, instance)) => {
            let mut result = call_run(
                shared,
                &mut store,
                instance,
                &request.script,
                &args_text,
                &limits,
            )
            .await;
            let unreplayed = store.data().calls.unreplayed();
            if result.is_ok() && unreplayed > 0 {
                result = Err(RunError::Divergence(format!(
                    "the script finished with {unreplayed} journaled completions it never asked for"
                )));
            }
            fill_summary(&mut summary, &mut store, &limits);
            // Dropping the store drops the run's calls, cancelling leaves still running.
            drop(store);
            result
        }
    };
    summary.ok = result.is_ok();
    summary.duration_ms = millis(started.elapsed());
    if journaled
        && ends_thread(&result)
        && let Some(store) = &shared.store
    {
        let outcome = RunOutcome {
            result: result.clone(),
            summary: summary.clone(),
            recorded: false,
        };
        let end = RunEnd {
            outcome: outcome.to_record(),
            finished_unix_ms: unix_millis(),
        };
        if let Err(error) = store.finish(&summary.thread_id, &end).await {
            result = Err(journal_error(error));
        }
    }
    summary.ok = result.is_ok();
    publish_end(&events, &summary, &result);
    RunOutcome {
        result,
        summary,
        recorded: false,
    }
}

/// Tells the backend a run ended when dropped.
struct RunEnded<'a> {
    backend: &'a dyn flowbox_backends::LeafBackend,
    thread_id: &'a str,
}

impl Drop for RunEnded<'_> {
    fn drop(&mut self) {
        self.backend.run_finished(self.thread_id);
    }
}

/// Whether a run's result is its thread's outcome (see [`crate::RunErrorKind::ends_thread`]).
fn ends_thread(result: &Result<Value, RunError>) -> bool {
    result
        .as_ref()
        .err()
        .is_none_or(|error| error.kind().ends_thread())
}

/// Parses and checks a script without running it; returns its `meta`.
pub(crate) async fn check(shared: &Shared, script: &str) -> Result<Option<Value>, RunError> {
    let limits = shared.limits.clone();
    check_input(script, &Value::Null, &limits)?;
    let thread_id = crate::thread::new_thread_id();
    let plan = Plan {
        events: Arc::new(RunEvents::new(
            thread_id.clone(),
            Arc::clone(&shared.events),
        )),
        thread_id,
        limits: limits.clone(),
        guard: true,
        start_unix_nanos: unix_nanos(),
        checkpoints: Checkpoints::default(),
    };
    let mut store = fresh_store(shared, plan)?;
    let outcome = tokio::time::timeout(limits.timeout, async {
        let instance = shared.pre.instantiate_async(&mut store).await?;
        instance.call_check(&mut store, script).await
    })
    .await;
    let meta = guest_result(outcome, &store, &limits)?;
    let meta: Value = serde_json::from_str(&meta)
        .map_err(|e| RunError::Guest(format!("check returned invalid JSON: {e}")))?;
    Ok((!meta.is_null()).then_some(meta))
}

/// Calls the guest's `run` export in `instance`, or in a fresh one instantiated in `store`.
async fn call_run(
    shared: &Shared,
    store: &mut Store<RunCtx>,
    instance: Option<Workflow>,
    script: &str,
    args: &str,
    limits: &Limits,
) -> Result<Value, RunError> {
    // The epoch callback stops a busy guest; this timeout stops a guest waiting on leaves.
    let outcome = tokio::time::timeout(limits.timeout, async {
        let instance = match instance {
            Some(instance) => instance,
            None => shared.pre.instantiate_async(&mut *store).await?,
        };
        instance.call_run(&mut *store, script, args).await
    })
    .await;
    let text = guest_result(outcome, store, limits)?;
    if text.len() > limits.max_result_bytes {
        return Err(RunError::ResultTooLarge {
            size: text.len(),
            limit: limits.max_result_bytes,
        });
    }
    // The guest checks and writes the result itself; text that still does not parse (a script
    // that reached into the guest's own machinery) is the script's invalid result all the same,
    // which ends its thread like any other.
    serde_json::from_str(&text).map_err(|e| {
        RunError::Script(ScriptError {
            kind: ScriptErrorKind::InvalidResult,
            message: format!("the result is not valid JSON: {e}"),
            line: None,
            exception: None,
        })
    })
}

/// What a call of one of the guest's exports ended with, as a run error when it did not
/// return: the deadline, a trap (classified), or the script's own error.
fn guest_result<T>(
    outcome: Result<
        wasmtime::Result<Result<T, crate::bindings::ScriptError>>,
        tokio::time::error::Elapsed,
    >,
    store: &Store<RunCtx>,
    limits: &Limits,
) -> Result<T, RunError> {
    match outcome {
        Err(_) => Err(RunError::Timeout {
            after: limits.timeout,
        }),
        Ok(Err(trap)) => Err(error::classify(trap, &store.data().trap_context())),
        Ok(Ok(Err(script_error))) => Err(error::from_guest(
            script_error,
            limits.memory_bytes,
            store.data().memory.denied,
        )),
        Ok(Ok(Ok(value))) => Ok(value),
    }
}

fn fill_summary(summary: &mut Summary, store: &mut Store<RunCtx>, limits: &Limits) {
    let remaining = store.get_fuel().unwrap_or(0);
    let ctx = store.data_mut();
    let spent = ctx.calls.spent();
    summary.name = ctx.record.name.take();
    summary.phases = std::mem::take(&mut ctx.record.phases);
    summary.logs = std::mem::take(&mut ctx.record.logs);
    summary.failed_branches = std::mem::take(&mut ctx.record.failed_branches);
    summary.failed_branch_count = ctx.record.failed_branch_count;
    summary.warnings = std::mem::take(&mut ctx.record.warnings);
    summary.agents_spawned = ctx.calls.agents_started();
    summary.tools_called = ctx.calls.tools_called();
    summary.input_tokens = spent.input_tokens;
    summary.output_tokens = spent.output_tokens;
    summary.tokens_spent = spent.total();
    summary.fuel_used = limits.fuel.saturating_sub(remaining);
}

/// Publishes the end of a run.
fn publish_end(events: &RunEvents, summary: &Summary, result: &Result<Value, RunError>) {
    events.emit(|| EventKind::RunFinished {
        ok: result.is_ok(),
        summary: Box::new(summary.clone()),
        error: result.as_ref().err().map(ErrorInfo::from),
    });
}

/// The store for a run of `plan`, with the instance it runs in when the warm pool had one
/// ready (else the run instantiates the guest within its deadline, as [`call_run`] does).
fn start(shared: &Shared, plan: Plan) -> Result<(Store<RunCtx>, Option<Workflow>), RunError> {
    let ctx = run_ctx(shared, plan);
    match shared.pool.as_ref().and_then(|pool| pool.take(&ctx.limits)) {
        Some(warm) => warm
            .start(ctx)
            .map(|(store, instance)| (store, Some(instance))),
        None => Ok((new_store(&shared.engine, ctx)?, None)),
    }
}

/// A fresh store for a run of `plan`.
fn fresh_store(shared: &Shared, plan: Plan) -> Result<Store<RunCtx>, RunError> {
    new_store(&shared.engine, run_ctx(shared, plan))
}

/// The state of a run of `plan` on the runtime's backend, tools and journal.
fn run_ctx(shared: &Shared, plan: Plan) -> RunCtx {
    RunCtx::new(
        Arc::clone(&shared.backend),
        shared.tools.clone(),
        shared.store.clone(),
        plan,
    )
}
