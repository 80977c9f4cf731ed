//! One run, start to end: past the pre-launch gate, admitted, the guest's `run` export called
//! in a fresh store (or in one from the warm pool, instantiated ahead but never run), the
//! outcome journaled and published; and a plan's projection, the same guest run against
//! placeholder leaves.

pub(crate) mod admission;
pub(crate) mod external;
pub(crate) mod outcome;
pub(crate) mod request;
pub(crate) mod shared;
pub(crate) mod thread;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::Store;

use flowbox_store::{ThreadEnd, now_unix_ms, now_unix_nanos};

use crate::bindings::Workflow;
use crate::calls::Checkpoints;
use crate::clock::millis;
use crate::error;
use crate::events::{EventKind, RunEvents};
use crate::instance::busy::Busy;
use crate::instance::context::{Pricing, RunCtx, RunSetup, new_store, within};
use crate::instance::prefault::{Learner, Mappings, TouchedPages};
use crate::instance::{fault_around, fresh};
use crate::journal::journal_error;
use crate::plan::{self, GateRefusal};
use crate::run::admission::{Prepared, check_input, prepare};
use crate::run::shared::Shared;
use crate::{
    ErrorInfo, Limits, RunError, RunOutcome, RunRequest, ScriptError, ScriptErrorKind, Summary,
};
use external::ExternalRun;

/// Runs one request to its outcome. Never panics on guest behaviour.
pub(crate) async fn execute(shared: &Shared, request: RunRequest) -> RunOutcome {
    let started = Instant::now();
    let (thread_id, starts) = match &request.thread_id {
        Some(id) => (id.clone(), request.starts_thread),
        None => (crate::run::thread::new_thread_id(), true),
    };
    let mut summary = Summary::new(thread_id.clone());
    let events = Arc::new(RunEvents::new(
        thread_id.clone(),
        Arc::clone(&shared.events),
    ));

    let prepared = match crate::run::thread::check_thread_id(&thread_id) {
        Ok(()) => match gate(shared, &request, &thread_id).await {
            Ok(()) => prepare(shared, &request, thread_id, starts, Arc::clone(&events)).await,
            Err(error) => Err(error),
        },
        Err(error) => Err(error),
    };
    // The claim on the thread lasts until its end is journaled.
    let (setup, args_text, _claim) = match prepared {
        Ok(Prepared::Run(setup, args_text, claim)) => (setup, args_text, claim),
        Ok(Prepared::Finished(outcome)) => {
            publish_end(&events, &outcome.summary, &outcome.result);
            return outcome;
        }
        // Rejected before a store existed: publish the end of the run all the same.
        Err(error) => return rejected(&events, summary, started, error),
    };
    let journaled = setup.checkpoints.journal.is_some();
    let limits = setup.limits.clone();
    // Whatever happens below — even if the caller drops this future — the backend hears
    // that the run ended, so it can let go of what it kept for it.
    let _ended = RunEnded {
        backend: shared.backend.as_ref(),
        thread_id: &summary.thread_id.clone(),
    };
    // The warm pool refills, and finished runs' stores are dropped, between runs rather than
    // next to them.
    let _busy = Busy::enter();
    let mut result = match start(shared, setup) {
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
            // Cancels leaves still running; the memory goes off this path.
            crate::instance::retire::retire(store);
            result
        }
    };
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
        let end = ThreadEnd {
            outcome: outcome.to_record(),
            finished_unix_ms: now_unix_ms(),
        };
        // The history up to the end, the end and the `run_finished` event after it are one
        // write, and the event is published once it is done.
        let written = events
            .finish(store.as_ref(), &end, finished(&summary, &result), |error| {
                finished(&summary, &Err(journal_error(error.clone())))
            })
            .await;
        if let Err(error) = written {
            result = Err(journal_error(error));
        }
    } else {
        if let Err(error) = events.flush().await
            && result.is_ok()
        {
            result = Err(journal_error(error));
        }
        publish_end(&events, &summary, &result);
    }
    // Writes what is left: the `run_finished` event where it was not journaled with an end
    // (should this write fail, the end is still the thread's record, which readers of the
    // history fall back on).
    let _ = events.flush().await;
    // The retired run's memory, which a thread of its own drops later, holds these events.
    events.release_journal();
    RunOutcome {
        result,
        summary,
        recorded: false,
    }
}

/// Runs one request whose calls another engine carries out (see [`crate::external`]): the
/// same guest, limits and summary as [`execute`], with no journal of the runtime's own; the
/// clocks start, and the deadline counts, from the thread's recorded start.
pub(crate) async fn execute_external(shared: &Shared, run: ExternalRun) -> RunOutcome {
    let started = Instant::now();
    let ExternalRun {
        request,
        start_unix_nanos,
        source,
        events: sink,
    } = run;
    let thread_id = request.thread_id.clone().unwrap_or_default();
    let mut summary = Summary::new(thread_id.clone());
    let events =
        Arc::new(RunEvents::new(thread_id.clone(), Arc::clone(&shared.events)).with_sink(sink));
    let limits = request
        .limits
        .clone()
        .unwrap_or_else(|| shared.limits.clone());
    let admitted = async {
        if request.thread_id.is_none() {
            return Err(RunError::Host(
                "a run on another engine must name its thread".into(),
            ));
        }
        crate::run::thread::check_thread_id(&thread_id)?;
        let args_text = check_input(
            &request.script,
            &request.args,
            &limits,
            shared.prices.is_some(),
        )?;
        gate(shared, &request, &thread_id).await?;
        // The deadline counts from the recorded start, so a retried attempt gets what is left.
        let elapsed = Duration::from_nanos(now_unix_nanos().saturating_sub(start_unix_nanos));
        match limits.timeout.checked_sub(elapsed) {
            Some(left) if !left.is_zero() => Ok((args_text, left)),
            _ => Err(RunError::Timeout {
                after: limits.timeout,
            }),
        }
    }
    .await;
    let (args_text, left) = match admitted {
        Ok(admitted) => admitted,
        Err(error) => return rejected(&events, summary, started, error),
    };
    let mut attempt_limits = limits.clone();
    attempt_limits.timeout = left;
    let setup = RunSetup {
        thread_id: thread_id.clone(),
        events: Arc::clone(&events),
        limits: attempt_limits.clone(),
        guard: request.guard,
        start_unix_nanos,
        checkpoints: Checkpoints {
            external: Some(source),
            ..Checkpoints::default()
        },
    };
    let _ended = RunEnded {
        backend: shared.backend.as_ref(),
        thread_id: &thread_id,
    };
    let _busy = Busy::enter();
    let result = match start(shared, setup) {
        Err(error) => Err(error),
        Ok((mut store, instance)) => {
            let result = call_run(
                shared,
                &mut store,
                instance,
                &request.script,
                &args_text,
                &attempt_limits,
            )
            .await;
            fill_summary(&mut summary, &mut store, &limits);
            drop(store);
            result
        }
    };
    // The deadline is the thread's, not what was left of it for this attempt.
    let result = result.map_err(|error| match error {
        RunError::Timeout { .. } => RunError::Timeout {
            after: limits.timeout,
        },
        other => other,
    });
    summary.duration_ms = millis(started.elapsed());
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
    check_input(script, &Value::Null, &limits, shared.prices.is_some())?;
    let thread_id = crate::run::thread::new_thread_id();
    let setup = RunSetup {
        events: Arc::new(RunEvents::new(
            thread_id.clone(),
            Arc::clone(&shared.events),
        )),
        thread_id,
        limits: limits.clone(),
        guard: true,
        start_unix_nanos: now_unix_nanos(),
        checkpoints: Checkpoints::default(),
    };
    let mut store = fresh_store(shared, setup, false)?;
    let outcome = within(limits.timeout, async {
        let instance = instantiate(shared, &mut store, None).await?;
        instance.call_check(&mut store, script, true).await
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
    let outcome = within(limits.timeout, async {
        let instance = match instance {
            Some(instance) => instance,
            None => instantiate(shared, store, None).await?,
        };
        run_export(store, &instance, script, args).await
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

/// The guest's `run` export for `script` in `instance`, with the run's guard and recursion
/// limit.
async fn run_export(
    store: &mut Store<RunCtx>,
    instance: &Workflow,
    script: &str,
    args: &str,
) -> wasmtime::Result<Result<String, crate::bindings::ScriptError>> {
    let guard = store.data().guard;
    let recursion_limit = store.data().limits.recursion_limit;
    instance
        .call_run(&mut *store, script, args, guard, recursion_limit)
        .await
}

/// What a call of one of the guest's exports ended with, as a run error when it did not
/// return: the deadline, a trap (classified), or the script's own error.
fn guest_result<T>(
    outcome: Option<wasmtime::Result<Result<T, crate::bindings::ScriptError>>>,
    store: &Store<RunCtx>,
    limits: &Limits,
) -> Result<T, RunError> {
    match outcome {
        None => Err(RunError::Timeout {
            after: limits.timeout,
        }),
        Some(Err(trap)) => Err(error::classify(trap, &store.data().trap_context())),
        Some(Ok(Err(script_error))) => Err(error::from_guest(
            script_error,
            limits.memory_bytes,
            store.data().memory.denied,
        )),
        Some(Ok(Ok(value))) => Ok(value),
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
    summary.leaves = ctx.calls.agents_started();
    summary.cost_usd = ctx.calls.dollars().1;
    summary.tools_called = ctx.calls.tools_called();
    summary.input_tokens = spent.input_tokens;
    summary.output_tokens = spent.output_tokens;
    summary.tokens_spent = spent.total();
    summary.estimated_tokens = spent.estimated_tokens;
    summary.fuel_used = limits.fuel.saturating_sub(remaining);
}

/// The outcome of a run rejected before its guest started, its end published all the same.
fn rejected(
    events: &RunEvents,
    mut summary: Summary,
    started: Instant,
    error: RunError,
) -> RunOutcome {
    let result = Err(error);
    summary.duration_ms = millis(started.elapsed());
    publish_end(events, &summary, &result);
    RunOutcome {
        result,
        summary,
        recorded: false,
    }
}

/// Publishes the end of a run, its last event.
fn publish_end(events: &RunEvents, summary: &Summary, result: &Result<Value, RunError>) {
    events.end(finished(summary, result));
}

/// The `run_finished` event of a run that ended with `result`.
fn finished(summary: &Summary, result: &Result<Value, RunError>) -> EventKind {
    EventKind::RunFinished {
        ok: result.is_ok(),
        summary: Box::new(summary.clone()),
        error: result.as_ref().err().map(ErrorInfo::from),
    }
}

/// The store for a run of `setup`, with the instance it runs in when the warm pool had one
/// ready (else the run instantiates the guest within its deadline, as [`call_run`] does).
fn start(shared: &Shared, setup: RunSetup) -> Result<(Store<RunCtx>, Option<Workflow>), RunError> {
    let ctx = run_ctx(shared, setup, false);
    match shared.pool.as_ref().and_then(|pool| pool.take(&ctx.limits)) {
        Some(warm) => warm
            .start(ctx)
            .map(|(store, instance)| (store, Some(instance))),
        None => Ok((new_store(shared.guest.engine(), ctx)?, None)),
    }
}

/// Instantiates the guest in `store`, its linear memory without the kernel's fault-around
/// (see `fault_around`) and pre-faulted with what most recent fresh runs did to it (see
/// `fresh`), or left as it is for its profile to learn from this run. The first instance of a
/// runtime whose cache directory keeps no pages waits for [`keep_a_trivial_run`] first. The
/// memory is found as the warm pool finds it (see `prefault`) but without its lock, which a
/// future that may move between threads cannot hold: a memory that took over the range of a
/// store dropped meanwhile looks old, and keeps fault-around and its page faults, nothing
/// else. Then the guest warms up, as a pooled instance did before its run (see `pool`),
/// drawing from the run's own random streams what a pooled run's skip.
///
/// A run on an instance left as it is teaches `keeper` when there is one (the kept run's),
/// else the profile.
async fn instantiate(
    shared: &Shared,
    store: &mut Store<RunCtx>,
    keeper: Option<Arc<fresh::Keeper>>,
) -> wasmtime::Result<Workflow> {
    let fresh = shared.guest.fresh();
    let (learner, prefault): (Arc<dyn Learner>, bool) = match keeper {
        // The kept run's pages are its own, never pre-faulted.
        Some(keeper) => (keeper, false),
        None => {
            if fresh.take_kept_run() {
                // Boxed: the kept run instantiates through here too.
                Box::pin(keep_a_trivial_run(shared)).await;
            }
            (Arc::clone(fresh) as Arc<dyn Learner>, true)
        }
    };
    let before = Mappings::now();
    let instance = shared.guest.pre().instantiate_async(&mut *store).await?;
    let memories = Mappings::now().linear_memories_since(&before, store.data().memory.total);
    fault_around::turn_off(&memories);
    if let [memory] = memories.as_slice()
        && (!prefault || fresh.prefault(memory).is_none())
    {
        store.data_mut().touched = Some(TouchedPages { memories, learner });
    }
    instance.call_warm_up(&mut *store).await?;
    Ok(instance)
}

/// Runs [`fresh::TRIVIAL`] on a fresh instance, under the default limits, publishing and
/// journaling nothing, for its pages to be kept in the cache directory for later processes
/// (see `fresh`). It is an optimisation: a run that fails, or whose memory cannot be told
/// apart, keeps nothing, and the next fresh instance may try again.
async fn keep_a_trivial_run(shared: &Shared) {
    let limits = Limits::default();
    let setup = unpublished(crate::run::thread::new_thread_id(), &limits, true);
    let Ok(mut store) = fresh_store(shared, setup, true) else {
        return;
    };
    let keeper = Arc::new(fresh::Keeper(Arc::clone(shared.guest.fresh())));
    let _ = within(limits.timeout, async {
        let instance = instantiate(shared, &mut store, Some(keeper)).await?;
        run_export(&mut store, &instance, fresh::TRIVIAL, "{}").await
    })
    .await;
    crate::instance::retire::retire(store);
}

/// The setup of a run on `thread_id` under `limits` whose events go nowhere: a plan's, the kept
/// run's.
fn unpublished(thread_id: String, limits: &Limits, guard: bool) -> RunSetup {
    RunSetup {
        events: Arc::new(RunEvents::new(
            thread_id.clone(),
            Arc::new(crate::events::EventHub::new(1)),
        )),
        thread_id,
        limits: limits.clone(),
        guard,
        start_unix_nanos: now_unix_nanos(),
        checkpoints: Checkpoints::default(),
    }
}

/// A fresh store for a run of `setup`; a `projection` answers its calls with placeholders.
fn fresh_store(
    shared: &Shared,
    setup: RunSetup,
    projection: bool,
) -> Result<Store<RunCtx>, RunError> {
    new_store(shared.guest.engine(), run_ctx(shared, setup, projection))
}

/// The state of a run of `setup` on the runtime's backend, tools, journal and prices; a
/// `projection` answers its calls with placeholders and journals nothing, not even its name.
fn run_ctx(shared: &Shared, setup: RunSetup, projection: bool) -> RunCtx {
    let pricing = Pricing {
        prices: shared.prices.clone(),
        fanout: shared.fanout.clone(),
        projection,
    };
    let store = if projection {
        None
    } else {
        shared.store.clone()
    };
    RunCtx::new(
        Arc::clone(&shared.backend),
        shared.tools.clone(),
        store,
        setup,
        pricing,
    )
}

/// Refuses a new run whose plan passes the gate of its limits, before anything is journaled
/// or any leaf starts. A thread the journal already holds passed the gate when it started.
async fn gate(shared: &Shared, request: &RunRequest, thread_id: &str) -> Result<(), RunError> {
    let limits = request.limits.as_ref().unwrap_or(&shared.limits);
    if !limits.gated() {
        return Ok(());
    }
    let (gate_leaves, gate_usd) = (limits.gate_leaves, limits.gate_usd);
    if let Some(store) = &shared.store
        && store
            .load(thread_id)
            .await
            .map_err(journal_error)?
            .is_some()
    {
        return Ok(());
    }
    // The same thread id seeds the same randomness, so the plan measures the run it admits.
    // What the gate checks is the ceiling, which needs no history: the journal's replies are
    // read only for a refusal's plan, which a person reads.
    let plan = plan(shared, request, Some(thread_id), false).await?;
    let mut reasons = Vec::new();
    if let Some(gate) = gate_leaves
        && plan.leaves > gate
    {
        reasons.push(format!(
            "the plan starts {} leaves and the gate admits at most {gate}",
            plan.leaves
        ));
    }
    if let Some(gate) = gate_usd {
        match plan.usd {
            Some(usd) if usd > gate => reasons.push(format!(
                "the plan may cost up to ${usd:.4} (expected ~${:.4}) and the gate admits at \
                 most ${gate}",
                plan.expected_usd.unwrap_or(usd)
            )),
            Some(_) => {}
            None => reasons.push(
                "the plan's cost is unknown (a model has no price) and the gate admits at most \
                 a known cost"
                    .into(),
            ),
        }
    }
    if reasons.is_empty() {
        return Ok(());
    }
    let plan = self::plan(shared, request, Some(thread_id), true).await?;
    Err(RunError::GateRefused(Box::new(GateRefusal {
        reason: reasons.join("; "),
        plan,
    })))
}

/// Projects a run of `request` into its plan: the real guest, under the request's limits (or
/// the runtime's), with every call but a read-only tool's answered by a placeholder; nothing is
/// journaled or published, and nothing that changes anything is called. `thread_id` seeds the
/// guest's randomness, as it would the run's. With `learn`, the expected output comes from the
/// journal's replies; without, every leaf expects the default.
pub(crate) async fn plan(
    shared: &Shared,
    request: &RunRequest,
    thread_id: Option<&str>,
    learn: bool,
) -> Result<plan::Plan, RunError> {
    let limits = request
        .limits
        .clone()
        .unwrap_or_else(|| shared.limits.clone());
    let args_text = check_input(
        &request.script,
        &request.args,
        &limits,
        shared.prices.is_some(),
    )?;
    let thread_id = thread_id.map_or_else(crate::run::thread::new_thread_id, str::to_owned);
    // A plan is not a run: its events go nowhere.
    let start = unpublished(thread_id, &limits, request.guard);
    let _busy = Busy::enter();
    let mut store = fresh_store(shared, start, true)?;
    let mut notes = None;
    let outcome = within(limits.timeout, async {
        let instance = instantiate(shared, &mut store, None).await?;
        let read_only: Vec<String> = shared
            .tools
            .read_only_names()
            .into_iter()
            .map(str::to_owned)
            .collect();
        match instance
            .call_plan_notes(&mut store, &request.script, &read_only)
            .await?
        {
            Ok(text) => notes = Some(text),
            Err(rejected) => return Ok(Err(rejected)),
        }
        run_export(&mut store, &instance, &request.script, &args_text).await
    })
    .await;
    let ended = match guest_result(outcome, &store, &limits) {
        Ok(_) => None,
        // A script that did not pass its checks, or machinery that failed, has no plan.
        Err(error)
            if notes.is_none()
                || error.class() == crate::RunErrorClass::Rejected
                || !error.kind().ends_thread() =>
        {
            return Err(error);
        }
        // One that failed on the placeholders' path has one, which says so.
        Err(error) => Some(ErrorInfo::from(&error)),
    };
    let reply_dependent = serde_json::from_str(notes.as_deref().unwrap_or("[]"))
        .map_err(|e| RunError::Guest(format!("plan-notes returned invalid JSON: {e}")))?;
    let fuel_used = limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0));
    // A journal that cannot be read leaves the plan its defaults, and says so.
    let journal = shared.store.as_deref().filter(|_| learn);
    let (history, history_error) = match plan::History::read(journal, shared.backend.as_ref()).await
    {
        Ok(history) => (history, None),
        Err(error) => (plan::History::default(), Some(error.to_string())),
    };
    let ctx = store.data_mut();
    let projection = ctx.calls.take_projection().unwrap_or_default();
    let context = plan::Context {
        name: ctx.record.name.take(),
        limits: &limits,
        prices: shared.prices.as_deref(),
        fanout: shared.fanout.as_ref(),
        history: &history,
        history_error,
        reply_dependent,
        ended,
        fuel_used,
        declared_phases: ctx.record.declared_phases.take(),
        entered_phases: std::mem::take(&mut ctx.record.phases),
    };
    let plan = plan::Plan::assemble(projection, context);
    // As a run's: unmapping the guest's memory is not the caller's wait.
    crate::instance::retire::retire(store);
    Ok(plan)
}
