//! A worker's engines, each with what is bound to it, and how a component is linked on
//! one of them (or moved to another).
//!
//! A worker has up to four engines: with or without fuel metering (only functions with
//! a fuel limit pay for it), each resetting memory slots either by the pages an event
//! wrote or whole (for the components `placement.rs` moves there). Only the one without
//! fuel that resets by written pages is built at start; the others when first needed.

use crate::cache::{CacheOutcome, ComponentCache};
use crate::compiler::{Compiler, MAX_COMPILES};
use crate::config::{SlotReset, WorkerConfig};
use crate::engine::{ClockedEngines, Codegen, PoolReset, build_engine};
use crate::function::Entry;
use crate::host::{self, StepFunctionPre};
use crate::linked::SharedEntries;
use crate::placement::Placement;
use crate::state::InstanceState;
use crate::swap::SwapWatch;
use faas_invoke::LoadError;
use faas_workflow::FunctionKind;
use std::sync::{Arc, Mutex, OnceLock};
use wasmtime::Engine;
use wasmtime::component::{Component, InstancePre, Linker};
use wasmtime_wasi_http::p2::bindings::ProxyPre;

/// The name under which a step function exports its handler.
const STEP_HANDLER_EXPORT: &str = "faas:platform/handler@0.1.0";

/// Which of a worker's engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flavor {
    /// Compiled with fuel metering.
    pub(crate) fuel: bool,
    /// Resets slots whole rather than by the pages an event wrote (when the worker
    /// chooses per component).
    pub(crate) whole: bool,
}

impl Flavor {
    fn index(self) -> usize {
        usize::from(self.fuel) | usize::from(self.whole) << 1
    }
}

/// One engine and what is bound to it: the host interfaces linked for it, its
/// compiled-code cache (a directory per engine compatibility hash) and the components
/// linked on it that loaded functions hold.
pub(crate) struct Runtime {
    pub(crate) engine: Engine,
    linker: Linker<InstanceState>,
    pub(crate) cache: ComponentCache,
    pub(crate) shared: Arc<SharedEntries>,
    /// What the engine was built with that shapes compiled code.
    codegen: Codegen,
    /// [`WorkerConfig::compiler`].
    compiler: Compiler,
    /// The worker's compile places, which every engine's compiles share
    /// ([`crate::compiler::MAX_COMPILES`]).
    compile_places: Arc<tokio::sync::Semaphore>,
    /// [`WorkerConfig::after_load`].
    after_load: fn(),
    /// Whether the engine resets slots by scanning for the pages an event wrote, which
    /// a swap area turned on later makes unsafe (`swap.rs`).
    pub(crate) scans_written_pages: bool,
    /// Whether the engine resets slots whole.
    resets_whole: bool,
    /// Whether functions linked here have their placement measured (`placement.rs`).
    pub(crate) measures_placement: bool,
}

impl Runtime {
    fn new(
        config: &WorkerConfig,
        flavor: Flavor,
        swap: &SwapWatch,
        compile_places: Arc<tokio::sync::Semaphore>,
    ) -> wasmtime::Result<Self> {
        let reset = match config.slot_reset {
            SlotReset::Whole { bytes } => PoolReset::Whole { bytes },
            SlotReset::ByFunction { whole_bytes } if flavor.whole => {
                PoolReset::Whole { bytes: whole_bytes }
            }
            SlotReset::ByFunction { .. } | SlotReset::WrittenPages => PoolReset::WrittenPages {
                scan: config.pooling && swap.scanning_is_safe(),
            },
        };
        let codegen = Codegen::new(config, flavor.fuel);
        let engine = build_engine(config, codegen, reset)?;
        let mut linker = Linker::new(&engine);
        host::add_to_linker(&mut linker)?;
        let cache =
            ComponentCache::new(&config.cache_dir, &engine).with_max_bytes(config.cache_max_bytes);
        // Left over by a crash, or over the size after a restart with a lower limit.
        cache.tidy();
        Ok(Self {
            engine,
            linker,
            cache,
            shared: Arc::default(),
            codegen,
            compiler: config.compiler.clone(),
            compile_places,
            after_load: config.after_load,
            scans_written_pages: reset == (PoolReset::WrittenPages { scan: true }),
            resets_whole: matches!(reset, PoolReset::Whole { .. }),
            measures_placement: config.pooling
                && !flavor.whole
                && matches!(config.slot_reset, SlotReset::ByFunction { .. }),
        })
    }

    /// Loads `bytes` (from the compiled-code cache, or compiling them off the async
    /// threads) and links them here as a function of `kind`.
    pub(crate) async fn link(
        &self,
        name: &str,
        kind: FunctionKind,
        bytes: faas_invoke::Component,
        deadline: crate::compiler::CompileDeadline,
    ) -> Result<(Entry, CacheOutcome), LoadError> {
        let (component, outcome) = self.compiled(name, bytes, deadline).await?;
        Ok((entry(&self.linker, &component, name, kind)?, outcome))
    }

    /// `bytes` (the component of function `name`) compiled for this engine: from the
    /// compiled-code cache, or compiled off the async threads and stored there.
    pub(crate) async fn compiled(
        &self,
        name: &str,
        bytes: faas_invoke::Component,
        deadline: crate::compiler::CompileDeadline,
    ) -> Result<(Component, CacheOutcome), LoadError> {
        let (engine, cache, owned_name, after_load) = (
            self.engine.clone(),
            self.cache.clone(),
            name.to_owned(),
            self.after_load,
        );
        let (compiler, codegen) = (self.compiler.clone(), self.codegen);
        // A compile place, taken here while the caller still waits (a caller gone
        // leaves no compile queued) when the code is not in the cache. Its wait does
        // not count against the compile's time: another tenant's compiles holding the
        // places must not fail this one.
        let abandon = deadline.abandon_on_drop();
        let asked = std::time::Instant::now();
        let mut place = None;
        if !self.cache.contains(bytes.digest()) {
            place = self.compile_places.clone().acquire_owned().await.ok();
        }
        deadline.extend(asked.elapsed());
        let (places, runtime) = (
            self.compile_places.clone(),
            tokio::runtime::Handle::current(),
        );
        // Compiling takes milliseconds to seconds of CPU: keep it off the async threads.
        // The compile itself runs below the priority of the threads serving events, on
        // the compile threads or in a child (`Compiler::compile`). Not the whole load:
        // a load of cached code waiting here for a compile thread would wait behind
        // the compiles (each holds one while its child runs).
        let compiling = tokio::task::spawn_blocking(move || {
            let loaded = cache.load_with(&engine, &owned_name, &bytes, |bytes| {
                // A miss whatever was expected (an artifact pruned since it was looked
                // for, `services/loads.rs`) takes a place too. Never closed.
                let asked = std::time::Instant::now();
                let _place = place.or_else(|| runtime.block_on(places.acquire_owned()).ok());
                deadline.extend(asked.elapsed());
                compiler.compile(&engine, codegen, &owned_name, bytes, &deadline)
            });
            // On the thread that loaded: what it freed is what to give back.
            after_load();
            loaded
        })
        .await;
        abandon.finished();
        compiling.map_err(|err| LoadError::Compile {
            function: name.to_owned(),
            message: format!("compiler task failed: {err}"),
        })?
    }

    /// Starts the later events of the function placed by `placement` from its
    /// component linked here (shared with the functions of the same bytes that moved
    /// here before it, or linked now: call it on a blocking thread); if that fails
    /// (logged), it stays where it is. `name` and `digest` name the function and its
    /// component.
    fn move_here(&self, placement: &Placement, name: &str, digest: &str) {
        let old = placement.entry();
        let kind = old.kind();
        let moved = match self.shared.get(kind, digest) {
            Some(entry) => Ok(entry),
            None => {
                // The artifact cached for the first engine serves this one too when
                // their compatibility hashes agree (pooling settings are not part of
                // it); otherwise the code in memory is handed over.
                let component = self.cache.load_cached(&self.engine, digest).map_or_else(
                    || {
                        let compiled = old.component().serialize()?;
                        // SAFETY: serialized by this process's Wasmtime a moment ago,
                        // from a component it compiled or loaded.
                        unsafe { Component::deserialize(&self.engine, compiled) }
                    },
                    Ok,
                );
                (self.after_load)();
                component
                    .map_err(|err| format!("{err:#}"))
                    .and_then(|component| {
                        entry(&self.linker, &component, name, kind).map_err(|err| err.to_string())
                    })
                    .map(|entry| self.shared.share(kind, digest, entry))
            }
        };
        let faults = placement.probe.fewest_faults();
        match moved {
            Ok(entry) => {
                placement.replace(entry);
                placement.probe.moved(true);
                tracing::info!(
                    function = name,
                    digest = &digest[..digest.len().min(12)],
                    fewest_faults_per_event = faults,
                    "function moved to whole slot resets: its events kept faulting pages in"
                );
            }
            Err(err) => stays(
                placement,
                name,
                &format!("cannot link it for whole resets: {err}"),
            ),
        }
    }
}

/// Records that the function placed by `placement` stays with written-page resets, and
/// logs `why`.
fn stays(placement: &Placement, name: &str, why: &str) {
    placement.probe.moved(false);
    tracing::warn!(
        function = name,
        "function stays with written-page resets: {why}"
    );
}

/// `component` linked by `linker` as the entry of a function of `kind`.
fn entry(
    linker: &Linker<InstanceState>,
    component: &Component,
    name: &str,
    kind: FunctionKind,
) -> Result<Entry, LoadError> {
    let link_error = |message: String| LoadError::Link {
        function: name.to_owned(),
        message,
    };
    let pre: InstancePre<InstanceState> = linker
        .instantiate_pre(component)
        .map_err(|err| link_error(format!("{err:#}")))?;
    Ok(match kind {
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
    })
}

/// A worker's engines: the first built at start, the others on first use (on a
/// blocking thread: building one reserves its pool's address space and tidies its
/// cache directory), each ticked by the worker's epoch clock.
pub(crate) struct Runtimes {
    first: Runtime,
    later: [OnceLock<Runtime>; 3],
    /// Held while a later runtime is being built, so each is built once.
    building: Mutex<()>,
    /// What the later runtimes are built from.
    config: WorkerConfig,
    /// The epoch clock's engines, which each later engine joins.
    clocked: ClockedEngines,
    /// The compile places every engine shares.
    compile_places: Arc<tokio::sync::Semaphore>,
}

impl Runtimes {
    /// Builds the first engine (no fuel, slots reset as configured) and adds it to
    /// `clocked`.
    pub(crate) fn new(
        config: &WorkerConfig,
        swap: &SwapWatch,
        clocked: ClockedEngines,
    ) -> wasmtime::Result<Self> {
        let first = Flavor {
            fuel: false,
            whole: false,
        };
        let compile_places = Arc::new(tokio::sync::Semaphore::new(MAX_COMPILES));
        let first = Runtime::new(config, first, swap, compile_places.clone())?;
        clocked.add(first.engine.clone());
        Ok(Self {
            first,
            later: Default::default(),
            building: Mutex::new(()),
            config: config.clone(),
            clocked,
            compile_places,
        })
    }

    /// The engine built at start.
    pub(crate) fn first(&self) -> &Runtime {
        &self.first
    }

    /// The runtime of `flavor`, built first on a blocking thread if it was not yet.
    pub(crate) async fn get(self: &Arc<Self>, flavor: Flavor) -> wasmtime::Result<&Runtime> {
        if self.built(flavor).is_none() {
            let runtimes = self.clone();
            tokio::task::spawn_blocking(move || runtimes.build(flavor).map(drop))
                .await
                .map_err(|err| wasmtime::Error::msg(format!("building an engine: {err}")))??;
        }
        self.build(flavor)
    }

    /// Moves the function placed by `placement` (`name`, of the component `digest`)
    /// to the engine of its fuel setting that resets slots whole, on a blocking
    /// thread, building that engine first if need be.
    pub(crate) fn move_to_whole_resets(
        self: &Arc<Self>,
        fuel: bool,
        placement: Arc<Placement>,
        name: Arc<str>,
        digest: String,
    ) {
        let runtimes = self.clone();
        tokio::task::spawn_blocking(move || match runtimes.build(Flavor { fuel, whole: true }) {
            Ok(runtime) => runtime.move_here(&placement, &name, &digest),
            Err(err) => stays(
                &placement,
                &name,
                &format!("cannot start an engine that resets slots whole: {err:#}"),
            ),
        });
    }

    /// The runtime of `flavor` if it was built.
    pub(crate) fn built(&self, flavor: Flavor) -> Option<&Runtime> {
        match flavor.index().checked_sub(1) {
            Some(i) => self.later[i].get(),
            None => Some(&self.first),
        }
    }

    /// The runtime of `flavor`, built on this thread if it was not yet.
    fn build(&self, flavor: Flavor) -> wasmtime::Result<&Runtime> {
        if let Some(runtime) = self.built(flavor) {
            return Ok(runtime);
        }
        let _building = self.building.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(runtime) = self.built(flavor) {
            return Ok(runtime);
        }
        let runtime = Runtime::new(
            &self.config,
            flavor,
            &SwapWatch::process(),
            self.compile_places.clone(),
        )?;
        self.clocked.add(runtime.engine.clone());
        tracing::info!(
            fuel = flavor.fuel,
            whole_slot_resets = flavor.whole,
            "engine started"
        );
        let slot = &self.later[flavor.index() - 1];
        Ok(slot.get_or_init(|| runtime))
    }

    /// Whether `engine` (one of these) resets its memory slots whole after each
    /// instance.
    pub(crate) fn resets_whole(&self, engine: &Engine) -> bool {
        std::iter::once(&self.first)
            .chain(self.later.iter().filter_map(OnceLock::get))
            .find(|runtime| Engine::same(&runtime.engine, engine))
            .is_some_and(|runtime| runtime.resets_whole)
    }

    /// How many distinct components are linked and held, over every engine.
    pub(crate) fn linked_components(&self) -> usize {
        self.first.shared.len()
            + self
                .later
                .iter()
                .filter_map(OnceLock::get)
                .map(|runtime| runtime.shared.len())
                .sum::<usize>()
    }
}
