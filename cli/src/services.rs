//! Services mode: `faas gateway`, `faas scheduler` and `faas worker`, each one part of
//! the platform in its own process, sharing deployments, placements and worker
//! registrations through Redis (crate `faas-shared-state`). Run one scheduler, one or
//! more gateways and any number of workers against the same Redis.

use crate::args::{BrokerArgs, GatewayArgs, IdentityArgs, WorkerArgs, generate_token};
use crate::up::wait_for_signal;
use anyhow::Context;
use faas_gateway::services::{ServicesBackend, ServicesConfig};
use faas_gateway::{Gateway, Registry};
use faas_shared_state::SharedState;
use faas_store::TenantStore;
use faas_worker::services::{MAX_INTERNAL_TOKEN_BYTES, Node, NodeConfig, NodeListeners};
use faas_worker::{KeyValueStore, Worker};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The Redis every process of one platform shares.
#[derive(Debug, clap::Args)]
pub struct RedisArgs {
    /// Redis URL: deployments, placements, registrations, key-value state, triggers.
    #[arg(
        long,
        env = "FAAS_REDIS_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    redis: String,
    /// How often this process reads the shared state, in milliseconds.
    #[arg(long, env = "FAAS_SYNC_INTERVAL_MS", default_value_t = 200)]
    sync_interval_ms: u64,
}

impl RedisArgs {
    fn interval(&self) -> Duration {
        Duration::from_millis(self.sync_interval_ms.max(10))
    }

    async fn shared(&self) -> anyhow::Result<SharedState> {
        SharedState::connect(&self.redis)
            .await
            .context("connecting to the shared state")
    }
}

/// The secret between gateways and workers, distinct from the admin token.
#[derive(Debug, clap::Args)]
pub struct InternalTokenArgs {
    /// Secret the gateway presents to workers' internal API and workers to each other
    /// (never the admin token). When not given, read from <data-dir>/internal-token,
    /// or generated there (mode 0600) if that file does not exist.
    #[arg(long, env = "FAAS_INTERNAL_TOKEN", hide_env_values = true)]
    internal_token: Option<String>,
}

impl InternalTokenArgs {
    /// The token given, else the one saved in `data_dir`, else a new one saved there.
    fn resolve(&self, data_dir: &Path) -> anyhow::Result<String> {
        let token = match &self.internal_token {
            Some(token) => token.clone(),
            None => read_or_create_token(&data_dir.join("internal-token"))?,
        };
        check_internal_token(&token)?;
        Ok(token)
    }

    /// Tells the operator where the token came from when it was not given, since every
    /// gateway and worker needs the same one.
    fn print_source(&self, data_dir: &Path) {
        if self.internal_token.is_none() {
            println!(
                "  internal token: in {} (gateways and workers need the same; \
                 --internal-token)",
                data_dir.join("internal-token").display()
            );
        }
    }
}

/// Reads the token saved at `path`, or writes a new one there (owner-only) when there
/// is none; creating it exclusively means a gateway and a worker sharing a data dir
/// and starting together end up with the same token.
fn read_or_create_token(path: &Path) -> anyhow::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating data dir {}", dir.display()))?;
    }
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(mut file) => {
            let token = generate_token();
            writeln!(file, "{token}").with_context(|| format!("writing {}", path.display()))?;
            Ok(token)
        }
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            // Written by the process that created it, maybe an instant ago.
            for _ in 0..50 {
                let token = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                if token.ends_with('\n') {
                    return Ok(token.trim().to_owned());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            anyhow::bail!("{} is incomplete; give --internal-token", path.display())
        }
        Err(err) => Err(err).with_context(|| format!("creating {}", path.display())),
    }
}

/// Refuses a internal token a worker could not check or a header could not carry.
fn check_internal_token(token: &str) -> anyhow::Result<()> {
    if token.is_empty() || token.len() > MAX_INTERNAL_TOKEN_BYTES {
        anyhow::bail!(
            "the internal token must be 1 to {MAX_INTERNAL_TOKEN_BYTES} bytes long (it has {})",
            token.len()
        );
    }
    if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
        anyhow::bail!("the internal token must be printable ASCII without spaces");
    }
    Ok(())
}

/// Arguments of `faas gateway`.
#[derive(Debug, clap::Args)]
pub struct GatewayCmdArgs {
    #[command(flatten)]
    identity: IdentityArgs,
    #[command(flatten)]
    internal_token: InternalTokenArgs,
    #[command(flatten)]
    gateway: GatewayArgs,
    #[command(flatten)]
    redis: RedisArgs,
    #[command(flatten)]
    broker: BrokerArgs,
    /// How long a deploy waits for the scheduler to place it and the workers to load
    /// it, in seconds.
    #[arg(long, env = "FAAS_DEPLOY_TIMEOUT_S", default_value_t = 120)]
    deploy_timeout_s: u64,
}

/// Arguments of `faas scheduler`.
#[derive(Debug, clap::Args)]
pub struct SchedulerArgs {
    #[command(flatten)]
    redis: RedisArgs,
    /// Delete from Redis the components no deployment names that were stored more than
    /// this many seconds ago (a deploy in progress stores them before naming them).
    #[arg(long, env = "FAAS_COMPONENT_TTL_S", default_value_t = 600)]
    component_ttl_s: u64,
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
    /// How long the worker counts as alive after its last heartbeat, in milliseconds;
    /// the scheduler places its workflows elsewhere after that.
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
    /// Serve Prometheus metrics (`GET /metrics`) on this address.
    #[arg(long, env = "FAAS_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
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

/// Runs a gateway of services mode until Ctrl-C or SIGTERM.
pub async fn gateway(args: GatewayCmdArgs) -> anyhow::Result<()> {
    let token = args.identity.token()?;
    let internal_token = args.internal_token.resolve(&args.identity.data_dir)?;
    let shared = args.redis.shared().await?;
    let broker = args.broker.connect(&args.redis.redis).await?;
    let backend = ServicesBackend::new(
        shared,
        ServicesConfig {
            token: internal_token,
            sync_interval: args.redis.interval(),
            deploy_timeout: Duration::from_secs(args.deploy_timeout_s),
        },
    );
    // Tenants and tokens in Redis, so that every gateway knows the same credentials.
    let tenants = TenantStore::redis(&args.redis.redis)
        .await
        .context("connecting to the tenant store")?;
    let registry = Arc::new(
        Registry::services_mode(backend)
            .with_redis_triggers()
            .with_tenants(tenants)
            .with_max_workflows(args.gateway.tenant_max_workflows),
    );
    let gateway = Gateway::new(args.gateway.config(&token), registry)
        .with_broker(broker)
        .start()
        .await?;
    println!("faas gateway is up at http://{}", gateway.local_addr());
    args.identity.print_token(&token);
    args.internal_token.print_source(&args.identity.data_dir);
    gateway.set_ready();
    wait_for_signal().await?;
    gateway.shutdown().await;
    Ok(())
}

/// Runs the scheduler until Ctrl-C or SIGTERM.
pub async fn scheduler(args: SchedulerArgs) -> anyhow::Result<()> {
    let shared = args.redis.shared().await?;
    println!("faas scheduler is up");
    tokio::select! {
        () = faas_scheduler::service::run(
            shared,
            args.redis.interval(),
            Duration::from_secs(args.component_ttl_s),
        ) => Ok(()),
        result = wait_for_signal() => result,
    }
}

/// Runs a worker until Ctrl-C or SIGTERM.
pub async fn worker(args: WorkerCmdArgs) -> anyhow::Result<()> {
    let token = args.internal_token.resolve(&args.identity.data_dir)?;
    let shared = args.redis.shared().await?;
    let broker = args.broker.connect(&args.redis.redis).await?;
    let key_value = Arc::new(
        KeyValueStore::redis(&args.redis.redis)
            .await?
            .with_quota(args.worker.kv_quota()),
    );
    let worker = Worker::new(args.worker.config(&args.identity.data_dir))?
        .with_key_value(key_value)
        .with_publisher(Arc::new(broker.clone()));
    let worker = Arc::new(worker);
    crate::tenants::follow_quotas(
        &args.redis.redis,
        worker.clone(),
        broker,
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
    let metrics = match args.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?,
        ),
        None => None,
    };
    let metrics_at = match &metrics {
        Some(listener) => format!(", metrics at http://{}/metrics", listener.local_addr()?),
        None => String::new(),
    };
    let listeners = NodeListeners {
        internal: listener,
        metrics,
    };
    let node =
        Node::start(worker, shared, config, listeners).context("binding the worker socket")?;
    println!("faas worker {id} is up at {bound}{metrics_at}");
    args.internal_token.print_source(&args.identity.data_dir);
    wait_for_signal().await?;
    println!("draining");
    node.drain(Duration::from_millis(args.shutdown_grace_ms))
        .await;
    Ok(())
}

/// This boot of this machine, as the kernel names it.
fn boot_id() -> anyhow::Result<String> {
    let path = "/proc/sys/kernel/random/boot_id";
    Ok(std::fs::read_to_string(path)
        .with_context(|| format!("reading {path}; give --host-id"))?
        .trim()
        .to_owned())
}
