//! How a worker is set up: where it caches compiled code, how many instances may run at
//! once, and the default limits every instance runs under.

use std::path::PathBuf;
use std::time::Duration;

/// Limits one instance runs under. Defaults: 128 MiB of linear memory, a 10 s deadline
/// and no fuel limit (the deadline already bounds an event's time, and fuel metering
/// slows all compiled code, so only functions given a fuel limit pay for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest linear memory an instance may grow to, in MiB.
    pub memory_mb: u32,
    /// Wall-clock time an event may take before it is interrupted.
    pub timeout: Duration,
    /// Fuel (roughly, wasm instructions) an event may burn; `None` turns fuel off: the
    /// function is then compiled without fuel metering.
    pub fuel: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mb: 128,
            timeout: Duration::from_secs(10),
            fuel: None,
        }
    }
}

/// Everything a [`crate::Worker`] needs to start.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Directory for precompiled components (created if missing).
    pub cache_dir: PathBuf,
    /// How many bytes of compiled components `cache_dir` may hold; the least recently
    /// used are deleted beyond it (0: no limit). See [`crate::cache`].
    pub cache_max_bytes: u64,
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
    /// How a pooled memory slot is made ready for the next instance.
    pub slot_reset: SlotReset,
    /// Regions of at least this many bytes are mapped into the next step's memory;
    /// shorter ones are copied, which measured faster than the page faults of a
    /// mapping (see [`DEFAULT_REGION_MAP_THRESHOLD`]).
    /// `usize::MAX` turns mapping off (every region is copied once).
    pub region_map_threshold: usize,
    /// How many guests may run at the same moment (turns of [`crate::fair`]): the
    /// cores given to guest code. A freed turn goes to the tenant running the fewest
    /// guests, so one tenant's busy loops cannot take every core while another tenant
    /// waits. Defaults to the number of cores.
    pub guest_turns: usize,
    /// How many instances one tenant may hold at once, so that one tenant cannot take
    /// every instance slot. Defaults to half of `max_instances`.
    pub max_instances_per_tenant: u32,
    /// How much guest memory (linear memory, and region bytes copied into the host) all
    /// instances may hold at once, and one tenant's (`per_holder`), so that one
    /// tenant's instances cannot take the machine's memory (`crate::memory_budget`).
    /// Defaults to half the memory the process may use, and half of that per tenant.
    pub guest_memory: faas_budget::BudgetLimits,
    /// How many regions one instance may create (`create-in` and `from-bytes`).
    pub max_regions_per_instance: usize,
    /// How many resource handles one instance may hold at once, its regions among them
    /// (so above `max_regions_per_instance`). Header fields, requests, bodies, streams
    /// and pollables live in the host, outside the instance's memory limit, so this
    /// bounds that memory: at most about [`crate::host_limits::MAX_FIELDS_BYTES`] per
    /// handle (see [`crate::host_limits`]).
    pub max_handles_per_instance: usize,
    /// How many outbound HTTP requests one instance may have in flight at once (each
    /// holds a connection, a descriptor, until its response body is read or dropped).
    pub max_outbound_connections_per_instance: usize,
    /// How many outbound HTTP connections all instances of the worker may have open at
    /// once (each a descriptor), one tenant's at most a quarter of them; a request past
    /// either fails at once with `connection-limit-reached`.
    pub max_outbound_connections: usize,
    /// The non-public networks (loopback, private, link-local...) outbound HTTP may
    /// reach, through an `allowed_outbound_hosts` entry that names its host, each opened
    /// to one tenant or to all; none by default, since a tenant chooses its entries and
    /// what their names resolve to.
    pub outbound_private_networks: faas_workflow::OpenedNetworks,
    /// How many region memory files may be open in this worker at once (a quarter of
    /// them per tenant): each is a file descriptor, so this keeps guests far from the
    /// process's descriptor limit.
    pub max_region_files: usize,
    /// How many guest page ranges the host may have mapped or protected for regions
    /// at once in this worker (a quarter of them per tenant). Each may split one of
    /// the process's memory maps in three, and the kernel allows a process only
    /// `vm.max_map_count` of them: past that every `mmap` and `mprotect` fails,
    /// Wasmtime's and the allocator's too, for every tenant.
    pub max_region_mappings: u64,
    /// Where components are compiled: in this process by default; `faas` compiles each
    /// in a child process bounded in time and memory ([`crate::compiler`]).
    pub compiler: crate::compiler::Compiler,
    /// Called on the blocking thread that loaded (and perhaps compiled) a component,
    /// right after the load. A compile allocates and frees tens of MiB, and an
    /// allocator that returns freed memory lazily, from the thread that freed it, keeps
    /// that garbage resident while the thread sits idle; the embedder, which chose the
    /// process's allocator, can release it here. Does nothing by default.
    pub after_load: fn(),
}

/// How a pooled memory slot is made ready for the next instance after an event
/// ([`WorkerConfig::slot_reset`]). Either way no instance ever sees another's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotReset {
    /// Each function starts with [`Self::WrittenPages`]; one whose events keep
    /// faulting pages back in (more than 32 minor faults in each of 16 events after
    /// its first 16: the worker's `placement.rs`) moves to [`Self::Whole`] resets of
    /// `whole_bytes`. Small components and large ones that write little keep the
    /// cheap reset; large interpreters get the one that suits them. Chosen per
    /// function, not per component, so that one tenant's events never choose for
    /// another tenant's function of the same bytes. The default, with 16 MiB.
    ByFunction {
        /// How much of each memory slot a moved function keeps resident and resets
        /// in full.
        whole_bytes: usize,
    },
    /// Zero (or restore from the component's image) only the pages the event wrote
    /// among the first 2 MiB of the memory, found by asking the kernel
    /// (`PAGEMAP_SCAN`, Linux 6.7+; all of those bytes elsewhere), and hand the rest
    /// back to the kernel. Cheapest for small components and for large ones that
    /// write little; at most 2 MiB per idle slot stays resident.
    WrittenPages,
    /// Zero (or restore) the whole first `bytes` of the memory after every event and
    /// keep them resident, without asking the kernel which pages were written. For
    /// large interpreters (Python, JavaScript): their events write pages all over their
    /// heaps, in more runs than Wasmtime 48's scan follows (it hands back everything
    /// past its 32nd run, which the next event faults in again). Costs `bytes` of
    /// resident memory per idle slot, and a small component's event resets all of its
    /// memory up to `bytes` (README, "Component sizes").
    Whole {
        /// How much of each memory slot stays resident and is reset in full.
        bytes: usize,
    },
}

/// The default [`SlotReset::ByFunction`] size: a Python or JavaScript hello's whole
/// heap (bench/sizes.sh).
pub const DEFAULT_WHOLE_RESET_BYTES: usize = 16 << 20;

impl Default for SlotReset {
    fn default() -> Self {
        Self::ByFunction {
            whole_bytes: DEFAULT_WHOLE_RESET_BYTES,
        }
    }
}

/// The default [`WorkerConfig::max_regions_per_instance`]: far more than a fan-out
/// needs (one region per branch), far fewer than would strain the host.
pub const DEFAULT_MAX_REGIONS_PER_INSTANCE: usize = 1024;

/// The default [`WorkerConfig::max_handles_per_instance`]: hundreds of concurrent
/// outbound requests' worth (each holds a few handles), and at most about 128 MiB of
/// host memory at [`crate::host_limits::MAX_FIELDS_BYTES`] each, the default memory
/// limit of an instance.
pub const DEFAULT_MAX_HANDLES_PER_INSTANCE: usize = 2048;

/// The default [`WorkerConfig::max_outbound_connections_per_instance`]: a fan-out to
/// dozens of services at once; with the default instance quota, at most 16,000
/// connections per tenant per worker.
pub const DEFAULT_MAX_OUTBOUND_CONNECTIONS_PER_INSTANCE: usize = 32;

/// The default [`WorkerConfig::max_outbound_connections`]: a quarter of the
/// descriptors the process may open, as region files have another (the instance cap
/// alone allowed 16,000 per tenant).
pub fn default_max_outbound_connections() -> usize {
    default_max_region_files()
}

/// The default [`WorkerConfig::max_region_files`]: a quarter of the descriptors the
/// process may open (after [`crate::raise_descriptor_limit`]), so sockets, compiled
/// code and everything else keep three quarters.
pub fn default_max_region_files() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1 << 20);
    usize::try_from(limit / 4).unwrap_or(usize::MAX).max(16)
}

/// The default [`WorkerConfig::max_region_mappings`]: a quarter of the kernel's limit on
/// a process's memory maps (`vm.max_map_count`, 65,530 unless raised), so that at
/// most half of the maps are regions' (each range splits a map in three at most).
pub fn default_max_region_mappings() -> u64 {
    let max_map_count = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(65_530);
    max_map_count / 4
}

/// The default [`WorkerConfig::region_map_threshold`], measured with
/// `bench/regions.sh --sweep` (an A→B chain, mapped against copied, the two modes
/// alternating run by run, on a 2-core VM). Up to 512 KiB copying is as fast or faster
/// (handoff 0.8-0.98x of mapping's time at the median, end to end with the consumer
/// reading every byte 0.84-0.96x, and less CPU): a memcpy into fresh pages beats the
/// page faults of a mapping. At 1 MiB mapping wins the handoff (0.83x) and ties end to
/// end; from 2 MiB it wins everything: handoff 0.27x, end to end 0.86x, the whole
/// request 0.92x, CPU 0.98x, and the gap widens with size (16 MiB: 0.04x handoff,
/// 0.75x end to end). So values from 2 MiB up are mapped.
///
/// A later 2-core VM found mapping no slower than copying at any size from 16 KiB
/// (README, "Regions: A→B handoff, mapped vs copied vs HTTP+JSON"); 2 MiB stays the
/// default, on the side that is safe on both, until sweeps on more machines settle it.
///
/// The producer's teardown is put off until the consumer has placed the value whether
/// it is mapped or copied; before that was so, copies looked slower than they are
/// because the teardown competed with the consumer's start.
pub const DEFAULT_REGION_MAP_THRESHOLD: usize = 2 << 20;

impl WorkerConfig {
    /// A configuration with default limits that caches compiled code in `cache_dir`.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        Self {
            cache_dir: cache_dir.into(),
            cache_max_bytes: crate::cache::DEFAULT_CACHE_MAX_BYTES,
            default_limits: Limits::default(),
            max_memory_mb: 512,
            max_instances: 1000,
            pooling: true,
            slot_reset: SlotReset::default(),
            region_map_threshold: DEFAULT_REGION_MAP_THRESHOLD,
            guest_turns: std::thread::available_parallelism().map_or(1, usize::from),
            max_instances_per_tenant: 500,
            guest_memory: crate::memory_budget::default_guest_memory(),
            max_regions_per_instance: DEFAULT_MAX_REGIONS_PER_INSTANCE,
            max_handles_per_instance: DEFAULT_MAX_HANDLES_PER_INSTANCE,
            max_outbound_connections_per_instance: DEFAULT_MAX_OUTBOUND_CONNECTIONS_PER_INSTANCE,
            max_outbound_connections: default_max_outbound_connections(),
            outbound_private_networks: faas_workflow::OpenedNetworks::default(),
            max_region_files: default_max_region_files(),
            max_region_mappings: default_max_region_mappings(),
            compiler: crate::compiler::Compiler::InProcess,
            after_load: || {},
        }
    }
}
