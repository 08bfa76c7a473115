//! `faas up`: the whole platform in one process (gateway, scheduler and one or more
//! workers). It needs no external service: deployments and key-value data are kept
//! in `<data-dir>/faas.db` (SQLite), so a restart, even after `kill -9`, serves them
//! again. With `--redis` it keeps key-value state in Redis instead and serves Redis
//! triggers.

use crate::args::{BrokerArgs, GatewayArgs, IdentityArgs};
use crate::deploy::prepare;
use crate::services::wait_for_signal;
use crate::worker::{SWAP_TURNED_ON, WorkerArgs, connect_guests_to_redis};
use anyhow::Context;
use faas_gateway::registry::Deployment;
use faas_gateway::{DeployOutcome, Gateway, Registry};
use faas_invoke::LocalWorker;
use faas_scheduler::{EmbeddedPlacement, WorkerId, WorkerSpec};
use faas_store::{Database, DeploymentStore, TenantData, TenantStore};
use faas_worker::{GuestMetrics, KeyValueStore, Worker};
use std::path::PathBuf;
use std::sync::Arc;

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
    #[command(flatten)]
    identity: IdentityArgs,
    #[command(flatten)]
    gateway: GatewayArgs,
    #[command(flatten)]
    worker: WorkerArgs,
    #[command(flatten)]
    broker: BrokerArgs,
    /// A workflow.toml to build and deploy at start (repeatable). Without any, the demo
    /// workflows under functions/ are deployed when present.
    #[arg(long = "deploy", value_name = "WORKFLOW_TOML")]
    deploy: Vec<PathBuf>,
    /// Deploy nothing at start, and create no `demo` tenant or token (one an earlier
    /// start created is kept, as any tenant; `faas tenant rm demo` removes it).
    #[arg(long, conflicts_with = "deploy")]
    no_demo: bool,
    /// How many workers to run in this process. Placement keeps each workflow on one
    /// worker (per replica) and a tenant's workflows together.
    #[arg(long, env = "FAAS_WORKERS", default_value_t = 1)]
    workers: u32,
    /// Use Redis at this URL: key-value state lives there, functions can publish and
    /// append, and workflows may have Redis channel and stream triggers.
    #[arg(
        long,
        env = "FAAS_REDIS_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    redis: Option<String>,
    /// How many bytes of its guests' log lines (`faas logs`) each workflow keeps; the
    /// oldest go first.
    #[arg(long, env = "FAAS_LOG_BUDGET_BYTES", default_value_t = faas_gateway::logs::DEFAULT_LOG_BUDGET_BYTES)]
    log_budget_bytes: usize,
    /// How many bytes of log lines the workflows of one tenant keep together; past it
    /// the oldest lines of the tenant's largest buffer go first. 0 for no limit.
    #[arg(long, env = "FAAS_LOG_MAX_BYTES", default_value_t = faas_gateway::logs::DEFAULT_TENANT_LOG_BYTES)]
    log_max_bytes: usize,
}

/// Runs the platform until Ctrl-C or SIGTERM.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let token = args.identity.token()?;
    let worker_config = args.worker.config(&args.identity.data_dir)?;
    // Everything kept at rest is in this one database (opened once: clones share its
    // connection), so a restart finds what was committed before it.
    let database = Database::open(&args.identity.data_dir)?;
    // State belongs to the platform, not to a worker: every worker sees the same store,
    // this one, or Redis (to which each worker connects for its guests, below).
    let key_value =
        Arc::new(KeyValueStore::sqlite(database.clone()).with_quota(args.worker.kv_quota()));
    // With Redis, functions can publish and append, and the gateway consumes the
    // workflows' channel and stream triggers.
    let broker = match &args.redis {
        Some(url) => Some(args.broker.connect(url).await?),
        None => None,
    };
    // The workers write guests' lines straight into the buffers the gateway reads.
    let logs = Arc::new(faas_gateway::logs::MemoryLogs::new(
        faas_gateway::logs::LogBudgets {
            per_workflow: args.log_budget_bytes,
            per_tenant: args.log_max_bytes,
        },
    ));
    // The workers' series (instance starts, compiles, regions), served by the gateway.
    let guest_metrics = GuestMetrics::default();
    let mut locals = Vec::new();
    for _ in 0..args.workers.max(1) {
        let mut worker = Worker::new(worker_config.clone())?
            .with_logs(logs.clone())
            .with_metrics(guest_metrics.clone());
        worker = match (&args.redis, &broker) {
            (Some(url), Some(broker)) => {
                connect_guests_to_redis(worker, url, &args.worker, broker).await?
            }
            _ => worker.with_key_value(key_value.clone()),
        };
        locals.push(Arc::new(worker));
    }
    // The gateway knows the workers only as `LocalWorker`s (it links no Wasmtime).
    let workers: Vec<(WorkerId, Arc<dyn LocalWorker>)> = locals
        .iter()
        .enumerate()
        .map(|(index, worker)| {
            let id = WorkerId(format!("local-{index}"));
            (id, worker.clone() as Arc<dyn LocalWorker>)
        })
        .collect();
    let placement = EmbeddedPlacement::new(workers.iter().map(|(id, _)| WorkerSpec {
        id: id.clone(),
        capacity: args.worker.capacity,
    }));
    // Tenants and their tokens persist in the same database.
    let tenants = TenantStore::sqlite(database.clone());
    let mut registry = Registry::new(workers, Arc::new(placement))
        .with_saved_deployments(DeploymentStore::new(database.clone()))
        .with_tenants(tenants.clone())
        .with_max_workflows(args.gateway.tenant_max_workflows)
        .with_max_code_mb(args.gateway.tenant_code_max_mb)
        .with_max_redis_consumers(args.gateway.max_redis_consumers_per_tenant);
    if broker.is_some() {
        registry = registry.with_redis_triggers();
    }
    // A removed tenant's data goes with it, from wherever its guests kept it.
    let tenants_key_value = match &args.redis {
        Some(url) => Arc::new(
            KeyValueStore::redis(url)
                .await
                .context("connecting to Redis for tenants' key-value data")?,
        ),
        None => key_value.clone(),
    };
    registry = registry.with_tenant_data(TenantData::new(
        tenants_key_value,
        broker.as_ref().map(|broker| broker.connection()),
    ));
    let registry = Arc::new(registry);
    // Before any tenant is created: a name whose removal stopped half-way is released
    // once its data is gone.
    registry
        .finish_tenant_removals()
        .await
        .context("finishing tenant removals")?;
    // Each tenant's own quotas hold from the first event on.
    registry
        .apply_tenant_quotas()
        .await
        .context("reading the tenants' quotas")?;

    let mut gateway = Gateway::new(args.gateway.config(&token), registry.clone())
        .with_logs(faas_gateway::logs::LogStore::Memory(logs))
        .with_metrics(guest_metrics.collector());
    if let Some(broker) = broker {
        gateway = gateway.with_broker(broker);
    }
    let gateway = gateway.start().await?;
    let url = format!("http://{}", gateway.local_addr());
    println!("faas is up at {url}");
    args.identity.print_token(&token);
    // Not with --no-demo, which the operator gives to run their own tenants only: a
    // `demo` tenant with a live token would be one more credential to the platform,
    // and created again at every start after they removed it.
    if !args.no_demo {
        let demo_token = demo_token(&tenants, &args.identity.data_dir).await?;
        println!(
            "  {} tenant token: {demo_token} (saved in {}; deploys, lists and removes the \
             {0} tenant's workflows only)",
            DEMO_TENANT,
            args.identity.data_dir.join("demo-token").display()
        );
    }

    // What was deployed before the last stop is served again first, with its revision,
    // so the demo below finds it (an identical demo is `unchanged`). The registry logs
    // each saved workflow it cannot serve again, with why. Not kept past printing: a
    // restored workflow removed later must not stay loaded.
    let restored = registry
        .restore_saved()
        .await
        .context("reading the saved deployments")?;
    for deployment in restored.served {
        print_routes("restored", &url, &deployment);
    }

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
        ensure_tenant_of(&tenants, &request).await?;
        let deployment = match registry.deploy(request).await? {
            DeployOutcome::Deployed(deployment) | DeployOutcome::Unchanged(deployment) => {
                deployment
            }
        };
        print_routes("deployed", &url, &deployment);
    }
    gateway.set_ready();
    println!("ready; press Ctrl-C to stop");

    let swap_turned_on = tokio::select! {
        result = wait_for_signal() => { result?; false }
        // Swap is the machine's: every worker of this process sees it turned on, so
        // the first (there is at least one) speaks for all.
        () = locals[0].until_swap_turned_on() => true,
    };
    println!("shutting down");
    gateway.shutdown().await;
    if swap_turned_on {
        anyhow::bail!("{SWAP_TURNED_ON}");
    }
    Ok(())
}

/// Tells the operator where `deployment`'s routes are served, each line starting with
/// what happened to it (`deployed`, `restored`).
fn print_routes(what: &str, url: &str, deployment: &Deployment) {
    for trigger in &deployment.workflow.http_triggers {
        println!(
            "  {what} {} (revision {}): {url}{} -> {}",
            deployment.workflow.name, deployment.revision, trigger.route, trigger.target
        );
    }
}

/// The tenant `faas up` creates unless given `--no-demo`, so that it works out of the
/// box.
pub(crate) const DEMO_TENANT: &str = "demo";

/// Creates the demo tenant if missing and returns a token for it: the one saved in
/// `<data_dir>/demo-token` while it still authenticates as the demo tenant (so that
/// restarts do not pile up tokens), else a new one, saved there (mode 0600).
///
/// # Errors
/// If the tenant store or the file fails.
pub(crate) async fn demo_token(
    tenants: &faas_store::TenantStore,
    data_dir: &std::path::Path,
) -> anyhow::Result<String> {
    tenants.ensure_tenant(DEMO_TENANT).await?;
    let path = data_dir.join("demo-token");
    if let Ok(saved) = std::fs::read_to_string(&path) {
        let saved = saved.trim();
        if tenants.authenticate(saved).await?.as_deref() == Some(DEMO_TENANT) {
            return Ok(saved.to_owned());
        }
    }
    let issued = tenants.create_token(DEMO_TENANT, "faas up").await?;
    crate::args::write_token(&path, &issued.secret)?;
    Ok(issued.secret)
}

/// Creates the tenant a manifest deployed at start names, if missing: deploying it
/// with `faas up --deploy` is the operator's explicit word that the tenant exists. A
/// manifest that does not parse is left to the deploy to report.
///
/// # Errors
/// If the tenant store fails or the name is not a valid tenant name.
pub(crate) async fn ensure_tenant_of(
    tenants: &faas_store::TenantStore,
    request: &faas_gateway::DeployRequest,
) -> anyhow::Result<()> {
    if let Ok(workflow) = faas_workflow::Workflow::parse(&request.file_name, &request.manifest)
        && tenants.ensure_tenant(&workflow.tenant).await?
    {
        println!(
            "  created tenant {} for {}",
            workflow.tenant, request.file_name
        );
    }
    Ok(())
}
