//! Services mode: `faas gateway`, `faas scheduler` and `faas worker`, each one part of
//! the platform in its own process, sharing deployments, placements and worker
//! registrations through Redis (crate `faas-shared-state`). Run one scheduler, one or
//! more gateways and any number of workers against the same Redis. The worker's own
//! command is in `worker.rs` (it alone needs Wasmtime).

use crate::args::{
    BrokerArgs, GatewayArgs, IdentityArgs, check_token, generate_token, prepare_data_dir,
    refuse_symlink,
};
use anyhow::Context;
use faas_gateway::activator::{self, ActivatorConfig};
use faas_gateway::kubernetes::WorkflowResources;
use faas_gateway::services::{ServicesBackend, ServicesConfig};
use faas_gateway::{Gateway, Registry};
use faas_invoke::wire::MAX_INTERNAL_TOKEN_BYTES;
use faas_scheduler::metrics::SchedulerMetrics;
use faas_shared_state::SharedState;
use faas_store::TenantStore;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

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
    pub(crate) redis: String,
    /// How often this process reads the shared state, in milliseconds.
    #[arg(long, env = "FAAS_SYNC_INTERVAL_MS", default_value_t = 200)]
    sync_interval_ms: u64,
}

impl RedisArgs {
    pub(crate) fn interval(&self) -> Duration {
        Duration::from_millis(self.sync_interval_ms.max(10))
    }

    pub(crate) async fn shared(&self) -> anyhow::Result<SharedState> {
        SharedState::connect(&self.redis)
            .await
            .context("connecting to the shared state")
    }
}

/// The log streams in Redis (`faas:logs:<tenant>:<workflow>`): workers append their guests'
/// lines, gateways a line for each event no worker took (`faas worker`, `faas gateway`).
#[derive(Debug, clap::Args)]
pub struct LogStreamArgs {
    /// How many log lines (`faas logs`) each workflow's Redis stream keeps at most; the
    /// oldest go first (1/64 of it, up to 64, at a time). 0 for no limit.
    #[arg(long, env = "FAAS_LOG_STREAM_LEN", default_value_t = faas_store::logs::DEFAULT_LOG_STREAM_LEN)]
    pub(crate) log_stream_len: u64,
    /// How many bytes the log streams of one tenant's workflows hold in all (each line
    /// counted with 16 bytes more, each stream with 4.5 KiB); past it a line trims the
    /// oldest lines of the tenant's largest log streams. 0 for no limit.
    #[arg(long, env = "FAAS_LOG_MAX_BYTES", default_value_t = faas_store::logs::DEFAULT_LOG_MAX_BYTES)]
    pub(crate) log_max_bytes: u64,
}

impl LogStreamArgs {
    /// This process's writer into the streams.
    pub(crate) async fn writer(
        &self,
        redis: &RedisArgs,
    ) -> anyhow::Result<faas_store::logs::RedisLogWriter> {
        let quota = faas_store::stream_quota::StreamQuota {
            max_len: self.log_stream_len,
            max_bytes: self.log_max_bytes,
        };
        faas_store::logs::RedisLogWriter::connect(&redis.redis, quota)
            .await
            .context("connecting to Redis for function logs")
    }
}

/// Where a process serves its Prometheus metrics (`faas worker`, `faas operator`,
/// `faas scheduler`).
#[derive(Debug, clap::Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics (`GET /metrics`) on this address.
    #[arg(long, env = "FAAS_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
}

impl MetricsArgs {
    /// Binds the metrics address, if one was given, with the words the process's "is
    /// up" line ends with to say where scrapers find it.
    pub(crate) async fn bind(&self) -> anyhow::Result<(Option<TcpListener>, String)> {
        let Some(addr) = self.metrics_listen else {
            return Ok((None, String::new()));
        };
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the metrics address {addr}"))?;
        let at = format!(", metrics at http://{}/metrics", listener.local_addr()?);
        Ok((Some(listener), at))
    }

    /// Serves `render`'s text there (if an address was given) for as long as the
    /// process runs, and returns [`MetricsArgs::bind`]'s words.
    pub(crate) async fn serve(
        &self,
        render: faas_metrics_endpoint::Render,
    ) -> anyhow::Result<String> {
        let (listener, at) = self.bind().await?;
        if let Some(listener) = listener {
            tokio::spawn(faas_metrics_endpoint::serve(listener, render));
        }
        Ok(at)
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
    /// Readies `data_dir` first ([`prepare_data_dir`]) even when the token is given:
    /// every process that needs this token keeps files there (a worker its compiled
    /// code and its socket).
    ///
    /// # Errors
    /// If the data dir is refused, the token cannot be read or written, or it is too
    /// short or long, or could not be sent in a header.
    pub(crate) fn resolve(&self, data_dir: &Path) -> anyhow::Result<String> {
        if let Some(token) = &self.internal_token {
            check_internal_token(self.given_by(token), token)?;
        }
        prepare_data_dir(data_dir)?;
        match &self.internal_token {
            Some(token) => Ok(token.clone()),
            None => {
                let path = data_dir.join("internal-token");
                let token = read_or_create_token(&path)?;
                check_internal_token(&path.display().to_string(), &token)?;
                Ok(token)
            }
        }
    }

    /// Where the token given came from: clap takes the flag over the variable, so the
    /// token is the variable's only when they are equal.
    fn given_by(&self, given: &str) -> &'static str {
        if std::env::var("FAAS_INTERNAL_TOKEN").is_ok_and(|env| env == given) {
            "FAAS_INTERNAL_TOKEN"
        } else {
            "--internal-token"
        }
    }

    /// Tells the operator where the token came from when it was not given, since every
    /// gateway and worker needs the same one.
    pub(crate) fn print_source(&self, data_dir: &Path) {
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
/// and starting together end up with the same token. The data dir is ready.
fn read_or_create_token(path: &Path) -> anyhow::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // `create_new` follows no link, but the read below would.
    refuse_symlink(path)?;
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
                refuse_symlink(path)?;
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

/// Refuses an internal token from `source` that is too short to resist guessing, or
/// that a worker could not check or a header could not carry.
fn check_internal_token(source: &str, token: &str) -> anyhow::Result<()> {
    check_token(
        "internal token",
        source,
        token,
        Some(MAX_INTERNAL_TOKEN_BYTES),
    )
}

/// Refuses an internal token that is the admin token: every worker holds the internal
/// token, and a worker runs tenants' code, so one that code escaped from would hold the
/// operator's credential too.
fn check_tokens_differ(admin: &str, internal: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        admin != internal,
        "the internal token (--internal-token, FAAS_INTERNAL_TOKEN) is the admin token \
         (--token, FAAS_TOKEN): every worker holds the internal token, and with it would \
         hold the operator's credential; give each a token of its own"
    );
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
    #[command(flatten)]
    logs: LogStreamArgs,
    /// How long a deploy waits for the scheduler to place it and the workers to load
    /// it (with --kubernetes: for the operator to observe it), in seconds.
    #[arg(long, env = "FAAS_DEPLOY_TIMEOUT_S", default_value_t = 120)]
    deploy_timeout_s: u64,
    /// Kubernetes mode: a deploy creates or updates a `Workflow` resource
    /// (faas.dev/v1alpha1) in the namespace named after its tenant, which `faas
    /// operator` deploys; `faas rm` deletes it; `faas tenant create` also creates the
    /// namespace. The cluster is the pod's own (service account), else KUBECONFIG's.
    #[arg(long, env = "FAAS_KUBERNETES")]
    kubernetes: bool,
    /// How many events one workflow with no ready replica (its workers scaled to zero)
    /// may hold while a worker starts; more get 503 with `Retry-After` at once.
    #[arg(long, env = "FAAS_ACTIVATOR_QUEUE", default_value_t = activator::DEFAULT_QUEUE)]
    activator_queue: usize,
    /// How long a held event waits for a ready replica before 503 with `Retry-After`,
    /// in milliseconds.
    #[arg(long, env = "FAAS_ACTIVATOR_TIMEOUT_MS",
          default_value_t = activator::DEFAULT_TIMEOUT.as_millis() as u64)]
    activator_timeout_ms: u64,
}

/// Arguments of `faas scheduler`.
#[derive(Debug, clap::Args)]
pub struct SchedulerArgs {
    #[command(flatten)]
    redis: RedisArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
    /// Delete from Redis the components no deployment names that were stored more than
    /// this many seconds ago (a deploy in progress stores them before naming them).
    #[arg(long, env = "FAAS_COMPONENT_TTL_S", default_value_t = 600)]
    component_ttl_s: u64,
}

/// Runs a gateway of services mode until Ctrl-C or SIGTERM.
pub async fn gateway(args: GatewayCmdArgs) -> anyhow::Result<()> {
    let token = args.identity.token()?;
    let internal_token = args.internal_token.resolve(&args.identity.data_dir)?;
    check_tokens_differ(&token, &internal_token)?;
    let mut shared = args.redis.shared().await?;
    if args.kubernetes {
        shared = shared.requiring_worker_pods();
    }
    let broker = args.broker.connect(&args.redis.redis).await?;
    let deploy_timeout = Duration::from_secs(args.deploy_timeout_s);
    let mut backend = ServicesBackend::new(
        shared,
        ServicesConfig {
            token: internal_token,
            sync_interval: args.redis.interval(),
            deploy_timeout,
        },
    )
    .with_activator(ActivatorConfig {
        queue: args.activator_queue,
        timeout: Duration::from_millis(args.activator_timeout_ms),
    });
    if args.kubernetes {
        let resources = WorkflowResources::from_environment(deploy_timeout)
            .await
            .context("connecting to the Kubernetes API (--kubernetes)")?;
        backend = backend.with_workflow_resources(resources);
    }
    // Tenants and tokens in Redis, so that every gateway knows the same credentials.
    let tenants = TenantStore::redis(&args.redis.redis)
        .await
        .context("connecting to the tenant store")?;
    // A removed tenant's data goes with it: its key-value entries and streams, all
    // in this Redis.
    let key_value = faas_store::KeyValueStore::redis(&args.redis.redis)
        .await
        .context("connecting to Redis for tenants' key-value data")?;
    let tenant_data = faas_store::TenantData::new(Arc::new(key_value), Some(broker.connection()));
    let registry = Arc::new(
        Registry::services_mode(backend)
            .with_redis_triggers()
            .with_tenants(tenants)
            .with_tenant_data(tenant_data)
            .with_max_workflows(args.gateway.tenant_max_workflows)
            .with_max_code_mb(args.gateway.tenant_code_max_mb)
            .with_max_redis_consumers(args.gateway.max_redis_consumers_per_tenant),
    );
    // A name whose removal stopped half-way (through any gateway) is released once
    // its data is gone.
    registry
        .finish_tenant_removals()
        .await
        .context("finishing tenant removals")?;
    let reader = faas_store::logs::RedisLogReader::connect(&args.redis.redis)
        .await
        .context("connecting to Redis for function logs")?;
    let writer = Arc::new(args.logs.writer(&args.redis).await?);
    let logs = faas_gateway::logs::RedisLogs { reader, writer };
    let gateway = Gateway::new(args.gateway.config(&token), registry)
        .with_broker(broker)
        .with_logs(faas_gateway::logs::LogStore::Redis(logs))
        .start()
        .await?;
    println!("faas gateway is up at http://{}", gateway.local_addr());
    if args.kubernetes {
        println!("  Kubernetes mode: deploys are Workflow resources in their tenant's namespace");
    }
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
    let metrics = Arc::new(SchedulerMetrics::default());
    let metrics_at = {
        let metrics = metrics.clone();
        args.metrics
            .serve(Arc::new(move || metrics.render()))
            .await?
    };
    println!("faas scheduler is up{metrics_at}");
    tokio::select! {
        () = faas_scheduler::service::run(
            shared,
            args.redis.interval(),
            Duration::from_secs(args.component_ttl_s),
            metrics.placement.clone(),
        ) => Ok(()),
        result = wait_for_signal() => result,
    }
}

/// Returns on Ctrl-C or SIGTERM.
pub(crate) async fn wait_for_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C"),
        _ = terminate.recv() => Ok(()),
    }
}
