//! The [`Runtime`]: the [`Guest`] (one wasmtime `Engine`, the guest compiled once) and what
//! every run shares.
//!
//! Compiling the ~20 MB guest takes seconds, so it is precompiled once per engine
//! configuration and cached on disk (see `cache`); building a runtime after that takes
//! milliseconds. Each run then instantiates the pre-linked component into a fresh `Store`.

mod binary;
pub(crate) mod cache;
#[cfg(test)]
mod calls;
mod guest;
mod immortal;
mod link;
mod reach;
mod trim;

use std::path::PathBuf;
use std::sync::Arc;

use flowbox_backends::{LeafBackend, LeafCatalog, ToolSet};
use flowbox_store::CheckpointStore;
use serde_json::Value;

use self::guest::CacheDir;
use crate::error::JournalError;
use crate::events::{EventHub, EventStream};
use crate::instance::pool::{WarmPool, WarmPoolStats};
use crate::plan::{FanoutProfile, Plan, PriceTable};
use crate::run::shared::Shared;
use crate::run::{self};
use crate::{Guest, RunRequest};
use crate::{Limits, RunError, RunOutcome};

/// Events a live subscriber may fall behind by before it sees a gap, and a lossless one may
/// hold before the scripts wait for it.
const DEFAULT_EVENT_CAPACITY: usize = 4096;

/// The guest component, embedded at build time (see `build.rs`); empty in a build made before
/// `make guest`.
static GUEST_COMPONENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/flowbox_guest.wasm"));
/// Its SHA-256, computed at build time.
const GUEST_SHA256: &str = env!("FLOWBOX_GUEST_SHA256");

/// Runs workflow scripts. Cheap to clone; clones share the [`Guest`], the backend and the
/// event stream. Build one per process with [`Runtime::builder`] (or several on one
/// [`Guest`]).
#[derive(Debug, Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

/// Why a runtime could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// wasmtime could not create the engine, compile or link the guest; the source is
    /// wasmtime's error.
    #[error("cannot prepare the flowbox guest")]
    Wasmtime(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// No leaf backend was configured: leaves would have nobody to answer them.
    #[error(
        "no leaf backend: call RuntimeBuilder::backend with the backend that answers leaves \
         (flowbox::backends::AgentBackend for real agents, FakeBackend for offline placeholder \
         replies)"
    )]
    NoBackend,
    /// This build of the library embeds no guest component: it was compiled before the
    /// component was built.
    #[error(
        "this build of flowbox has no guest component: build it with `make guest` and rebuild \
         (or set FLOWBOX_GUEST_COMPONENT at build time)"
    )]
    GuestMissing,
    /// The warm pool's refill thread could not be started.
    #[error("cannot start the warm pool")]
    WarmPool(#[source] std::io::Error),
    /// The runtime's limits are outside their ranges ([`Limits::check`]).
    #[error("invalid limits: {0}")]
    Limits(#[from] crate::InvalidLimit),
    /// Traces could not be set up ([`RuntimeBuilder::otlp`]).
    #[cfg(feature = "otlp")]
    #[error(transparent)]
    Otlp(#[from] crate::trace::OtlpError),
    /// The runtime's limits set a dollar budget or gate (the field named), and there is no
    /// price table to price leaves with.
    #[error(
        "the limit {0} is in dollars and the runtime has no prices: give it a price table \
         with RuntimeBuilder::prices"
    )]
    NoPrices(&'static str),
}

/// Configures a [`Runtime`].
#[derive(Debug)]
pub struct RuntimeBuilder {
    backend: Option<Arc<dyn LeafBackend>>,
    tools: ToolSet,
    store: Option<Arc<dyn CheckpointStore>>,
    limits: Limits,
    guest: GuestSource,
    event_capacity: usize,
    prices: Option<PriceTable>,
    fanout: Option<FanoutProfile>,
    warm_pool: usize,
    remote: Option<Arc<dyn crate::external::Remote>>,
    #[cfg(feature = "otlp")]
    otlp: Option<crate::trace::Otlp>,
}

/// Where a runtime gets its guest.
#[derive(Debug)]
enum GuestSource {
    Load(CacheDir),
    Given(Guest),
}

impl RuntimeBuilder {
    /// The backend that answers leaf calls. Required: there is no default, so a runtime never
    /// answers leaves with placeholders by accident
    /// ([`FakeBackend`](crate::backends::FakeBackend) does that on purpose).
    pub fn backend(self, backend: impl LeafBackend + 'static) -> Self {
        self.shared_backend(Arc::new(backend))
    }

    /// A backend shared with other parts of the embedding application.
    pub fn shared_backend(mut self, backend: Arc<dyn LeafBackend>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// The host tools scripts may call directly with `call_tool(name, **arguments)`: a
    /// separate allowlist from the tools leaves may use. Arguments are checked against each
    /// tool's schema before it runs; calls are journaled like leaves. A plan calls only the
    /// [read-only](crate::tools::Tool::read_only) ones, and answers the others with a
    /// placeholder of their [result schema](crate::tools::Tool::result_schema). None by
    /// default.
    pub fn code_tools(mut self, tools: ToolSet) -> Self {
        self.tools = tools;
        self
    }

    /// Journals every run in `store`, which makes runs durable: an interrupted thread resumes
    /// from its journal ([`Runtime::resume`]) without calling a finished leaf again. Without a
    /// store (the default) runs are not journaled.
    pub fn store(self, store: impl CheckpointStore + 'static) -> Self {
        self.shared_store(Arc::new(store))
    }

    /// A journal shared with other parts of the embedding application.
    pub fn shared_store(mut self, store: Arc<dyn CheckpointStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The limits every run gets unless its [`RunRequest`] says otherwise.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The prices leaves are costed at: plans show dollars with them, and dollar budgets and
    /// gates ([`Limits::budget_usd`], [`Limits::gate_usd`]) need them. None by default.
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = Some(prices);
        self
    }

    /// A default profile for leaves in wide fan-outs (see [`FanoutProfile`]). None by default:
    /// every leaf runs on the backend's default model unless it names another.
    pub fn fanout_profile(mut self, fanout: FanoutProfile) -> Self {
        self.fanout = Some(fanout);
        self
    }

    /// Where the precompiled guest is cached. The default is `$FLOWBOX_CACHE_DIR`, else the
    /// user's cache directory (`$XDG_CACHE_HOME/flowbox` or `~/.cache/flowbox`).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.guest = GuestSource::Load(CacheDir::At(dir.into()));
        self
    }

    /// Compiles the guest in memory every time, without a disk cache.
    pub fn no_cache(mut self) -> Self {
        self.guest = GuestSource::Load(CacheDir::Disabled);
        self
    }

    /// Runs on this guest, loaded already (see [`Guest`]), instead of loading one as the
    /// runtime is built; [`cache_dir`](Self::cache_dir) and [`no_cache`](Self::no_cache) then
    /// do not apply, since the guest was loaded from where its own loader said.
    pub fn guest(mut self, guest: Guest) -> Self {
        self.guest = GuestSource::Given(guest);
        self
    }

    /// How many events a [live](Runtime::subscribe) subscriber may fall behind by before it
    /// sees a gap, and how many a [lossless](Runtime::subscribe_lossless) one holds before the
    /// scripts wait for it (default 4096, at least 1).
    pub fn event_capacity(mut self, capacity: usize) -> Self {
        self.event_capacity = capacity.max(1);
        self
    }

    /// Keeps up to `instances` guests instantiated and warmed up ahead of demand (default 0: no
    /// pool), so a run skips instantiation and the guest's own set-up, and, on Linux, with the
    /// pages of their linear memory that runs touch pre-faulted (faulted in ahead, contents
    /// unchanged), so a run skips the page faults of its first writes to the guest's memory
    /// image. Each pooled guest serves exactly one run and is then dropped, so runs stay as
    /// isolated and as deterministic as with a fresh instance each (same result, same fuel).
    /// One background thread refills the pool, one instance at a time, between runs, and
    /// waits while it is full; each ready instance holds the guest's linear memory (~12 MiB, of which what is
    /// pre-faulted is resident; see [`Runtime::warm_pool`] for the figures). A run finding the
    /// pool empty instantiates a fresh guest itself, as it does without a pool.
    pub fn warm_pool(mut self, instances: usize) -> Self {
        self.warm_pool = instances;
        self
    }

    /// Sends [`Runtime::run_request`]s (and [`Runtime::run`]s, and so the orchestrator's
    /// `run_workflow`) to another durable-execution engine instead of running them here, such
    /// as `flowbox_restate::RestateEngine`. The runtime still checks scripts and plans runs
    /// itself. Off by default.
    pub fn remote(mut self, remote: Arc<dyn crate::external::Remote>) -> Self {
        self.remote = Some(remote);
        self
    }

    /// Exports a trace of every run to an OpenTelemetry collector over OTLP/HTTP (see
    /// [`crate::trace`]; feature `otlp`). Off by default; `None` leaves it off.
    #[cfg(feature = "otlp")]
    pub fn otlp(mut self, otlp: Option<crate::trace::Otlp>) -> Self {
        self.otlp = otlp;
        self
    }

    /// Builds the runtime, loading the guest unless it was [given one](Self::guest): from the
    /// cache in milliseconds, or compiled in a few seconds the first time (then cached). A
    /// runtime built while another one of this process, on the same cache directory, still
    /// holds its guest takes that one (see [`Guest`]) rather than load it again.
    pub fn build(self) -> Result<Runtime, SetupError> {
        let backend = self.backend.ok_or(SetupError::NoBackend)?;
        self.limits.check()?;
        if let Some(field) = self.limits.needs_prices()
            && self.prices.is_none()
        {
            return Err(SetupError::NoPrices(field));
        }
        let guest = match self.guest {
            GuestSource::Load(cache_dir) => Guest::shared_from(cache_dir)?,
            GuestSource::Given(guest) => guest,
        };
        #[cfg(feature = "otlp")]
        let tracer = match self.otlp {
            Some(otlp) => Some(Arc::new(crate::trace::Tracer::start(otlp)?)),
            None => None,
        };
        #[cfg(feature = "otlp")]
        let observer = tracer
            .clone()
            .map(|tracer| tracer as Arc<dyn crate::events::Observer>);
        #[cfg(not(feature = "otlp"))]
        let observer = None;
        let pool = match self.warm_pool {
            0 => None,
            instances => Some(
                WarmPool::start(
                    instances,
                    guest.engine().clone(),
                    guest.pre().clone(),
                    Arc::clone(&backend),
                )
                .map_err(SetupError::WarmPool)?,
            ),
        };
        Ok(Runtime {
            shared: Arc::new(Shared {
                guest,
                backend,
                tools: self.tools,
                limits: self.limits,
                events: Arc::new(EventHub::new(self.event_capacity).observed(observer)),
                #[cfg(feature = "otlp")]
                tracer,
                store: self.store,
                prices: self.prices.map(Arc::new),
                fanout: self.fanout,
                pool,
                remote: self.remote,
            }),
        })
    }
}

impl Runtime {
    /// A builder with [`Limits::default`], the disk cache, no journal and no code-callable
    /// tools; it needs a [`backend`](RuntimeBuilder::backend) before it builds.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            backend: None,
            tools: ToolSet::new(),
            store: None,
            limits: Limits::default(),
            guest: GuestSource::Load(CacheDir::Default),
            event_capacity: DEFAULT_EVENT_CAPACITY,
            prices: None,
            fanout: None,
            warm_pool: 0,
            remote: None,
            #[cfg(feature = "otlp")]
            otlp: None,
        }
    }

    /// Runs `script` with `args` under a new thread id and the runtime's limits.
    pub async fn run(&self, script: &str, args: Value) -> RunOutcome {
        self.run_request(RunRequest::new(script).args(args)).await
    }

    /// Runs a script with the options of `request`.
    pub async fn run_request(&self, request: RunRequest) -> RunOutcome {
        if let Some(remote) = &self.shared.remote {
            return remote.run(request).await;
        }
        run::execute(&self.shared, request).await
    }

    /// Runs a request whose calls another durable-execution engine carries out, its journal
    /// the checkpoint log (see [`crate::external`]): limits, caps, budgets, events and the
    /// summary as for [`Self::run_request`]; the runtime's own journal, if any, is not used.
    pub async fn run_external(&self, run: crate::external::ExternalRun) -> RunOutcome {
        run::execute_external(&self.shared, run).await
    }

    /// Plans a run of `request` without making it: the script runs in the real guest, under
    /// the request's limits and the runtime's fan-out profile, against instant placeholder
    /// leaves; no backend is called, and no tool but the read-only ones, which run for real
    /// (see [`crate::plan`]). The plan counts its
    /// leaves, fan-outs, waves, tokens and dollars (with [`RuntimeBuilder::prices`]), per
    /// phase and per profile. A script that does not pass its checks is an error, as for a
    /// run; one that fails on the placeholders' path still has a plan, which says where.
    pub async fn plan(&self, request: RunRequest) -> Result<Plan, RunError> {
        run::plan(&self.shared, &request, request.thread_id.as_deref(), true).await
    }

    /// Resumes a journaled thread: a finished one returns its recorded outcome; an interrupted
    /// one replays its journal — same steps, same fuel, no backend calls — and continues live.
    /// The script, args, guard and (unless `limits` is given) the limits come from the journal.
    pub async fn resume(&self, thread_id: &str, limits: Option<Limits>) -> RunOutcome {
        let header = match &self.shared.store {
            None => Err(RunError::Journal(JournalError::NotConfigured(
                "resuming a thread",
            ))),
            Some(store) => match store.load(thread_id).await {
                Err(error) => Err(crate::journal::journal_error(error)),
                Ok(None) => Err(RunError::UnknownThread(thread_id.to_owned())),
                Ok(Some(run)) => Ok(run.header),
            },
        };
        let header = match header {
            Ok(header) => header,
            Err(error) => return crate::run::admission::rejected(thread_id, error),
        };
        let mut request = RunRequest::new(header.script)
            .args(header.args)
            .thread_id(thread_id);
        // Without limits of its own, the run takes the thread's recorded ones (and its guard).
        if let Some(limits) = limits {
            request = request.limits(limits);
        }
        self.run_request(request).await
    }

    /// The journal, when the runtime keeps one.
    pub fn store(&self) -> Option<&Arc<dyn CheckpointStore>> {
        self.shared.store.as_ref()
    }

    /// Parses and checks `script` (syntax, `meta`, the guard) without running it, and returns
    /// its `meta` (`None` when it has none).
    pub async fn check(&self, script: &str) -> Result<Option<Value>, RunError> {
        run::check(&self.shared, script).await
    }

    /// Subscribes to the events of every run started from now on, live: publishing never
    /// waits for this stream, so a subscriber that falls behind by more than the
    /// [event capacity](RuntimeBuilder::event_capacity) loses the oldest events and gets one
    /// [`EventKind::Gap`](crate::EventKind::Gap) instead. For a display.
    pub fn subscribe(&self) -> EventStream {
        self.shared.events.subscribe()
    }

    /// Subscribes to every event of every run published from now on, without loss: for a
    /// record (a file, a pipe, a database). The stream's queue holds up to the
    /// [event capacity](RuntimeBuilder::event_capacity); when it is full, the scripts' own
    /// writers — `log`, `phase`, and `await`ing a call — wait until the reader has drained it to
    /// half, so a slow reader slows the scripts down (a wait that counts against each run's
    /// `timeout`). Leaves, and the start and end of each run, never wait: their events go past
    /// the capacity, a few per leaf or tool call (started, finished, the tools a leaf calls in
    /// its own loop), so memory stays bounded by the capacity plus what the runs' `max_agents`
    /// and `max_tool_calls` allow. Read the stream steadily from another task than the one
    /// awaiting the run (a run awaited before its stream is read stops at the first full
    /// queue until its timeout), or drop it: dropping it releases every waiting writer.
    pub fn subscribe_lossless(&self) -> EventStream {
        self.shared.events.subscribe_lossless()
    }

    /// What the warm pool holds now (`None` without one): its capacity, the instances ready,
    /// the linear memory they hold and how much of it is pre-faulted, and how many runs found
    /// an instance ready.
    pub fn warm_pool(&self) -> Option<WarmPoolStats> {
        self.shared.pool.as_ref().map(WarmPool::stats)
    }

    /// What the runtime's traces have come to so far (`None` without
    /// [`RuntimeBuilder::otlp`]): the spans exported and dropped.
    #[cfg(feature = "otlp")]
    pub fn traces(&self) -> Option<crate::trace::TraceStats> {
        self.shared.tracer.as_ref().map(|tracer| tracer.stats())
    }

    /// Exports the spans of the runs that have ended and waits until the collector has taken
    /// them or the export timed out (at once without traces): before a short-lived process
    /// exits.
    #[cfg(feature = "otlp")]
    pub fn flush_traces(&self) {
        if let Some(tracer) = &self.shared.tracer {
            tracer.flush();
        }
    }

    /// What a fresh instance of the guest costs wasmtime itself, the floor every start-up
    /// figure is measured against (`make bench`): a new store, the pre-linked guest
    /// instantiated into it and its trivial `warm-up` export called (which is also where the
    /// guest's runtime sets itself up), timed on this thread; the store is dropped after.
    pub async fn instance_floor(&self) -> Result<std::time::Duration, RunError> {
        let shared = &self.shared;
        let mut store =
            crate::instance::pool::placeholder_store(shared.guest.engine(), &shared.backend)
                .ok_or_else(|| RunError::Host("cannot make a store".into()))?;
        let start = std::time::Instant::now();
        let instance = shared
            .guest
            .pre()
            .instantiate_async(&mut store)
            .await
            .map_err(|e| RunError::Host(format!("cannot instantiate the guest: {e}")))?;
        instance
            .call_warm_up(&mut store)
            .await
            .map_err(|e| RunError::Host(format!("the guest's warm-up failed: {e}")))?;
        let floor = start.elapsed();
        crate::instance::retire::retire(store);
        Ok(floor)
    }

    /// SHA-256 (hex) of the guest component this build embeds: with the crate's version, what
    /// names a deployment of the same code (a distributed engine keeps in-flight runs on it).
    pub fn guest_sha256(&self) -> &'static str {
        GUEST_SHA256
    }

    /// The limits runs get by default.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// What the backend offers scripts' `agent(...)` calls, for the guidance.
    pub(crate) fn leaf_catalog(&self) -> LeafCatalog {
        self.shared.backend.catalog()
    }

    /// The tools scripts may call with `call_tool`.
    pub(crate) fn code_tools(&self) -> &ToolSet {
        &self.shared.tools
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_without_a_backend_is_refused_with_what_to_add() {
        let error = Runtime::builder().no_cache().build().unwrap_err();
        assert!(matches!(error, SetupError::NoBackend), "{error:?}");
        assert!(
            error.to_string().contains("RuntimeBuilder::backend"),
            "{error}"
        );
    }

    fn test_cache() -> PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/flowbox-cache")
    }

    fn test_runtime() -> Runtime {
        Runtime::builder()
            .backend(flowbox_backends::FakeBackend::new())
            .cache_dir(test_cache())
            .build()
            .expect("the guest loads")
    }

    /// A guest loaded from the cache has its file marked used, so that no other flowbox
    /// build's new guest prunes it while it is in use.
    #[test]
    fn loading_a_guest_marks_it_used() {
        let engine = test_runtime().shared.guest.engine().clone();
        let name = cache::artifact_name(&engine, GUEST_SHA256);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(&name);
        std::fs::copy(test_cache().join(&name), &path).unwrap();
        let month = std::time::Duration::from_secs(30 * 24 * 60 * 60);
        let long_ago = std::time::SystemTime::now() - month;
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_modified(long_ago).unwrap();
        drop(file);
        Guest::load_cached_in(dir.path()).expect("the guest loads");
        let marked = std::fs::metadata(&path).unwrap().modified().unwrap();
        let since = marked.duration_since(long_ago).unwrap();
        assert!(
            since >= month - std::time::Duration::from_secs(60),
            "{since:?}"
        );
    }

    /// Runtimes built on one cache directory share the guest loaded for the first while one
    /// of them holds it, and no longer: the next one loads it anew.
    #[tokio::test]
    async fn runtimes_built_on_one_cache_share_its_guest_while_one_holds_it() {
        // A directory of this test's own, so no other test's runtimes share its guest.
        let own = Guest::load_cached_in(test_cache()).expect("the guest loads");
        let name = super::cache::artifact_name(own.engine(), GUEST_SHA256);
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(test_cache().join(&name), dir.path().join(&name)).unwrap();
        let build = || {
            Runtime::builder()
                .backend(flowbox_backends::FakeBackend::new())
                .cache_dir(dir.path())
                .build()
                .expect("the guest loads")
        };
        let engine = |runtime: &Runtime| runtime.shared.guest.engine() as *const _;
        let (first, second) = (build(), build());
        assert_eq!(
            engine(&first),
            engine(&second),
            "the second runtime loaded its own"
        );
        assert_ne!(
            engine(&first),
            own.engine() as *const _,
            "a guest loaded apart is the caller's own"
        );
        let held = first.shared.guest.downgrade();
        drop(first);
        assert!(
            held.upgrade().is_some(),
            "the second runtime still holds it"
        );
        drop(second);
        assert!(
            held.upgrade().is_none(),
            "nothing keeps a guest nobody holds"
        );
        let outcome = build()
            .run_request(crate::RunRequest::new("return 1"))
            .await;
        assert_eq!(outcome.result.unwrap(), serde_json::json!(1));
    }

    /// On Linux, the first fresh run teaches the runtime's profile, and the next is pre-faulted
    /// by it: with the same result and, to the unit, the same fuel.
    #[tokio::test]
    #[cfg(target_os = "linux")]
    async fn a_fresh_run_pre_faulted_by_the_profile_uses_exactly_the_fuel_of_the_first() {
        let mut guest = Guest::load_cached_in(test_cache()).expect("the guest loads");
        guest.forget_pages();
        let runtime = Runtime::builder()
            .backend(flowbox_backends::FakeBackend::new())
            .guest(guest)
            .build()
            .unwrap();
        let script = "import random\nreturn [random.random(), sum(range(1000))]";
        let run = async || {
            runtime
                .run_request(crate::RunRequest::new(script).thread_id("fresh"))
                .await
        };
        let fresh = runtime.shared.guest.fresh();
        // A run whose instantiation another test's overlapped cannot tell its memory apart
        // (see `Mappings::linear_memories_since`), and neither teaches nor is pre-faulted: such
        // runs are run again. The thread that drops stores waits for moments without runs in
        // flight, which the other tests make scarce: up to 5 s.
        let mut first = run().await;
        for attempt in 1..2500 {
            if fresh.runs() > 0 {
                break;
            }
            if attempt % 250 == 0 {
                first = run().await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert_eq!(fresh.runs(), 1, "no run taught the profile");
        let mut second = run().await;
        for _ in 0..20 {
            if fresh.instances() > 0 {
                break;
            }
            second = run().await;
        }
        assert_eq!(fresh.instances(), 1, "no later run was pre-faulted");
        assert_eq!(second.result.unwrap(), first.result.unwrap());
        assert_eq!(second.summary.fuel_used, first.summary.fuel_used);
    }

    /// The first fresh instance of a runtime whose cache directory keeps no pages waits for a
    /// `return 1` run made to keep its pages there, whatever its own script; a runtime built on
    /// that directory later starts from them and pre-faults its fresh runs, which use exactly
    /// the fuel the first runtime's run did.
    #[tokio::test]
    #[cfg(target_os = "linux")]
    async fn a_trivial_runs_pages_are_kept_for_the_next_runtime_on_the_cache() {
        let shared_cache = test_cache();
        let engine = test_runtime().shared.guest.engine().clone();
        let artifact = cache::artifact_name(&engine, GUEST_SHA256);
        let on_dir = |dir: &std::path::Path| {
            std::fs::copy(shared_cache.join(&artifact), dir.join(&artifact)).unwrap();
            Runtime::builder()
                .backend(flowbox_backends::FakeBackend::new())
                .cache_dir(dir)
                .build()
                .expect("the guest loads")
        };
        // The kept pages of a runtime whose first script is `script`.
        let kept_after = async |script: &str| {
            let dir = tempfile::tempdir().unwrap();
            let runtime = on_dir(dir.path());
            assert_eq!(runtime.shared.guest.fresh().runs(), 0);
            // A run whose instantiation another test's overlapped cannot tell its memory
            // apart (see `Mappings::linear_memories_since`) and neither keeps its pages nor
            // is pre-faulted: such runs are made again.
            let pages = cache::pages_path(&engine, GUEST_SHA256, dir.path());
            let mut outcome = runtime.run(script, serde_json::json!({})).await;
            for _ in 0..20 {
                if pages.exists() {
                    break;
                }
                outcome = runtime.run(script, serde_json::json!({})).await;
            }
            let kept = std::fs::read(&pages).expect("the kept run's pages are kept as it ends");
            assert!(kept.starts_with(b"flowbox pages 2 "), "{:?}", &kept[..20]);
            (dir, kept, outcome)
        };
        // A first script that writes far more of the memory than most runs keeps no more.
        let big = "return len([str(i) * 10 for i in range(100000)])";
        let (dir, kept, first) = kept_after(big).await;
        let (_, trivial_kept, _) = kept_after("return 1").await;
        assert!(kept == trivial_kept, "the kept pages are a trivial run's");

        let next = on_dir(dir.path());
        assert_eq!(
            next.shared.guest.fresh().runs(),
            1,
            "it starts from the kept pages"
        );
        let mut prefaulted = next.run(big, serde_json::json!({})).await;
        for _ in 0..20 {
            if next.shared.guest.fresh().instances() > 0 {
                break;
            }
            prefaulted = next.run(big, serde_json::json!({})).await;
        }
        assert_eq!(
            next.shared.guest.fresh().instances(),
            1,
            "a run was pre-faulted"
        );
        assert_eq!(prefaulted.result.unwrap(), first.result.unwrap());
        assert_eq!(prefaulted.summary.fuel_used, first.summary.fuel_used);
    }

    /// Everything the guest can call, by interface: the component's imports are fixed when it
    /// is built, so this is the whole of its reach outside the sandbox.
    #[test]
    fn the_guest_imports_nothing_but_the_host_interface_and_wasi() {
        let runtime = test_runtime();
        let shared = &runtime.shared;
        let types = shared
            .guest
            .pre()
            .instance_pre()
            .component()
            .component_type();
        let imports: Vec<&str> = types
            .imports(shared.guest.engine())
            .map(|(name, _)| name)
            .collect();
        let allowed = [
            "flowbox:workflow/host@0.1.0",
            "wasi:cli/",
            "wasi:clocks/",
            "wasi:filesystem/",
            "wasi:io/",
            "wasi:random/",
            "wasi:sockets/",
        ];
        for import in &imports {
            assert!(
                allowed.iter().any(|prefix| import.starts_with(prefix)),
                "the guest imports {import}, which is not an allowed interface"
            );
        }
        assert!(
            imports.contains(&"flowbox:workflow/host@0.1.0"),
            "{imports:?}"
        );
    }
}
