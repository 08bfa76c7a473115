//! The Wasmtime engine every function of a worker shares, and the clock that enforces
//! deadlines.

use crate::config::WorkerConfig;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances. Deadlines are rounded up to whole ticks, so a
/// runaway guest is stopped at most one tick late.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// How much of each pooled memory and table slot stays resident between instances.
const KEEP_RESIDENT_BYTES: usize = 2 << 20;

/// How many unused slots stay warm (resident, ready for the component that last used
/// them). Enough for the busy functions of a worker; beyond it, idle slots are released.
const MAX_WARM_SLOTS: u32 = 16;

/// Builds the engine: pooling allocator, epoch interruption, fuel if the default limits
/// use it.
pub(crate) fn build_engine(config: &WorkerConfig) -> wasmtime::Result<Engine> {
    let mut wasm = Config::new();
    wasm.epoch_interruption(true);
    // Always metered so any function can be given a fuel limit in workflow.toml.
    wasm.consume_fuel(true);
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

/// Advances the engine's epoch every [`EPOCH_TICK`] on a thread of its own until
/// dropped.
pub(crate) struct EpochClock {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EpochClock {
    pub(crate) fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("faas-epoch".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawning the epoch thread");
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for EpochClock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The number of epoch ticks that covers `timeout`, plus one because the current tick
/// is already partly over.
pub(crate) fn deadline_ticks(timeout: Duration) -> u64 {
    let tick = EPOCH_TICK.as_nanos();
    (timeout.as_nanos().div_ceil(tick) as u64).saturating_add(1)
}
