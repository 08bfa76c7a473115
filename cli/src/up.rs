//! `faas up`: the whole platform in one process (gateway, scheduler and one or more
//! workers). By default its state is in memory and it needs no external service; with
//! `--redis` it keeps key-value state in Redis and serves Redis triggers.

use crate::deploy::prepare;
use anyhow::Context;
use faas_gateway::{DeployOutcome, Gateway, GatewayConfig, RedisBroker, Registry};
use faas_scheduler::{EmbeddedPlacement, WorkerId, WorkerSpec};
use faas_worker::config::DEFAULT_REGION_MAP_THRESHOLD;
use faas_worker::{KeyValueStore, Limits, Worker, WorkerConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The workflows `faas up` deploys when started from the repository root.
const DEMO_WORKFLOWS: [&str; 4] = [
    "functions/hello/workflow.toml",
    "functions/kv-counter/workflow.toml",
    "functions/wasi-hello/workflow.toml",
    "functions/wordcount/workflow.toml",
];

/// Arguments of `faas up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Address to listen on.
    #[arg(long, env = "FAAS_LISTEN", default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// Admin API token; generated and written to <data-dir>/token when not given.
    #[arg(long, env = "FAAS_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Directory for compiled components and the token.
    #[arg(long, env = "FAAS_DATA_DIR", default_value = ".faas")]
    data_dir: PathBuf,
    /// Directory for precompiled components; defaults to <data-dir>/cache. Processes
    /// may share one.
    #[arg(long, env = "FAAS_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// A workflow.toml to build and deploy at start (repeatable). Without any, the demo
    /// workflows under functions/ are deployed when present.
    #[arg(long = "deploy", value_name = "WORKFLOW_TOML")]
    deploy: Vec<PathBuf>,
    /// Deploy nothing at start.
    #[arg(long, conflicts_with = "deploy")]
    no_demo: bool,
    /// Default memory limit of an instance, in MiB.
    #[arg(long, env = "FAAS_MEMORY_MB", default_value_t = Limits::default().memory_mb)]
    memory_mb: u32,
    /// Largest memory limit a function may ask for, in MiB.
    #[arg(long, env = "FAAS_MAX_MEMORY_MB", default_value_t = 512)]
    max_memory_mb: u32,
    /// Default deadline of an event, in milliseconds.
    #[arg(long, env = "FAAS_TIMEOUT_MS", default_value_t = 10_000)]
    timeout_ms: u64,
    /// Default fuel of an event (about one unit per wasm instruction); 0 for unlimited.
    #[arg(long, env = "FAAS_FUEL", default_value_t = 10_000_000_000)]
    fuel: u64,
    /// Largest request body an invocation may send, in bytes.
    #[arg(long, env = "FAAS_MAX_BODY_BYTES", default_value_t = 8 << 20)]
    max_body_bytes: usize,
    /// How many instances may run at once, per worker.
    #[arg(long, env = "FAAS_MAX_INSTANCES", default_value_t = 1000)]
    max_instances: u32,
    /// Regions of at least this many bytes are mapped into the next step's memory
    /// instead of copied; `off` copies every region once (for comparison).
    #[arg(long, env = "FAAS_REGION_MAP_THRESHOLD", value_name = "BYTES|off",
          default_value_t = MapThreshold(DEFAULT_REGION_MAP_THRESHOLD), value_parser = parse_map_threshold)]
    region_map_threshold: MapThreshold,
    /// How many workers to run in this process. Placement keeps each workflow on one
    /// worker (per replica) and a tenant's workflows together.
    #[arg(long, env = "FAAS_WORKERS", default_value_t = 1)]
    workers: u32,
    /// How many workflows each worker may hold before placement spills to another.
    #[arg(long, env = "FAAS_WORKER_CAPACITY", default_value_t = 1000)]
    worker_capacity: usize,
    /// Use Redis at this URL: key-value state lives there, functions can publish and
    /// append, and workflows may have Redis channel and stream triggers.
    #[arg(
        long,
        env = "FAAS_REDIS_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    redis: Option<String>,
}

/// `--region-map-threshold`: a byte count, or `off` (never map).
#[derive(Debug, Clone, Copy)]
struct MapThreshold(usize);

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

/// Runs the platform until Ctrl-C or SIGTERM.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating data dir {}", args.data_dir.display()))?;
    let token = match &args.token {
        Some(token) => token.clone(),
        None => generate_token(),
    };
    write_token(&args.data_dir.join("token"), &token)?;

    let mut worker_config = WorkerConfig::new(
        args.cache_dir
            .clone()
            .unwrap_or_else(|| args.data_dir.join("cache")),
    );
    worker_config.default_limits = Limits {
        memory_mb: args.memory_mb,
        timeout: Duration::from_millis(args.timeout_ms),
        fuel: (args.fuel > 0).then_some(args.fuel),
    };
    worker_config.max_memory_mb = args.max_memory_mb;
    worker_config.max_instances = args.max_instances;
    worker_config.region_map_threshold = args.region_map_threshold.0;
    // State belongs to the platform, not to a worker: every worker sees the same store.
    let key_value = Arc::new(match &args.redis {
        Some(url) => KeyValueStore::redis(url).await?,
        None => KeyValueStore::memory(),
    });
    // With Redis, functions can publish and append, and the gateway consumes the
    // workflows' channel and stream triggers.
    let broker = match &args.redis {
        Some(url) => Some(RedisBroker::connect(url).await?),
        None => None,
    };
    let mut workers = Vec::new();
    for index in 0..args.workers.max(1) {
        let id = WorkerId(format!("local-{index}"));
        let mut worker = Worker::new(worker_config.clone())?.with_key_value(key_value.clone());
        if let Some(broker) = &broker {
            worker = worker.with_publisher(Arc::new(broker.clone()));
        }
        workers.push((id, Arc::new(worker)));
    }
    let placement = EmbeddedPlacement::new(workers.iter().map(|(id, _)| WorkerSpec {
        id: id.clone(),
        capacity: args.worker_capacity,
    }));
    let mut registry = Registry::new(workers, Arc::new(placement));
    if broker.is_some() {
        registry = registry.with_redis_triggers();
    }
    let registry = Arc::new(registry);

    let mut config = GatewayConfig::new(token.clone());
    config.listen = args.listen;
    config.max_body_bytes = args.max_body_bytes;
    let mut gateway = Gateway::new(config, registry.clone());
    if let Some(broker) = broker {
        gateway = gateway.with_broker(broker);
    }
    let gateway = gateway.start().await?;
    let url = format!("http://{}", gateway.local_addr());
    println!("faas is up at {url}");
    println!(
        "  admin token: {token} (saved in {}; send `Authorization: Bearer <token>`)",
        args.data_dir.join("token").display()
    );

    let manifests = if args.no_demo {
        Vec::new()
    } else if args.deploy.is_empty() {
        DEMO_WORKFLOWS
            .iter()
            .map(PathBuf::from)
            .filter(|path| path.exists())
            .collect()
    } else {
        args.deploy.clone()
    };
    for manifest in &manifests {
        let request = prepare(manifest, true).await?;
        let deployment = match registry.deploy(request).await? {
            DeployOutcome::Deployed(deployment) | DeployOutcome::Unchanged(deployment) => {
                deployment
            }
        };
        for trigger in &deployment.workflow.http_triggers {
            println!(
                "  deployed {}: {url}{} -> {}",
                deployment.workflow.name, trigger.route, trigger.target
            );
        }
    }
    gateway.set_ready();
    println!("ready; press Ctrl-C to stop");

    wait_for_signal().await?;
    println!("shutting down");
    gateway.shutdown().await;
    Ok(())
}

/// A random 256-bit token, hex-encoded.
fn generate_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Writes the token readable by its owner only.
fn write_token(path: &Path, token: &str) -> anyhow::Result<()> {
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

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C"),
        _ = terminate.recv() => Ok(()),
    }
}
