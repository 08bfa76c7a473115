//! Command-line arguments shared by the commands that run platform processes: `faas
//! up` (everything in one process) and `faas gateway` / `faas worker` (services mode).

use anyhow::Context;
use faas_connections::ConnectionLimits;
use faas_gateway::GatewayConfig;
use faas_gateway::config::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
};
use faas_store::broker::{DEFAULT_STREAM_MAX_LEN, RedisBroker};
use faas_worker::cache::DEFAULT_CACHE_MAX_BYTES;
use faas_worker::config::{DEFAULT_MAX_REGIONS_PER_INSTANCE, DEFAULT_REGION_MAP_THRESHOLD};
use faas_worker::kv::{DEFAULT_MAX_BYTES, DEFAULT_MAX_KEYS, KvQuota};
use faas_worker::{Limits, WorkerConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The token and the data directory.
#[derive(Debug, clap::Args)]
pub struct IdentityArgs {
    /// Admin API token; generated and written to <data-dir>/token when not given.
    /// Workers never accept it (services mode uses `--internal-token`).
    #[arg(long, env = "FAAS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Directory for compiled components and the token.
    #[arg(long, env = "FAAS_DATA_DIR", default_value = ".faas")]
    pub data_dir: PathBuf,
}

impl IdentityArgs {
    /// The token given, or a generated one; either way saved in <data-dir>/token.
    ///
    /// # Errors
    /// If the data directory or the token file cannot be written.
    pub fn token(&self) -> anyhow::Result<String> {
        std::fs::create_dir_all(&self.data_dir)
            .with_context(|| format!("creating data dir {}", self.data_dir.display()))?;
        let token = match &self.token {
            Some(token) => token.clone(),
            None => generate_token(),
        };
        write_token(&self.data_dir.join("token"), &token)?;
        Ok(token)
    }

    /// Tells the operator the token and where it is saved.
    pub fn print_token(&self, token: &str) {
        println!(
            "  admin token: {token} (saved in {}; send `Authorization: Bearer <token>`)",
            self.data_dir.join("token").display()
        );
    }
}

/// The gateway's listening address and limits.
#[derive(Debug, clap::Args)]
pub struct GatewayArgs {
    /// Address to listen on.
    #[arg(long, env = "FAAS_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// Largest request body an invocation may send, in bytes.
    #[arg(long, env = "FAAS_MAX_BODY_BYTES", default_value_t = 8 << 20)]
    pub max_body_bytes: usize,
    /// How many workflows each tenant may have deployed, unless the operator set the
    /// tenant's own quota (`faas tenant set <name> --max-workflows N`). 0 for no limit.
    #[arg(long, env = "FAAS_TENANT_MAX_WORKFLOWS", default_value_t = DEFAULT_TENANT_MAX_WORKFLOWS)]
    pub tenant_max_workflows: u64,
    /// How many connections one client address may hold open; more are closed as soon
    /// as they are accepted.
    #[arg(long, env = "FAAS_MAX_CONNECTIONS_PER_CLIENT", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_CLIENT)]
    pub max_connections_per_client: usize,
    /// How many connections the gateway holds open in all.
    #[arg(long, env = "FAAS_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// How long a connection may carry no request before it is closed, in milliseconds.
    #[arg(long, env = "FAAS_IDLE_TIMEOUT_MS", default_value_t = DEFAULT_IDLE_TIMEOUT.as_millis() as u64)]
    pub idle_timeout_ms: u64,
}

/// Default of `--tenant-max-workflows`: far more than a team deploys by hand, few
/// enough that a runaway script cannot fill the cluster's placement and Redis.
pub const DEFAULT_TENANT_MAX_WORKFLOWS: u64 = 100;

impl GatewayArgs {
    /// The gateway's configuration with admin token `token`.
    pub fn config(&self, token: &str) -> GatewayConfig {
        let mut config = GatewayConfig::new(token);
        config.listen = self.listen;
        config.max_body_bytes = self.max_body_bytes;
        config.connections = ConnectionLimits {
            per_client: self.max_connections_per_client.max(1),
            total: self.max_connections.max(1),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms.max(1)),
        };
        config
    }
}

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
    /// Regions of at least this many bytes are mapped into the next step's memory
    /// instead of copied; `off` copies every region once (for comparison).
    #[arg(long, env = "FAAS_REGION_MAP_THRESHOLD", value_name = "BYTES|off",
          default_value_t = MapThreshold(DEFAULT_REGION_MAP_THRESHOLD), value_parser = parse_map_threshold)]
    pub region_map_threshold: MapThreshold,
    /// How many workflows each worker may hold before placement spills to another.
    #[arg(
        long = "worker-capacity",
        env = "FAAS_WORKER_CAPACITY",
        default_value_t = 1000
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
    /// How many regions one instance may create.
    #[arg(long, env = "FAAS_MAX_REGIONS_PER_INSTANCE", default_value_t = DEFAULT_MAX_REGIONS_PER_INSTANCE)]
    pub max_regions_per_instance: usize,
    /// How many region memory files may be open at once, per worker. Defaults to a
    /// quarter of the process's descriptor limit.
    #[arg(long, env = "FAAS_MAX_REGION_FILES")]
    pub max_region_files: Option<usize>,
}

impl WorkerArgs {
    /// The key-value quota every tenant gets.
    pub fn kv_quota(&self) -> KvQuota {
        KvQuota::new(self.kv_max_keys, self.kv_max_bytes)
    }

    /// The worker configuration, caching compiled code under `data_dir` unless
    /// `--cache-dir` says otherwise.
    pub fn config(&self, data_dir: &Path) -> WorkerConfig {
        let mut config = WorkerConfig::new(
            self.cache_dir
                .clone()
                .unwrap_or_else(|| data_dir.join("cache")),
        );
        config.default_limits = Limits {
            memory_mb: self.memory_mb,
            timeout: Duration::from_millis(self.timeout_ms),
            fuel: (self.fuel > 0).then_some(self.fuel),
        };
        config.cache_max_bytes = self.cache_max_mb.saturating_mul(1 << 20);
        config.max_memory_mb = self.max_memory_mb;
        config.max_instances = self.max_instances;
        config.region_map_threshold = self.region_map_threshold.0;
        if let Some(turns) = self.guest_turns {
            config.guest_turns = turns.max(1);
        }
        config.max_instances_per_tenant = self
            .max_instances_per_tenant
            .unwrap_or(self.max_instances.div_ceil(2))
            .max(1);
        config.max_regions_per_instance = self.max_regions_per_instance;
        if let Some(files) = self.max_region_files {
            config.max_region_files = files;
        }
        config
    }
}

/// How the processes that use Redis as a message broker treat its streams.
#[derive(Debug, clap::Args)]
pub struct BrokerArgs {
    /// About how many entries a stream keeps when a function appends to it or an entry
    /// is dead-lettered (`XADD ... MAXLEN ~ N`); the oldest go first. 0 for no limit.
    #[arg(long, env = "FAAS_STREAM_MAX_LEN", default_value_t = DEFAULT_STREAM_MAX_LEN)]
    pub stream_max_len: usize,
}

impl BrokerArgs {
    /// Connects to the broker at `url` with these settings.
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn connect(&self, url: &str) -> anyhow::Result<RedisBroker> {
        Ok(RedisBroker::connect(url)
            .await?
            .with_stream_max_len(self.stream_max_len))
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

/// A random 256-bit token, hex-encoded.
pub(crate) fn generate_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Writes the token readable by its owner only.
pub(crate) fn write_token(path: &Path, token: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(file, "{token}").with_context(|| format!("writing {}", path.display()))
}
