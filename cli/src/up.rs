//! `faas up`: the whole platform in one process (gateway, scheduler and one or more
//! workers). By default its state is in memory and it needs no external service; with
//! `--redis` it keeps key-value state in Redis and serves Redis triggers.

use crate::args::{GatewayArgs, IdentityArgs, WorkerArgs};
use crate::deploy::prepare;
use anyhow::Context;
use faas_gateway::{DeployOutcome, Gateway, RedisBroker, Registry};
use faas_scheduler::{EmbeddedPlacement, WorkerId, WorkerSpec};
use faas_worker::{KeyValueStore, Worker};
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
    /// A workflow.toml to build and deploy at start (repeatable). Without any, the demo
    /// workflows under functions/ are deployed when present.
    #[arg(long = "deploy", value_name = "WORKFLOW_TOML")]
    deploy: Vec<PathBuf>,
    /// Deploy nothing at start.
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
}

/// Runs the platform until Ctrl-C or SIGTERM.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let token = args.identity.token()?;
    let worker_config = args.worker.config(&args.identity.data_dir);
    // State belongs to the platform, not to a worker: every worker sees the same store.
    let key_value = Arc::new(
        match &args.redis {
            Some(url) => KeyValueStore::redis(url).await?,
            None => KeyValueStore::memory(),
        }
        .with_quota(args.worker.kv_quota()),
    );
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
        capacity: args.worker.capacity,
    }));
    let mut registry = Registry::new(workers, Arc::new(placement));
    if broker.is_some() {
        registry = registry.with_redis_triggers();
    }
    let registry = Arc::new(registry);

    let mut gateway = Gateway::new(args.gateway.config(&token), registry.clone());
    if let Some(broker) = broker {
        gateway = gateway.with_broker(broker);
    }
    let gateway = gateway.start().await?;
    let url = format!("http://{}", gateway.local_addr());
    println!("faas is up at {url}");
    args.identity.print_token(&token);

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

/// Returns on Ctrl-C or SIGTERM.
pub(crate) async fn wait_for_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C"),
        _ = terminate.recv() => Ok(()),
    }
}
