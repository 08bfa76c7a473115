//! The Wasmtime engines a worker's functions share (one without fuel metering, and one
//! with it for the functions that have a fuel limit), and the clock that enforces
//! deadlines on both.

use crate::config::WorkerConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances. Deadlines are rounded up to whole ticks, so a
/// runaway guest is stopped at most one tick late.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(2);

/// How much of each pooled memory and table slot stays resident between instances.
const KEEP_RESIDENT_BYTES: usize = 2 << 20;

/// How many unused slots stay warm (resident, ready for the component that last used
/// them). Enough for the busy functions of a worker; beyond it, idle slots are released.
const MAX_WARM_SLOTS: u32 = 16;

/// Builds an engine: pooling allocator and epoch interruption, and fuel metering if
/// `fuel`.
///
/// Fuel is compiled into every function of an engine (a counter updated in every
/// block), which costs compute-heavy guests time (4-27% in bench/cachesim.sh), while
/// epochs already bound an event's time. So a worker compiles functions without a
/// fuel limit for an engine without metering, and only those with one for a metered
/// engine; both are built here, so their pooling and epoch settings cannot drift apart.
pub(crate) fn build_engine(config: &WorkerConfig, fuel: bool) -> wasmtime::Result<Engine> {
    let mut wasm = Config::new();
    wasm.epoch_interruption(true);
    wasm.consume_fuel(fuel);
    // Regions map payload pages at host addresses inside linear memories; a memory
    // that moved on growth would leave those mappings behind.
    wasm.memory_may_move(false);
    if config.pooling {
        let mut pool = PoolingAllocationConfig::new();
        // `max_instances` (the slot semaphore) bounds live stores. A store frees its
        // permit when its data is dropped, which Wasmtime does before it hands the
        // instance's pool slot back (so that regions are unmapped before any reuse);
        // an event that takes the permit at once can then find the pool still full for
        // a moment. Twice the slots costs only address space.
        let slots = config.max_instances.saturating_mul(2);
        pool.total_component_instances(slots)
            // A Rust component holds a few core instances (its module plus shims).
            .total_core_instances(slots.saturating_mul(4))
            .total_memories(slots)
            .total_tables(slots.saturating_mul(2))
            .max_memory_size(config.max_memory_mb as usize * (1 << 20))
            .max_memories_per_component(2)
            .max_tables_per_component(4)
            .total_stacks(slots)
            // Resetting a slot by zeroing its first pages instead of handing them back
            // to the kernel avoids page faults and TLB shootdowns on every event,
            // which otherwise dominate a small function's cost.
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
            .table_keep_resident(KEEP_RESIDENT_BYTES)
            // Each component keeps affinity to the slots it used; bound how many idle
            // slots stay warm, so idle workflows do not hold resident memory.
            .max_unused_warm_slots(MAX_WARM_SLOTS);
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        // Copy data segments into resident pages instead of mapping a copy-on-write
        // image: with kept-resident slots, instantiation then needs no page-table
        // changes at all, so no cross-core TLB shootdowns.
        wasm.memory_init_cow(false);
    }
    Engine::new(&wasm)
}

/// Advances the epoch of every engine it was given every [`EPOCH_TICK`], on a thread
/// of its own, until dropped.
pub(crate) struct EpochClock {
    stop: Arc<AtomicBool>,
    engines: Arc<Mutex<Vec<Engine>>>,
}

impl EpochClock {
    /// Starts ticking `engine`. After the clock is dropped it keeps ticking while any
    /// of `live`'s `slots` permits is out (a store still exists): a running guest
    /// yields, and meets its deadline, only on ticks, so without them a guest still
    /// running when its worker goes (at shutdown) would spin forever.
    pub(crate) fn start(engine: Engine, live: Arc<tokio::sync::Semaphore>, slots: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let engines = Arc::new(Mutex::new(vec![engine]));
        let (stopped, ticked) = (stop.clone(), engines.clone());
        std::thread::Builder::new()
            .name("faas-epoch".into())
            .spawn(move || {
                while !(stopped.load(Ordering::Relaxed) && live.available_permits() >= slots) {
                    std::thread::sleep(EPOCH_TICK);
                    for engine in ticked.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                        engine.increment_epoch();
                    }
                }
            })
            .expect("spawning the epoch thread");
        Self { stop, engines }
    }

    /// A function that ends the current tick of every engine now, so every running
    /// guest reaches its epoch callback (and yields) within microseconds: how a guest
    /// of a tenant below its fair share gets the cores without waiting for a tick.
    pub(crate) fn preempter(&self) -> impl Fn() + Send + Sync + 'static {
        let engines = self.engines.clone();
        move || {
            for engine in engines.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                engine.increment_epoch();
            }
        }
    }

    /// Ticks `engine` too, from the next tick on.
    pub(crate) fn add(&self, engine: Engine) {
        self.engines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(engine);
    }
}

impl Drop for EpochClock {
    fn drop(&mut self) {
        // The thread ends by itself once no store is left.
        self.stop.store(true, Ordering::Relaxed);
    }
}
