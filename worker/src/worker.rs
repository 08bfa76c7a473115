//! The [`Worker`]: owns the engine, the linker and the compiled-code cache, loads
//! workflows and creates one store per event.

use crate::cache::{CacheOutcome, ComponentCache};
use crate::config::{Limits, WorkerConfig};
use crate::engine::{EpochClock, build_engine, deadline_ticks};
use crate::error::{InvokeError, LoadError, StartError};
use crate::function::{Entry, LoadedFunction, LoadedWorkflow};
use crate::host::{self, StepFunctionPre};
use crate::kv::KeyValueStore;
use crate::messaging::Publisher;
use crate::region::{RegionScope, Retired};
use crate::state::{EventContext, GUEST_OUTPUT_BYTES, InstanceState};
use faas_workflow::{Function, FunctionKind, Workflow};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use wasmtime::component::Linker;
use wasmtime::{Engine, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi_http::p2::bindings::ProxyPre;

/// The name under which a step function exports its handler.
const STEP_HANDLER_EXPORT: &str = "faas:platform/handler@0.1.0";

/// Runs functions. One per process in embedded mode; cheap to share behind an `Arc`.
pub struct Worker {
    engine: Engine,
    linker: Linker<InstanceState>,
    cache: ComponentCache,
    kv: Arc<KeyValueStore>,
    publisher: Option<Arc<dyn Publisher>>,
    /// One permit per instance slot: an event holds one for as long as its store lives.
    instance_slots: Arc<Semaphore>,
    /// Finished producers kept until their consumers placed their regions; torn down
    /// early when an event needs their slots.
    retired: std::sync::Mutex<Vec<std::sync::Weak<Retired>>>,
    config: WorkerConfig,
    _clock: EpochClock,
}

impl Worker {
    /// Starts a worker: builds the engine (pooling allocator unless turned off) and
    /// starts the epoch clock that enforces deadlines.
    ///
    /// # Errors
    /// If the engine cannot be created (e.g. the pooling allocator cannot reserve its
    /// address space).
    pub fn new(config: WorkerConfig) -> Result<Self, StartError> {
        let engine = build_engine(&config).map_err(|err| StartError(format!("{err:#}")))?;
        let mut linker = Linker::new(&engine);
        host::add_to_linker(&mut linker).map_err(|err| StartError(format!("{err:#}")))?;
        let cache = ComponentCache::new(&config.cache_dir, &engine);
        Ok(Self {
            _clock: EpochClock::start(engine.clone()),
            engine,
            linker,
            cache,
            kv: Arc::new(KeyValueStore::memory()),
            publisher: None,
            instance_slots: Arc::new(Semaphore::new(config.max_instances as usize)),
            retired: std::sync::Mutex::default(),
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

    /// How many instances exist right now (each holds an instance slot until its store
    /// is dropped). Zero when idle: no instance outlives its event.
    pub fn active_instances(&self) -> usize {
        self.config.max_instances as usize - self.instance_slots.available_permits()
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

    /// Tears every retired producer down now, freeing their slots.
    fn release_retired(&self) {
        let list = std::mem::take(&mut *self.retired.lock().unwrap_or_else(|p| p.into_inner()));
        for retired in list.iter().filter_map(std::sync::Weak::upgrade) {
            retired.release();
        }
    }

    /// The configuration the worker was started with.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
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
        mut components: BTreeMap<String, Vec<u8>>,
    ) -> Result<LoadedWorkflow, LoadError> {
        let mut functions = HashMap::new();
        for (name, spec) in &workflow.functions {
            let bytes = components
                .remove(name)
                .ok_or_else(|| LoadError::MissingComponent {
                    function: name.clone(),
                })?;
            let function = self.load_function(name, spec, bytes).await?;
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
        })
    }

    async fn load_function(
        &self,
        name: &str,
        spec: &Function,
        bytes: Vec<u8>,
    ) -> Result<LoadedFunction, LoadError> {
        let limits = self.limits_for(name, spec)?;
        let digest = ComponentCache::digest(&bytes);
        let (engine, cache, owned_name) =
            (self.engine.clone(), self.cache.clone(), name.to_owned());
        // Compiling takes milliseconds to seconds of CPU: keep it off the async threads.
        let (component, outcome) =
            tokio::task::spawn_blocking(move || cache.load(&engine, &owned_name, &bytes))
                .await
                .map_err(|err| LoadError::Compile {
                    function: name.to_owned(),
                    message: format!("compiler task failed: {err}"),
                })??;
        tracing::info!(
            function = name,
            digest = &digest[..12],
            cached = outcome == CacheOutcome::Hit,
            "component loaded"
        );
        let link_error = |message: String| LoadError::Link {
            function: name.to_owned(),
            message,
        };
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|err| link_error(format!("{err:#}")))?;
        let entry = match spec.kind {
            FunctionKind::Http => Entry::Http(ProxyPre::new(pre).map_err(|err| {
                link_error(format!(
                    "an HTTP function must export wasi:http/incoming-handler@0.2.x: {err:#}"
                ))
            })?),
            FunctionKind::Step => Entry::Step(StepFunctionPre::new(pre).map_err(|err| {
                link_error(format!(
                    "a step function must export {STEP_HANDLER_EXPORT}: {err:#}"
                ))
            })?),
        };
        Ok(LoadedFunction {
            name: name.into(),
            digest,
            entry,
            limits,
            config: Arc::new(spec.config.clone()),
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

    /// A fresh store for one event of `function`, with its limits armed. Also returns
    /// the pipe that collects the guest's stdout and stderr.
    ///
    /// Waits for a free instance slot first (so a burst queues instead of failing),
    /// but no longer than the function's deadline.
    ///
    /// # Errors
    /// [`InvokeError::Overloaded`] when no slot frees up within the deadline.
    pub(crate) async fn new_store(
        &self,
        workflow: &LoadedWorkflow,
        function: &LoadedFunction,
        regions: Option<RegionScope>,
    ) -> Result<(Store<InstanceState>, MemoryOutputPipe), InvokeError> {
        let slot = match self.instance_slots.clone().try_acquire_owned() {
            Ok(slot) => Ok(Ok(slot)),
            Err(_) => {
                // Retired producers wait only for speed; an event must not wait on them.
                self.release_retired();
                tokio::time::timeout(
                    function.limits.timeout,
                    self.instance_slots.clone().acquire_owned(),
                )
                .await
            }
        }
        .map_err(|_| InvokeError::Overloaded {
            function: function.name.to_string(),
            message: format!(
                "all {} instance slots stayed busy for {}ms",
                self.config.max_instances,
                function.limits.timeout.as_millis()
            ),
        })?
        .expect("the slot semaphore is never closed");
        let output = MemoryOutputPipe::new(GUEST_OUTPUT_BYTES);
        let event = EventContext {
            tenant: workflow.tenant.clone(),
            workflow: workflow.name.clone(),
            function: function.name.clone(),
            config: function.config.clone(),
            kv: self.kv.clone(),
            publisher: self.publisher.clone(),
        };
        let max_memory = function.limits.memory_mb as usize * (1 << 20);
        let mut store = Store::new(
            &self.engine,
            InstanceState::new(
                event,
                max_memory,
                output.clone(),
                slot,
                regions.unwrap_or_else(|| RegionScope::detached(self.config.region_map_threshold)),
            ),
        );
        store.limiter(|state| &mut state.limiter);
        // A list argument can be at most the guest's whole memory, which the memory
        // limit already bounds; region pages are passed as lists without being copied.
        store.set_hostcall_fuel(max_memory.max(128 << 20));
        store.set_epoch_deadline(deadline_ticks(function.limits.timeout));
        store.epoch_deadline_trap();
        // Fuel is always metered, so that any function may set a fuel limit; no limit
        // means as much as a u64 holds.
        store
            .set_fuel(function.limits.fuel.unwrap_or(u64::MAX))
            .expect("fuel metering is enabled on every engine");
        Ok((store, output))
    }
}
