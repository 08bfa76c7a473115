//! Deployed workflows and the route table built from them.
//!
//! A deploy parses and validates the manifest, places the workflow, has its worker
//! compile and link every function, and only then swaps the new version in: the
//! deployments map and the route table change together under one write lock. A
//! request takes an `Arc` of what it found, so requests in flight finish on the
//! version they started on.

use faas_scheduler::{Placement, PlacementError, WorkerId, WorkflowKey};
use faas_worker::{LoadError, LoadedWorkflow, RunRecord, Worker};
use faas_workflow::{ManifestError, Route, TriggerTarget, Workflow};
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
    /// Component bytes by function name.
    pub components: BTreeMap<String, Vec<u8>>,
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
    /// Its replicas: each a whole copy of the workflow, on its own worker.
    pub replicas: Vec<Replica>,
    /// The uploaded components, kept to place replicas again when a worker goes away.
    components: Arc<BTreeMap<String, Vec<u8>>>,
    /// Round-robin position over `replicas`.
    next_replica: AtomicUsize,
}

/// One whole copy of a workflow on one worker.
#[derive(Clone)]
pub struct Replica {
    /// The worker it runs on.
    pub worker_id: WorkerId,
    /// That worker.
    pub worker: Arc<Worker>,
    /// The workflow's functions, compiled and linked on that worker.
    pub loaded: Arc<LoadedWorkflow>,
}

impl Deployment {
    /// The replica the next event goes to (round-robin).
    pub fn pick_replica(&self) -> &Replica {
        let index = self.next_replica.fetch_add(1, Ordering::Relaxed) % self.replicas.len();
        &self.replicas[index]
    }

    /// The workers its replicas run on.
    pub fn workers(&self) -> impl Iterator<Item = &WorkerId> {
        self.replicas.iter().map(|replica| &replica.worker_id)
    }
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
    /// No worker could take the workflow.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// The workflow needs something this platform was started without.
    #[error("{0}")]
    Unsupported(String),
}

/// One route and where it leads.
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
    /// Most specific route first.
    routes: Arc<Vec<RouteEntry>>,
    last_revision: u64,
    workers: BTreeMap<WorkerId, Arc<Worker>>,
}

/// How many runs of each workflow `faas runs` can show.
const RUN_HISTORY: usize = 100;

/// Every deployed workflow, the workers that run them and their placement.
pub struct Registry {
    placement: Arc<dyn Placement>,
    state: RwLock<State>,
    /// Recent runs per workflow name, newest last.
    runs: Mutex<BTreeMap<String, VecDeque<RunRecord>>>,
    /// Serializes deploys and deletes so two uploads of one workflow cannot race.
    deploy_lock: tokio::sync::Mutex<()>,
    /// Bumped whenever the set of deployments changes, for whoever follows them
    /// (the Redis trigger supervisor).
    changes: tokio::sync::watch::Sender<u64>,
    /// Whether something consumes Redis triggers (the platform runs with Redis).
    redis_triggers: bool,
}

impl Registry {
    /// A registry placing workflows on `workers` with `placement`.
    pub fn new(
        workers: impl IntoIterator<Item = (WorkerId, Arc<Worker>)>,
        placement: Arc<dyn Placement>,
    ) -> Self {
        Self {
            placement,
            state: RwLock::new(State {
                workers: workers.into_iter().collect(),
                ..State::default()
            }),
            runs: Mutex::default(),
            deploy_lock: tokio::sync::Mutex::new(()),
            changes: tokio::sync::watch::Sender::new(0),
            redis_triggers: false,
        }
    }

    /// Accepts workflows with Redis channel and stream triggers (the gateway consumes
    /// them). Without this, deploying one fails rather than silently never running.
    pub fn with_redis_triggers(mut self) -> Self {
        self.redis_triggers = true;
        self
    }

    /// Deploys `request`, or does nothing if the identical workflow is live.
    ///
    /// # Errors
    /// [`DeployError`] if the manifest or a component is invalid, a name or route is
    /// taken by another workflow, or no worker can take it. The live version, if
    /// any, is untouched.
    pub async fn deploy(&self, request: DeployRequest) -> Result<DeployOutcome, DeployError> {
        let _guard = self.deploy_lock.lock().await;
        let workflow = Workflow::parse(&request.file_name, &request.manifest)?;
        if !self.redis_triggers
            && (!workflow.redis_triggers.is_empty() || !workflow.stream_triggers.is_empty())
        {
            return Err(DeployError::Unsupported(format!(
                "workflow `{}` has Redis triggers, but this platform runs without Redis \
                 (start it with --redis <url>)",
                workflow.name
            )));
        }
        let digest = digest(&request);
        let current = self.get(&workflow.name);
        if let Some(current) = &current {
            if current.digest == digest {
                return Ok(DeployOutcome::Unchanged(current.clone()));
            }
            if current.key.tenant != workflow.tenant {
                return Err(DeployError::Conflict(format!(
                    "workflow `{}` belongs to tenant `{}`",
                    workflow.name, current.key.tenant
                )));
            }
        }
        self.check_routes_are_free(&workflow)?;
        let key = WorkflowKey {
            tenant: workflow.tenant.clone(),
            name: workflow.name.clone(),
        };
        let previous = current
            .as_ref()
            .map(|current| self.placement.replicas_of(&current.key));
        let worker_ids = self
            .placement
            .place_replicas(&key, workflow.settings.replicas as usize)?;
        let components = Arc::new(request.components);
        let replicas = match self
            .load_replicas(&workflow, &worker_ids, &components)
            .await
        {
            Ok(replicas) => replicas,
            Err(err) => {
                // Nothing changes on failure, placement included.
                match previous {
                    Some(previous) => {
                        let _ = self.placement.place_replicas(&key, previous.len());
                    }
                    None => self.placement.remove(&key),
                }
                return Err(err);
            }
        };
        let mut state = self.write();
        state.last_revision += 1;
        let deployment = Arc::new(Deployment {
            key,
            workflow,
            digest,
            revision: state.last_revision,
            deployed_at: SystemTime::now(),
            replicas,
            components,
            next_replica: AtomicUsize::new(0),
        });
        state
            .deployments
            .insert(deployment.workflow.name.clone(), deployment.clone());
        state.routes = Arc::new(route_table(&state.deployments));
        drop(state);
        self.changed();
        Ok(DeployOutcome::Deployed(deployment))
    }

    /// Removes the workflow `name`; requests already running finish normally.
    pub async fn remove(&self, name: &str) -> Option<Arc<Deployment>> {
        let _guard = self.deploy_lock.lock().await;
        let mut state = self.write();
        let removed = state.deployments.remove(name)?;
        state.routes = Arc::new(route_table(&state.deployments));
        drop(state);
        self.placement.remove(&removed.key);
        self.lock_runs().remove(name);
        self.changed();
        Some(removed)
    }

    /// Takes a worker out (it went away or is drained): every workflow with a replica
    /// on it gets a replica on another worker, loaded before the swap, so requests keep
    /// being served throughout. Returns the workflows that could not be placed again
    /// (they keep their other replicas, if any).
    ///
    /// # Errors
    /// [`DeployError::Placement`] if there is no such worker.
    pub async fn remove_worker(&self, id: &WorkerId) -> Result<Vec<String>, DeployError> {
        let _guard = self.deploy_lock.lock().await;
        if self.write().workers.remove(id).is_none() {
            return Err(DeployError::Placement(PlacementError::NoWorkers));
        }
        self.placement.remove_worker(id);
        let affected: Vec<Arc<Deployment>> = self
            .list()
            .into_iter()
            .filter(|deployment| deployment.workers().any(|worker| worker == id))
            .collect();
        let mut unplaced = Vec::new();
        for deployment in affected {
            let worker_ids = self.placement.replicas_of(&deployment.key);
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
                Ok(loaded) => replicas.extend(loaded),
                Err(err) => tracing::error!(workflow = %deployment.key, "re-placing failed: {err}"),
            }
            if replicas.is_empty() {
                unplaced.push(deployment.workflow.name.clone());
                // With no replica left the workflow cannot serve: take it out whole.
                let mut state = self.write();
                state.deployments.remove(&deployment.workflow.name);
                state.routes = Arc::new(route_table(&state.deployments));
                continue;
            }
            let moved = Arc::new(Deployment {
                key: deployment.key.clone(),
                workflow: deployment.workflow.clone(),
                digest: deployment.digest.clone(),
                revision: deployment.revision,
                deployed_at: deployment.deployed_at,
                replicas,
                components: deployment.components.clone(),
                next_replica: AtomicUsize::new(0),
            });
            let mut state = self.write();
            state.deployments.insert(moved.workflow.name.clone(), moved);
            state.routes = Arc::new(route_table(&state.deployments));
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

    /// Instances alive right now on all workers.
    pub fn active_instances(&self) -> usize {
        self.read()
            .workers
            .values()
            .map(|worker| worker.active_instances())
            .sum()
    }

    /// Remembers a finished run of `workflow` for [`Registry::runs`].
    pub fn record_run(&self, workflow: &str, record: RunRecord) {
        let mut runs = self.lock_runs();
        let history = runs.entry(workflow.to_owned()).or_default();
        if history.len() == RUN_HISTORY {
            history.pop_front();
        }
        history.push_back(record);
    }

    /// The recent runs of `workflow`, newest first.
    pub fn runs(&self, workflow: &str) -> Vec<RunRecord> {
        self.lock_runs()
            .get(workflow)
            .map(|history| history.iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    /// Loads `workflow` on each of `worker_ids`.
    async fn load_replicas(
        &self,
        workflow: &Workflow,
        worker_ids: &[WorkerId],
        components: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Vec<Replica>, DeployError> {
        let mut replicas = Vec::with_capacity(worker_ids.len());
        for worker_id in worker_ids {
            let Some(worker) = self.read().workers.get(worker_id).cloned() else {
                return Err(DeployError::Placement(PlacementError::NoWorkers));
            };
            let loaded = worker.load_workflow(workflow, components.clone()).await?;
            replicas.push(Replica {
                worker_id: worker_id.clone(),
                worker,
                loaded: Arc::new(loaded),
            });
        }
        Ok(replicas)
    }

    fn lock_runs(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, VecDeque<RunRecord>>> {
        // Each operation is a single push/pop: a poisoned lock is still consistent.
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
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

    /// What `path` routes to, and its deployment.
    pub fn route(&self, path: &str) -> Option<(Arc<Deployment>, TriggerTarget)> {
        let routes = self.read().routes.clone();
        routes
            .iter()
            .find(|entry| entry.route.matches(path))
            .map(|entry| (entry.deployment.clone(), entry.target.clone()))
    }

    fn check_routes_are_free(&self, workflow: &Workflow) -> Result<(), DeployError> {
        let state = self.read();
        for trigger in &workflow.http_triggers {
            if let Some(owner) = state
                .routes
                .iter()
                .find(|entry| entry.route == trigger.route)
                .filter(|entry| entry.deployment.workflow.name != workflow.name)
            {
                return Err(DeployError::Conflict(format!(
                    "route `{}` is already served by workflow `{}`",
                    trigger.route, owner.deployment.workflow.name
                )));
            }
        }
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // Writers replace whole values; a panic cannot leave State half-updated.
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// The route table of `deployments`, most specific route first.
fn route_table(deployments: &BTreeMap<String, Arc<Deployment>>) -> Vec<RouteEntry> {
    let mut routes: Vec<RouteEntry> = deployments
        .values()
        .flat_map(|deployment| {
            deployment
                .workflow
                .http_triggers
                .iter()
                .map(|trigger| RouteEntry {
                    route: trigger.route.clone(),
                    target: trigger.target.clone(),
                    deployment: deployment.clone(),
                })
        })
        .collect();
    routes.sort_by_key(|entry| std::cmp::Reverse(entry.route.specificity()));
    routes
}

/// SHA-256 over the manifest and every component, so an identical upload is
/// recognised whatever order the components came in.
fn digest(request: &DeployRequest) -> String {
    let mut hasher = Sha256::new();
    hasher.update(request.manifest.as_bytes());
    for (name, bytes) in &request.components {
        hasher.update([0]);
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update(Sha256::digest(bytes));
    }
    hex::encode(hasher.finalize())
}
