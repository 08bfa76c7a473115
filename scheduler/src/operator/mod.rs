//! The Kubernetes operator (`faas operator`): Workflow resources are the source of
//! truth for what is deployed, and the operator is the only writer of deployment
//! records in Redis.
//!
//! - [`reconcile`]: per Workflow, the finalizer, validation, tenant and route checks,
//!   components, the deployment record and the status.
//! - [`components`]: fetching a component from its URL into Redis, SHA-256 verified.
//! - [`refetch`]: a refused component URL is fetched again only after a wait.
//! - [`floor`]: revisions stay above those handed out before Redis lost its counter.
//! - [`observe`]: a deployment's placement and load status as the Workflow's status.
//! - [`pods`]: a deleted worker pod's worker is forgotten at once.
//! - [`orphans`]: records whose Workflow went without the finalizer's cleanup are
//!   removed.
//! - [`scale`]: the worker Deployment scaled to zero when idle and back on demand.
//! - [`leader`]: only the holder of a Lease reconciles, places and scales.
//! - [`events`]: Kubernetes Events for what changed (deployed, refused, Ready, placed,
//!   scaled).
//! - [`metrics`]: Prometheus metrics (leadership, reconciles, Workflows by state,
//!   scaling), served by the caller.
//!
//! Placement runs the same rounds as `faas scheduler` ([`crate::service`]), so tenant
//! affinity, capacity and replicas follow the planner's rules in both modes.

mod components;
mod events;
mod fetch_client;
mod floor;
mod leader;
mod metrics;
mod observe;
mod orphans;
mod pods;
mod reconcile;
mod refetch;
mod retry;
mod scale;

use crate::service::Rounds;
use faas_shared_state::SharedState;
use faas_store::TenantStore;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

pub use faas_kube::crd_yaml;
pub use metrics::OperatorMetrics;

/// A client of the API server from the environment: the pod's service account in a
/// cluster, else `KUBECONFIG` or `~/.kube/config`.
///
/// # Errors
/// [`OperatorError::Kube`] when neither is usable.
pub async fn client_from_environment() -> Result<kube::Client, OperatorError> {
    Ok(kube::Client::try_default().await?)
}

/// How the operator runs (the flags of `faas operator`).
#[derive(Debug, Clone)]
pub struct OperatorConfig {
    /// The namespace of the worker pods, the worker Deployment and the Lease.
    pub namespace: String,
    /// How often placement rounds and the scaler run.
    pub interval: Duration,
    /// The label selector of worker pods (`app.kubernetes.io/component=worker`).
    pub worker_selector: String,
    /// The worker Deployment scaled to zero and back.
    pub worker_deployment: String,
    /// The worker replicas when there is demand.
    pub worker_replicas: i32,
    /// Scale the workers to zero after this long without an event (`None`: never).
    pub scale_to_zero_after: Option<Duration>,
    /// The name of the Lease the replicas of the operator elect their leader with.
    pub lease_name: String,
    /// This replica's identity in the Lease (its pod name).
    pub identity: String,
    /// The largest component fetched from a URL, in bytes.
    pub max_component_bytes: u64,
    /// How long fetching one component from its URL may take.
    pub fetch_timeout: Duration,
    /// The non-public networks component URLs may be fetched from
    /// (`--component-private-networks`; `fetch_client`).
    pub component_private_networks: Arc<[ipnet::IpNet]>,
    /// The workflows a tenant may have when its quota is the platform's default (0: no
    /// limit).
    pub tenant_max_workflows: u64,
    /// How many MiB the components of a tenant's workflows may take in all when its
    /// quota is the platform's default (0: no limit).
    pub tenant_code_max_mb: u64,
    /// How many channel and stream triggers one tenant's Workflows may have in all
    /// ([`faas_workflow::redis_consumers_over`]; 0: no limit).
    pub max_redis_consumers_per_tenant: usize,
    /// Components no deployment names are deleted from Redis once this old.
    pub component_ttl: Duration,
}

/// Why the operator stopped.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The Kubernetes API refused or could not be reached.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Leader election failed.
    #[error("leader election on Lease `{lease}`: {message}")]
    Lease {
        /// The Lease.
        lease: String,
        /// What went wrong.
        message: String,
    },
    /// Another replica took the Lease: this one stops so that it never acts beside
    /// the new leader (Kubernetes restarts it as a candidate).
    #[error("lost the leadership (Lease `{0}`)")]
    LostLeadership(String),
    /// The HTTP client for component URLs could not be built.
    #[error("building the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
}

/// What every task of the operator shares.
pub(crate) struct Context {
    pub(crate) client: kube::Client,
    pub(crate) shared: SharedState,
    pub(crate) tenants: TenantStore,
    pub(crate) http: reqwest::Client,
    pub(crate) config: OperatorConfig,
    /// Whether the worker Deployment is scaled to zero (the scaler's last view), so a
    /// status says `ScaledToZero` rather than `NoWorkers`.
    pub(crate) scaled_to_zero: AtomicBool,
    /// Wakes the placement loop early (a worker pod went away).
    pub(crate) place_now: Notify,
    /// Wakes every Workflow's reconcile (placements or load status changed).
    pub(crate) reconcile_all: Notify,
    /// Where the operator's Kubernetes Events go.
    pub(crate) events: events::Events,
    /// What the operator counts for Prometheus.
    pub(crate) metrics: Arc<OperatorMetrics>,
    /// One deploy at a time, since each checks names and routes against the others.
    pub(crate) deploy_lock: tokio::sync::Mutex<()>,
    /// The bytes of components being fetched, by tenant: at most
    /// `max_component_bytes` of one tenant's, twice that in all, so that Workflows
    /// naming large URLs at once cannot take the operator's memory (each is buffered
    /// whole, then sent to Redis in pieces); a fetch past it fails and is retried.
    pub(crate) fetching: Arc<faas_budget::Budget<String>>,
    /// Component URLs whose fetch was refused, not fetched again before their wait ends.
    pub(crate) refused_fetches: refetch::RefusedFetches,
    /// Failed reconciles in a row, by `namespace/name`, for the retry backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// Reconciles in a row that left a Workflow refused for a cause outside its spec
    /// (quota, name, route, tenant), by `namespace/name`, for its requeue backoff.
    refusals: Mutex<HashMap<String, u32>>,
    /// When the operator last wrote each Workflow's status, by `namespace/name`, to
    /// space out writes that change its messages only (see `reconcile::apply`).
    status_writes: Mutex<HashMap<String, std::time::Instant>>,
    /// The highest revision seen in a deployment record. A deploy raises the revision
    /// counter past it first: after Redis lost its state, the counter (and every
    /// record) is gone, and revisions counted from 1 again would name, to the gateways
    /// and workers that still hold the old ones, other code than they loaded.
    pub(crate) revision_floor: std::sync::atomic::AtomicU64,
}

impl Context {
    pub(crate) fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        // A count is always consistent, even after a panic elsewhere.
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn refusals(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.refusals.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn status_writes(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, std::time::Instant>> {
        self.status_writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets what it keeps by Workflow (`namespace/name`) for each one `declared`
    /// says is gone: one deleted without its cleanup (a tenant may strip the
    /// finalizer) left its entries, which piled up without bound, and the
    /// `faas_operator_workflows` gauge counted it for good.
    pub(crate) fn forget_undeclared(&self, declared: impl Fn(&str, &str) -> bool) {
        let keep = |key: &String| {
            key.split_once('/')
                .is_some_and(|(namespace, name)| declared(namespace, name))
        };
        self.failures().retain(|key, _| keep(key));
        self.refusals().retain(|key, _| keep(key));
        self.status_writes().retain(|key, _| keep(key));
        self.metrics.retain_workflows(keep);
    }
}

/// Runs the operator until `shutdown` completes (then gives up the Lease), it fails or
/// it loses the leadership: waits to be elected, then reconciles Workflows, places,
/// follows worker pods and scales the workers, counting into `metrics`.
///
/// # Errors
/// [`OperatorError`] when the API server cannot be used or the Lease is lost.
pub async fn run(
    client: kube::Client,
    shared: SharedState,
    tenants: TenantStore,
    config: OperatorConfig,
    metrics: Arc<OperatorMetrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), OperatorError> {
    tokio::pin!(shutdown);
    let http = fetch_client::build(
        config.fetch_timeout,
        config.component_private_networks.clone(),
    )?;
    let mut leadership = tokio::select! {
        elected = leader::elect(&client, &config) => elected?,
        () = &mut shutdown => return Ok(()),
    };
    tracing::info!(identity = %config.identity, lease = %config.lease_name, "elected leader");
    metrics.set_leader(true);
    let events = events::Events::new(client.clone(), &config.identity);
    // One tenant's fetches (a URL announcing its size and then sending nothing holds
    // that much until the fetch timeout) leave as much again to the others.
    let fetching = Arc::new(faas_budget::Budget::new(faas_budget::BudgetLimits {
        total: config.max_component_bytes.saturating_mul(2),
        per_holder: config.max_component_bytes,
    }));
    let context = Arc::new(Context {
        client,
        shared,
        tenants,
        http,
        config,
        scaled_to_zero: AtomicBool::new(false),
        place_now: Notify::new(),
        reconcile_all: Notify::new(),
        events,
        metrics: metrics.clone(),
        deploy_lock: tokio::sync::Mutex::new(()),
        fetching,
        failures: Mutex::new(HashMap::new()),
        refusals: Mutex::new(HashMap::new()),
        status_writes: Mutex::new(HashMap::new()),
        refused_fetches: refetch::RefusedFetches::default(),
        revision_floor: std::sync::atomic::AtomicU64::new(0),
    });
    let stopped = tokio::select! {
        lost = leadership.lost() => {
            metrics.set_leader(false);
            return Err(lost);
        }
        () = &mut shutdown => Ok(()),
        () = place(context.clone()) => Ok(()),
        () = pods::follow(context.clone()) => Ok(()),
        () = scale::run(context.clone()) => Ok(()),
        () = orphans::sweep(context.clone()) => Ok(()),
        () = reconcile::run(context.clone()) => Ok(()),
    };
    leadership.release().await;
    metrics.set_leader(false);
    stopped
}

/// The placement rounds of `faas scheduler`, at every interval or when woken; after a
/// round, every Workflow's status is refreshed if the placements or load statuses
/// changed.
async fn place(context: Arc<Context>) {
    let mut rounds = Rounds::new(
        context.config.component_ttl,
        context.metrics.placement.clone(),
    );
    let mut ticker = tokio::time::interval(context.config.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = None;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = context.place_now.notified() => {}
        }
        rounds.run_once(&context.shared).await;
        match observe::fingerprint(&context.shared).await {
            Ok(now) if last.as_ref() != Some(&now) => {
                last = Some(now);
                context.reconcile_all.notify_one();
            }
            Ok(_) => {}
            Err(err) => tracing::warn!("reading placements failed, retrying: {err}"),
        }
    }
}
