//! Deployed workflows and the route table built from them.
//!
//! A deploy parses and validates the manifest, places the workflow, has its worker
//! compile and link every function, and only then swaps the new version in: the
//! deployments map and the route table change together under one write lock. A
//! request takes an `Arc` of what it found, so requests in flight finish on the
//! version they started on.

use crate::auth::{Caller, TenantCredential};
use crate::kubernetes::KubeError;
pub use crate::replica::Replica;
use crate::services::ServicesBackend;
use faas_invoke::{
    ComponentPool, Components, FunctionSummary, LoadError, LoadErrorKind, LocalWorker, RunRecord,
    WorkerQuotas, distinct_bytes,
};
use faas_scheduler::{Placement, PlacementError, WorkerId, WorkflowKey};
use faas_store::{
    DeploymentStore, Forgotten, IssuedToken, QuotaChanges, Quotas, SavedDeployment, StoreError,
    Tenant, TenantData, TenantError, TenantStore, TenantWorkflows, TokenInfo,
};
use faas_workflow::{
    ManifestError, Route, RouteOwners, RouteTable, TenantScope, TriggerTarget, Workflow,
};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

/// A workflow upload: the manifest text and each function's component bytes.
#[derive(Debug, Clone)]
pub struct DeployRequest {
    /// The manifest's file name, used in error messages.
    pub file_name: String,
    /// The workflow.toml text.
    pub manifest: String,
    /// Components by function name.
    pub components: Components,
    /// Karmem `.km` texts by file name as written in the manifest.
    pub schemas: BTreeMap<String, String>,
}

/// One deployed version of a workflow.
pub struct Deployment {
    /// Tenant and name.
    pub key: WorkflowKey,
    /// The parsed manifest.
    pub workflow: Workflow,
    /// Hash of the manifest and components: equal digests mean an identical deploy.
    pub digest: String,
    /// Increases with every deploy that changed something.
    pub revision: u64,
    /// When this version was deployed.
    pub deployed_at: SystemTime,
    /// Its replicas ready to serve: each a whole copy of the workflow, on its own
    /// worker. Empty in services mode while its only worker is being replaced.
    pub replicas: Vec<Replica>,
    /// Each function as loaded (component digest and effective limits).
    pub functions: Vec<FunctionSummary>,
    /// The uploaded components, kept to place replicas again when a worker goes away
    /// (embedded mode) or to write them back if Redis loses them (services mode).
    components: Arc<Components>,
    /// Round-robin position over `replicas`.
    next_replica: AtomicUsize,
}

/// What a [`Deployment`] is made of.
pub(crate) struct DeploymentParts {
    /// The parsed manifest.
    pub workflow: Workflow,
    /// Hash of the manifest and components.
    pub digest: String,
    /// Its revision.
    pub revision: u64,
    /// When it was deployed.
    pub deployed_at: SystemTime,
    /// The replicas serving it now.
    pub replicas: Vec<Replica>,
    /// Each function as loaded.
    pub functions: Vec<FunctionSummary>,
    /// The uploaded components by function name.
    pub components: Arc<Components>,
}

impl Deployment {
    /// A deployment of `parts.workflow` as it is now served by `parts.replicas`.
    pub(crate) fn new(parts: DeploymentParts) -> Self {
        let DeploymentParts {
            workflow,
            digest,
            revision,
            deployed_at,
            replicas,
            functions,
            components,
        } = parts;
        Self {
            key: WorkflowKey {
                tenant: workflow.tenant.clone(),
                name: workflow.name.clone(),
            },
            workflow,
            digest,
            revision,
            deployed_at,
            replicas,
            functions,
            components,
            next_replica: AtomicUsize::new(0),
        }
    }

    /// The same version served by other replicas.
    pub(crate) fn with_replicas(&self, replicas: Vec<Replica>) -> Self {
        Self::new(DeploymentParts {
            workflow: self.workflow.clone(),
            digest: self.digest.clone(),
            revision: self.revision,
            deployed_at: self.deployed_at,
            replicas,
            functions: self.functions.clone(),
            components: self.components.clone(),
        })
    }

    /// The same version served by `replicas`, which loaded its `functions`. Those
    /// replace its own only when it knew none (it was first seen before any worker had
    /// loaded it: deployed by the operator, or its workers scaled to zero).
    pub(crate) fn with_loaded_replicas(
        &self,
        replicas: Vec<Replica>,
        functions: Vec<FunctionSummary>,
    ) -> Self {
        let mut deployment = self.with_replicas(replicas);
        if deployment.functions.is_empty() {
            deployment.functions = functions;
        }
        deployment
    }

    /// The uploaded components by function name.
    pub(crate) fn components(&self) -> &Arc<Components> {
        &self.components
    }

    /// Every ready replica, starting with the one the next event goes to (round-robin).
    pub fn replicas_in_turn(&self) -> impl Iterator<Item = &Replica> {
        let count = self.replicas.len();
        let start = self.next_replica.fetch_add(1, Ordering::Relaxed);
        (0..count).map(move |offset| &self.replicas[(start + offset) % count])
    }

    /// The workers its replicas run on.
    pub fn workers(&self) -> impl Iterator<Item = &WorkerId> {
        self.replicas.iter().map(|replica| &replica.worker_id)
    }
}

/// What [`Registry::check`] found of a deploy.
enum Checked {
    /// The identical version is live.
    Unchanged(Arc<Deployment>),
    /// It may go on; its digest.
    New { digest: String },
}

/// What a deploy did.
pub enum DeployOutcome {
    /// A new version is live.
    Deployed(Arc<Deployment>),
    /// The same manifest and components were already live; nothing changed.
    Unchanged(Arc<Deployment>),
}

/// Why a deploy was refused. Nothing changed when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The manifest is invalid; the error names file, line and field.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A component is invalid or does not fit its function's kind.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The workflow name or a route belongs to another workflow or tenant.
    #[error("{0}")]
    Conflict(String),
    /// The caller's credential does not allow this deploy (a tenant token deploying
    /// the catch-all route, or one revoked before the deploy went live).
    #[error("{0}")]
    Forbidden(String),
    /// The tenant does not exist, or the tenant store could not be read.
    #[error(transparent)]
    Tenant(#[from] TenantError),
    /// The deploy would take the tenant over one of its quotas; the text names the
    /// quota and how an operator raises it.
    #[error("{0}")]
    Quota(String),
    /// No worker could take the workflow.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// The workflow needs something this platform was started without.
    #[error("{0}")]
    Unsupported(String),
    /// A worker process could not load the workflow (services mode); its message
    /// names the function.
    #[error("worker `{worker}`: {message}")]
    RemoteLoad {
        /// The worker that tried.
        worker: String,
        /// Its load error.
        message: String,
        /// Whose the error is to fix.
        kind: LoadErrorKind,
    },
    /// The shared state in Redis could not be read or written, or the workers did
    /// not answer in time (services mode).
    #[error("{0}")]
    SharedState(String),
    /// The state database could not save or delete the deployment (embedded mode).
    #[error(transparent)]
    Store(StoreError),
    /// A removed tenant's data could not all be removed, so its name stays leaving.
    #[error(
        "tenant `{tenant}` is removed but not all of its data: {source}; removing it again \
         removes the rest (until then its name cannot be created again)"
    )]
    TenantData {
        /// The tenant.
        tenant: String,
        /// What failed: the tenant's data store, or the shared state's record of the
        /// components it stored.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The Workflow resource could not be applied or deleted, or the operator
    /// refused it (Kubernetes mode).
    #[error(transparent)]
    Kubernetes(#[from] KubeError),
    /// The deploy stopped before it was checked: the gateway is shutting down.
    #[error("the deploy was interrupted before it was checked ({0}); nothing was deployed")]
    Interrupted(String),
    /// Checking the deploy failed unexpectedly (a bug of the gateway's, logged).
    #[error("checking the deploy failed unexpectedly ({0}); nothing was deployed")]
    CheckFailed(String),
}

/// Where a deploy's workflow now runs: what the backend returns to the registry.
pub(crate) struct Placed {
    /// The revision the shared state gave it; `None` to number it locally.
    pub revision: Option<u64>,
    /// Its ready replicas.
    pub replicas: Vec<Replica>,
    /// Its functions as loaded.
    pub functions: Vec<FunctionSummary>,
    /// The components to keep for re-placing it (embedded mode).
    pub components: Arc<Components>,
    /// Whether it is live now.
    pub state: PlacedState,
}

/// Whether a deploy's new version is live when the backend returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlacedState {
    /// Loaded on its replicas: served from now on.
    Live,
    /// Accepted (a Workflow resource the operator observed), not loaded yet: the
    /// follower serves it once a worker has loaded it.
    Pending,
    /// The same spec was already declared; nothing changed.
    Unchanged,
}

/// Who places and loads workflows.
enum Backend {
    /// Workers in this process, placed by a placement in this process.
    Embedded(Arc<dyn Placement>),
    /// Worker processes, placed by the scheduler process through Redis.
    Services(Arc<ServicesBackend>),
}

/// One route and where it leads.
#[derive(Clone)]
pub struct RouteEntry {
    /// The route pattern.
    pub route: Route,
    /// The function it invokes, or the step that starts a run.
    pub target: TriggerTarget,
    /// The deployment that owns it.
    pub deployment: Arc<Deployment>,
}

#[derive(Default)]
struct State {
    deployments: BTreeMap<String, Arc<Deployment>>,
    /// Every deployment's routes, as requests find them.
    routes: Arc<RouteTable<RouteEntry>>,
    /// Every deployment's routes, by owner: what a deploy's routes are checked against.
    owners: RouteOwners,
    last_revision: u64,
    /// Workers in this process (embedded mode), or the live worker processes as last
    /// seen in Redis (services mode; `None`, as they are not here).
    workers: BTreeMap<WorkerId, Option<Arc<dyn LocalWorker>>>,
    /// Counts the deploys and removals made through this registry, so that a view of
    /// the shared state read before one of them is not installed over it.
    local_changes: u64,
}

impl State {
    /// Serves `deployment` in place of the deployment of the same name, if any. The
    /// route table and the route owners change with it, by that workflow's routes only
    /// (the route table is copied first while requests still hold the old one).
    fn put(&mut self, deployment: Arc<Deployment>) {
        self.take(&deployment.workflow.name);
        self.owners.insert(&deployment.workflow);
        let routes = Arc::make_mut(&mut self.routes);
        for (route, entry) in route_entries(&deployment) {
            routes.insert(&route, entry);
        }
        self.deployments
            .insert(deployment.workflow.name.clone(), deployment);
    }

    /// Takes the deployment `name` out of service, with its routes.
    fn take(&mut self, name: &str) -> Option<Arc<Deployment>> {
        let deployment = self.deployments.remove(name)?;
        self.owners.remove(&deployment.workflow);
        let routes = Arc::make_mut(&mut self.routes);
        for trigger in &deployment.workflow.http_triggers {
            routes.remove_if(&trigger.route, |entry| {
                Arc::ptr_eq(&entry.deployment, &deployment)
            });
        }
        Some(deployment)
    }

    /// Serves `deployments` and nothing else.
    fn replace_all(&mut self, deployments: Vec<Arc<Deployment>>) {
        self.deployments = deployments
            .into_iter()
            .map(|deployment| (deployment.workflow.name.clone(), deployment))
            .collect();
        let workflows = self.deployments.values().map(|d| &d.workflow);
        self.owners = workflows.collect();
        self.routes = Arc::new(RouteTable::new(
            self.deployments.values().flat_map(route_entries),
        ));
    }
}

/// The part of a tenant's quotas that a worker enforces.
fn worker_quotas(quotas: &Quotas) -> WorkerQuotas {
    WorkerQuotas {
        max_instances: quotas.max_instances,
        kv_max_keys: quotas.kv_max_keys,
        kv_max_bytes: quotas.kv_max_bytes,
        guest_memory_mb: quotas.guest_memory_mb,
    }
}

/// How many runs of each workflow `faas runs` can show.
const RUN_HISTORY: usize = 100;

/// How many bytes of run records each workflow keeps (see [`RunRecord::approx_bytes`]);
/// the oldest go first. Guest error texts are already cut to
/// the worker's `GUEST_TEXT_BYTES`, but a fan-out has a record per branch.
const RUN_HISTORY_BYTES: usize = 1 << 20;

/// One workflow's recent runs, newest last, within [`RUN_HISTORY`] and
/// [`RUN_HISTORY_BYTES`].
#[derive(Debug, Default)]
struct RunHistory {
    records: VecDeque<RunRecord>,
    bytes: usize,
}

impl RunHistory {
    fn push(&mut self, record: RunRecord) {
        self.bytes += record.approx_bytes();
        self.records.push_back(record);
        // The newest record stays even if it alone is over the budget.
        while self.records.len() > 1
            && (self.records.len() > RUN_HISTORY || self.bytes > RUN_HISTORY_BYTES)
        {
            if let Some(oldest) = self.records.pop_front() {
                self.bytes -= oldest.approx_bytes();
            }
        }
    }
}

/// Every deployed workflow, the workers that run them and their placement.
pub struct Registry {
    backend: Backend,
    state: RwLock<State>,
    /// Recent runs per deployed workflow, by tenant and name, newest last: a name
    /// another tenant deploys later starts with none.
    runs: Mutex<BTreeMap<WorkflowKey, RunHistory>>,
    /// Serializes deploys and deletes so two uploads of one workflow cannot race.
    deploy_lock: tokio::sync::Mutex<()>,
    /// Bumped whenever the set of deployments changes, for whoever follows them
    /// (the Redis trigger supervisor).
    changes: tokio::sync::watch::Sender<u64>,
    /// Whether something consumes Redis triggers (the platform runs with Redis).
    redis_triggers: bool,
    /// The tenants a workflow may be deployed for, and their tokens; without a store,
    /// any tenant a manifest names is accepted.
    tenants: Option<TenantStore>,
    /// Where embedded mode saves every deploy and removal, so that a restart serves
    /// them again; `None` keeps deployments in memory only (services mode keeps them
    /// in Redis).
    saved: Option<DeploymentStore>,
    /// How many workflows a tenant without a quota of its own may have deployed; 0
    /// for no limit.
    max_workflows: u64,
    /// How many MiB the components of a tenant's deployed workflows may take in all,
    /// for a tenant without a quota of its own; 0 for no limit.
    max_code_mb: u64,
    /// How many channel and stream triggers one tenant's workflows may have in all
    /// ([`faas_workflow::redis_consumers_over`]); 0 for no limit.
    max_redis_consumers: usize,
    /// Where tenants' data is, removed with a tenant.
    tenant_data: Option<TenantData>,
    /// The deployments' components, one copy of each however many deployments name
    /// it.
    components: ComponentPool,
}

/// What [`Registry::remove_tenant`] did.
#[derive(Debug, Clone, Copy)]
pub struct TenantRemoved {
    /// How many of its tokens were revoked.
    pub revoked: u64,
    /// What of its data was removed.
    pub forgotten: Forgotten,
}

/// What [`Registry::restore_saved`] did.
#[derive(Default)]
pub struct Restored {
    /// The deployments served again, by revision.
    pub served: Vec<Arc<Deployment>>,
    /// The saved deployments that could not be served again (e.g. a component the
    /// engine no longer loads), by name, with why. They stay saved, serving nothing,
    /// until a deploy of the same name replaces them or a removal deletes them.
    pub failed: Vec<(String, DeployError)>,
}

impl Registry {
    /// A registry placing workflows on `workers` with `placement`.
    pub fn new(
        workers: impl IntoIterator<Item = (WorkerId, Arc<dyn LocalWorker>)>,
        placement: Arc<dyn Placement>,
    ) -> Self {
        let workers = workers
            .into_iter()
            .map(|(id, worker)| (id, Some(worker)))
            .collect();
        Self::with_backend(Backend::Embedded(placement), workers)
    }

    /// A registry of services mode: deploys go through `backend` (Redis), where the
    /// scheduler process places them and worker processes load them. Call
    /// [`crate::services::follow`] to keep it in step with the shared state.
    pub fn services_mode(backend: ServicesBackend) -> Self {
        Self::with_backend(Backend::Services(Arc::new(backend)), BTreeMap::new())
    }

    fn with_backend(
        backend: Backend,
        workers: BTreeMap<WorkerId, Option<Arc<dyn LocalWorker>>>,
    ) -> Self {
        Self {
            backend,
            state: RwLock::new(State {
                workers,
                ..State::default()
            }),
            runs: Mutex::default(),
            deploy_lock: tokio::sync::Mutex::new(()),
            components: ComponentPool::default(),
            changes: tokio::sync::watch::Sender::new(0),
            redis_triggers: false,
            tenants: None,
            saved: None,
            max_workflows: 0,
            max_code_mb: 0,
            max_redis_consumers: 0,
            tenant_data: None,
        }
    }

    /// Lets a tenant without a quota of its own deploy at most `max` workflows (0 for
    /// no limit; the default).
    pub fn with_max_workflows(mut self, max: u64) -> Self {
        self.max_workflows = max;
        self
    }

    /// Lets the components of the deployed workflows of a tenant without a quota of its
    /// own take at most `max` MiB in all (0 for no limit; the default).
    pub fn with_max_code_mb(mut self, max: u64) -> Self {
        self.max_code_mb = max;
        self
    }

    /// Lets one tenant's workflows have at most `max` channel and stream triggers in
    /// all, each a Redis connection in every gateway (0 for no limit; the default).
    pub fn with_max_redis_consumers(mut self, max: usize) -> Self {
        self.max_redis_consumers = max;
        self
    }

    /// Saves every deploy and removal in `store` as part of it (embedded mode): a deploy
    /// whose save fails is refused, with nothing changed. See
    /// [`Registry::restore_saved`] for serving them again.
    pub fn with_saved_deployments(mut self, store: DeploymentStore) -> Self {
        self.saved = Some(store);
        self
    }

    /// Accepts deploys only for the tenants in `tenants`, and authenticates tenant
    /// tokens against it.
    pub fn with_tenants(mut self, tenants: TenantStore) -> Self {
        self.tenants = Some(tenants);
        self
    }

    /// Removes a removed tenant's data from `data` ([`Self::remove_tenant`]).
    pub fn with_tenant_data(mut self, data: TenantData) -> Self {
        self.tenant_data = Some(data);
        self
    }

    /// The tenant store, if the registry has one.
    pub fn tenants(&self) -> Option<&TenantStore> {
        self.tenants.as_ref()
    }

    /// Accepts workflows with Redis channel and stream triggers (the gateway consumes
    /// them). Without this, deploying one fails rather than silently never running.
    pub fn with_redis_triggers(mut self) -> Self {
        self.redis_triggers = true;
        self
    }

    /// Deploys `request` with the operator's authority (the manifest names its
    /// tenant), or does nothing if the identical workflow is live.
    ///
    /// # Errors
    /// See [`Registry::deploy_as`].
    pub async fn deploy(&self, request: DeployRequest) -> Result<DeployOutcome, DeployError> {
        self.deploy_as(request, &Caller::Admin, None).await
    }

    /// Deploys `request` for `caller`, or does nothing if the identical workflow is
    /// live. A tenant's token deploys for its own tenant only (the manifest may leave
    /// `tenant` out), never the catch-all route `/...`.
    ///
    /// `credential` is the tenant token the request presented (`None` for the
    /// operator): the deploy goes live only if it is still live then. Reading the
    /// upload and loading the components take time, in which the token may be revoked,
    /// or its tenant removed and made again for someone else, who must not find the
    /// old tenant's workflow deployed in its name.
    ///
    /// # Errors
    /// [`DeployError`] if the manifest or a component is invalid, the manifest's tenant
    /// is not the caller's or does not exist, the credential is no longer live, a name
    /// or route belongs to another workflow or tenant, or no worker can take it. The
    /// live version, if any, is untouched.
    pub async fn deploy_as(
        &self,
        request: DeployRequest,
        caller: &Caller,
        credential: Option<&TenantCredential>,
    ) -> Result<DeployOutcome, DeployError> {
        // No token to check again as the deploy goes live: refused, not trusted.
        if let (Caller::Tenant(tenant), None) = (caller, credential) {
            return Err(DeployError::Forbidden(format!(
                "a deploy for tenant `{tenant}` must present one of its tokens \
                 (Authorization: Bearer); nothing was deployed"
            )));
        }
        let (workflow, mut request) = read_off_the_runtime(request, caller).await?;
        let workflow = workflow?;
        // A catch-all answers every path nobody else serves: the operator's fallback,
        // not something a tenant may claim.
        if !caller.is_admin()
            && let Some(trigger) = workflow
                .http_triggers
                .iter()
                .find(|t| t.route.is_catch_all())
        {
            return Err(DeployError::Forbidden(format!(
                "route `{}` is a catch-all: only the operator (admin credential) may \
                 deploy it",
                trigger.route
            )));
        }
        self.check_supported(&workflow)?;
        // Kept with the deployment (state database, Redis): only what it runs.
        if let Some(function) = request
            .components
            .keys()
            .find(|function| !workflow.functions.contains_key(*function))
        {
            let function = function.clone();
            return Err(DeployError::Load(LoadError::UndeclaredComponent {
                function,
            }));
        }
        // Checked before anything compiles (a deploy refused for its quota compiles
        // nothing), and again under the lock, where they hold.
        if let Checked::Unchanged(current) = self.check(&workflow, &request, caller).await? {
            return Ok(DeployOutcome::Unchanged(current));
        }
        self.compile_ahead(&workflow, &request.components).await?;
        let guard = self.deploy_lock.lock().await;
        // Under the deploy lock, which a tenant's removal takes too: in embedded mode
        // that holds until the deploy is saved. In services mode the promotion checks
        // again, in the same step as it goes live (the lock is let go while workers
        // load).
        if let (Some(credential), Some(tenants)) = (credential, &self.tenants)
            && !credential.is_live(tenants).await?
        {
            return Err(token_revoked());
        }
        let digest = match self.check(&workflow, &request, caller).await? {
            Checked::Unchanged(current) => return Ok(DeployOutcome::Unchanged(current)),
            Checked::New { digest } => digest,
        };
        request.components = self.components.share_all(request.components);
        let deployed_at = SystemTime::now();
        let placed = match &self.backend {
            Backend::Embedded(placement) => {
                // Numbered before it is saved; `deploy_lock` keeps any other deploy
                // from taking the number in between.
                let revision = self.read().last_revision + 1;
                let save = |components: &Arc<Components>| {
                    self.save(&SavedDeployment {
                        name: workflow.name.clone(),
                        tenant: workflow.tenant.clone(),
                        file_name: request.file_name.clone(),
                        manifest: request.manifest.clone(),
                        schemas: request.schemas.clone(),
                        components: components.clone(),
                        revision,
                        deployed_at,
                    })
                };
                let mut placed = self
                    .place_here(placement.as_ref(), &workflow, request.components, save)
                    .await?;
                placed.revision = Some(revision);
                placed
            }
            Backend::Services(shared) => {
                // Let go before the workers load it, which takes as long as their
                // compiles: held, one tenant's slow deploy held up every other
                // tenant's deploy through this gateway. The shared state orders
                // deploys already, as gateways deploy at once anyway: a lease per
                // workflow, and names and routes checked again against every deploy
                // staged (`ServicesBackend::deploy`).
                drop(guard);
                let credential = credential.zip(self.tenants.as_ref());
                shared
                    .deploy(&workflow, request, &digest, caller, credential)
                    .await?
            }
        };
        Ok(self.publish(workflow, digest, deployed_at, placed))
    }

    /// Serves what a deploy `placed`, as far as it is ready to be served.
    fn publish(
        &self,
        workflow: Workflow,
        digest: String,
        deployed_at: SystemTime,
        placed: Placed,
    ) -> DeployOutcome {
        let state = placed.state;
        if state == PlacedState::Live {
            return DeployOutcome::Deployed(self.serve(workflow, digest, deployed_at, placed));
        }
        let current = self.get_of(&workflow.tenant, &workflow.name);
        let deployment = match current {
            // Served already at this revision or a later one (the follower was first).
            Some(current)
                if placed
                    .revision
                    .is_some_and(|revision| current.revision >= revision) =>
            {
                current
            }
            // The version before keeps serving until a worker has loaded this one;
            // the follower swaps it in then. This one is only described.
            Some(current) if !current.replicas.is_empty() => {
                Arc::new(Deployment::new(DeploymentParts {
                    workflow,
                    digest,
                    revision: placed.revision.unwrap_or(current.revision + 1),
                    deployed_at,
                    replicas: placed.replicas,
                    functions: placed.functions,
                    components: placed.components,
                }))
            }
            // New here, or serving nothing: routed at once, so that the activator
            // holds its events until a worker has loaded it.
            _ => self.serve(workflow, digest, deployed_at, placed),
        };
        match state {
            PlacedState::Unchanged => DeployOutcome::Unchanged(deployment),
            PlacedState::Live | PlacedState::Pending => DeployOutcome::Deployed(deployment),
        }
    }

    /// How many workflows a tenant with `quotas` may have deployed: its own quota, else
    /// the platform's default (0: no limit).
    fn max_workflows_of(&self, quotas: &Quotas) -> u64 {
        quotas.max_workflows.unwrap_or(self.max_workflows)
    }

    /// Refuses a new workflow of `tenant` when it has as many deployed as its quota
    /// (its own, else the platform's default) allows. In services mode the count is of
    /// the shared state, so it includes what other gateways deployed; two gateways
    /// deploying at the same moment may each let one more in.
    async fn check_workflow_quota(&self, tenant: &str, quotas: &Quotas) -> Result<(), DeployError> {
        let max = self.max_workflows_of(quotas);
        let whose = match quotas.max_workflows {
            Some(_) => "its quota",
            None => "the platform's default quota",
        };
        if max == 0 {
            return Ok(());
        }
        let deployed = match &self.backend {
            Backend::Embedded(_) => self
                .read()
                .deployments
                .values()
                .filter(|deployment| deployment.key.tenant == tenant)
                .count(),
            Backend::Services(shared) => shared.workflows_of(tenant).await?.len(),
        };
        if (deployed as u64) < max {
            return Ok(());
        }
        Err(DeployError::Quota(format!(
            "tenant `{tenant}` has {deployed} workflows deployed, {whose} (max_workflows = \
             {max}); remove one (`faas rm <name>`), or have an operator raise it with \
             `faas tenant set {tenant} --max-workflows N`"
        )))
    }

    /// Refuses a deploy of `workflow` with `components` when, in place of its current
    /// version, the components of its tenant's deployed workflows would take more than
    /// its quota (its own, else the platform's default). Every gateway keeps each
    /// deployment's components in memory (to place it again, or write it back to
    /// Redis), so without this one tenant's deploys of large components could take the
    /// gateways' memory. Each component counts once, however many of the tenant's
    /// workflows name it, as the gateway holds it once (`ComponentPool`) and the state
    /// at rest stores it once. In services mode the count is of this gateway's view of
    /// the shared state, which may be a sync behind.
    fn check_code_quota(
        &self,
        workflow: &Workflow,
        components: &Components,
        quotas: &Quotas,
    ) -> Result<(), DeployError> {
        let (max_mb, whose) = match quotas.code_max_mb {
            Some(max) => (max, "its quota"),
            None => (self.max_code_mb, "the platform's default quota"),
        };
        if max_mb == 0 {
            return Ok(());
        }
        let new = distinct_bytes(components.values());
        let total = {
            let state = self.read();
            let others = state
                .deployments
                .values()
                .filter(|d| d.key.tenant == workflow.tenant && d.workflow.name != workflow.name)
                .flat_map(|d| d.components().values());
            distinct_bytes(others.chain(components.values()))
        };
        if total <= faas_budget::mib_or_unlimited(max_mb) {
            return Ok(());
        }
        let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
        let tenant = &workflow.tenant;
        Err(DeployError::Quota(format!(
            "the components of tenant `{tenant}`'s workflows would take {:.1} MiB with this \
             deploy ({:.1} MiB of it), over {whose} (code_max_mb = {max_mb}); remove a \
             workflow (`faas rm <name>`), or have an operator raise it with `faas tenant \
             set {tenant} --code-max-mb N`",
            mib(total),
            mib(new),
        )))
    }

    /// Creates tenant `name` with `quotas` and applies them on the workers in this
    /// process.
    ///
    /// # Errors
    /// [`DeployError::Tenant`] (invalid name or quota, already exists, store failed);
    /// [`DeployError::Unsupported`] without a tenant store.
    pub async fn create_tenant(&self, name: &str, quotas: Quotas) -> Result<Tenant, DeployError> {
        let tenants = self.tenants.as_ref().ok_or_else(no_tenant_store)?;
        // Its namespace first (if it has one): a tenant is never left without it, and
        // creating it again when it exists changes nothing. A name the store would
        // refuse makes no namespace.
        if let Backend::Services(shared) = &self.backend
            && faas_workflow::is_valid_name(name)
        {
            shared
                .prepare_tenant(name, self.max_workflows_of(&quotas))
                .await?;
        }
        let tenant = tenants.create_tenant_with_quotas(name, quotas).await?;
        self.apply_quotas_here(&tenant.name, &tenant.quotas);
        self.tenants_changed().await;
        Ok(tenant)
    }

    /// Creates a token for `tenant` ([`TenantStore::create_token`]).
    ///
    /// # Errors
    /// [`DeployError::Tenant`] (no such tenant, invalid label, store failed);
    /// [`DeployError::Unsupported`] without a tenant store.
    pub async fn create_token(
        &self,
        tenant: &str,
        label: &str,
    ) -> Result<IssuedToken, DeployError> {
        let tenants = self.tenants.as_ref().ok_or_else(no_tenant_store)?;
        let issued = tenants.create_token(tenant, label).await?;
        self.tenants_changed().await;
        Ok(issued)
    }

    /// Revokes token `id` ([`TenantStore::revoke_token`]); returns its record.
    ///
    /// In embedded mode under the deploy lock, as a deploy checks its token under it
    /// ([`Self::deploy_as`]): a deploy made with the token either is saved before the
    /// revocation or refused after it. In services mode a deploy checks its token in
    /// the step that makes it live (or, in Kubernetes mode, just before it applies the
    /// resource), and the lock is not held there.
    ///
    /// # Errors
    /// [`DeployError::Tenant`] (no such token, store failed); [`DeployError::Unsupported`]
    /// without a tenant store.
    pub async fn revoke_token(&self, id: &str) -> Result<TokenInfo, DeployError> {
        let tenants = self.tenants.as_ref().ok_or_else(no_tenant_store)?;
        let guard = match &self.backend {
            Backend::Embedded(_) => Some(self.deploy_lock.lock().await),
            Backend::Services(_) => None,
        };
        let revoked = tenants.revoke_token(id).await?;
        drop(guard);
        self.tenants_changed().await;
        Ok(revoked)
    }

    /// Call after a tenant or token changed through this registry's tenant store: in
    /// services mode the copy written back should Redis lose its state is taken again
    /// at once, so that it holds the change (a revoked token stays revoked).
    async fn tenants_changed(&self) {
        if let Backend::Services(shared) = &self.backend {
            shared.copy_tenants_after_change(self).await;
        }
    }

    /// Makes `changes` to tenant `name`'s quotas and applies them on the workers in
    /// this process at once (worker processes read them within
    /// [`faas_store::tenants::QUOTA_SYNC_INTERVAL`]). Returns the tenant as it now is.
    ///
    /// # Errors
    /// [`DeployError::Tenant`] (no such tenant, invalid quota, store failed);
    /// [`DeployError::Unsupported`] without a tenant store.
    pub async fn set_tenant_quotas(
        &self,
        name: &str,
        changes: &QuotaChanges,
    ) -> Result<Tenant, DeployError> {
        let tenants = self.tenants.as_ref().ok_or_else(no_tenant_store)?;
        let tenant = tenants.update_quotas(name, changes).await?;
        self.apply_quotas_here(&tenant.name, &tenant.quotas);
        self.tenants_changed().await;
        // After the store: should this fail, the same change sent again applies it.
        if let Backend::Services(shared) = &self.backend {
            shared
                .tenant_quotas_changed(&tenant.name, self.max_workflows_of(&tenant.quotas))
                .await?;
        }
        Ok(tenant)
    }

    /// Applies every tenant's quotas on the workers in this process; call it at start,
    /// before serving (embedded mode).
    ///
    /// # Errors
    /// [`TenantError`] if the tenant store cannot be read.
    pub async fn apply_tenant_quotas(&self) -> Result<(), TenantError> {
        if let Some(tenants) = &self.tenants {
            let tenants: Vec<(String, WorkerQuotas)> = tenants
                .tenants()
                .await?
                .into_iter()
                .map(|tenant| {
                    let quotas = worker_quotas(&tenant.quotas);
                    (tenant.name, quotas)
                })
                .collect();
            for worker in self.read().workers.values().flatten() {
                worker.apply_tenant_quotas(&tenants);
            }
        }
        Ok(())
    }

    /// Applies `tenant`'s quotas on the workers in this process (none in services
    /// mode).
    fn apply_quotas_here(&self, tenant: &str, quotas: &Quotas) {
        let quotas = worker_quotas(quotas);
        for worker in self.read().workers.values().flatten() {
            worker.set_tenant_quotas(tenant, &quotas);
        }
    }

    /// Swaps `workflow`, as `placed`, in for its live version (if any): the deployments
    /// map and the route table change together under one write lock.
    fn serve(
        &self,
        workflow: Workflow,
        digest: String,
        deployed_at: SystemTime,
        placed: Placed,
    ) -> Arc<Deployment> {
        let mut state = self.write();
        let revision = placed.revision.unwrap_or(state.last_revision + 1);
        state.last_revision = state.last_revision.max(revision);
        let deployment = Arc::new(Deployment::new(DeploymentParts {
            workflow,
            digest,
            revision,
            deployed_at,
            replicas: placed.replicas,
            functions: placed.functions,
            components: placed.components,
        }));
        state.put(deployment.clone());
        state.local_changes += 1;
        drop(state);
        self.changed();
        deployment
    }

    /// Refuses a workflow that needs something this platform was started without.
    fn check_supported(&self, workflow: &Workflow) -> Result<(), DeployError> {
        if !self.redis_triggers
            && (!workflow.redis_triggers.is_empty() || !workflow.stream_triggers.is_empty())
        {
            return Err(DeployError::Unsupported(format!(
                "workflow `{}` has Redis triggers, but this platform runs without Redis \
                 (start it with --redis <url>)",
                workflow.name
            )));
        }
        Ok(())
    }

    /// Saves `deployment` in the store, if the registry has one.
    fn save(&self, deployment: &SavedDeployment) -> Result<(), DeployError> {
        match &self.saved {
            Some(store) => store.save(deployment).map_err(DeployError::Store),
            None => Ok(()),
        }
    }

    /// Serves again every deployment saved in the store given with
    /// [`Registry::with_saved_deployments`], each with its saved revision and deploy
    /// time, in the order of their revisions; later deploys are numbered above the
    /// highest saved revision. One that cannot be served again is logged with why and
    /// left out; the others are served regardless. Call it once at start, before the
    /// gateway reports ready.
    ///
    /// # Errors
    /// [`StoreError`] if the saved deployments cannot be read.
    pub async fn restore_saved(&self) -> Result<Restored, StoreError> {
        let mut restored = Restored::default();
        let (Some(store), Backend::Embedded(placement)) = (&self.saved, &self.backend) else {
            return Ok(restored);
        };
        let _guard = self.deploy_lock.lock().await;
        let mut saved = store.load_all()?;
        saved.sort_by_key(|deployment| deployment.revision);
        for deployment in saved {
            {
                let mut state = self.write();
                state.last_revision = state.last_revision.max(deployment.revision);
            }
            let name = deployment.name.clone();
            match self.restore_one(placement.as_ref(), deployment).await {
                Ok(deployment) => restored.served.push(deployment),
                Err(err) => {
                    tracing::error!(
                        workflow = %name,
                        "the saved deployment cannot be served again; it stays saved, out \
                         of service, until deployed again or removed: {err}"
                    );
                    restored.failed.push((name, err));
                }
            }
        }
        Ok(restored)
    }

    /// Deploys `saved` again as it was, without saving it again.
    async fn restore_one(
        &self,
        placement: &dyn Placement,
        saved: SavedDeployment,
    ) -> Result<Arc<Deployment>, DeployError> {
        // The manifest may leave out the tenant (a tenant token's deploy): the saved
        // tenant is the one it was deployed for. Saved, it was checked when deployed,
        // perhaps by a version with fewer limits.
        let workflow = Workflow::parse_saved(
            &saved.file_name,
            &saved.manifest,
            Some(&saved.schemas),
            TenantScope::Own(&saved.tenant),
        )?;
        self.check_supported(&workflow)?;
        {
            check_routes(&workflow, &self.read().owners)?;
        }
        let components = self
            .components
            .share_all(Arc::unwrap_or_clone(saved.components));
        let digest = digest(&saved.manifest, &components, &saved.schemas);
        let mut placed = self
            .place_here(placement, &workflow, components, |_| Ok(()))
            .await?;
        placed.revision = Some(saved.revision);
        Ok(self.serve(workflow, digest, saved.deployed_at, placed))
    }

    /// Removes the workflow `name` if `caller` may see it; requests already running
    /// finish normally. Returns the tenant it belonged to, or `None` when there is no
    /// such workflow (another tenant's is as good as absent). In Kubernetes mode a
    /// Workflow resource that never went live (the operator refused it) is removed
    /// too.
    ///
    /// # Errors
    /// [`DeployError::SharedState`] if the shared state could not be changed (services
    /// mode), [`DeployError::Kubernetes`] if the resource could not be deleted or the
    /// operator did not remove it in time, [`DeployError::Store`] if the saved
    /// deployment could not be deleted (embedded mode); the workflow stays deployed
    /// then.
    pub async fn remove(&self, name: &str, caller: &Caller) -> Result<Option<String>, DeployError> {
        let current = || {
            self.get(name)
                .filter(|current| caller.may_act_for(&current.key.tenant))
        };
        // In embedded mode held to the end: the removal is saved and served as one.
        let mut guard = None;
        // The tenant, and the revision this gateway served when the removal began.
        let (tenant, served) = match &self.backend {
            Backend::Embedded(placement) => {
                guard = Some(self.deploy_lock.lock().await);
                let Some(current) = current() else {
                    return Ok(None);
                };
                if let Some(saved) = &self.saved {
                    saved.remove(name).map_err(DeployError::Store)?;
                }
                placement.remove(&current.key);
                (current.key.tenant.clone(), Some(current.revision))
            }
            // Not under the deploy lock, which deploys let go of before they reach the
            // shared state too: the workflow's lease in Redis (or the API server)
            // orders this removal against them. Held, a removal in Kubernetes mode,
            // which waits for the operator, held up every deploy and token revocation
            // through this gateway for as long.
            Backend::Services(shared) => {
                let current = current();
                let tenant = match &current {
                    Some(current) => current.key.tenant.clone(),
                    None => match shared.declared_owner(name, caller).await? {
                        Some(tenant) => tenant,
                        None => return Ok(None),
                    },
                };
                if !shared.remove(&tenant, name).await? {
                    return Ok(None);
                }
                (tenant, current.map(|current| current.revision))
            }
        };
        let mut state = self.write();
        // Only the version served when the removal began: one this gateway published
        // meanwhile (a redeploy that went live first) keeps its route and run history
        // until the next sync says whether it is still live.
        let taken = served.is_some()
            && state.deployments.get(name).is_some_and(|deployment| {
                deployment.key.tenant == tenant && Some(deployment.revision) == served
            });
        if taken {
            state.take(name);
        }
        state.local_changes += 1;
        drop((state, guard));
        if taken {
            self.lock_runs().remove(&WorkflowKey {
                tenant: tenant.clone(),
                name: name.to_owned(),
            });
        }
        self.changed();
        Ok(Some(tenant))
    }

    /// Removes tenant `name`, its tokens and its data ([`Self::with_tenant_data`]);
    /// refused while it has deployed workflows (in services mode, as every gateway
    /// deployed them). Holding the deploy lock, no deploy through this registry slips
    /// in between the check and the removal; in services mode the check and the
    /// removal are one step in Redis, and a deploy through another gateway that makes
    /// its version live after it fails ([`ServicesBackend::remove_tenant`]).
    ///
    /// The tenant goes first, in that one step, and its data after: nothing of it can
    /// run or be deployed by then to write more, and its name stays leaving (not to be
    /// created again) until the data is gone ([`TenantStore::remove_tenant`]). A
    /// removal that failed half-way is finished by removing the tenant again.
    ///
    /// # Errors
    /// [`DeployError::Tenant`] naming the workflows still deployed, or when there is
    /// no such tenant; [`DeployError::TenantData`] when its data could not all be
    /// removed (its name stays leaving); [`DeployError::Unsupported`] without a tenant
    /// store.
    pub async fn remove_tenant(&self, name: &str) -> Result<TenantRemoved, DeployError> {
        let Some(tenants) = &self.tenants else {
            return Err(no_tenant_store());
        };
        // Held for the removal only: a deploy through this gateway either is saved
        // before it or refused after it. The copy of the tenants and the data go after,
        // without it, as nothing of the tenant can be deployed by then.
        let guard = self.deploy_lock.lock().await;
        let removed = match &self.backend {
            Backend::Embedded(_) => {
                let deployed: Vec<String> = self
                    .list()
                    .iter()
                    .filter(|deployment| deployment.key.tenant == name)
                    .map(|deployment| deployment.workflow.name.clone())
                    .collect();
                tenants
                    .remove_tenant(name, TenantWorkflows::Listed(&deployed))
                    .await
                    .map_err(DeployError::from)
            }
            Backend::Services(shared) => shared.remove_tenant(tenants, name).await,
        };
        drop(guard);
        let revoked = match removed {
            Ok(revoked) => {
                // A tenant created again under this name starts with the defaults.
                self.apply_quotas_here(name, &Quotas::default());
                self.tenants_changed().await;
                revoked
            }
            // Removed before, but not all of its data: this removal finishes that one.
            Err(DeployError::Tenant(TenantError::NoSuchTenant(_)))
                if tenants.is_leaving(name).await? =>
            {
                0
            }
            Err(err) => return Err(err),
        };
        let data_error =
            |source: Box<dyn std::error::Error + Send + Sync>| DeployError::TenantData {
                tenant: name.to_owned(),
                source,
            };
        let forgotten = match &self.tenant_data {
            Some(data) => data
                .forget(name)
                .await
                .map_err(|err| data_error(err.into()))?,
            None => Forgotten::default(),
        };
        // Before its name can be created again: the components it stored are not the
        // next tenant's of that name to name by digest (Kubernetes mode).
        if let Backend::Services(services) = &self.backend {
            services
                .forget_component_tenant(name)
                .await
                .map_err(|err| data_error(err.into()))?;
        }
        tenants.release_name(name).await?;
        Ok(TenantRemoved { revoked, forgotten })
    }

    /// Finishes the removals of tenants whose data is not all removed yet (a store
    /// failure, or a process stopped half-way: [`Self::remove_tenant`]), so that their
    /// names can be created again; run at start. Returns those it finished; one that
    /// fails again is logged and stays leaving, for the next start or an operator's
    /// `faas tenant rm`.
    ///
    /// # Errors
    /// When the tenant store cannot list them.
    pub async fn finish_tenant_removals(&self) -> Result<Vec<String>, DeployError> {
        let Some(tenants) = &self.tenants else {
            return Ok(Vec::new());
        };
        let mut finished = Vec::new();
        for name in tenants.leaving_tenants().await? {
            match self.remove_tenant(&name).await {
                Ok(removed) => {
                    tracing::info!(
                        tenant = %name,
                        kv_entries = removed.forgotten.kv_entries,
                        stream_keys = removed.forgotten.stream_keys,
                        "finished removing a removed tenant's data"
                    );
                    finished.push(name);
                }
                Err(err) => tracing::warn!(tenant = %name, "{err}"),
            }
        }
        Ok(finished)
    }

    /// Takes a worker out (it went away or is drained): every workflow with a replica
    /// on it gets a replica on another worker, loaded before the swap, so requests keep
    /// being served throughout. Returns the workflows that could not be placed again
    /// (they keep their other replicas, if any).
    ///
    /// # Errors
    /// [`DeployError::Placement`] if there is no such worker.
    pub async fn remove_worker(&self, id: &WorkerId) -> Result<Vec<String>, DeployError> {
        let Backend::Embedded(placement) = &self.backend else {
            return Err(DeployError::Unsupported(
                "in services mode a worker leaves by stopping; the scheduler places its \
                 workflows again once its heartbeat expires"
                    .to_owned(),
            ));
        };
        let _guard = self.deploy_lock.lock().await;
        if self.write().workers.remove(id).is_none() {
            return Err(DeployError::Placement(PlacementError::NoWorkers));
        }
        placement.remove_worker(id);
        let affected: Vec<Arc<Deployment>> = self
            .list()
            .into_iter()
            .filter(|deployment| deployment.workers().any(|worker| worker == id))
            .collect();
        let mut unplaced = Vec::new();
        for deployment in affected {
            let worker_ids = placement.replicas_of(&deployment.key);
            let mut replicas: Vec<Replica> = deployment
                .replicas
                .iter()
                .filter(|replica| {
                    replica.worker_id != *id && worker_ids.contains(&replica.worker_id)
                })
                .cloned()
                .collect();
            let new_ids: Vec<WorkerId> = worker_ids
                .into_iter()
                .filter(|worker| !replicas.iter().any(|r| r.worker_id == *worker))
                .collect();
            match self
                .load_replicas(&deployment.workflow, &new_ids, &deployment.components)
                .await
            {
                Ok((loaded, _)) => replicas.extend(loaded),
                Err(err) => tracing::error!(workflow = %deployment.key, "re-placing failed: {err}"),
            }
            if replicas.is_empty() {
                unplaced.push(deployment.workflow.name.clone());
                // With no replica left the workflow cannot serve: take it out whole.
                self.write().take(&deployment.workflow.name);
                continue;
            }
            let moved = Arc::new(deployment.with_replicas(replicas));
            self.write().put(moved);
        }
        self.changed();
        Ok(unplaced)
    }

    /// The workers and the workflows each holds a replica of.
    pub fn workers(&self) -> BTreeMap<WorkerId, Vec<String>> {
        let state = self.read();
        let mut workers: BTreeMap<WorkerId, Vec<String>> = state
            .workers
            .keys()
            .map(|id| (id.clone(), Vec::new()))
            .collect();
        for deployment in state.deployments.values() {
            for worker in deployment.workers() {
                if let Some(names) = workers.get_mut(worker) {
                    names.push(deployment.workflow.name.clone());
                }
            }
        }
        workers
    }

    /// Instances alive right now on the workers in this process.
    pub fn active_instances(&self) -> usize {
        self.read()
            .workers
            .values()
            .flatten()
            .map(|worker| worker.active_instances())
            .sum()
    }

    /// Remembers a finished run of the workflow `key` for [`Registry::runs`], if its
    /// tenant still has it deployed: a run that ends after its workflow was removed
    /// leaves nothing behind.
    pub fn record_run(&self, key: &WorkflowKey, record: RunRecord) {
        if self
            .get(&key.name)
            .is_none_or(|current| current.key.tenant != key.tenant)
        {
            return;
        }
        self.lock_runs()
            .entry(key.clone())
            .or_default()
            .push(record);
    }

    /// The recent runs of the workflow `key`, newest first.
    pub fn runs(&self, key: &WorkflowKey) -> Vec<RunRecord> {
        self.lock_runs()
            .get(key)
            .map(|history| history.records.iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets the runs of workflows no longer deployed (by the tenant that ran them),
    /// after a change this gateway learnt of from the shared state.
    fn forget_runs_of_removed(&self) {
        let state = self.read();
        self.lock_runs().retain(|key, _| {
            state
                .deployments
                .get(&key.name)
                .is_some_and(|deployment| deployment.key == *key)
        });
    }

    /// Whether `workflow`, parsed from `request`, may be deployed by `caller` now: its
    /// tenant exists, the name is not another tenant's, and it fits the tenant's
    /// quotas (a new version of a deployed workflow never counts against the count of
    /// workflows), its routes and its Redis consumers. The identical version live
    /// already is `Unchanged`, once the owner is checked.
    async fn check(
        &self,
        workflow: &Workflow,
        request: &DeployRequest,
        caller: &Caller,
    ) -> Result<Checked, DeployError> {
        let quotas = match &self.tenants {
            Some(tenants) => match tenants.tenant(&workflow.tenant).await? {
                Some(tenant) => tenant.quotas,
                None => return Err(TenantError::NoSuchTenant(workflow.tenant.clone()).into()),
            },
            None => Quotas::default(),
        };
        let digest = digest(&request.manifest, &request.components, &request.schemas);
        let current = self.get(&workflow.name);
        // The owner first: the digest covers no tenant, so another tenant's upload of
        // the same bytes would otherwise be told "unchanged", with the status of a
        // workflow it may not see.
        check_owner(
            workflow,
            current.as_ref().map(|current| &current.workflow),
            caller,
        )?;
        if let Some(current) = current.as_ref().filter(|current| current.digest == digest) {
            return Ok(Checked::Unchanged(current.clone()));
        }
        if current.is_none() {
            self.check_workflow_quota(&workflow.tenant, &quotas).await?;
        }
        self.check_code_quota(workflow, &request.components, &quotas)?;
        let state = self.read();
        let deployed = || state.deployments.values().map(|d| &d.workflow);
        check_routes(workflow, &state.owners)?;
        let max = self.max_redis_consumers;
        if let Some(message) = faas_workflow::redis_consumers_over(workflow, deployed(), max) {
            return Err(DeployError::Quota(message));
        }
        Ok(Checked::New { digest })
    }

    /// Embedded mode: compiles `components` (of `workflow`) into the compiled-code
    /// cache on a worker of this process, before the deploy takes the deploy lock,
    /// so that the load under the lock only maps them. A tenant's compile runs for up
    /// to `--compile-timeout-secs`; under the lock it held up every other tenant's
    /// deploy as long. The worker bounds how many compile at once
    /// (`faas_worker::compiler::MAX_COMPILES`); a tenant's deploys come one at a time
    /// already (the deploy turn, `deploy_admission.rs`).
    async fn compile_ahead(
        &self,
        workflow: &Workflow,
        components: &Components,
    ) -> Result<(), DeployError> {
        let Backend::Embedded(_) = &self.backend else {
            return Ok(());
        };
        let worker = self.read().workers.values().flatten().next().cloned();
        let Some(worker) = worker else {
            return Ok(());
        };
        Ok(worker.compile_ahead(workflow, components).await?)
    }

    /// Places `workflow` on workers in this process and loads it there, then calls
    /// `commit` (which saves it); if either fails the placement is as it was.
    async fn place_here(
        &self,
        placement: &dyn Placement,
        workflow: &Workflow,
        components: Components,
        commit: impl FnOnce(&Arc<Components>) -> Result<(), DeployError>,
    ) -> Result<Placed, DeployError> {
        let key = WorkflowKey {
            tenant: workflow.tenant.clone(),
            name: workflow.name.clone(),
        };
        let previous = placement.replicas_of(&key);
        let worker_ids = placement.place_replicas(&key, workflow.settings.replicas as usize)?;
        let components = Arc::new(components);
        let loaded = match self.load_replicas(workflow, &worker_ids, &components).await {
            Ok(loaded) => commit(&components).map(|()| loaded),
            Err(err) => Err(err),
        };
        match loaded {
            Ok((replicas, functions)) => Ok(Placed {
                revision: None,
                replicas,
                functions,
                components,
                state: PlacedState::Live,
            }),
            Err(err) => {
                if previous.is_empty() {
                    placement.remove(&key);
                } else {
                    let _ = placement.place_replicas(&key, previous.len());
                }
                Err(err)
            }
        }
    }

    /// Loads `workflow` on each of `worker_ids`; returns the replicas and the
    /// functions as the first worker loaded them (none if `worker_ids` is empty).
    async fn load_replicas(
        &self,
        workflow: &Workflow,
        worker_ids: &[WorkerId],
        components: &Components,
    ) -> Result<(Vec<Replica>, Vec<FunctionSummary>), DeployError> {
        let mut replicas = Vec::with_capacity(worker_ids.len());
        let mut functions = None;
        for worker_id in worker_ids {
            let Some(worker) = self.read().workers.get(worker_id).cloned().flatten() else {
                return Err(DeployError::Placement(PlacementError::NoWorkers));
            };
            let loaded = worker.load(workflow, components.clone()).await?;
            functions.get_or_insert(loaded.functions);
            replicas.push(Replica {
                worker_id: worker_id.clone(),
                target: loaded.replica,
            });
        }
        Ok((replicas, functions.unwrap_or_default()))
    }

    fn lock_runs(&self) -> std::sync::MutexGuard<'_, BTreeMap<WorkflowKey, RunHistory>> {
        // Each operation is a single push/pop: a poisoned lock is still consistent.
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pool every deployment's components are shared through.
    pub(crate) fn component_pool(&self) -> &ComponentPool {
        &self.components
    }

    /// Whether each tenant has a namespace of its own (Kubernetes mode), which removing
    /// the tenant leaves in place.
    pub fn has_tenant_namespaces(&self) -> bool {
        self.services()
            .is_some_and(|shared| shared.has_tenant_namespaces())
    }

    /// The services-mode backend, if the registry has one.
    pub(crate) fn services(&self) -> Option<&Arc<ServicesBackend>> {
        match &self.backend {
            Backend::Services(shared) => Some(shared),
            Backend::Embedded(_) => None,
        }
    }

    /// Where the deploys and removals made through this registry stand; see
    /// [`Registry::install`].
    pub(crate) fn local_generation(&self) -> u64 {
        self.read().local_changes
    }

    /// Installs the deployments and workers as the shared state has them now
    /// (services mode), if no deploy or removal went through this registry since
    /// `generation` (the view may predate it; the next one will not). Nothing changes,
    /// and no one is notified, when they are what the registry already serves.
    pub(crate) fn install(
        &self,
        deployments: Vec<Arc<Deployment>>,
        workers: Vec<WorkerId>,
        generation: u64,
    ) {
        let serving = |deployment: &Deployment| {
            (
                deployment.revision,
                deployment.workers().cloned().collect::<Vec<_>>(),
            )
        };
        let mut state = self.write();
        if state.local_changes != generation {
            return;
        }
        state.workers = workers.into_iter().map(|id| (id, None)).collect();
        let same = state.deployments.len() == deployments.len()
            && deployments.iter().all(|new| {
                state
                    .deployments
                    .get(&new.workflow.name)
                    .is_some_and(|old| serving(old) == serving(new))
            });
        if same {
            return;
        }
        for deployment in &deployments {
            state.last_revision = state.last_revision.max(deployment.revision);
        }
        state.replace_all(deployments);
        drop(state);
        self.forget_runs_of_removed();
        self.changed();
    }

    /// A receiver that sees a new value after every change to the deployments.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|generation| *generation += 1);
    }

    /// Every live deployment, by name.
    pub fn list(&self) -> Vec<Arc<Deployment>> {
        self.read().deployments.values().cloned().collect()
    }

    /// The live deployment of workflow `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Deployment>> {
        self.read().deployments.get(name).cloned()
    }

    /// The live deployment of workflow `name` if it is `tenant`'s: another tenant may
    /// have taken the name since whatever asks learned it.
    pub fn get_of(&self, tenant: &str, name: &str) -> Option<Arc<Deployment>> {
        self.get(name)
            .filter(|deployment| deployment.key.tenant == tenant)
    }

    /// What `path` routes to, and its deployment.
    pub fn route(&self, path: &str) -> Option<(Arc<Deployment>, TriggerTarget)> {
        let routes = self.read().routes.clone();
        routes
            .find(path)
            .map(|entry| (entry.deployment.clone(), entry.target.clone()))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // Writers replace whole values; a panic cannot leave State half-updated.
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// The error of a tenant operation on a platform started without a tenant store.
pub(crate) fn no_tenant_store() -> DeployError {
    DeployError::Unsupported("this platform was started without a tenant store".to_owned())
}

/// The error of a deploy whose token stopped being live before the deploy went live.
pub(crate) fn token_revoked() -> DeployError {
    DeployError::Forbidden(
        "the token this deploy was made with was revoked, or its tenant removed, before \
         the deploy went live; nothing was deployed"
            .to_owned(),
    )
}

/// Refuses `workflow` when its name belongs to `current`, another tenant's workflow.
/// Only the operator learns which tenant that is.
pub(crate) fn check_owner(
    workflow: &Workflow,
    current: Option<&Workflow>,
    caller: &Caller,
) -> Result<(), DeployError> {
    match current {
        Some(current) if current.tenant != workflow.tenant => {
            Err(DeployError::Conflict(match caller {
                Caller::Admin => format!(
                    "workflow `{}` belongs to tenant `{}`",
                    workflow.name, current.tenant
                ),
                Caller::Tenant(_) => format!(
                    "workflow name `{}` belongs to another tenant; choose another name",
                    workflow.name
                ),
            }))
        }
        _ => Ok(()),
    }
}

/// Refuses `workflow` when one of its routes conflicts with a route of `deployed`
/// ([`faas_workflow::route_conflict`], the rule the Kubernetes operator applies too).
pub(crate) fn check_routes(workflow: &Workflow, deployed: &RouteOwners) -> Result<(), DeployError> {
    refuse_conflict(deployed.conflict(workflow))
}

/// [`check_routes`] against a set of workflows fetched for this one check.
pub(crate) fn check_routes_once<'a>(
    workflow: &Workflow,
    deployed: impl IntoIterator<Item = &'a Workflow>,
) -> Result<(), DeployError> {
    refuse_conflict(faas_workflow::route_conflict(workflow, deployed))
}

/// Refuses a deploy for `conflict`, if there is one.
fn refuse_conflict(conflict: Option<String>) -> Result<(), DeployError> {
    conflict.map_or(Ok(()), |message| Err(DeployError::Conflict(message)))
}

/// The route table's entries for `deployment`'s routes.
fn route_entries(deployment: &Arc<Deployment>) -> impl Iterator<Item = (Route, RouteEntry)> + '_ {
    deployment.workflow.http_triggers.iter().map(|trigger| {
        let entry = RouteEntry {
            route: trigger.route.clone(),
            target: trigger.target.clone(),
            deployment: deployment.clone(),
        };
        (trigger.route.clone(), entry)
    })
}

/// Parses `request`'s manifest for `caller` and hashes its components, on a blocking
/// thread: a manifest of a megabyte takes a tenth of a second to check and components
/// of hundreds of megabytes longer to hash, all that time holding one of the gateway's
/// few async threads, which serve every tenant's requests. Gives the request back.
async fn read_off_the_runtime(
    request: DeployRequest,
    caller: &Caller,
) -> Result<(Result<Workflow, ManifestError>, DeployRequest), DeployError> {
    let tenant = match caller {
        Caller::Admin => None,
        Caller::Tenant(tenant) => Some(tenant.clone()),
    };
    let read = move || {
        let scope = tenant
            .as_deref()
            .map_or(TenantScope::Named, TenantScope::Own);
        let workflow = Workflow::parse_scoped(
            &request.file_name,
            &request.manifest,
            Some(&request.schemas),
            scope,
        );
        if workflow.is_ok() {
            // Hashed once, here; `digest` and the stores only read the result.
            for component in request.components.values() {
                component.sha256();
            }
        }
        (workflow, request)
    };
    tokio::task::spawn_blocking(read).await.map_err(|err| {
        if err.is_panic() {
            tracing::error!("checking a deploy panicked: {err}");
            DeployError::CheckFailed(err.to_string())
        } else {
            DeployError::Interrupted(err.to_string())
        }
    })
}

/// SHA-256 over the manifest, every component and every schema, so an identical
/// upload is recognised whatever order the components came in.
fn digest(manifest: &str, components: &Components, schemas: &BTreeMap<String, String>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(manifest.as_bytes());
    for (name, component) in components {
        hasher.update([0]);
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update(component.sha256());
    }
    for (name, text) in schemas {
        hasher.update([1]);
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update(Sha256::digest(text.as_bytes()));
    }
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use faas_invoke::RunStatus;

    fn failed_run(index: usize, error_bytes: usize) -> RunRecord {
        RunRecord {
            run_id: format!("run-{index}"),
            workflow: "w".into(),
            started_at_ms: 0,
            duration_ms: 1.0,
            status: RunStatus::Failed,
            error: Some("x".repeat(error_bytes)),
            steps: Vec::new(),
            omitted_steps: 0,
        }
    }

    fn workflow(name: &str, tenant: &str) -> Workflow {
        let text = format!(
            "name = \"{name}\"\ntenant = \"{tenant}\"\n\
             [functions.main]\ncomponent = \"main.wasm\"\n\
             [[triggers.http]]\nroute = \"/{name}\"\nfunction = \"main\"\n"
        );
        Workflow::parse("workflow.toml", &text).unwrap()
    }

    /// Checking a manifest of a megabyte takes a tenth of a second or more. Done on the
    /// async thread the deploy came in on, it held up every other request that thread
    /// served for as long (a tenant's uploads, one after another, stalled the other
    /// tenants' requests). A ticker on the same single thread now keeps ticking while
    /// the deploy is checked: before, it could not tick once, as the whole check ran
    /// in the deploy's first poll.
    #[tokio::test(flavor = "current_thread")]
    async fn checking_a_large_manifest_holds_up_nothing_else_on_the_gateways_threads() {
        use std::sync::atomic::AtomicUsize;
        use std::time::Duration;
        // Far more functions than a workflow may declare: refused, once all are read.
        let functions: String = (0..25_000)
            .map(|i| format!("[functions.f{i}]\ncomponent = \"f.wasm\"\n"))
            .collect();
        let manifest = format!("name = \"big\"\ntenant = \"t\"\n{functions}");
        let registry = Registry::new([], Arc::new(faas_scheduler::EmbeddedPlacement::new([])));
        let ticks = Arc::new(AtomicUsize::new(0));
        let ticker = tokio::spawn({
            let ticks = ticks.clone();
            async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    ticks.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        let request = DeployRequest {
            file_name: "workflow.toml".into(),
            manifest,
            components: Components::new(),
            schemas: BTreeMap::new(),
        };
        let before = ticks.load(Ordering::SeqCst);
        let refused = registry.deploy(request).await;
        let during = ticks.load(Ordering::SeqCst) - before;
        ticker.abort();
        assert!(
            matches!(refused, Err(DeployError::Manifest(_))),
            "the manifest is refused"
        );
        assert!(
            during >= 5,
            "the ticker ticked {during} times during the check"
        );
    }

    #[test]
    fn only_the_operator_learns_who_owns_a_taken_workflow_name() {
        let victim = workflow("shop", "victim");
        let claim = workflow("shop", "mallory");
        let as_admin = check_owner(&claim, Some(&victim), &Caller::Admin).unwrap_err();
        assert_eq!(
            as_admin.to_string(),
            "workflow `shop` belongs to tenant `victim`"
        );
        let as_tenant = check_owner(&claim, Some(&victim), &Caller::Tenant("mallory".into()))
            .unwrap_err()
            .to_string();
        assert!(!as_tenant.contains("victim"), "{as_tenant}");
        assert!(check_owner(&victim, Some(&victim), &Caller::Admin).is_ok());
    }

    #[test]
    fn run_history_keeps_within_its_byte_budget_and_the_newest_run() {
        let mut history = RunHistory::default();
        for index in 0..10 {
            history.push(failed_run(index, 300 << 10));
        }
        assert!(history.bytes <= RUN_HISTORY_BYTES, "{}", history.bytes);
        assert_eq!(history.records.len(), 3);
        assert_eq!(history.records.back().unwrap().run_id, "run-9");
        // One record over the whole budget is still kept, alone.
        history.push(failed_run(10, 2 << 20));
        assert_eq!(history.records.len(), 1);
        // And the count limit still holds for small records.
        for index in 0..(RUN_HISTORY + 20) {
            history.push(failed_run(index, 10));
        }
        assert_eq!(history.records.len(), RUN_HISTORY);
        let expected: usize = history.records.iter().map(RunRecord::approx_bytes).sum();
        assert_eq!(history.bytes, expected);
    }
}
