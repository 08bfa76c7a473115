//! `faas operator`: the Kubernetes operator (Workflow resources to deployments in
//! Redis, placement, worker scale to zero), and `faas operator crd`. Needs no Wasmtime,
//! so it is in the build without the `worker` feature.

use crate::services::{MetricsArgs, RedisArgs, wait_for_signal};
use anyhow::Context;
use faas_scheduler::operator::{self, OperatorConfig, OperatorMetrics};
use faas_store::TenantStore;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `faas operator`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct OperatorArgs {
    #[command(subcommand)]
    command: Option<OperatorCommand>,
    #[command(flatten)]
    redis: Option<RedisArgs>,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
}

/// What `faas operator` does besides running.
#[derive(Debug, clap::Subcommand)]
enum OperatorCommand {
    /// Print the Workflow CustomResourceDefinition (YAML), as the chart installs it.
    Crd,
}

/// How the operator runs.
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The namespace of the worker pods, the worker Deployment and the Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    namespace: String,
    /// The label selector of the worker pods (a deleted pod's worker is forgotten at once).
    #[arg(
        long,
        env = "FAAS_WORKER_SELECTOR",
        default_value = "app.kubernetes.io/component=worker"
    )]
    worker_selector: String,
    /// The worker Deployment scaled to zero when idle and back on demand.
    #[arg(long, env = "FAAS_WORKER_DEPLOYMENT", default_value = "faas-worker")]
    worker_deployment: String,
    /// The worker replicas to scale up to when an event waits for a worker.
    #[arg(long, env = "FAAS_WORKER_REPLICAS", default_value_t = 1,
          value_parser = clap::value_parser!(i32).range(1..))]
    worker_replicas: i32,
    /// Scale the workers to zero after this many seconds without an event (0: never).
    #[arg(long, env = "FAAS_SCALE_TO_ZERO_AFTER", default_value_t = 300)]
    scale_to_zero_after: u64,
    /// The Lease the operator's replicas elect their leader with.
    #[arg(long, env = "FAAS_LEASE_NAME", default_value = "faas-operator")]
    lease_name: String,
    /// This replica's identity in the Lease (default: the host name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// The largest component fetched from a Workflow's `url`, in bytes.
    #[arg(long, env = "FAAS_MAX_COMPONENT_BYTES", default_value_t = 256 << 20)]
    max_component_bytes: u64,
    /// How long fetching one component from its URL may take, in seconds.
    #[arg(long, env = "FAAS_FETCH_TIMEOUT_S", default_value_t = 120)]
    fetch_timeout_s: u64,
    /// Non-public networks (CIDR ranges or addresses) a Workflow's component URL may be
    /// fetched from. None by default: a tenant writes the URL, and chooses what its
    /// name resolves to, and the operator's pod reaches the cloud metadata address and
    /// the cluster's services. A network holding a cloud metadata address is refused.
    #[arg(long, env = "FAAS_COMPONENT_PRIVATE_NETWORKS", value_delimiter = ',',
          value_parser = faas_workflow::parse_network)]
    component_private_networks: Vec<ipnet::IpNet>,
    /// How many workflows a tenant may have when its quota is the default (0: no
    /// limit); the gateways' default, so that a Workflow applied with kubectl is held to
    /// what a deploy through a gateway is.
    #[arg(long, env = "FAAS_TENANT_MAX_WORKFLOWS", default_value_t = crate::args::DEFAULT_TENANT_MAX_WORKFLOWS)]
    tenant_max_workflows: u64,
    /// How many MiB the components of a tenant's Workflows may take in all when its
    /// quota is the default (0: no limit).
    #[arg(long, env = "FAAS_TENANT_CODE_MAX_MB", default_value_t = crate::args::DEFAULT_TENANT_CODE_MAX_MB)]
    tenant_code_max_mb: u64,
    /// How many channel and stream triggers one tenant's Workflows may have in all
    /// (each is a Redis connection in every gateway); one past it is refused. 0 for no
    /// limit.
    #[arg(long, env = "FAAS_MAX_REDIS_CONSUMERS_PER_TENANT", default_value_t = faas_workflow::DEFAULT_MAX_REDIS_CONSUMERS_PER_TENANT)]
    max_redis_consumers_per_tenant: usize,
    /// Delete from Redis the components no deployment names that were stored more than
    /// this many seconds ago.
    #[arg(long, env = "FAAS_COMPONENT_TTL_S", default_value_t = 600)]
    component_ttl_s: u64,
}

/// Runs `faas operator` (until Ctrl-C, SIGTERM or a lost leadership) or prints the CRD.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    if let Some(OperatorCommand::Crd) = args.command {
        print!("{}", operator::crd_yaml());
        return Ok(());
    }
    let redis = args
        .redis
        .context("--redis (or FAAS_REDIS_URL) is required")?;
    let run = args.run;
    // The workers are the worker pods it records (`faas_shared_state`'s `worker_pods`).
    let shared = redis.shared().await?.requiring_worker_pods();
    let tenants = TenantStore::redis(&redis.redis)
        .await
        .context("connecting to the tenant store")?;
    let client = operator::client_from_environment()
        .await
        .context("connecting to the Kubernetes API (in-cluster service account or KUBECONFIG)")?;
    let identity = run.identity.unwrap_or_else(host_name);
    let config = OperatorConfig {
        namespace: run.namespace,
        interval: redis.interval(),
        worker_selector: run.worker_selector,
        worker_deployment: run.worker_deployment,
        worker_replicas: run.worker_replicas,
        scale_to_zero_after: (run.scale_to_zero_after > 0)
            .then(|| Duration::from_secs(run.scale_to_zero_after)),
        lease_name: run.lease_name,
        identity,
        max_component_bytes: run.max_component_bytes,
        fetch_timeout: Duration::from_secs(run.fetch_timeout_s.max(1)),
        component_private_networks: run.component_private_networks.into(),
        tenant_max_workflows: run.tenant_max_workflows,
        tenant_code_max_mb: run.tenant_code_max_mb,
        max_redis_consumers_per_tenant: run.max_redis_consumers_per_tenant,
        component_ttl: Duration::from_secs(run.component_ttl_s),
    };
    let metrics = Arc::new(OperatorMetrics::new());
    // Served before the election: a replica that waits for the Lease is scraped too.
    let metrics_at = {
        let metrics = metrics.clone();
        args.metrics
            .serve(Arc::new(move || metrics.render()))
            .await?
    };
    println!(
        "faas operator is up (namespace {}, identity {}){metrics_at}",
        config.namespace, config.identity
    );
    let shutdown = async {
        if let Err(err) = wait_for_signal().await {
            tracing::warn!("{err:#}");
        }
    };
    operator::run(client, shared, tenants, config, metrics, shutdown)
        .await
        .context("faas operator")
}

/// This machine's host name (a pod's name in a cluster).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "faas-operator".to_owned())
}
