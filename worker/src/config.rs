//! How a worker is set up: where it caches compiled code, how many instances may run at
//! once, and the default limits every instance runs under.

use std::path::PathBuf;
use std::time::Duration;

/// Limits one instance runs under. Defaults are on: 128 MiB of linear memory, a 10 s
/// deadline and 10 billion units of fuel per event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest linear memory an instance may grow to, in MiB.
    pub memory_mb: u32,
    /// Wall-clock time an event may take before it is interrupted.
    pub timeout: Duration,
    /// Fuel (roughly, wasm instructions) an event may burn; `None` turns fuel off.
    pub fuel: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mb: 128,
            timeout: Duration::from_secs(10),
            fuel: Some(10_000_000_000),
        }
    }
}

/// Everything a [`crate::Worker`] needs to start.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Directory for precompiled components (created if missing).
    pub cache_dir: PathBuf,
    /// Defaults for functions whose workflow.toml sets no limits. A function may ask
    /// for less or more memory, but never more than `max_memory_mb`.
    pub default_limits: Limits,
    /// The most memory any one instance may have: the size of a pooling-allocator slot.
    pub max_memory_mb: u32,
    /// How many instances may exist at once (pooling-allocator slots). An event that
    /// finds none free waits for one, up to its deadline, then fails with
    /// [`crate::InvokeError::Overloaded`].
    pub max_instances: u32,
    /// Use the pooling allocator (the default) rather than allocating each instance's
    /// memory on demand.
    pub pooling: bool,
    /// Regions of at least this many bytes are mapped into the next step's memory;
    /// shorter ones are copied, which is cheaper than changing page tables.
    /// `usize::MAX` turns mapping off (every region is copied once).
    pub region_map_threshold: usize,
}

/// The default [`WorkerConfig::region_map_threshold`]. From the prototype figures in
/// the design notes (a copy into fresh pages costs about 0.7 ms per MiB, a mapping
/// 4-15 us plus its page faults), a copy only wins for values of a few 64 KiB pages;
/// 256 KiB is a conservative crossover, not yet re-measured with `bench/regions.sh`.
pub const DEFAULT_REGION_MAP_THRESHOLD: usize = 256 << 10;

impl WorkerConfig {
    /// A configuration with default limits that caches compiled code in `cache_dir`.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        Self {
            cache_dir: cache_dir.into(),
            default_limits: Limits::default(),
            max_memory_mb: 512,
            max_instances: 1000,
            pooling: true,
            region_map_threshold: DEFAULT_REGION_MAP_THRESHOLD,
        }
    }
}
