//! Deployed workflows and the route table built from them.
//!
//! A deploy parses and validates the manifest, places the workflow, has its worker
//! compile and link every function, and only then swaps the new version in: the
//! deployments map and the route table change together under one write lock. A
//! request takes an `Arc` of what it found, so requests in flight finish on the
//! version they started on.

use faas_scheduler::{Placement, PlacementError, WorkerId, WorkflowKey};
use faas_worker::{LoadError, LoadedWorkflow, Worker};
use faas_workflow::{ManifestError, Route, TriggerTarget, Workflow};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
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
    /// The worker it runs on.
    pub worker: WorkerId,
    /// Its compiled functions.
    pub loaded: Arc<LoadedWorkflow>,
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
}

/// Every deployed workflow, the workers that run them and their placement.
pub struct Registry {
    workers: BTreeMap<WorkerId, Arc<Worker>>,
    placement: Arc<dyn Placement>,
    state: RwLock<State>,
    /// Serializes deploys and deletes so two uploads of one workflow cannot race.
    deploy_lock: tokio::sync::Mutex<()>,
}

impl Registry {
    /// A registry placing workflows on `workers` with `placement`.
    pub fn new(
        workers: impl IntoIterator<Item = (WorkerId, Arc<Worker>)>,
        placement: Arc<dyn Placement>,
    ) -> Self {
        Self {
            workers: workers.into_iter().collect(),
            placement,
            state: RwLock::default(),
            deploy_lock: tokio::sync::Mutex::new(()),
        }
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
        let worker_id = self.placement.place(&key)?;
        let Some(worker) = self.workers.get(&worker_id) else {
            return Err(DeployError::Placement(PlacementError::NoWorkers));
        };
        let loaded = match worker.load_workflow(&workflow, request.components).await {
            Ok(loaded) => Arc::new(loaded),
            Err(err) => {
                if current.is_none() {
                    self.placement.remove(&key);
                }
                return Err(err.into());
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
            worker: worker_id,
            loaded,
        });
        state
            .deployments
            .insert(deployment.workflow.name.clone(), deployment.clone());
        state.routes = Arc::new(route_table(&state.deployments));
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
        Some(removed)
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

    /// The worker called `id`.
    pub fn worker(&self, id: &WorkerId) -> Option<&Arc<Worker>> {
        self.workers.get(id)
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
