//! The [`Worker`]: owns the engines, their linkers and the compiled-code cache, loads
//! workflows and creates one store per event.

use crate::cache::CacheOutcome;
use crate::config::{Limits, WorkerConfig};
use crate::engine::{ClockedEngines, EpochClock};
use crate::error::{InvokeError, StartError};
use crate::fair::{FirstPoll, GuestPool, GuestTask};
use crate::function::{Entry, LoadedFunction, LoadedWorkflow};
use crate::kv::KeyValueStore;
use crate::limits::FileBudget;
use crate::memory_budget::GuestMemory;
use crate::metrics::{FunctionCounters, GuestMetrics};
use crate::placement::Placement;
use crate::region::{RegionLimits, RegionScope, Retired};
use crate::runtimes::{Flavor, Runtimes};
use crate::state::{EventContext, GUEST_OUTPUT_BYTES, InstanceState, LineOwner, MemoryLimiter};
use crate::swap::SwapWatch;
use faas_invoke::{Component, Components, LoadError, LogLevel, LogSource, Publisher};
use faas_store::{Quotas, Tenant};
use faas_workflow::{Function, Workflow};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// Extra time, beyond a function's deadline, before the host drops an instance that
/// waits on the host (where the epoch deadline cannot fire).
pub(crate) const HOST_WAIT_GRACE: Duration = Duration::from_millis(100);

/// Runs functions. One per process in embedded mode; cheap to share behind an `Arc`.
pub struct Worker {
    /// Its engines, with or without fuel, resetting slots by written pages or whole.
    runtimes: Arc<Runtimes>,
    kv: Arc<KeyValueStore>,
    publisher: Option<Arc<dyn Publisher>>,
    /// Where guests' log lines and output go (`faas logs`); nowhere but the
    /// platform's own log when unset.
    logs: Option<Arc<dyn faas_invoke::LogSink>>,
    /// What it counts per workflow and function (instance starts, compiles, regions).
    metrics: GuestMetrics,
    /// One permit per instance slot: an event holds one for as long as its store lives.
    instance_slots: Arc<Semaphore>,
    /// Each tenant's share of the instance slots (`max_instances_per_tenant`, or the
    /// tenant's own quota), made on a tenant's first event or quota.
    tenant_slots: std::sync::Mutex<HashMap<Arc<str>, TenantSlots>>,
    /// The tenants given quotas of their own by [`Worker::apply_tenant_quotas`], so
    /// that a tenant that is gone gets the defaults back.
    quota_tenants: std::sync::Mutex<HashSet<String>>,
    /// The components [`Worker::compile_ahead`] compiled (by digest) that no load has
    /// read from the cache since, with when: the load that does counts as the cold
    /// one. Entries past [`COMPILED_AHEAD_KEPT`] (a deploy refused after its compile)
    /// go.
    compiled_ahead: std::sync::Mutex<HashMap<String, std::time::Instant>>,
    /// The threads guest code runs on, shared fairly between tenants.
    guests: GuestPool,
    /// Region memory files open in this worker, against `max_region_files`.
    region_files: Arc<FileBudget>,
    /// Guest page ranges mapped or protected for regions, against
    /// `max_region_mappings`.
    region_mappings: Arc<crate::limits::MappingBudget>,
    /// Guests' name lookups under way (`crate::lookups`).
    lookups: Arc<crate::lookups::Lookups>,
    /// Outbound connections open, by tenant (`outbound::Connections`).
    outbound_connections: Arc<crate::outbound::Connections>,
    /// The guest memory its instances hold, by tenant, against `guest_memory`.
    guest_memory: Arc<GuestMemory>,
    /// Finished producers kept until their consumers placed their regions; torn down
    /// early when an event needs their slots.
    retired: std::sync::Mutex<Vec<std::sync::Weak<Retired>>>,
    config: WorkerConfig,
    clock: EpochClock,
    /// The process's swap watch, while this worker's slots are reset by scanning for
    /// written pages: once a swap area is turned on, no new instance starts.
    swap: Option<Arc<SwapWatch>>,
}

/// One tenant's instance slots on a worker: a semaphore of `limit` permits, resized
/// when the operator changes the tenant's quota.
struct TenantSlots {
    semaphore: Arc<Semaphore>,
    /// How many slots the tenant has.
    limit: usize,
    /// Permits still to take out of the semaphore after the limit was lowered while
    /// they were held: taken as they come back, before the next event's acquire.
    owed: usize,
    /// Its events that hold one of its slots and wait for one of the worker's.
    behind_shared: Arc<BehindShared>,
}

impl TenantSlots {
    fn new(limit: usize) -> Self {
        Self {
            semaphore: Arc::new(Semaphore::new(limit)),
            limit,
            owed: 0,
            behind_shared: Arc::default(),
        }
    }

    /// Makes the semaphore stand for `limit` slots: adds permits, or takes away the
    /// free ones now and the held ones as they are released.
    fn resize(&mut self, limit: usize) {
        if limit >= self.limit {
            let more = limit - self.limit;
            let forgiven = more.min(self.owed);
            self.owed -= forgiven;
            self.semaphore.add_permits(more - forgiven);
        } else {
            self.owed += self.limit - limit;
        }
        self.limit = limit;
        self.collect_owed();
    }

    /// Takes away the owed permits that are free.
    fn collect_owed(&mut self) {
        if self.owed > 0 {
            self.owed -= self.semaphore.forget_permits(self.owed);
        }
    }
}

/// A tenant's events that hold one of its instance slots while they wait for one of the
/// worker's. While they wait, its slots are held up by the worker's shared capacity
/// (other tenants' load), not by its own work: an event refused one of them then is
/// refused for want of shared capacity, which a stream entry is not charged a delivery
/// for, as when it is refused one of the worker's slots itself.
#[derive(Default)]
struct BehindShared {
    /// How many wait now.
    waiting: std::sync::atomic::AtomicUsize,
    /// How many waits have ended, so that one that ended during another event's wait
    /// counts too.
    ended: std::sync::atomic::AtomicU64,
}

impl BehindShared {
    /// Counts a wait for one of the worker's slots until the returned guard is dropped.
    fn wait(self: &Arc<Self>) -> BehindSharedWait {
        self.waiting
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        BehindSharedWait(self.clone())
    }

    /// Where the waits stand, to compare with [`Self::since`] later.
    fn mark(&self) -> u64 {
        self.ended.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether any of the tenant's events waited for the worker's slots since `mark`.
    fn since(&self, mark: u64) -> bool {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed) > 0 || self.mark() != mark
    }
}

/// One event's wait counted in [`BehindShared`].
struct BehindSharedWait(Arc<BehindShared>);

impl Drop for BehindSharedWait {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.0.ended.fetch_add(1, Relaxed);
        self.0.waiting.fetch_sub(1, Relaxed);
    }
}

impl Worker {
    /// Starts a worker: builds the engine (pooling allocator unless turned off) and
    /// starts the epoch clock that enforces deadlines. The fuel-metered engine is
    /// built later, when a function with a fuel limit is first loaded.
    ///
    /// # Errors
    /// If the engine cannot be created (e.g. the pooling allocator cannot reserve its
    /// address space).
    pub fn new(config: WorkerConfig) -> Result<Self, StartError> {
        let swap = SwapWatch::process();
        let clocked = ClockedEngines::default();
        let runtimes = Runtimes::new(&config, &swap, clocked.clone())
            .map_err(|err| StartError(format!("{err:#}")))?;
        let instance_slots = Arc::new(Semaphore::new(config.max_instances as usize));
        let clock = EpochClock::start(
            clocked,
            instance_slots.clone(),
            config.max_instances as usize,
        );
        Ok(Self {
            guests: GuestPool::new(config.guest_turns, clock.preempter())
                .map_err(|err| StartError(format!("starting the guest threads: {err}")))?,
            clock,
            kv: Arc::new(KeyValueStore::memory()),
            publisher: None,
            logs: None,
            metrics: GuestMetrics::default(),
            instance_slots,
            tenant_slots: std::sync::Mutex::default(),
            quota_tenants: std::sync::Mutex::default(),
            compiled_ahead: std::sync::Mutex::default(),
            region_files: crate::limits::file_budget(config.max_region_files),
            region_mappings: Arc::new(crate::limits::mapping_budget(config.max_region_mappings)),
            lookups: crate::lookups::Lookups::new(),
            outbound_connections: crate::outbound::connections(config.max_outbound_connections),
            guest_memory: Arc::new(GuestMemory::new(config.guest_memory)),
            retired: std::sync::Mutex::default(),
            swap: runtimes.first().scans_written_pages.then_some(swap),
            runtimes: Arc::new(runtimes),
            config,
        })
    }

    /// Uses `kv` as the key-value backend instead of a private in-memory store.
    pub fn with_key_value(mut self, kv: Arc<KeyValueStore>) -> Self {
        self.kv = kv;
        self
    }

    /// Sends functions' outbound messages through `publisher`.
    pub fn with_publisher(mut self, publisher: Arc<dyn Publisher>) -> Self {
        self.publisher = Some(publisher);
        self
    }

    /// Runs `future` on the threads this worker's guests run on, and gives its output.
    ///
    /// For connecting the clients that guests' host calls go through (key-value,
    /// messaging): a Redis connection drives its socket from a task spawned where it
    /// connects, so connected from here its replies wake the waiting guest on the
    /// guest threads themselves rather than on a thread of the process's main runtime
    /// that hands each reply over (bench/HISTORY.md, "Sensor pipeline"). A reconnection starts
    /// where the call that found the connection lost runs: mostly a guest on these
    /// threads, but an HTTP function's first poll runs on the thread that received
    /// the request, and a connection it re-makes is driven from the main runtime:
    /// correct, only without the saving.
    ///
    /// # Errors
    /// When `future` panicked.
    pub async fn on_guest_threads<F>(&self, future: F) -> Result<F::Output, tokio::task::JoinError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.guest_threads().spawn(future).await
    }

    /// The runtime of the threads this worker's guests run on (a workflow run's
    /// orchestration runs there too: `run/chain.rs`).
    pub(crate) fn guest_threads(&self) -> &tokio::runtime::Handle {
        self.guests.handle()
    }

    /// Hands guests' log lines and stdout/stderr to `logs` (`faas logs`).
    pub fn with_logs(mut self, logs: Arc<dyn faas_invoke::LogSink>) -> Self {
        self.logs = Some(logs);
        self
    }

    /// Counts into `metrics` (shared with the process's other workers, and registered
    /// where `/metrics` is served) instead of series nobody reads.
    pub fn with_metrics(mut self, metrics: GuestMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// What this worker counts per workflow and function.
    pub fn metrics(&self) -> &GuestMetrics {
        &self.metrics
    }

    /// How many distinct components are loaded and linked right now, over every
    /// engine: functions that run the same bytes on the same engine share one (see
    /// `linked.rs`), and one no function holds any more is not counted.
    pub fn linked_components(&self) -> usize {
        self.runtimes.linked_components()
    }

    /// How many instances exist right now (each holds an instance slot until its store
    /// is dropped). Zero when idle: no instance outlives its event.
    pub fn active_instances(&self) -> usize {
        self.config.max_instances as usize - self.instance_slots.available_permits()
    }

    /// Runs `guest`, the future that drives one instance of `function` for `tenant`,
    /// on the guest threads (its first poll, per `first_poll`, on this one),
    /// polled only while it holds a fair turn on the cores (see [`crate::fair`]). The
    /// event's deadline covers all of it: past the function's timeout (plus
    /// [`HOST_WAIT_GRACE`]) the future is dropped with its store, even if it waits on
    /// the host where no epoch tick can interrupt it, and the task gives
    /// `None`.
    ///
    /// While the function's placement is measured (`placement.rs`), the page faults
    /// the guest takes are counted, unless `mapped_regions` says of its output that
    /// the host mapped region pages into its memory: the faults on those pages tell
    /// nothing about its slot resets.
    pub(crate) fn spawn_guest<F>(
        &self,
        tenant: Arc<str>,
        function: &LoadedFunction,
        first_poll: FirstPoll,
        guest: F,
        mapped_regions: fn(&F::Output) -> bool,
    ) -> GuestTask<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if function.placement.probe.take_move() {
            self.move_to_whole_resets(function);
        }
        let guest =
            crate::placement::count_faults(function.placement.clone(), guest, mapped_regions);
        let gone_at = tokio::time::Instant::now() + function.limits.timeout + HOST_WAIT_GRACE;
        self.guests.spawn(tenant, first_poll, guest, gone_at)
    }

    /// Moves `function` to the engine that resets slots whole, in the background: its
    /// events kept faulting pages in (`placement.rs`).
    fn move_to_whole_resets(&self, function: &LoadedFunction) {
        self.runtimes.move_to_whole_resets(
            function.limits.fuel.is_some(),
            function.placement.clone(),
            function.name.clone(),
            function.digest.clone(),
        );
    }

    /// Where guests' lines and the platform's lines for tenants go, if anywhere.
    pub(crate) fn logs(&self) -> Option<&Arc<dyn faas_invoke::LogSink>> {
        self.logs.as_ref()
    }

    /// Tells the tenant of `owner`, in `faas logs`, why an event failed: `level` is
    /// [`LogLevel::Warn`] for a step's attempt that will be retried.
    pub(crate) fn log_failure(&self, owner: LineOwner<'_>, level: LogLevel, why: String) {
        if let Some(logs) = &self.logs {
            logs.push(owner.line(level, LogSource::Platform, why));
        }
    }

    /// Keeps `store`, a finished producer, until its consumers placed its regions (or
    /// an event needs its slot).
    pub(crate) fn retire(&self, store: Store<InstanceState>) -> Arc<Retired> {
        let retired = Retired::new(store);
        let mut list = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|weak| weak.strong_count() > 0);
        list.push(Arc::downgrade(&retired));
        retired
    }

    /// Returns once a swap area was turned on after this worker started resetting its
    /// instance slots by scanning for the pages an event wrote (never, if it resets
    /// them in full). From then on no instance starts on it ([`InvokeError::SwapTurnedOn`]),
    /// so its process should stop, to be started again with slots reset in full.
    pub async fn until_swap_turned_on(&self) {
        match &self.swap {
            Some(swap) => swap.until_turned_on().await,
            None => std::future::pending().await,
        }
    }

    /// Watches `swap` instead of the process's watch, as if this worker's slots were
    /// reset by scanning for written pages.
    #[cfg(test)]
    fn with_swap_watch(mut self, swap: Arc<SwapWatch>) -> Self {
        self.swap = Some(swap);
        self
    }

    /// Whether this worker's slots can no longer be reset safely (see
    /// [`Self::until_swap_turned_on`]).
    fn swap_turned_on(&self) -> bool {
        self.swap.as_ref().is_some_and(|swap| swap.turned_on())
    }

    /// Tears every retired producer down now, freeing their slots.
    fn release_retired(&self) {
        let list = std::mem::take(&mut *self.retired.lock().unwrap_or_else(|p| p.into_inner()));
        for retired in list.iter().filter_map(std::sync::Weak::upgrade) {
            retired.release();
        }
    }

    /// The guest memory all of this worker's instances, and the values its runs hold,
    /// count against.
    pub(crate) fn guest_memory(&self) -> &Arc<GuestMemory> {
        &self.guest_memory
    }

    /// What every store's regions are held to.
    pub(crate) fn region_limits(&self) -> RegionLimits {
        RegionLimits {
            per_instance: self.config.max_regions_per_instance,
            files: self.region_files.clone(),
            mappings: self.region_mappings.clone(),
        }
    }

    /// `tenant`'s share of the instance slots, and how many there are.
    fn tenant_slots(&self, tenant: &Arc<str>) -> (Arc<Semaphore>, usize, Arc<BehindShared>) {
        let mut slots = self.tenant_slots.lock().unwrap_or_else(|p| p.into_inner());
        let slots = slots
            .entry(tenant.clone())
            .or_insert_with(|| TenantSlots::new(self.default_tenant_slots()));
        slots.collect_owed();
        (
            slots.semaphore.clone(),
            slots.limit,
            slots.behind_shared.clone(),
        )
    }

    /// How many instance slots a tenant without a quota of its own has.
    fn default_tenant_slots(&self) -> usize {
        self.config.max_instances_per_tenant.max(1) as usize
    }

    /// Applies `tenant`'s quotas on this worker: its instance slots (`max_instances`),
    /// its key-value quota and its share of guest memory (`guest_memory_mb`, 0 for
    /// none of its own); a limit left unset is the worker's default, so
    /// `Quotas::default()` gives every default back. A lowered instance limit holds
    /// for new events at once while the events running keep their slots.
    pub fn set_tenant_quotas(&self, tenant: &str, quotas: &Quotas) {
        let limit = quotas
            .max_instances
            .map_or(self.default_tenant_slots(), |max| max.max(1) as usize);
        self.tenant_slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(tenant.into())
            .or_insert_with(|| TenantSlots::new(limit))
            .resize(limit);
        self.kv
            .set_tenant_quota(tenant, quotas.kv_max_keys, quotas.kv_max_bytes);
        let share = quotas.guest_memory_mb.map(faas_budget::mib_or_unlimited);
        self.guest_memory.set_share(tenant.into(), share);
    }

    /// Applies the quotas of every tenant in `tenants`, the whole list as the tenant
    /// store has it: a tenant given quotas before and missing now gets the defaults.
    pub fn apply_tenant_quotas(&self, tenants: &[Tenant]) {
        self.apply_quotas(
            tenants
                .iter()
                .map(|tenant| (tenant.name.as_str(), tenant.quotas)),
        );
    }

    /// [`Worker::apply_tenant_quotas`] over `(name, quotas)` pairs.
    pub(crate) fn apply_quotas<'a>(&self, tenants: impl Iterator<Item = (&'a str, Quotas)>) {
        let mut applied = self.quota_tenants.lock().unwrap_or_else(|p| p.into_inner());
        let given: Vec<(&str, Quotas)> =
            tenants.filter(|(_, quotas)| !quotas.is_default()).collect();
        let now: HashSet<String> = given.iter().map(|(name, _)| (*name).to_owned()).collect();
        for gone in applied.difference(&now) {
            self.set_tenant_quotas(gone, &Quotas::default());
        }
        for (name, quotas) in &given {
            self.set_tenant_quotas(name, quotas);
        }
        *applied = now;
    }

    /// The configuration the worker was started with.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Whether loading `workflow`, whose functions run the components of `digests`
    /// (function name -> [`Component::digest`]), would compile nothing: each is linked
    /// here already, or its artifact is in the compiled-code cache of the engine it
    /// would load on. Such a load maps files and links; it need not wait behind
    /// compiles. `false` when unsure (a function it would refuse, an engine not built).
    pub fn compiles_nothing(
        &self,
        workflow: &Workflow,
        digests: &BTreeMap<String, String>,
    ) -> bool {
        digests.iter().all(|(name, digest)| {
            let Some(spec) = workflow.functions.get(name) else {
                return false;
            };
            let Ok(limits) = self.limits_for(name, spec) else {
                return false;
            };
            self.runtimes
                .built(flavor_of(&limits))
                .is_some_and(|runtime| {
                    runtime.shared.get(spec.kind, digest).is_some()
                        || runtime.cache.contains(digest)
                })
        })
    }

    /// The limits function `name` (`spec`) runs with and the runtime it loads on, once
    /// its `component`'s header is checked.
    async fn runtime_for(
        &self,
        name: &str,
        spec: &Function,
        component: &Component,
    ) -> Result<(Limits, &crate::runtimes::Runtime), LoadError> {
        let limits = self.limits_for(name, spec)?;
        faas_workflow::check_component_header(component).map_err(|reason| {
            LoadError::NotAComponent {
                function: name.to_owned(),
                reason,
            }
        })?;
        let runtime =
            self.runtimes
                .get(flavor_of(&limits))
                .await
                .map_err(|err| LoadError::Engine {
                    function: name.to_owned(),
                    message: format!("{err:#}"),
                })?;
        Ok((limits, runtime))
    }

    /// Compiles the components of `workflow` (`components`, by function name) into
    /// the compiled-code cache, within the worker's compile limits, and links nothing:
    /// a [`Self::load_workflow`] of them after it only maps their code. What an
    /// embedded deploy does before it takes the deploy lock, so that one tenant's
    /// compile holds up no other tenant's deploy.
    ///
    /// # Errors
    /// [`LoadError`] naming the first function that could not be compiled, as
    /// [`Self::load_workflow`] would.
    pub async fn compile_ahead(
        &self,
        workflow: &Workflow,
        components: &Components,
    ) -> Result<(), LoadError> {
        let deadline = self.config.compiler.deadline();
        for (name, spec) in &workflow.functions {
            let Some(component) = components.get(name) else {
                continue;
            };
            let (_, runtime) = self.runtime_for(name, spec, component).await?;
            if runtime.shared.get(spec.kind, component.digest()).is_some() {
                continue;
            }
            let (_, outcome) = runtime
                .compiled(name, component.clone(), deadline.clone())
                .await?;
            if outcome == CacheOutcome::Miss {
                let now = std::time::Instant::now();
                let mut ahead = self.compiled_ahead();
                ahead.retain(|_, at| now.duration_since(*at) < COMPILED_AHEAD_KEPT);
                ahead.insert(component.digest().to_owned(), now);
            }
        }
        Ok(())
    }

    fn compiled_ahead(&self) -> std::sync::MutexGuard<'_, HashMap<String, std::time::Instant>> {
        // Each change is one insert or remove: a poisoned lock still holds a sound map.
        self.compiled_ahead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Compiles (or loads from cache) and links every function of `workflow`.
    ///
    /// `components` maps each function name to its component's bytes. Nothing is
    /// instantiated: instances are created per event.
    ///
    /// # Errors
    /// [`LoadError`] naming the first function that is missing, invalid, asks for too
    /// much memory, or does not fit its kind's world.
    pub async fn load_workflow(
        &self,
        workflow: &Workflow,
        mut components: Components,
    ) -> Result<LoadedWorkflow, LoadError> {
        // Held from here, so a scrape during the load keeps the series.
        let metrics = self.metrics.workflow(&workflow.tenant, &workflow.name);
        let deadline = self.config.compiler.deadline();
        let mut functions = HashMap::new();
        for (name, spec) in &workflow.functions {
            let component = components
                .remove(name)
                .ok_or_else(|| LoadError::MissingComponent {
                    function: name.clone(),
                })?;
            let function = self
                .load_function(name, spec, component, metrics.function(name), &deadline)
                .await?;
            functions.insert(name.clone(), Arc::new(function));
        }
        Ok(LoadedWorkflow {
            manifest: Arc::new(workflow.clone()),
            chain: workflow
                .chain()
                .into_iter()
                .map(|(step, edge)| (step.to_owned(), edge.cloned()))
                .collect(),
            tenant: workflow.tenant.as_str().into(),
            name: workflow.name.as_str().into(),
            functions,
            _metrics: metrics,
        })
    }

    async fn load_function(
        &self,
        name: &str,
        spec: &Function,
        component: Component,
        metrics: Arc<FunctionCounters>,
        deadline: &crate::compiler::CompileDeadline,
    ) -> Result<LoadedFunction, LoadError> {
        let (limits, runtime) = self.runtime_for(name, spec, &component).await?;
        let digest = component.digest().to_owned();
        let shared = runtime.shared.get(spec.kind, &digest);
        let was_shared = shared.is_some();
        let (entry, outcome) = match shared {
            Some(entry) => {
                runtime.cache.mark_used(&digest);
                (entry, CacheOutcome::Hit)
            }
            None => {
                let (entry, outcome) = runtime
                    .link(name, spec.kind, component, deadline.clone())
                    .await?;
                (runtime.shared.share(spec.kind, &digest, entry), outcome)
            }
        };
        // The compile a deploy ran ahead of its load counts as this load's.
        let compiled_ahead = !was_shared && self.compiled_ahead().remove(&digest).is_some();
        let cached = outcome == CacheOutcome::Hit && !compiled_ahead;
        tracing::info!(
            function = name,
            digest = &digest[..12],
            cached,
            shared = was_shared,
            "component loaded"
        );
        metrics.loaded(cached);
        Ok(LoadedFunction {
            name: name.into(),
            digest,
            placement: Arc::new(Placement::new(entry, runtime.measures_placement)),
            limits,
            config: Arc::new(spec.config.clone()),
            allowed_outbound_hosts: Arc::new(spec.allowed_outbound_hosts.clone()),
            metrics,
        })
    }

    /// The worker's defaults overridden by what the function's workflow.toml asks for.
    fn limits_for(&self, name: &str, spec: &Function) -> Result<Limits, LoadError> {
        let defaults = self.config.default_limits;
        let memory_mb = spec.limits.memory_mb.unwrap_or(defaults.memory_mb);
        if memory_mb > self.config.max_memory_mb {
            return Err(LoadError::MemoryTooLarge {
                function: name.to_owned(),
                asked: memory_mb,
                max: self.config.max_memory_mb,
            });
        }
        Ok(Limits {
            memory_mb,
            timeout: spec
                .limits
                .timeout_ms
                .map_or(defaults.timeout, Duration::from_millis),
            fuel: spec.limits.fuel.or(defaults.fuel),
        })
    }

    /// A fresh store for one event of `function`, to instantiate `entry` (the
    /// function's entry, taken once for the event) in, with its limits armed. Also
    /// returns the pipe that collects the guest's stdout and stderr.
    ///
    /// Waits for a free instance slot first (so a burst queues instead of failing),
    /// but no longer than the function's deadline.
    ///
    /// # Errors
    /// [`InvokeError::Overloaded`] when no slot frees up within the deadline,
    /// [`InvokeError::SwapTurnedOn`] once this worker's slots can no longer be reset
    /// safely.
    pub(crate) async fn new_store(
        &self,
        workflow: &LoadedWorkflow,
        function: &LoadedFunction,
        entry: &Entry,
        regions: Option<RegionScope>,
    ) -> Result<(Store<InstanceState>, MemoryOutputPipe), InvokeError> {
        let overloaded = |message: String, shared: bool| InvokeError::Overloaded {
            function: function.name.to_string(),
            message,
            shared,
        };
        let wait = function.limits.timeout;
        let (tenant_slots, tenant_limit, behind_shared) = self.tenant_slots(&workflow.tenant);
        let mark = behind_shared.mark();
        let tenant_slot = match tenant_slots.clone().try_acquire_owned() {
            Ok(slot) => Ok(Ok(slot)),
            Err(_) => {
                // Retired producers (kept for speed) must not make their consumers wait.
                self.release_retired();
                tokio::time::timeout(wait, tenant_slots.acquire_owned()).await
            }
        }
        .map_err(|_| {
            let shared = behind_shared.since(mark);
            overloaded(
                format!(
                    "tenant `{tenant}` kept all of its {tenant_limit} instance slots busy for \
                 {}ms{} (the max-instances quota, per worker; an operator raises it with \
                 `faas tenant set {tenant} --max-instances N`)",
                    wait.as_millis(),
                    if shared {
                        ", some of them waiting for the worker's own slots"
                    } else {
                        ""
                    },
                    tenant = workflow.tenant,
                ),
                shared,
            )
        })?
        .expect("tenant slot semaphores are never closed");
        let slot = match self.instance_slots.clone().try_acquire_owned() {
            Ok(slot) => Ok(Ok(slot)),
            Err(_) => {
                // Retired producers wait only for speed; an event must not wait on them.
                self.release_retired();
                let _counted = behind_shared.wait();
                tokio::time::timeout(wait, self.instance_slots.clone().acquire_owned()).await
            }
        }
        .map_err(|_| {
            overloaded(
                format!(
                    "all {} instance slots stayed busy for {}ms",
                    self.config.max_instances,
                    wait.as_millis()
                ),
                true,
            )
        })?
        .expect("the slot semaphore is never closed");
        // Checked once the slots are held, as late as can be: an event may have waited
        // for them while swap was turned on.
        if self.swap_turned_on() {
            return Err(InvokeError::SwapTurnedOn {
                function: function.name.to_string(),
            });
        }
        // The store about to be made needs ticks for its deadline and fair turns.
        self.clock.wake();
        function
            .metrics
            .instance_started(self.runtimes.resets_whole(entry.engine()));
        let output = MemoryOutputPipe::new(GUEST_OUTPUT_BYTES);
        let event = EventContext {
            tenant: workflow.tenant.clone(),
            workflow: workflow.name.clone(),
            function: function.name.clone(),
            config: function.config.clone(),
            kv: self.kv.clone(),
            publisher: self.publisher.clone(),
            logs: self.logs.clone(),
            run: None,
            metrics: function.metrics.clone(),
            outbound: crate::outbound::Outbound::new(
                crate::outbound::Destinations {
                    allowed: function.allowed_outbound_hosts.clone(),
                    opened: self.config.outbound_private_networks.of(&workflow.tenant),
                    lookups: self.lookups.clone(),
                    connections: self.outbound_connections.clone(),
                    tenant: workflow.tenant.clone(),
                    shares: self.guests.shares().clone(),
                },
                function.name.clone(),
                function.limits.timeout,
                self.config.max_outbound_connections_per_instance,
            ),
        };
        let max_memory = function.limits.memory_mb as usize * (1 << 20);
        let regions = regions.unwrap_or_else(|| {
            RegionScope::detached(self.config.region_map_threshold, self.region_limits())
        });
        let places_read_only = regions.input.read_only;
        let mut store = Store::new(
            entry.engine(),
            InstanceState::new(
                event,
                MemoryLimiter::new(max_memory, self.guest_memory.claim(workflow.tenant.clone())),
                output.clone(),
                [tenant_slot, slot],
                regions,
            ),
        );
        // What Wasmtime may copy from the guest outside host calls (an export's
        // results: a step's error text, an HTTP function's response parts).
        let results_fuel = max_memory.max(128 << 20);
        store.set_hostcall_fuel(results_fuel);
        store.call_hook(move |mut store, hook| {
            match hook {
                // Set before Wasmtime lifts the call's arguments, which it copies into
                // host memory up to this much (see `hostcall_fuel`).
                wasmtime::CallHook::CallingHost => {
                    let fuel = hostcall_fuel(store.data().limiter.memory_bytes);
                    store.set_hostcall_fuel(fuel);
                }
                wasmtime::CallHook::ReturningFromHost => store.set_hostcall_fuel(results_fuel),
                _ => {}
            }
            let state = store.data_mut();
            if places_read_only {
                // Read-only region pages must be writable while the host runs (it
                // writes call results into guest memory): see `MappedPages::on_call`.
                state.regions.mapped.on_call(hook)?;
            }
            if let wasmtime::CallHook::ReturningFromHost = hook {
                state.claim_handles()?;
            }
            Ok(())
        });
        store.limiter(|state| &mut state.limiter);
        // Host memory held through handles is bounded per handle (`host_limits`); this
        // bounds the handles, and the hook above claims them in the guest memory
        // budget. Regions have a limit of their own.
        store.set_max_component_handles(self.config.max_handles_per_instance);
        // At the end of its poll's slice (a tick, or a few while its tenant is alone:
        // `fair::slice_over`) the guest yields to the runtime, so that a busy guest
        // holds neither a thread nor its fair turn on the cores for longer; the
        // deadline is checked at every tick.
        let deadline = std::time::Instant::now() + function.limits.timeout;
        store.epoch_deadline_callback(move |_| {
            if std::time::Instant::now() >= deadline {
                return Err(wasmtime::Trap::Interrupt.into());
            }
            if !crate::fair::slice_over() {
                return Ok(UpdateDeadline::Continue(1));
            }
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ))
        });
        store.set_epoch_deadline(1);
        // Only functions with a fuel limit were compiled for the metered engine.
        if let Some(fuel) = function.limits.fuel {
            store
                .set_fuel(fuel)
                .expect("a function with a fuel limit runs on the metered engine");
        }
        Ok((store, output))
    }
}

/// The least [`hostcall_fuel`] gives a call: a whole batch of messages (16 MiB, which
/// may all be the same few bytes of the guest's) with room to spare.
const MIN_HOSTCALL_FUEL: usize = 32 << 20;

/// How many bytes Wasmtime may copy into host memory for one host call's arguments
/// (strings, lists, and the lists inside lists) from a guest whose linear memories
/// hold `memory_bytes`: as much as they hold, at least [`MIN_HOSTCALL_FUEL`]. Not the
/// guest's limit: lists in a list may all point at the same bytes, so 1 MiB of a guest
/// allowed 4 GiB made the host allocate 4 GiB before any host function could look at
/// the sizes. What the guest holds bounds every argument that is not such a trick,
/// the pages `create-in` and `read-into` take (seen in place, but counted) among them.
fn hostcall_fuel(memory_bytes: usize) -> usize {
    memory_bytes.max(MIN_HOSTCALL_FUEL)
}

/// How long a compile [`Worker::compile_ahead`] ran waits to be counted by its load.
const COMPILED_AHEAD_KEPT: Duration = Duration::from_secs(600);

/// The engine a function of `limits` loads on: only one with a fuel limit pays for
/// fuel metering.
fn flavor_of(limits: &Limits) -> Flavor {
    Flavor {
        fuel: limits.fuel.is_some(),
        whole: false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{TenantSlots, Worker};
    use crate::swap::SwapWatch;
    use crate::{InvokeError, WorkerConfig};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn thread_name() -> String {
        std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_owned()
    }

    // What a client connected there spawns (a Redis connection's socket task) stays on
    // the guest threads too: that is what makes its replies wake guests where they run.
    #[tokio::test]
    async fn what_runs_on_guest_threads_spawns_its_tasks_there() {
        let dir = tempfile::tempdir().unwrap();
        let worker = Worker::new(WorkerConfig::new(dir.path())).unwrap();
        let (ran_on, spawned_on) = worker
            .on_guest_threads(async {
                let spawned = tokio::spawn(async { thread_name() });
                (thread_name(), spawned.await.unwrap())
            })
            .await
            .unwrap();
        assert_eq!(ran_on, "faas-guest");
        assert_eq!(spawned_on, "faas-guest");
        assert_ne!(thread_name(), "faas-guest");
    }

    /// The lines a worker writes for tenants, kept.
    #[derive(Default)]
    pub(crate) struct KeptLines(pub(crate) std::sync::Mutex<Vec<faas_invoke::LogLine>>);

    impl faas_invoke::LogSink for KeptLines {
        fn push(&self, line: faas_invoke::LogLine) {
            self.0.lock().unwrap().push(line);
        }
    }

    /// Loads workflow `w` of tenant `t`, whose function is the component built from
    /// `package`, named after it, with `limits` in its table, and serves it on
    /// `/<package>/...`.
    pub(crate) async fn load_http(
        worker: &Worker,
        package: &str,
        limits: &str,
    ) -> crate::LoadedWorkflow {
        load_http_as(worker, ("t", "w"), package, limits).await
    }

    /// [`load_http`] as `tenant`'s workflow `name`.
    async fn load_http_as(
        worker: &Worker,
        (tenant, name): (&str, &str),
        package: &str,
        limits: &str,
    ) -> crate::LoadedWorkflow {
        let text = format!(
            "name = \"{name}\"\ntenant = \"{tenant}\"\n[functions.{package}]\n\
             component = \"{}\"\n{limits}\n[[triggers.http]]\nroute = \"/{package}/...\"\n\
             function = \"{package}\"\n",
            faas_testing::component_path(package).display()
        );
        let manifest = faas_workflow::Workflow::parse("workflow.toml", &text).unwrap();
        let components = BTreeMap::from([(
            package.to_owned(),
            faas_invoke::Component::new(faas_testing::component(package)),
        )]);
        worker.load_workflow(&manifest, components).await.unwrap()
    }

    /// A GET of `path` from the only function of `workflow` (see [`load_http`]).
    pub(crate) async fn get(
        worker: &Worker,
        workflow: &crate::LoadedWorkflow,
        path: &str,
    ) -> Result<faas_invoke::HttpResponse, InvokeError> {
        let function = workflow.functions().next().unwrap().name.clone();
        let request = hyper::Request::get(format!("http://localhost{path}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        worker.handle_http(workflow, &function, request).await
    }

    /// A tenant's event refused one of its own instance slots while they are held by its
    /// events waiting for one of the worker's (another tenant's load) is refused for want
    /// of shared capacity, which a stream entry is not charged a delivery for: it was
    /// charged, and another tenant's load dead-lettered a tenant's entries whose later
    /// step found its slots so held up. Refused them while its own events run, it is
    /// its own load.
    #[tokio::test]
    async fn a_tenants_slots_held_up_behind_the_workers_are_shared_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = WorkerConfig::new(dir.path());
        config.max_instances = 1;
        config.max_instances_per_tenant = 1;
        let worker = Arc::new(Worker::new(config).unwrap());
        let long = "timeout_ms = 5000";
        let hog = load_http_as(&worker, ("mallory", "hog"), "misbehave", long).await;
        let victim = load_http_as(&worker, ("victim", "v"), "misbehave", "timeout_ms = 300");
        let victim = victim.await;
        let victim_long = load_http_as(&worker, ("victim", "v2"), "misbehave", long).await;
        let (hog, victim_long) = (Arc::new(hog), Arc::new(victim_long));
        let call = |workflow: &Arc<crate::LoadedWorkflow>, path: &'static str| {
            let (worker, workflow) = (worker.clone(), workflow.clone());
            tokio::spawn(async move { get(&worker, &workflow, path).await })
        };
        let pause = || tokio::time::sleep(std::time::Duration::from_millis(100));

        // mallory holds the worker's only slot; victim's first event takes victim's
        // only slot and waits for the worker's; its second waits for victim's.
        let hogging = call(&hog, "/misbehave/slow?ms=1500");
        pause().await;
        let waiting = call(&victim_long, "/misbehave/slow?ms=1");
        pause().await;
        let refused = get(&worker, &victim, "/misbehave/slow?ms=1")
            .await
            .unwrap_err();
        assert!(refused.for_shared_capacity(), "{refused}");
        assert!(
            refused
                .to_string()
                .contains("waiting for the worker's own slots"),
            "{refused}"
        );
        assert_eq!(hogging.await.unwrap().unwrap().status(), 200);
        assert_eq!(waiting.await.unwrap().unwrap().status(), 200);

        // Now victim's own event holds its slot, running, while the worker's is free.
        let running = call(&victim_long, "/misbehave/slow?ms=1000");
        pause().await;
        let own = get(&worker, &victim, "/misbehave/slow?ms=1")
            .await
            .unwrap_err();
        assert!(
            matches!(own, InvokeError::Overloaded { .. }) && !own.for_shared_capacity(),
            "{own}"
        );
        assert_eq!(running.await.unwrap().unwrap().status(), 200);
    }

    /// Once a swap area is turned on, a worker whose slots are scanned for written pages
    /// starts no instance (one could read another's swapped-out page), and says so to
    /// whoever waits to stop its process. The refused event leaves no line in the
    /// tenant's logs: another replica may serve it, and the gateway writes the line
    /// when none does.
    #[tokio::test]
    async fn once_swap_is_turned_on_no_instance_starts_and_the_process_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let swap = Arc::new(SwapWatch::detached());
        let lines = Arc::new(KeptLines::default());
        let worker = Arc::new(
            Worker::new(WorkerConfig::new(dir.path()))
                .unwrap()
                .with_swap_watch(swap.clone())
                .with_logs(lines.clone()),
        );
        let workflow = load_http(&worker, "hello", "").await;
        let hello = || get(&worker, &workflow, "/hello/");
        assert_eq!(hello().await.unwrap().status(), 200);
        let told = tokio::spawn({
            let worker = worker.clone();
            async move { worker.until_swap_turned_on().await }
        });
        tokio::task::yield_now().await;
        assert!(!told.is_finished(), "told before swap was turned on");

        swap.turn_on("swap was turned on (/swapfile)");
        let refused = hello().await.unwrap_err();
        assert!(
            matches!(refused, InvokeError::SwapTurnedOn { .. }),
            "{refused}"
        );
        assert_eq!(refused.status(), 503);
        assert_eq!(refused.cause(), faas_invoke::FailureKind::Unavailable);
        told.await.unwrap();
        let platform_lines: Vec<String> = lines
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.source == faas_invoke::LogSource::Platform)
            .map(|line| line.text.clone())
            .collect();
        assert!(platform_lines.is_empty(), "{platform_lines:?}");
    }

    #[test]
    fn tenant_slots_grow_at_once_and_shrink_as_held_slots_come_back() {
        let mut slots = TenantSlots::new(2);
        let held: Vec<_> = (0..2)
            .map(|_| slots.semaphore.clone().try_acquire_owned().unwrap())
            .collect();
        assert!(slots.semaphore.clone().try_acquire_owned().is_err());

        // Raised: a third event runs at once.
        slots.resize(3);
        let third = slots.semaphore.clone().try_acquire_owned().unwrap();

        // Lowered to 1 while 3 are held: none is taken from a running event, and none
        // is handed out again until fewer than 1 are held.
        slots.resize(1);
        assert_eq!(slots.owed, 2);
        drop(third);
        slots.collect_owed();
        assert_eq!(slots.owed, 1);
        assert!(slots.semaphore.clone().try_acquire_owned().is_err());
        drop(held);
        slots.collect_owed();
        assert_eq!(slots.owed, 0);
        let only = slots.semaphore.clone().try_acquire_owned().unwrap();
        assert!(slots.semaphore.clone().try_acquire_owned().is_err());

        // Raised again while a debt is owed: the debt is forgiven first.
        slots.resize(0);
        assert_eq!(slots.owed, 1);
        slots.resize(2);
        assert_eq!(slots.owed, 0);
        assert_eq!(slots.semaphore.available_permits(), 1);
        drop(only);
        assert_eq!(slots.semaphore.available_permits(), 2);
    }
}
