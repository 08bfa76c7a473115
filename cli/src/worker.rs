//! `faas worker` (services mode: a worker that registers in Redis and runs what is
//! placed on it) and the worker flags `faas up` shares. Everything in this crate that
//! needs `faas-worker`, and so Wasmtime, is here or in `up`: without the default
//! `worker` feature, `no_worker.rs` stands in for this module, so that a `faas` for the
//! gateway and operator images carries no compiler.

use crate::args::{BrokerArgs, IdentityArgs};
use crate::services::{InternalTokenArgs, LogStreamArgs, MetricsArgs, RedisArgs, wait_for_signal};
use anyhow::Context;
use faas_budget::mib_or_unlimited;
use faas_store::broker::RedisBroker;
use faas_worker::cache::DEFAULT_CACHE_MAX_BYTES;
use faas_worker::compiler::{
    CompileLimits, Compiler, DEFAULT_COMPILE_MEMORY_MB, DEFAULT_COMPILE_TIME,
};
use faas_worker::config::{
    DEFAULT_MAX_HANDLES_PER_INSTANCE, DEFAULT_MAX_OUTBOUND_CONNECTIONS_PER_INSTANCE,
    DEFAULT_MAX_REGIONS_PER_INSTANCE, DEFAULT_REGION_MAP_THRESHOLD, DEFAULT_WHOLE_RESET_BYTES,
};
use faas_worker::kv::{DEFAULT_MAX_BYTES, DEFAULT_MAX_KEYS, KvQuota};
use faas_worker::services::{Node, NodeConfig, NodeListeners};
use faas_worker::{KeyValueStore, Limits, SlotReset, Worker, WorkerConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use crate::up::{UpArgs, run as up};
pub use faas_worker::compiler::run_if_child as run_if_compile_child;
pub use faas_worker::raise_descriptor_limit;

/// A worker's limits and capacity.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// Directory for precompiled components; defaults to <data-dir>/cache. Processes
    /// may share one.
    #[arg(long, env = "FAAS_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Most compiled code the cache directory may hold, in MiB; the least recently used
    /// components are deleted beyond it. 0 for no limit.
    #[arg(long, env = "FAAS_CACHE_MAX_MB", default_value_t = DEFAULT_CACHE_MAX_BYTES >> 20)]
    pub cache_max_mb: u64,
    /// How many key-value keys each tenant may keep. 0 for no limit.
    #[arg(long, env = "FAAS_KV_MAX_KEYS", default_value_t = DEFAULT_MAX_KEYS)]
    pub kv_max_keys: u64,
    /// How many bytes of key-value keys and values each tenant may keep. 0 for no
    /// limit.
    #[arg(long, env = "FAAS_KV_MAX_BYTES", default_value_t = DEFAULT_MAX_BYTES)]
    pub kv_max_bytes: u64,
    /// Default memory limit of an instance, in MiB.
    #[arg(long, env = "FAAS_MEMORY_MB", default_value_t = Limits::default().memory_mb)]
    pub memory_mb: u32,
    /// Largest memory limit a function may ask for, in MiB.
    #[arg(long, env = "FAAS_MAX_MEMORY_MB", default_value_t = 512)]
    pub max_memory_mb: u32,
    /// Default deadline of an event, in milliseconds.
    #[arg(long, env = "FAAS_TIMEOUT_MS", default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Default fuel of an event (about one unit per wasm instruction); 0 for unlimited.
    /// Functions with a fuel limit (this default, or `fuel` in workflow.toml) are
    /// compiled with fuel metering, which slows compute-heavy code (4-27% in
    /// bench/cachesim.sh); the deadline (`--timeout-ms`) bounds every event either way.
    #[arg(long, env = "FAAS_FUEL", default_value_t = 0)]
    pub fuel: u64,
    /// How many instances may run at once, per worker.
    #[arg(long, env = "FAAS_MAX_INSTANCES", default_value_t = 1000)]
    pub max_instances: u32,
    /// How an instance's memory slot is reset after each event: `by-function` (the
    /// default) resets only the pages an event wrote, except for functions whose
    /// events keep faulting pages in (large interpreters: Python, JavaScript), which
    /// are moved to whole resets after their first events; `written-pages` never moves
    /// them; `whole` resets every slot whole (README, "Component sizes").
    #[arg(long, env = "FAAS_SLOT_RESET", value_enum, default_value_t = SlotResetArg::ByFunction)]
    pub slot_reset: SlotResetArg,
    /// How many MiB of a memory slot a whole reset zeroes (or restores) and keeps
    /// resident, per idle slot.
    #[arg(long, env = "FAAS_WHOLE_SLOT_RESET_MB", default_value_t = (DEFAULT_WHOLE_RESET_BYTES >> 20) as u32,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub whole_slot_reset_mb: u32,
    /// Regions of at least this many bytes are mapped into the next step's memory
    /// instead of copied; `off` copies every region once (for comparison).
    #[arg(long, env = "FAAS_REGION_MAP_THRESHOLD", value_name = "BYTES|off",
          default_value_t = MapThreshold(DEFAULT_REGION_MAP_THRESHOLD), value_parser = parse_map_threshold)]
    pub region_map_threshold: MapThreshold,
    /// How many workflows each worker may hold before placement spills to another.
    #[arg(
        long = "worker-capacity",
        env = "FAAS_WORKER_CAPACITY",
        default_value_t = faas_shared_state::DEFAULT_WORKER_CAPACITY
    )]
    pub capacity: usize,
    /// How many guests may run at the same moment; a freed turn goes to the tenant
    /// running the fewest guests. Defaults to the number of cores.
    #[arg(long, env = "FAAS_GUEST_TURNS")]
    pub guest_turns: Option<usize>,
    /// How many instances one tenant may hold at once, per worker. Defaults to half of
    /// `--max-instances`.
    #[arg(long, env = "FAAS_MAX_INSTANCES_PER_TENANT")]
    pub max_instances_per_tenant: Option<u32>,
    /// How much guest memory (instances' linear memory, and region bytes they copy into
    /// the host) all instances of a worker may hold at once, in MiB; a guest whose
    /// memory would grow past it traps, and its event fails with 503 `memory_budget`.
    /// Defaults to half the memory the process may use (its cgroup's limit, else the
    /// machine's). 0 for no limit.
    #[arg(long, env = "FAAS_GUEST_MEMORY_MB")]
    pub guest_memory_mb: Option<u64>,
    /// How much of `--guest-memory-mb` one tenant's instances may hold at once, in MiB.
    /// Defaults to half of it. 0 for no limit.
    #[arg(long, env = "FAAS_TENANT_GUEST_MEMORY_MB")]
    pub tenant_guest_memory_mb: Option<u64>,
    /// How many regions one instance may create.
    #[arg(long, env = "FAAS_MAX_REGIONS_PER_INSTANCE", default_value_t = DEFAULT_MAX_REGIONS_PER_INSTANCE)]
    pub max_regions_per_instance: usize,
    /// How many resource handles (header fields, bodies, streams, pollables, and its
    /// regions) one instance may hold at once: they hold host memory its memory limit
    /// does not count. Must be above `--max-regions-per-instance`.
    #[arg(long, env = "FAAS_MAX_HANDLES_PER_INSTANCE", default_value_t = DEFAULT_MAX_HANDLES_PER_INSTANCE)]
    pub max_handles_per_instance: usize,
    /// How many outbound HTTP requests one instance may have in flight at once; one
    /// more fails at once with `connection-limit-reached`.
    #[arg(long, env = "FAAS_MAX_OUTBOUND_CONNECTIONS_PER_INSTANCE", default_value_t = DEFAULT_MAX_OUTBOUND_CONNECTIONS_PER_INSTANCE)]
    pub max_outbound_connections_per_instance: usize,
    /// How many outbound HTTP connections all of a worker's instances may have open at
    /// once, one tenant's at most a quarter of them; one more fails at once with
    /// `connection-limit-reached`. Defaults to a quarter of the descriptors the process
    /// may open.
    #[arg(long, env = "FAAS_MAX_OUTBOUND_CONNECTIONS")]
    pub max_outbound_connections: Option<usize>,
    /// Non-public networks (loopback, private, link-local) that guests' outbound HTTP
    /// may reach, comma-separated CIDR ranges or addresses (`10.1.0.0/16,127.0.0.1`),
    /// and only through an `allowed_outbound_hosts` entry that names the host.
    /// `TENANT=NETWORK` (`acme=10.1.0.0/16`) opens a network to that tenant's functions
    /// only; a bare one opens it to every tenant's. None by default: a tenant chooses
    /// its entries, and what their names resolve to. A network holding a cloud
    /// metadata address (`169.254.169.254`...) is refused.
    #[arg(long, env = "FAAS_OUTBOUND_PRIVATE_NETWORKS", value_delimiter = ',')]
    pub outbound_private_networks: Vec<faas_workflow::OpenedNetwork>,
    /// How many region memory files may be open at once, per worker (a quarter of
    /// them per tenant). Defaults to a quarter of the process's descriptor limit.
    #[arg(long, env = "FAAS_MAX_REGION_FILES")]
    pub max_region_files: Option<usize>,
    /// How many guest page ranges regions may have mapped or protected at once, per
    /// worker; a tenant a quarter of them. Each splits the kernel's memory maps of the
    /// process, of which it allows only `vm.max_map_count`. Defaults to a quarter of
    /// that.
    #[arg(long, env = "FAAS_MAX_REGION_MAPPINGS", value_parser = clap::value_parser!(u64).range(4..))]
    pub max_region_mappings: Option<u64>,
    /// How long compiling the components of one deploy may take in all, in seconds;
    /// each is compiled in a child process, killed past this (the deploy then fails).
    #[arg(long, env = "FAAS_COMPILE_TIMEOUT_SECS", default_value_t = DEFAULT_COMPILE_TIME.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub compile_timeout_secs: u64,
    /// How much memory compiling one component may take, in MiB (what the compile
    /// child holds resident); past it the child is killed and the deploy fails.
    #[arg(long, env = "FAAS_COMPILE_MEMORY_MB", default_value_t = DEFAULT_COMPILE_MEMORY_MB,
          value_parser = clap::value_parser!(u64).range(64..))]
    pub compile_memory_mb: u64,
    /// How many tenants may have Redis connections of their own open at once in this
    /// process, for their guests' key-value commands, and as many for their messages
    /// (a tenant's is closed after a minute without a command); the tenants past it
    /// share one. Every process takes from Redis's `maxclients` (10,000 by default).
    /// 0: every tenant shares one.
    #[arg(long, env = "FAAS_REDIS_TENANT_CONNECTIONS", default_value_t = faas_store::DEFAULT_TENANT_CONNECTIONS)]
    pub redis_tenant_connections: usize,
}

/// `--slot-reset`: the choices of [`SlotReset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SlotResetArg {
    /// Written pages, or whole for functions whose events keep faulting pages in.
    ByFunction,
    /// Only the pages an event wrote, for every function.
    WrittenPages,
    /// Whole, for every function.
    Whole,
}

impl WorkerArgs {
    /// The key-value quota every tenant gets.
    pub fn kv_quota(&self) -> KvQuota {
        KvQuota::new(self.kv_max_keys, self.kv_max_bytes)
    }

    /// The worker configuration, caching compiled code under `data_dir` unless
    /// `--cache-dir` says otherwise.
    ///
    /// # Errors
    /// If the limits contradict each other, or the cache dir is not the process
    /// user's alone (`prepare_private_dir`).
    pub fn config(&self, data_dir: &Path) -> anyhow::Result<WorkerConfig> {
        // An instance's regions are among its handles: a region limit at or above the
        // handle limit would never be reached, the handle limit's trap coming first.
        if self.max_regions_per_instance >= self.max_handles_per_instance {
            anyhow::bail!(
                "--max-regions-per-instance ({}) must be below --max-handles-per-instance \
                 ({}): an instance's regions count among its handles",
                self.max_regions_per_instance,
                self.max_handles_per_instance
            );
        }
        let cache_dir = self
            .cache_dir
            .clone()
            .unwrap_or_else(|| data_dir.join("cache"));
        crate::args::prepare_private_dir(
            &cache_dir,
            "cache dir",
            "compiled code the worker loads and runs as native code",
            "--cache-dir",
        )?;
        let mut config = WorkerConfig::new(cache_dir);
        config.default_limits = Limits {
            memory_mb: self.memory_mb,
            timeout: Duration::from_millis(self.timeout_ms),
            fuel: (self.fuel > 0).then_some(self.fuel),
        };
        config.cache_max_bytes = self.cache_max_mb.saturating_mul(1 << 20);
        config.max_memory_mb = self.max_memory_mb;
        config.max_instances = self.max_instances;
        let whole_bytes = (self.whole_slot_reset_mb as usize) << 20;
        config.slot_reset = match self.slot_reset {
            SlotResetArg::ByFunction => SlotReset::ByFunction { whole_bytes },
            SlotResetArg::WrittenPages => SlotReset::WrittenPages,
            SlotResetArg::Whole => SlotReset::Whole { bytes: whole_bytes },
        };
        config.region_map_threshold = self.region_map_threshold.0;
        if let Some(turns) = self.guest_turns {
            config.guest_turns = turns.max(1);
        }
        config.max_instances_per_tenant = self
            .max_instances_per_tenant
            .unwrap_or(self.max_instances.div_ceil(2))
            .max(1);
        if let Some(total) = self.guest_memory_mb {
            config.guest_memory.total = mib_or_unlimited(total);
            config.guest_memory.per_holder = config.guest_memory.total / 2;
        }
        if let Some(share) = self.tenant_guest_memory_mb {
            config.guest_memory.per_holder = mib_or_unlimited(share);
        }
        config.max_regions_per_instance = self.max_regions_per_instance;
        config.max_handles_per_instance = self.max_handles_per_instance;
        config.max_outbound_connections_per_instance = self.max_outbound_connections_per_instance;
        if let Some(connections) = self.max_outbound_connections {
            config.max_outbound_connections = connections.max(4);
        }
        config.outbound_private_networks =
            faas_workflow::OpenedNetworks::new(&self.outbound_private_networks);
        if let Some(files) = self.max_region_files {
            config.max_region_files = files;
        }
        if let Some(mappings) = self.max_region_mappings {
            config.max_region_mappings = mappings;
        }
        config.compiler = Compiler::Child {
            // The running executable itself, even once an upgrade replaced or deleted
            // its file: a child of another build would compile for another engine.
            program: PathBuf::from("/proc/self/exe"),
            limits: CompileLimits {
                time: Duration::from_secs(self.compile_timeout_secs),
                memory_mb: self.compile_memory_mb,
            },
        };
        config.after_load = crate::allocator::release_freed_memory;
        Ok(config)
    }
}

/// `--region-map-threshold`: a byte count, or `off` (never map).
#[derive(Debug, Clone, Copy)]
pub struct MapThreshold(usize);

impl std::fmt::Display for MapThreshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 == usize::MAX {
            f.write_str("off")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

fn parse_map_threshold(value: &str) -> Result<MapThreshold, String> {
    if value == "off" {
        return Ok(MapThreshold(usize::MAX));
    }
    value
        .parse()
        .map(MapThreshold)
        .map_err(|_| format!("`{value}` is neither a byte count nor `off`"))
}

/// Arguments of `faas worker`.
#[derive(Debug, clap::Args)]
pub struct WorkerCmdArgs {
    #[command(flatten)]
    identity: IdentityArgs,
    #[command(flatten)]
    internal_token: InternalTokenArgs,
    #[command(flatten)]
    worker: WorkerArgs,
    #[command(flatten)]
    redis: RedisArgs,
    #[command(flatten)]
    broker: BrokerArgs,
    #[command(flatten)]
    logs: LogStreamArgs,
    /// Address of the internal API the gateway forwards events to.
    #[arg(long, env = "FAAS_WORKER_LISTEN", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// `host:port` the gateway reaches the internal API at; defaults to the address
    /// bound.
    #[arg(long, env = "FAAS_WORKER_ADVERTISE")]
    advertise: Option<String>,
    /// This worker's id among the workers; a random one by default.
    #[arg(long, env = "FAAS_WORKER_ID")]
    id: Option<String>,
    /// The other workers are the worker pods the operator records (Kubernetes), not
    /// what the registry in Redis says, which every worker may write: so that code that
    /// escaped another worker cannot pass for a peer of this one (the chart sets it).
    #[arg(long, env = "FAAS_WORKER_PODS")]
    worker_pods: bool,
    /// How long the worker counts as alive after its last heartbeat, in milliseconds;
    /// the scheduler places its workflows elsewhere after that (in Kubernetes, its
    /// `GET /readyz` fails after that, and its pod stops being Ready).
    #[arg(long, env = "FAAS_HEARTBEAT_TTL_MS", default_value_t = 3000)]
    heartbeat_ttl_ms: u64,
    /// Identifies this machine: workers with the same host id hand regions to each
    /// other as memory file descriptors. Defaults to the kernel's boot id.
    #[arg(long, env = "FAAS_HOST_ID")]
    host_id: Option<String>,
    /// The Unix socket other workers on this host pass region descriptors through;
    /// defaults to <data-dir>/worker.sock.
    #[arg(long, env = "FAAS_WORKER_SOCKET")]
    socket: Option<PathBuf>,
    #[command(flatten)]
    metrics: MetricsArgs,
    /// On SIGTERM, how long the worker may keep serving while its workflows are placed
    /// and loaded elsewhere and its events in flight finish, in milliseconds.
    #[arg(long, env = "FAAS_SHUTDOWN_GRACE_MS", default_value_t = 30_000)]
    shutdown_grace_ms: u64,
    /// Close an internal API connection after it carried no request for this many
    /// milliseconds.
    #[arg(long, env = "FAAS_INTERNAL_IDLE_TIMEOUT_MS", default_value_t = 60_000)]
    internal_idle_timeout_ms: u64,
    /// Most internal API connections one client address may hold open at once; more
    /// are refused.
    #[arg(long, env = "FAAS_INTERNAL_MAX_CONNECTIONS", default_value_t = 64)]
    internal_max_connections: usize,
}

/// Gives `worker`'s guests their Redis at `url`: the key-value store (with `args`'
/// quota) and `broker` for their messages and stream appends, both over connections
/// made on the guest threads ([`Worker::on_guest_threads`]) so that Redis's replies
/// wake guests there, at most `--redis-tenant-connections` tenants' own in each. The
/// broker's copy shares its settings and tenants' quotas.
pub(crate) async fn connect_guests_to_redis(
    worker: Worker,
    url: &str,
    args: &WorkerArgs,
    broker: &RedisBroker,
) -> anyhow::Result<Worker> {
    let (url, quota, tenant_connections) = (
        url.to_owned(),
        args.kv_quota(),
        args.redis_tenant_connections,
    );
    let broker = broker.clone().with_tenant_connections(tenant_connections);
    let (key_value, publisher) = worker
        .on_guest_threads(async move {
            let key_value = KeyValueStore::redis(&url)
                .await?
                .with_quota(quota)
                .with_tenant_connections(tenant_connections);
            anyhow::Ok((key_value, broker.with_own_connection().await?))
        })
        .await
        .context("connecting guests to Redis")??;
    Ok(worker
        .with_key_value(Arc::new(key_value))
        .with_publisher(Arc::new(publisher)))
}

/// Runs a worker until Ctrl-C or SIGTERM.
pub async fn worker(args: WorkerCmdArgs) -> anyhow::Result<()> {
    let token = args.internal_token.resolve(&args.identity.data_dir)?;
    let mut shared = args.redis.shared().await?;
    if args.worker_pods {
        shared = shared.requiring_worker_pods();
    }
    let broker = args.broker.connect(&args.redis.redis).await?;
    let logs = Arc::new(args.logs.writer(&args.redis).await?);
    let worker = Worker::new(args.worker.config(&args.identity.data_dir)?)?.with_logs(logs.clone());
    let worker = connect_guests_to_redis(worker, &args.redis.redis, &args.worker, &broker).await?;
    let worker = Arc::new(worker);
    follow_quotas(
        &args.redis.redis,
        Enforcers {
            worker: worker.clone(),
            broker,
            logs,
        },
        args.redis.interval(),
    )
    .await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let bound = listener.local_addr()?;
    let id = args
        .id
        .unwrap_or_else(|| format!("worker-{:08x}", rand::random::<u32>()));
    let config = NodeConfig {
        id: id.clone(),
        advertise: args.advertise.unwrap_or_else(|| bound.to_string()),
        capacity: args.worker.capacity,
        token,
        heartbeat_ttl: Duration::from_millis(args.heartbeat_ttl_ms.max(30)),
        sync_interval: args.redis.interval(),
        host_id: match args.host_id {
            Some(host_id) => host_id,
            None => boot_id()?,
        },
        socket: Some(
            args.socket
                .unwrap_or_else(|| args.identity.data_dir.join("worker.sock")),
        ),
        idle_timeout: Duration::from_millis(args.internal_idle_timeout_ms.max(1)),
        max_connections_per_client: args.internal_max_connections.max(1),
    };
    std::fs::create_dir_all(&args.identity.data_dir)
        .with_context(|| format!("creating data dir {}", args.identity.data_dir.display()))?;
    let (metrics, metrics_at) = args.metrics.bind().await?;
    let listeners = NodeListeners {
        internal: listener,
        metrics,
    };
    let node = Node::start(worker.clone(), shared, config, listeners)
        .context("binding the worker socket")?;
    println!("faas worker {id} is up at {bound}{metrics_at}");
    args.internal_token.print_source(&args.identity.data_dir);
    let swap_turned_on = tokio::select! {
        result = wait_for_signal() => { result?; false }
        () = worker.until_swap_turned_on() => true,
    };
    println!("draining");
    node.drain(Duration::from_millis(args.shutdown_grace_ms))
        .await;
    if swap_turned_on {
        anyhow::bail!("{SWAP_TURNED_ON}");
    }
    Ok(())
}

/// Why a process that runs guests stopped by itself: its workers reset instance slots
/// by scanning for the pages an event wrote, which misses pages swapped out, and refuse
/// to start instances since ([`Worker::until_swap_turned_on`]). Started again, it
/// resets slots in full.
pub(crate) const SWAP_TURNED_ON: &str = "a swap area was turned on while this process \
    ran guests; it stopped so that it can be started again with instance slots reset \
    in full (or with swap off)";

/// This boot of this machine, as the kernel names it.
fn boot_id() -> anyhow::Result<String> {
    let path = "/proc/sys/kernel/random/boot_id";
    Ok(std::fs::read_to_string(path)
        .with_context(|| format!("reading {path}; give --host-id"))?
        .trim()
        .to_owned())
}

/// What enforces the tenants' quotas in a worker process of services mode.
struct Enforcers {
    /// Instances, key-value entries and guest memory.
    worker: Arc<faas_worker::Worker>,
    /// Guests' stream appends.
    broker: faas_store::broker::RedisBroker,
    /// Guests' log lines.
    logs: Arc<faas_store::logs::RedisLogWriter>,
}

/// Has `enforcers` follow the tenants' quotas in the Redis at `url`, every `interval`
/// (the worker's `--sync-interval-ms`, as it follows placements), in a task of their
/// own.
///
/// # Errors
/// If Redis cannot be reached.
async fn follow_quotas(
    url: &str,
    enforcers: Enforcers,
    interval: std::time::Duration,
) -> anyhow::Result<()> {
    let tenants = faas_store::TenantStore::redis_for_reading(url)
        .await
        .context("connecting to the tenant store")?;
    tokio::spawn(async move {
        tenants
            .follow(interval, |all| {
                enforcers.worker.apply_tenant_quotas(all);
                enforcers.broker.apply_tenant_quotas(all);
                enforcers.logs.apply_tenant_quotas(all);
            })
            .await;
    });
    Ok(())
}
