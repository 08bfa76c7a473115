//! The Wasmtime engines a worker's functions share (one without fuel metering, and one
//! with it for the functions that have a fuel limit), and the clock that enforces
//! deadlines on both.

use crate::config::WorkerConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances. Deadlines are rounded up to whole ticks, so a
/// runaway guest is stopped at most one tick late.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(2);

/// How much of each pooled memory and table slot stays resident between instances,
/// unless the engine resets its memory slots whole ([`PoolReset::Whole`]).
pub(crate) const KEEP_RESIDENT_BYTES: usize = 2 << 20;

/// How many unused slots stay warm (resident, ready for the component that last used
/// them). Enough for the busy functions of a worker; beyond it, idle slots are released.
const MAX_WARM_SLOTS: u32 = 16;

/// How much memory the warm slots of an engine that resets slots whole may keep
/// resident at rest: each keeps its whole reset size.
const WHOLE_RESET_WARM_BYTES: usize = 128 << 20;

/// How an engine's pool makes a memory slot ready for the next instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolReset {
    /// Only the pages an event wrote among the first [`KEEP_RESIDENT_BYTES`], found by
    /// asking the kernel if `scan` (which is safe only while nothing can be swapped
    /// out: `swap.rs`); all of those bytes otherwise.
    WrittenPages {
        /// Whether to ask the kernel which pages were written.
        scan: bool,
    },
    /// The first `bytes`, in full, without a scan.
    Whole {
        /// How much of each slot stays resident and is reset.
        bytes: usize,
    },
}

impl PoolReset {
    fn resident_bytes(self) -> usize {
        match self {
            Self::WrittenPages { .. } => KEEP_RESIDENT_BYTES,
            Self::Whole { bytes } => bytes,
        }
    }

    fn warm_slots(self) -> u32 {
        match self {
            Self::WrittenPages { .. } => MAX_WARM_SLOTS,
            Self::Whole { bytes } => {
                let fit = WHOLE_RESET_WARM_BYTES / bytes.max(1);
                u32::try_from(fit)
                    .unwrap_or(u32::MAX)
                    .clamp(1, MAX_WARM_SLOTS)
            }
        }
    }
}

/// The most core module instances one component may make: a Rust component makes 3, a
/// componentize-py one 14, a componentize-js one 4. A component with more is refused
/// at load.
pub const MAX_CORE_INSTANCES_PER_COMPONENT: u32 = 32;

/// Builds an engine: pooling allocator and epoch interruption, and fuel metering if
/// `fuel`; its slots are reset as `reset` says.
///
/// Fuel is compiled into every function of an engine (a counter updated in every
/// block), which costs compute-heavy guests time (4-27% in bench/cachesim.sh), while
/// epochs already bound an event's time. So a worker compiles functions without a
/// fuel limit for an engine without metering, and only those with one for a metered
/// engine; both are built here, so their pooling and epoch settings cannot drift apart.
pub(crate) fn build_engine(
    config: &WorkerConfig,
    codegen: Codegen,
    reset: PoolReset,
) -> wasmtime::Result<Engine> {
    let mut wasm = codegen.config();
    if config.pooling {
        let mut pool = PoolingAllocationConfig::new();
        // `max_instances` (the slot semaphore) bounds live stores. A store frees its
        // permit when its data is dropped, which Wasmtime does before it hands the
        // instance's pool slot back (so that regions are unmapped before any reuse);
        // an event that takes the permit at once can then find the pool still full for
        // a moment. Twice the slots costs only address space; past that, an
        // instantiation waits a moment for a slot ([`PoolWait`]).
        let slots = config.max_instances.saturating_mul(2);
        pool.total_component_instances(slots)
            // Every slot may hold a component with the most core instances one may
            // have, so the core instances never run out before the slots do: the slots
            // are what each tenant's share counts, and a component of hundreds of
            // core instances must not leave other tenants' instantiations failing.
            // Only a count (each instance's memory is bounded by
            // `max_component_instance_size`, whatever the count).
            .max_core_instances_per_component(MAX_CORE_INSTANCES_PER_COMPONENT)
            .total_core_instances(slots.saturating_mul(MAX_CORE_INSTANCES_PER_COMPONENT))
            .total_memories(slots)
            .total_tables(slots.saturating_mul(2))
            .max_memory_size(config.max_memory_mb as usize * (1 << 20))
            .max_memories_per_component(2)
            .max_tables_per_component(4)
            .total_stacks(slots)
            // Resetting a slot by zeroing its first pages instead of handing them back
            // to the kernel avoids page faults and TLB shootdowns on every event,
            // which otherwise dominate a small function's cost.
            .linear_memory_keep_resident(reset.resident_bytes())
            .table_keep_resident(KEEP_RESIDENT_BYTES)
            // Where the kernel has PAGEMAP_SCAN (Linux 6.7+), zero only the kept pages
            // an event wrote, not all of them: a hello touches a few pages of its
            // 2 MiB. Elsewhere Wasmtime falls back to zeroing them all.
            .pagemap_scan(if reset == (PoolReset::WrittenPages { scan: true }) {
                Enabled::Auto
            } else {
                Enabled::No
            })
            // Each component keeps affinity to the slots it used; bound how many idle
            // slots stay warm, so idle workflows do not hold resident memory.
            .max_unused_warm_slots(reset.warm_slots());
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&wasm)
}

/// The engine settings that shape compiled code (the rest, such as the instance
/// allocator, only shape how it runs): an artifact compiled by an engine with the same
/// settings loads in any engine built here with them. What a compile child is told
/// (`compiler.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Codegen {
    /// Fuel metering compiled into every function.
    pub(crate) fuel: bool,
    /// Whether initial data is laid out to be mapped copy-on-write.
    pub(crate) memory_init_cow: bool,
}

impl Codegen {
    /// The settings of an engine for `config`, with fuel metering if `fuel`.
    pub(crate) fn new(config: &WorkerConfig, fuel: bool) -> Self {
        Self {
            fuel,
            // Map each component's initial data copy-on-write (pages are copied when
            // written, so an instance pays for what it touches: a Python component's
            // 13 MB image is not copied per event), where the region code can see
            // image pages and keep regions off them (`region/mappings.rs`, Linux
            // 6.11+). Elsewhere data segments are copied into each pooled instance.
            // Without pooling no region maps into a slot: Wasmtime's default.
            memory_init_cow: !config.pooling || crate::region::images_can_be_told_apart(),
        }
    }

    /// A Wasmtime configuration with these settings and nothing else.
    pub(crate) fn config(self) -> Config {
        let mut wasm = Config::new();
        wasm.epoch_interruption(true);
        wasm.consume_fuel(self.fuel);
        // Regions map payload pages at host addresses inside linear memories; a memory
        // that moved on growth would leave those mappings behind.
        wasm.memory_may_move(false);
        wasm.memory_init_cow(self.memory_init_cow);
        wasm
    }
}

/// How often an idle clock (no store exists) looks whether it was told to stop.
const IDLE_RECHECK: Duration = Duration::from_secs(1);

/// Advances the epoch of every engine it was given every [`EPOCH_TICK`], on a thread
/// of its own, until dropped. While no store exists there is nothing to interrupt, so
/// the thread sleeps until [`EpochClock::wake`]: an idle worker costs no wake-ups.
pub(crate) struct EpochClock {
    stop: Arc<AtomicBool>,
    engines: ClockedEngines,
    thread: std::thread::Thread,
    /// Ticks so far, to see that an idle clock stands still.
    ticks: Arc<std::sync::atomic::AtomicU64>,
}

impl EpochClock {
    /// Starts ticking `engines` (those added later too). After the clock is dropped it
    /// keeps ticking while any of `live`'s `slots` permits is out (a store still
    /// exists): a running guest yields, and meets its deadline, only on ticks, so
    /// without them a guest still running when its worker goes (at shutdown) would
    /// spin forever.
    pub(crate) fn start(
        engines: ClockedEngines,
        live: Arc<tokio::sync::Semaphore>,
        slots: usize,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (stopped, ticked, counted) = (stop.clone(), engines.clone(), ticks.clone());
        let thread = std::thread::Builder::new()
            .name("faas-epoch".into())
            .spawn(move || {
                let idle = || live.available_permits() >= slots;
                while !(stopped.load(Ordering::Relaxed) && idle()) {
                    if idle() {
                        // A store made after this check unparks us first, and the
                        // unpark is kept for this park: no wake-up is lost.
                        std::thread::park_timeout(IDLE_RECHECK);
                        continue;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    ticked.tick();
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            })
            .expect("spawning the epoch thread")
            .thread()
            .clone();
        Self {
            stop,
            engines,
            thread,
            ticks,
        }
    }

    /// Resumes ticking after a store was made (its instance slot taken).
    pub(crate) fn wake(&self) {
        self.thread.unpark();
    }

    /// How many ticks the clock has made.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// A function that ends the current tick of every engine now, so every running
    /// guest reaches its epoch callback (and yields) within microseconds: how a guest
    /// of a tenant below its fair share gets the cores without waiting for a tick.
    pub(crate) fn preempter(&self) -> impl Fn() + Send + Sync + 'static {
        let engines = self.engines.clone();
        move || engines.tick()
    }
}

/// The engines an [`EpochClock`] ticks, shared with whoever builds engines later (a
/// worker's later engines are built on blocking threads, away from the clock).
#[derive(Clone, Default)]
pub(crate) struct ClockedEngines(Arc<Mutex<Vec<Engine>>>);

impl ClockedEngines {
    /// Ticks `engine` too, from the next tick on.
    pub(crate) fn add(&self, engine: Engine) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(engine);
    }

    /// Ends the current epoch of every engine.
    fn tick(&self) {
        for engine in self.0.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            engine.increment_epoch();
        }
    }
}

impl Drop for EpochClock {
    fn drop(&mut self) {
        // The thread ends by itself once no store is left.
        self.stop.store(true, Ordering::Relaxed);
        self.thread.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::Semaphore;

    /// A component that instantiates an empty core module `count` times, and does
    /// nothing else.
    fn component_of_core_instances(count: u32) -> Vec<u8> {
        let mut component = b"\0asm\x0d\0\x01\0".to_vec();
        let module = b"\0asm\x01\0\0\0";
        component.extend([1, module.len() as u8]);
        component.extend(module);
        // The core instance section: `count` times (instantiate module 0, no args).
        let mut instances = Vec::new();
        leb128(&mut instances, count);
        for _ in 0..count {
            instances.extend([0, 0, 0]);
        }
        component.push(2);
        leb128(&mut component, instances.len() as u32);
        component.extend(instances);
        component
    }

    fn leb128(out: &mut Vec<u8>, mut value: u32) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    #[tokio::test]
    async fn every_slot_may_hold_a_component_of_the_most_core_instances_and_no_more() {
        // The pool had four core instances a slot, and no bound per component: a few
        // instances of a component making hundreds of them left every other
        // tenant's instantiation failing.
        let dir = tempfile::tempdir().unwrap();
        let mut config = WorkerConfig::new(dir.path());
        config.max_instances = 4;
        let codegen = Codegen {
            fuel: false,
            memory_init_cow: false,
        };
        let engine = build_engine(&config, codegen, PoolReset::Whole { bytes: 0 }).unwrap();
        let over = component_of_core_instances(MAX_CORE_INSTANCES_PER_COMPONENT + 1);
        let refused = wasmtime::component::Component::new(&engine, over).unwrap_err();
        assert!(
            format!("{refused:?}").contains("core module instances"),
            "{refused:?}"
        );
        let most = component_of_core_instances(MAX_CORE_INSTANCES_PER_COMPONENT);
        let component = wasmtime::component::Component::new(&engine, most).unwrap();
        let linker = wasmtime::component::Linker::<()>::new(&engine);
        let mut stores = Vec::new();
        for slot in 0..config.max_instances * 2 {
            let mut store = wasmtime::Store::new(&engine, ());
            if let Err(err) = linker.instantiate_async(&mut store, &component).await {
                panic!("slot {slot} of {}: {err:?}", config.max_instances * 2);
            }
            stores.push(store);
        }
    }

    #[test]
    fn the_clock_stands_still_while_no_store_exists() {
        let slots = Arc::new(Semaphore::new(2));
        let engines = ClockedEngines::default();
        engines.add(Engine::default());
        let clock = EpochClock::start(engines, slots.clone(), 2);
        std::thread::sleep(EPOCH_TICK * 25);
        assert_eq!(clock.ticks(), 0, "an idle clock must not tick");
        let permit = slots.clone().try_acquire_owned().unwrap();
        clock.wake();
        std::thread::sleep(EPOCH_TICK * 25);
        let while_busy = clock.ticks();
        assert!(
            while_busy >= 5,
            "ticked {while_busy} times while a store existed"
        );
        drop(permit);
        std::thread::sleep(EPOCH_TICK * 5);
        let settled = clock.ticks();
        std::thread::sleep(EPOCH_TICK * 25);
        assert!(
            clock.ticks() <= settled + 1,
            "kept ticking once idle again: {settled} then {}",
            clock.ticks()
        );
    }
}

/// Waits out a pool found full at instantiation, for at most [`POOL_WAIT`]: the slot
/// semaphore let the event in, so a slot is on its way back from a store whose data
/// is gone but whose instance Wasmtime is still resetting (a thread preempted there on
/// busy cores can hold it while other events come and go).
#[derive(Debug, Default)]
pub(crate) struct PoolWait {
    waited: Duration,
}

/// The longest [`PoolWait`] waits for a pool slot before the event fails as overloaded.
const POOL_WAIT: Duration = Duration::from_millis(200);

impl PoolWait {
    /// Whether to instantiate again after `made` (once a moment has passed): it failed
    /// only because the pool was full, and the wait is not over.
    pub(crate) async fn again<T>(&mut self, made: &wasmtime::Result<T>) -> bool {
        let full = matches!(made, Err(err) if err.is::<wasmtime::PoolConcurrencyLimitError>());
        if !full || self.waited >= POOL_WAIT {
            return false;
        }
        let pause = Duration::from_millis(2);
        tokio::time::sleep(pause).await;
        self.waited += pause;
        true
    }
}
