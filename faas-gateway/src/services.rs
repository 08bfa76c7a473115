//! Services mode on the gateway's side.
//!
//! A deploy takes the workflow's lease (a few seconds, renewed while the deploy runs,
//! so a dead gateway's lease ends soon), stores the components and stages a
//! [`DeploymentRecord`] in Redis, then waits until the scheduler process has placed it
//! and every placed worker reports the staged revision loaded (beside the live one,
//! which keeps serving). Only then does the staged record replace the live one. If a
//! worker reports a load error, or nothing is ready in time, the staged record is
//! removed; if the gateway dies, its lease expires and the scheduler removes it. Every
//! write is fenced by the lease: a gateway that lost it writes nothing. [`follow`] keeps
//! the registry's deployments, replicas and route table in step with the shared state:
//! a worker that stopped heartbeating leaves the replicas, and the replicas the
//! scheduler placed instead join once they have loaded.

use crate::activator::ActivatorConfig;
use crate::auth::{Caller, TenantCredential};
use crate::kubernetes::{KubeError, WorkflowResources};
use crate::registry::{
    DeployError, DeployRequest, Deployment, DeploymentParts, Placed, PlacedState, Registry,
    Replica, check_owner, check_routes_once, token_revoked,
};
use faas_invoke::{Component, ComponentPool, Components, FunctionSummary, RemoteWorkers};
use faas_invoke::{LoadError, LoadErrorKind};
use faas_scheduler::WorkerId;
use faas_shared_state::{
    DEPLOYMENTS, DeploymentRecord, LoadStatus, PlacementRecord, Promotion, Removal, SharedState,
    SharedStateError, WorkerInfo,
};
use faas_store::{TenantError, TenantStore, TenantWorkflows, TenantsCopy};
use faas_workflow::Workflow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a workflow's lease lasts unless its holder renews it: how soon a workflow
/// whose deploying gateway died can be changed again.
const LEASE: Duration = Duration::from_secs(5);
/// How often the holder renews its lease.
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// How long the lease on writing back a lost state lasts: long enough for components of
/// hundreds of MiB, and how soon another gateway takes over from one that died doing it.
const WRITE_BACK_LEASE: Duration = Duration::from_secs(60);

/// Why writing a lost state back failed (it is tried again at the next round).
#[derive(Debug, thiserror::Error)]
enum WriteBackError {
    #[error("the tenants: {0}")]
    Tenants(#[from] TenantError),
    #[error("the deployments: {0}")]
    Shared(#[from] SharedStateError),
}

/// How the gateway takes part in services mode.
#[derive(Debug, Clone)]
pub struct ServicesConfig {
    /// The token the gateway presents to workers.
    pub token: String,
    /// How often it reads the shared state.
    pub sync_interval: Duration,
    /// How long a deploy waits for placement and loading before giving up.
    pub deploy_timeout: Duration,
}

/// The shared state, and a client per worker.
pub struct ServicesBackend {
    shared: SharedState,
    config: ServicesConfig,
    /// Clients of the workers.
    clients: RemoteWorkers,
    /// The tenants and tokens as last read from Redis, with the epoch of the shared
    /// state they were read in, written back should Redis lose them (see
    /// [`ServicesBackend::state_is_intact`]).
    tenants_copy: std::sync::Mutex<Option<(String, TenantsCopy)>>,
    /// Held while a copy is read, so that a copy read before a change never replaces
    /// one read after it; when the last copy began.
    copying_tenants: tokio::sync::Mutex<Option<tokio::time::Instant>>,
    /// When the registry last took in the deployments as the shared state has them.
    synced_at: std::sync::Mutex<Option<std::time::Instant>>,
    /// How events for a workflow with no ready replica are held.
    activator: ActivatorConfig,
    /// Where deploys go.
    target: DeployTarget,
}

/// Where a validated deploy goes, and so who writes the deployment records in Redis.
enum DeployTarget {
    /// The gateway stages the record itself and makes it live once the workers loaded
    /// it (services mode).
    Staging,
    /// The gateway applies a Workflow resource; the operator writes the record
    /// (Kubernetes mode).
    Resources(WorkflowResources),
}

/// The shared state at one moment.
struct Snapshot {
    deployments: BTreeMap<String, DeploymentRecord>,
    placements: BTreeMap<String, PlacementRecord>,
    live: Vec<WorkerInfo>,
    /// What each live worker reported, by worker id then workflow name.
    loads: Loads,
    /// What each live worker reported for staged revisions (read for deploys only).
    staged_loads: Loads,
}

/// Load reports by worker id, then workflow name.
type Loads = BTreeMap<String, BTreeMap<String, LoadStatus>>;

impl ServicesBackend {
    /// A backend over the shared state `shared`.
    pub fn new(shared: SharedState, config: ServicesConfig) -> Self {
        Self {
            clients: RemoteWorkers::new(config.token.clone()),
            shared,
            config,
            tenants_copy: std::sync::Mutex::default(),
            copying_tenants: tokio::sync::Mutex::default(),
            synced_at: std::sync::Mutex::default(),
            activator: ActivatorConfig::default(),
            target: DeployTarget::Staging,
        }
    }

    /// Deploys by applying Workflow resources through `resources` (Kubernetes mode):
    /// the resources are the source of truth, the operator alone writes deployment
    /// records into Redis, and a tenant's workflows live in its namespace.
    pub fn with_workflow_resources(mut self, resources: WorkflowResources) -> Self {
        self.target = DeployTarget::Resources(resources);
        self
    }

    /// Whether each tenant has a namespace of its own (Kubernetes mode).
    pub(crate) fn has_tenant_namespaces(&self) -> bool {
        matches!(self.target, DeployTarget::Resources(_))
    }

    /// Readies what a new tenant needs beyond the tenant store: in Kubernetes mode its
    /// namespace, created (labelled) if missing, holding at most `max_workflows`
    /// Workflow resources.
    pub(crate) async fn prepare_tenant(
        &self,
        tenant: &str,
        max_workflows: u64,
    ) -> Result<(), DeployError> {
        if let DeployTarget::Resources(resources) = &self.target
            && resources.ensure_namespace(tenant).await?
        {
            tracing::info!(tenant, "tenant namespace created");
        }
        self.tenant_quotas_changed(tenant, max_workflows).await
    }

    /// After a change of `tenant`'s quotas: in Kubernetes mode, its namespace holds at
    /// most `max_workflows` Workflow resources from now on.
    pub(crate) async fn tenant_quotas_changed(
        &self,
        tenant: &str,
        max_workflows: u64,
    ) -> Result<(), DeployError> {
        if let DeployTarget::Resources(resources) = &self.target {
            resources.limit_workflows(tenant, max_workflows).await?;
        }
        Ok(())
    }

    /// Holds events for a workflow with no ready replica as `activator` says (the
    /// default: [`ActivatorConfig::default`]).
    pub fn with_activator(mut self, activator: ActivatorConfig) -> Self {
        self.activator = activator;
        self
    }

    /// How events for a workflow with no ready replica are held.
    pub(crate) fn activator_config(&self) -> ActivatorConfig {
        self.activator
    }

    /// The shared state.
    pub(crate) fn shared(&self) -> &SharedState {
        &self.shared
    }

    /// Publishes `workflow` (parsed from `request`): staged, it waits until its
    /// replicas are loaded; as a Workflow resource, until the operator observed it.
    /// `credential` is the tenant token it was made with, checked again in `tenants`
    /// as it goes live ([`crate::Registry::deploy_as`]).
    pub(crate) async fn deploy(
        &self,
        workflow: &Workflow,
        request: DeployRequest,
        digest: &str,
        caller: &Caller,
        credential: Option<(&TenantCredential, &TenantStore)>,
    ) -> Result<Placed, DeployError> {
        match &self.target {
            DeployTarget::Staging => {
                let name = &workflow.name;
                let holder = new_holder();
                let token_hash = credential.map(|(credential, _)| credential.secret_hash());
                let deploying = Deploying {
                    caller,
                    token_hash: token_hash.as_deref(),
                    holder: &holder,
                };
                self.locked(
                    name,
                    &holder,
                    self.deploy_locked(workflow, request.components, digest, deploying),
                )
                .await
            }
            DeployTarget::Resources(resources) => {
                self.apply(resources, workflow, request, caller, credential)
                    .await
            }
        }
    }

    /// [`Self::deploy`] in Kubernetes mode. Everything is checked before anything is
    /// written: no worker loads the components before the deploy answers, so their
    /// headers are checked here; names and routes are checked against every workflow
    /// deployed (Redis) or declared (the resources, some not reconciled yet).
    async fn apply(
        &self,
        resources: &WorkflowResources,
        workflow: &Workflow,
        request: DeployRequest,
        caller: &Caller,
        credential: Option<(&TenantCredential, &TenantStore)>,
    ) -> Result<Placed, DeployError> {
        check_components(workflow, &request.components)?;
        let deployed = self.shared.deployments().await.map_err(shared_state)?;
        let declared = resources.claims().await?;
        let known: Vec<&Workflow> = deployed
            .values()
            .map(|record| &record.workflow)
            .chain(declared.iter().map(|claim| &**claim))
            .collect();
        check_owner(
            workflow,
            known
                .iter()
                .copied()
                .find(|other| other.name == workflow.name && other.tenant != workflow.tenant),
            caller,
        )?;
        check_routes_once(workflow, known.iter().copied())?;
        let stored = self
            .put_components(&request.components, &workflow.tenant)
            .await
            .map_err(shared_state)?;
        let applied = async {
            // Once applied, the tenant's removal sees the resource and is refused; up
            // to here its token may have been revoked, or the tenant removed (and made
            // again), since the deploy began.
            if let Some((credential, tenants)) = credential
                && !credential.is_live(tenants).await?
            {
                return Err(token_revoked());
            }
            let spec =
                faas_kube::spec_from_manifest(&request.manifest, &stored.digests, &request.schemas)
                    .map_err(KubeError::from)?;
            Ok::<_, DeployError>(
                resources
                    .apply(&workflow.tenant, &workflow.name, spec)
                    .await?,
            )
        }
        .await;
        let observed = match applied {
            Ok(observed) => observed,
            Err(err) => {
                self.forget_components(workflow, &stored.created).await;
                return Err(err);
            }
        };
        Ok(Placed {
            revision: observed.revision,
            replicas: Vec::new(),
            functions: Vec::new(),
            components: Arc::new(request.components),
            state: if observed.changed {
                PlacedState::Pending
            } else {
                PlacedState::Unchanged
            },
        })
    }

    /// [`Self::deploy`], under the workflow's lease. The name and routes are checked
    /// again against what every gateway deployed or is deploying, not only this one.
    async fn deploy_locked(
        &self,
        workflow: &Workflow,
        components: Components,
        digest: &str,
        deploying: Deploying<'_>,
    ) -> Result<Placed, DeployError> {
        let Deploying { caller, .. } = deploying;
        let name = &workflow.name;
        let deployed = self.shared.deployments().await.map_err(shared_state)?;
        check_owner(
            workflow,
            deployed.get(name).map(|record| &record.workflow),
            caller,
        )?;
        self.check_claims(workflow).await?;
        let started = crate::activator::unix_millis();
        let stored = self
            .put_components(&components, &workflow.tenant)
            .await
            .map_err(shared_state)?;
        let placed = self
            .stage_and_promote(workflow, stored.digests, digest, &deploying)
            .await;
        match &placed {
            // What it stored itself goes at once (not after --component-ttl-s), or a
            // tenant failing deploy after deploy could fill the Redis every tenant
            // shares with bytes no quota counts.
            Err(_) => self.forget_components(workflow, &stored.created).await,
            // So do its previous version's, but those another deploy stored since
            // it started.
            Ok(_) => {
                let previous: Vec<(String, u64)> = deployed
                    .get(name)
                    .into_iter()
                    .flat_map(|record| record.components.values())
                    .map(|sha| (sha.clone(), started.saturating_sub(1)))
                    .collect();
                self.forget_components(workflow, &previous).await;
            }
        }
        let (revision, replicas, functions) = placed?;
        Ok(Placed {
            revision: Some(revision),
            functions,
            replicas,
            components: Arc::new(components),
            state: PlacedState::Live,
        })
    }

    /// Stages `workflow`'s record naming `digests`, waits until its workers loaded it
    /// and makes it live; unstages it if any of that fails. Returns its revision and
    /// where it runs.
    async fn stage_and_promote(
        &self,
        workflow: &Workflow,
        digests: BTreeMap<String, String>,
        digest: &str,
        deploying: &Deploying<'_>,
    ) -> Result<(u64, Vec<Replica>, Vec<FunctionSummary>), DeployError> {
        let name = &workflow.name;
        let holder = deploying.holder;
        let record = DeploymentRecord {
            workflow: workflow.clone(),
            digest: digest.to_owned(),
            revision: self.shared.next_revision().await.map_err(shared_state)?,
            deployed_at: unix_seconds(SystemTime::now()),
            components: digests,
        };
        let fenced = |done: Result<bool, SharedStateError>| match done {
            Ok(true) => Ok(()),
            Ok(false) => Err(lease_lost(name)),
            Err(err) => Err(shared_state(err)),
        };
        fenced(self.shared.stage_deployment(&record, holder).await)?;
        // Checked again now that this deploy's claim is staged: two deploys of other
        // names that read before either staged both passed the first check, and each
        // now sees the other (so at most one goes on; both may have to try again).
        let switched = match self.check_claims(workflow).await {
            Ok(()) => self.load_and_promote(workflow, &record, deploying).await,
            Err(err) => Err(err),
        };
        let (replicas, functions) = match switched {
            Ok(loaded) => loaded,
            Err(err) => {
                // The live version never changed; only the staged one goes.
                if let Err(unstage) = self.shared.unstage_deployment(name, holder).await {
                    tracing::error!(
                        workflow = name,
                        "removing the staged version (the scheduler will): {unstage}"
                    );
                }
                return Err(err);
            }
        };
        Ok((record.revision, replicas, functions))
    }

    /// Refuses `workflow` if a route of it meets one of another workflow staged or
    /// deployed now. The staged ones are read first: a promotion moves a record from
    /// staged to deployed in one step, so one made between the two reads is seen in
    /// the second (read the other way round, it would be in neither).
    async fn check_claims(&self, workflow: &Workflow) -> Result<(), DeployError> {
        let staged = self
            .shared
            .staged_deployments()
            .await
            .map_err(shared_state)?;
        let deployed = self.shared.deployments().await.map_err(shared_state)?;
        let claimed = staged.values().chain(deployed.values());
        check_routes_once(workflow, claimed.map(|record| &record.workflow))
    }

    /// Waits until `record` (staged) is loaded on its workers, then makes it live.
    async fn load_and_promote(
        &self,
        workflow: &Workflow,
        record: &DeploymentRecord,
        deploying: &Deploying<'_>,
    ) -> Result<(Vec<Replica>, Vec<FunctionSummary>), DeployError> {
        let name = &workflow.name;
        match self.wait_until_loaded(record).await {
            Ok(loaded) => match self
                .shared
                .promote_deployment(record, deploying.holder, deploying.token_hash)
                .await
            {
                Ok(Promotion::Live) => Ok(loaded),
                Ok(Promotion::LeaseLost) => Err(lease_lost(name)),
                // Its tenant was removed (through any gateway) while it loaded.
                Ok(Promotion::NoTenant) => {
                    Err(TenantError::NoSuchTenant(workflow.tenant.clone()).into())
                }
                // And perhaps made again: the new one's name is not the old one's say.
                Ok(Promotion::TokenRevoked) => Err(token_revoked()),
                Err(err) => Err(shared_state(err)),
            },
            Err(err) => Err(err),
        }
    }

    /// Stores each component under its SHA-256, as `tenant`'s; returns the digests by
    /// function name, and those this call stored itself, with their stamps.
    async fn put_components(
        &self,
        components: &Components,
        tenant: &str,
    ) -> Result<StoredComponents, SharedStateError> {
        let mut stored = StoredComponents::default();
        for (function, component) in components {
            let sha = component.digest();
            let put = self.shared.put_component(sha, component, tenant).await?;
            if put.created {
                stored.created.push((sha.to_owned(), put.stamp));
            }
            stored.digests.insert(function.clone(), sha.to_owned());
        }
        Ok(stored)
    }

    /// [`SharedState::forget_components`] for a deploy of `workflow`; a failure is
    /// logged (the scheduler's collection deletes them later).
    async fn forget_components(&self, workflow: &Workflow, candidates: &[(String, u64)]) {
        let (tenant, workflow) = (&workflow.tenant, &workflow.name);
        match self.shared.forget_components(tenant, candidates).await {
            Ok(deleted) if !deleted.is_empty() => {
                tracing::debug!(workflow, ?deleted, "deleted components no deployment names");
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(
                workflow,
                "deleting the deploy's unnamed components (the scheduler will): {err}"
            ),
        }
    }

    /// The components `record` names: those alive in `pool` (another deployment here
    /// names them too) as they are, the others read back from Redis.
    async fn components_of(
        &self,
        record: &DeploymentRecord,
        pool: &ComponentPool,
    ) -> Result<Components, SharedStateError> {
        let mut components = BTreeMap::new();
        for (function, sha) in &record.components {
            let component = match pool.get(sha) {
                Some(component) => component,
                None => pool.share(Component::new(self.shared.component(sha).await?)),
            };
            components.insert(function.clone(), component);
        }
        Ok(components)
    }

    /// The epoch of the shared state, if it is whole (`None` while it is written
    /// back). When its epoch is gone, Redis lost it (an empty restart): this gateway
    /// starts a new epoch and writes back every deployment it serves, so the scheduler
    /// and the workers find them again without an operator.
    async fn state_is_intact(
        &self,
        registry: &Registry,
    ) -> Result<Option<String>, SharedStateError> {
        if let Some(epoch) = self.shared.epoch().await? {
            return Ok(Some(epoch));
        }
        let epoch = format!("{:016x}", rand::random::<u64>());
        if !self
            .shared
            .claim_write_back(&epoch, WRITE_BACK_LEASE)
            .await?
        {
            // Another gateway is writing it back.
            return Ok(None);
        }
        match self.write_back(registry).await {
            // The epoch last: a write-back cut short (Redis went away again) is done
            // again from the start at the next round, never left half-written.
            Ok(()) => {
                self.shared.start_epoch(&epoch).await?;
            }
            Err(err) => tracing::error!("writing the shared state back failed, retrying: {err}"),
        }
        self.shared.release_write_back(&epoch).await?;
        Ok(None)
    }

    /// Writes what this gateway serves back into a Redis that lost it (or, on a fresh
    /// one, nothing). Every write may be repeated.
    async fn write_back(&self, registry: &Registry) -> Result<(), WriteBackError> {
        // Tenants first: a deployment written back serves its tenant's tokens.
        self.write_back_tenants(registry).await?;
        // Revisions go on past every one this gateway serves, in either mode: the
        // operator's deploys from Workflow resources too, or a revision counted
        // again from 1 would name other code than the one the gateways and workers
        // hold under it.
        let newest = registry.list().iter().map(|d| d.revision).max();
        self.shared.raise_revision(newest.unwrap_or(0)).await?;
        // With Workflow resources the operator writes the records back from them.
        let deployments = match self.target {
            DeployTarget::Staging => registry.list(),
            DeployTarget::Resources(_) => Vec::new(),
        };
        if !deployments.is_empty() {
            tracing::warn!(
                count = deployments.len(),
                "the shared state in Redis is gone; writing back the deployments"
            );
        }
        for deployment in deployments {
            let stored = self
                .put_components(deployment.components(), &deployment.workflow.tenant)
                .await?;
            let record = DeploymentRecord {
                workflow: deployment.workflow.clone(),
                digest: deployment.digest.clone(),
                revision: deployment.revision,
                deployed_at: unix_seconds(deployment.deployed_at),
                components: stored.digests,
            };
            self.shared.put_deployment(&record).await?;
        }
        Ok(())
    }

    /// Keeps a copy of the tenants and tokens in Redis, for [`Self::write_back_tenants`],
    /// read again whenever their version moved (one `GET` when it did not): at every
    /// sync, unless a copy is under way already.
    async fn copy_tenants(&self, registry: &Registry) {
        if let Ok(mut copying) = self.copying_tenants.try_lock() {
            self.copy_tenants_now(registry, &mut copying).await;
        }
    }

    /// [`Self::copy_tenants`] after a change through this gateway, once the copy holds
    /// it, so that a token revoked here does not come back with a copy read before,
    /// should Redis lose its state right after. At most one such copy begins every
    /// [`TENANTS_COPY_EVERY`], covering every change made before it began (whoever
    /// made one then and waited for the copy returns at once): a tenant making and
    /// revoking tokens in a loop had every tenant's records read for each of its
    /// changes.
    pub(crate) async fn copy_tenants_after_change(&self, registry: &Registry) {
        let changed = tokio::time::Instant::now();
        let mut copying = self.copying_tenants.lock().await;
        match *copying {
            // Begun after the change: it holds it.
            Some(last) if last >= changed => return,
            Some(last) => tokio::time::sleep_until(last + TENANTS_COPY_EVERY).await,
            None => {}
        }
        self.copy_tenants_now(registry, &mut copying).await;
    }

    /// Reads the copy, holding `copying` (when it began goes there).
    async fn copy_tenants_now(
        &self,
        registry: &Registry,
        copying: &mut Option<tokio::time::Instant>,
    ) {
        let Some(tenants) = registry.tenants() else {
            return;
        };
        let (epoch, version) = match (self.shared.epoch().await, tenants.version().await) {
            (Ok(Some(epoch)), Ok(Some(version))) => (epoch, version),
            // No epoch: the state is being written back, and a copy now could be empty.
            (Ok(_), Ok(_)) => return,
            (Err(err), _) => {
                tracing::warn!("reading the shared state's epoch failed: {err}");
                return;
            }
            (_, Err(err)) => {
                tracing::warn!("reading the tenants' version failed: {err}");
                return;
            }
        };
        // Read again after a while all the same: a process from before the version
        // (during a rolling upgrade) changes tenants and tokens without moving it.
        let current = self
            .lock_tenants_copy()
            .as_ref()
            .is_some_and(|(held, copy)| {
                *held == epoch && copy.version() == version && copy.age() < TENANTS_COPY_MAX_AGE
            });
        if current {
            return;
        }
        // Kept only if the same epoch held before and after it was read: a Redis that
        // restarted empty meanwhile would give an empty copy, and writing that back
        // would restore no tenant at all.
        *copying = Some(tokio::time::Instant::now());
        let copy = tenants.copy().await;
        let same_epoch = matches!(self.shared.epoch().await, Ok(Some(after)) if after == epoch);
        match copy {
            Ok(Some(copy)) if same_epoch => *self.lock_tenants_copy() = Some((epoch, copy)),
            Ok(Some(_)) => {
                tracing::debug!("the shared state changed epoch while copied; not kept");
            }
            Ok(None) => {}
            Err(err) => tracing::warn!("reading the tenants to keep a copy failed: {err}"),
        }
    }

    /// Writes the tenants and tokens this gateway last read back into a Redis that
    /// lost them; without it, every tenant token would stop working and every deploy
    /// be refused for want of its tenant.
    async fn write_back_tenants(&self, registry: &Registry) -> Result<(), TenantError> {
        let copy = self.lock_tenants_copy().clone();
        let (Some(tenants), Some((_, copy))) = (registry.tenants(), copy) else {
            return Ok(());
        };
        tracing::warn!(
            tenants = copy.tenants(),
            "the shared state in Redis is gone; writing back the tenants and tokens"
        );
        tenants.write_back(&copy).await
    }

    /// Whether the registry took in the shared state's deployments lately (within five
    /// syncs, and at least 5 s): what it serves then is what is deployed (but for the
    /// last syncs' changes). A gateway that just started, or cannot read Redis, or waits
    /// for another to write the state back, serves less than is deployed.
    pub(crate) fn in_sync(&self) -> bool {
        let fresh = (self.config.sync_interval * 5).max(Duration::from_secs(5));
        self.synced_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() <= fresh)
    }

    fn lock_tenants_copy(&self) -> std::sync::MutexGuard<'_, Option<(String, TenantsCopy)>> {
        // Replaced whole: a poisoned lock still holds a whole copy.
        self.tenants_copy.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every worker the scheduler placed `record` on has loaded it staged.
    async fn wait_until_loaded(
        &self,
        record: &DeploymentRecord,
    ) -> Result<(Vec<Replica>, Vec<FunctionSummary>), DeployError> {
        let deadline = tokio::time::Instant::now() + self.config.deploy_timeout;
        let name = &record.workflow.name;
        loop {
            let snapshot = self.snapshot(true).await.map_err(shared_state)?;
            if snapshot.live.is_empty() {
                return Err(DeployError::Placement(
                    faas_scheduler::PlacementError::NoWorkers,
                ));
            }
            if let Some(placement) = snapshot.placements.get(name) {
                let statuses: Vec<(&String, Option<&LoadStatus>)> = placement
                    .workers
                    .iter()
                    .map(|worker| {
                        let status = snapshot
                            .staged_loads
                            .get(worker)
                            .and_then(|loads| loads.get(name));
                        (worker, status)
                    })
                    .collect();
                for (worker, status) in &statuses {
                    if let Some(status) = status
                        .filter(|status| status.revision == record.revision)
                        .filter(|status| status.error.is_some())
                    {
                        return Err(DeployError::RemoteLoad {
                            worker: (*worker).clone(),
                            message: status.error.clone().unwrap_or_default(),
                            kind: status.error_kind.unwrap_or(LoadErrorKind::Component),
                        });
                    }
                }
                let all_ready = statuses
                    .iter()
                    .all(|(_, status)| status.is_some_and(|s| s.is_ready(record.revision)));
                if all_ready {
                    let (replicas, functions) =
                        self.ready_replicas(&snapshot, &snapshot.staged_loads, record);
                    if !replicas.is_empty() {
                        return Ok((replicas, functions));
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(DeployError::SharedState(format!(
                    "workflow `{name}` was not placed and loaded within {}s; is the \
                     scheduler running?",
                    self.config.deploy_timeout.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The names of the workflows of `tenant` deployed through any gateway (with
    /// Workflow resources: declared in its namespace).
    pub(crate) async fn workflows_of(&self, tenant: &str) -> Result<Vec<String>, DeployError> {
        if let DeployTarget::Resources(resources) = &self.target {
            return Ok(resources
                .list(Some(tenant))
                .await?
                .into_iter()
                .filter_map(|resource| resource.metadata.name)
                .collect());
        }
        let deployed = self.shared.deployments().await.map_err(shared_state)?;
        Ok(deployed
            .into_values()
            .filter(|record| record.workflow.tenant == tenant)
            .map(|record| record.workflow.name)
            .collect())
    }

    /// Forgets that removed tenant `tenant` stored any component
    /// ([`SharedState::forget_component_tenant`]).
    pub(crate) async fn forget_component_tenant(
        &self,
        tenant: &str,
    ) -> Result<u64, SharedStateError> {
        self.shared.forget_component_tenant(tenant).await
    }

    /// Removes `tenant` from `tenants` unless it has workflows: the deployments in
    /// Redis, read in the same step as the removal (a deploy through another gateway
    /// either lands before it and stops it, or fails: [`SharedState::promote_deployment`]),
    /// and with Workflow resources also those declared in its namespace (deployed or
    /// not). A record whose resource is gone counts until the operator removes it.
    /// Returns how many tokens were revoked.
    pub(crate) async fn remove_tenant(
        &self,
        tenants: &TenantStore,
        tenant: &str,
    ) -> Result<u64, DeployError> {
        let declared;
        let deployed = match &self.target {
            DeployTarget::Resources(_) => {
                declared = self.workflows_of(tenant).await?;
                if declared.is_empty() {
                    TenantWorkflows::InRedisHash(DEPLOYMENTS)
                } else {
                    TenantWorkflows::Listed(&declared)
                }
            }
            DeployTarget::Staging => TenantWorkflows::InRedisHash(DEPLOYMENTS),
        };
        Ok(tenants.remove_tenant(tenant, deployed).await?)
    }

    /// The tenant whose Workflow resource `name` is, among those `caller` may see
    /// (Kubernetes mode; none otherwise): for a workflow declared but not deployed.
    pub(crate) async fn declared_owner(
        &self,
        name: &str,
        caller: &Caller,
    ) -> Result<Option<String>, DeployError> {
        let DeployTarget::Resources(resources) = &self.target else {
            return Ok(None);
        };
        // A name from the request's path: none other reaches the API server's paths.
        if !faas_workflow::is_valid_name(name) {
            return Ok(None);
        }
        match caller {
            // Its own namespace only: a tenant's `faas rm` of any name must not cost a
            // list of every tenant's Workflows.
            Caller::Tenant(tenant) => Ok(resources
                .exists(tenant, name)
                .await?
                .then(|| tenant.clone())),
            Caller::Admin => Ok(resources
                .list(None)
                .await?
                .into_iter()
                .filter(|resource| resource.metadata.name.as_deref() == Some(name))
                .find_map(|resource| resource.metadata.namespace)),
        }
    }

    /// Removes workflow `name` of `tenant`: from the shared state, or (Kubernetes
    /// mode) by deleting its resource and waiting until the operator removed it.
    /// Returns false, having removed nothing, when the name is another tenant's in the
    /// shared state: this gateway's copy of its owner may be a sync old.
    pub(crate) async fn remove(&self, tenant: &str, name: &str) -> Result<bool, DeployError> {
        if let DeployTarget::Resources(resources) = &self.target {
            resources.delete(tenant, name).await?;
            return Ok(true);
        }
        let holder = new_holder();
        self.locked(name, &holder, async {
            match self.shared.remove_deployment(name, tenant, &holder).await {
                Ok(Removal::Removed) => Ok(true),
                Ok(Removal::OtherTenants) => Ok(false),
                Ok(Removal::LeaseLost) => Err(lease_lost(name)),
                Err(err) => Err(shared_state(err)),
            }
        })
        .await
    }

    /// Runs `change` holding the lease on workflow `name` as `holder`, so that two
    /// gateways never change one workflow at once. The lease is renewed while `change`
    /// runs; should it be lost all the same, `change` is abandoned (its writes are
    /// fenced by the lease, so it could not finish anyway).
    async fn locked<T>(
        &self,
        name: &str,
        holder: &str,
        change: impl Future<Output = Result<T, DeployError>>,
    ) -> Result<T, DeployError> {
        if !self
            .shared
            .lock_workflow(name, holder, LEASE)
            .await
            .map_err(shared_state)?
        {
            return Err(DeployError::Conflict(format!(
                "workflow `{name}` is being deployed or removed already (through this \
                 gateway or another); try again"
            )));
        }
        let renew = async {
            let mut ticker = tokio::time::interval(RENEW_EVERY);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                match self.shared.renew_lock(name, holder, LEASE).await {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(err) => tracing::warn!(workflow = name, "renewing the lease: {err}"),
                }
            }
        };
        let result = tokio::select! {
            result = change => result,
            () = renew => Err(lease_lost(name)),
        };
        if let Err(err) = self.shared.unlock_workflow(name, holder).await {
            tracing::warn!(
                workflow = name,
                "releasing the deploy lock (it expires): {err}"
            );
        }
        result
    }

    /// The shared state now; with the staged load reports when `staged`.
    async fn snapshot(&self, staged: bool) -> Result<Snapshot, SharedStateError> {
        let deployments = self.shared.deployments().await?;
        let placements = self.shared.placements().await?;
        let live = self.shared.workers().await?.live;
        let mut loads = BTreeMap::new();
        let mut staged_loads = BTreeMap::new();
        for worker in &live {
            loads.insert(
                worker.id.clone(),
                self.shared.load_statuses(&worker.id).await?,
            );
            if staged {
                staged_loads.insert(
                    worker.id.clone(),
                    self.shared.staged_load_statuses(&worker.id).await?,
                );
            }
        }
        Ok(Snapshot {
            deployments,
            placements,
            live,
            loads,
            staged_loads,
        })
    }

    /// The replicas of `record`'s revision that are loaded on live workers according
    /// to `loads`, and its functions as the first of them reported. Their events name
    /// the revision, so a worker that holds it staged serves them with it.
    fn ready_replicas(
        &self,
        snapshot: &Snapshot,
        loads: &Loads,
        record: &DeploymentRecord,
    ) -> (Vec<Replica>, Vec<FunctionSummary>) {
        let name = &record.workflow.name;
        let mut functions = Vec::new();
        let mut replicas = Vec::new();
        let placed = snapshot
            .placements
            .get(name)
            .map_or(&[][..], |placement| &placement.workers[..]);
        for info in snapshot
            .live
            .iter()
            .filter(|info| placed.contains(&info.id))
        {
            let Some(status) = loads
                .get(&info.id)
                .and_then(|loads| loads.get(name))
                .filter(|status| status.is_ready(record.revision))
            else {
                continue;
            };
            if functions.is_empty() {
                functions = status.functions.clone();
            }
            replicas.push(Replica {
                worker_id: WorkerId(info.id.clone()),
                target: self
                    .clients
                    .get(&info.id, &info.addr)
                    .serving(&record.workflow.tenant, record.revision),
            });
        }
        (replicas, functions)
    }
}

/// Refuses an upload that lacks a function's component, or whose component is not a
/// WebAssembly component, as a worker loading it would.
fn check_components(workflow: &Workflow, components: &Components) -> Result<(), LoadError> {
    for function in workflow.functions.keys() {
        let bytes = components
            .get(function)
            .ok_or_else(|| LoadError::MissingComponent {
                function: function.clone(),
            })?;
        faas_workflow::check_component_header(bytes).map_err(|reason| {
            LoadError::NotAComponent {
                function: function.clone(),
                reason,
            }
        })?;
    }
    Ok(())
}

/// Keeps `registry` in step with the shared state until the task is dropped.
///
/// For each deployment, the replicas of its revision loaded on live workers serve it.
/// While a new revision loads, the version the registry serves stays; a deployment
/// with no replica (its workers died, were scaled to zero, or have not loaded it yet)
/// stays routed, and the activator holds its events until the scheduler's placement
/// has loaded. While Redis is unreachable nothing changes.
pub async fn follow(registry: Arc<Registry>) {
    let Some(backend) = registry.services().cloned() else {
        return;
    };
    let mut ticker = tokio::time::interval(backend.config.sync_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(err) = follow_once(&backend, &registry).await {
            err.log_retry("reading the shared state");
        }
    }
}

async fn follow_once(
    backend: &ServicesBackend,
    registry: &Registry,
) -> Result<(), SharedStateError> {
    let Some(epoch) = backend.state_is_intact(registry).await? else {
        return Ok(());
    };
    backend.copy_tenants(registry).await;
    let generation = registry.local_generation();
    let snapshot = backend.snapshot(false).await?;
    // Asked again once read: from a Redis that restarted empty since the check above
    // (and perhaps was written back by another gateway, under a new epoch), the
    // snapshot is empty or partial, and taking it in would drop deployments this
    // gateway serves, leaving its write-back nothing to write.
    if backend.shared.epoch().await?.as_deref() != Some(epoch.as_str()) {
        return Ok(());
    }
    let live: Vec<String> = snapshot.live.iter().map(|info| info.id.clone()).collect();
    let mut deployments = Vec::new();
    for (name, record) in &snapshot.deployments {
        let (replicas, functions) = backend.ready_replicas(&snapshot, &snapshot.loads, record);
        let current = registry.get(name);
        let deployment = match current {
            // A newer version deployed through this gateway, or the one it serves
            // while the record's revision loads: kept, on the replicas still alive.
            Some(current)
                if current.revision > record.revision
                    || (replicas.is_empty() && has_live_replica(&current, &live)) =>
            {
                let alive: Vec<Replica> = current
                    .replicas
                    .iter()
                    .filter(|replica| live.contains(&replica.worker_id.0))
                    .cloned()
                    .collect();
                if alive.len() == current.replicas.len() {
                    current
                } else {
                    Arc::new(current.with_replicas(alive))
                }
            }
            Some(current) if current.revision == record.revision => {
                let same = current.workers().eq(replicas.iter().map(|r| &r.worker_id));
                if same {
                    current
                } else {
                    Arc::new(current.with_loaded_replicas(replicas, functions))
                }
            }
            // Deployed through another gateway (or by the operator), or a new
            // revision of one with no live replica: keep its components too, to write
            // them back should Redis lose them. With no replica loaded yet (its
            // workers are scaled to zero or still loading) it is routed all the same,
            // so that the activator holds its events instead of a 404.
            _ => Arc::new(Deployment::new(DeploymentParts {
                workflow: record.workflow.clone(),
                digest: record.digest.clone(),
                revision: record.revision,
                deployed_at: UNIX_EPOCH + Duration::from_secs(record.deployed_at),
                replicas,
                functions,
                components: Arc::new(
                    backend
                        .components_of(record, registry.component_pool())
                        .await?,
                ),
            })),
        };
        deployments.push(deployment);
    }
    registry.install(
        deployments,
        live.into_iter().map(WorkerId).collect(),
        generation,
    );
    *backend.synced_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
    Ok(())
}

/// The least time between two copies of the tenants and tokens
/// ([`ServicesBackend::copy_tenants`]).
const TENANTS_COPY_EVERY: Duration = Duration::from_millis(100);

/// How old a copy of the tenants and tokens may get even when their version did not
/// move.
const TENANTS_COPY_MAX_AGE: Duration = Duration::from_secs(60);

/// Whether `deployment` has a replica on one of the `live` workers.
fn has_live_replica(deployment: &Deployment, live: &[String]) -> bool {
    deployment
        .replicas
        .iter()
        .any(|replica| live.contains(&replica.worker_id.0))
}

/// What a deploy stored in Redis.
#[derive(Default)]
struct StoredComponents {
    /// Each function's component digest.
    digests: BTreeMap<String, String>,
    /// The components the deploy stored itself (they were not there), with their
    /// stamps: what it leaves behind if it fails.
    created: Vec<(String, u64)>,
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// A random lease holder id.
fn new_holder() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Who a deploy under way acts for, and with what.
struct Deploying<'a> {
    /// Who asked for it.
    caller: &'a Caller,
    /// The hash of the tenant token it was made with (`None`: the operator's).
    token_hash: Option<&'a str>,
    /// Its hold on the workflow's lease.
    holder: &'a str,
}

fn lease_lost(name: &str) -> DeployError {
    DeployError::Conflict(format!(
        "the lease on workflow `{name}` expired before the change was made (Redis slow or \
         unreachable?); nothing changed, try again"
    ))
}

fn shared_state(err: SharedStateError) -> DeployError {
    DeployError::SharedState(format!("shared state: {err}"))
}
