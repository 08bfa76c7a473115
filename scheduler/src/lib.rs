//! Placement: which worker runs each workflow.
//!
//! The unit of placement is the workflow and the affinity key its tenant: every
//! function of a workflow runs on the worker the workflow is placed on (so chained
//! functions can share memory), and a tenant's workflows are packed onto the same
//! worker while its capacity allows.
//!
//! Architecture invariant: placement is pure logic. The [`Planner`] knows worker ids
//! and capacities, never sockets or Wasmtime; the embedded mode runs it behind
//! [`Placement`], and services mode's scheduler process ([`service`]) runs the same
//! planner against the state shared in Redis. The Kubernetes operator ([`operator`])
//! runs those same rounds beside its reconciling of Workflow resources.

pub mod metrics;
pub mod operator;
mod planner;
pub mod service;

pub use planner::{Planner, WorkerSpec};

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Mutex;

/// Names one worker.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkerId(pub String);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Names one deployed workflow: its tenant and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkflowKey {
    /// The tenant that owns it: the affinity key.
    pub tenant: String,
    /// The workflow's name.
    pub name: String,
}

impl fmt::Display for WorkflowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.name)
    }
}

/// Why a workflow could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// No worker is registered.
    #[error("no worker is available")]
    NoWorkers,
    /// Every worker is full.
    #[error("every worker is at capacity; cannot place {0}")]
    NoCapacity(WorkflowKey),
}

/// Decides and remembers where workflows run. Implemented in-process here; the
/// distributed mode implements it over shared state.
pub trait Placement: Send + Sync {
    /// The worker `workflow` runs on, placing it first if it is new.
    ///
    /// # Errors
    /// [`PlacementError`] when no worker can take it.
    fn place(&self, workflow: &WorkflowKey) -> Result<WorkerId, PlacementError>;

    /// The workers `replicas` whole copies of `workflow` run on, placing new replicas
    /// (or dropping extra ones) as needed.
    ///
    /// # Errors
    /// [`PlacementError`] when too few workers have room; nothing changes then.
    fn place_replicas(
        &self,
        workflow: &WorkflowKey,
        replicas: usize,
    ) -> Result<Vec<WorkerId>, PlacementError>;

    /// Forgets `workflow`, freeing its capacity.
    fn remove(&self, workflow: &WorkflowKey);

    /// Removes a worker that went away; its replicas are placed again elsewhere.
    /// Returns the workflows that lost a replica which fits nowhere.
    fn remove_worker(&self, worker: &WorkerId) -> Vec<WorkflowKey>;

    /// Every replica of `workflow`.
    fn replicas_of(&self, workflow: &WorkflowKey) -> Vec<WorkerId>;

    /// Where `workflow` runs, if it is placed.
    fn placement_of(&self, workflow: &WorkflowKey) -> Option<WorkerId>;
}

/// Placement inside one process: a [`Planner`] behind a mutex.
#[derive(Debug)]
pub struct EmbeddedPlacement {
    planner: Mutex<Planner>,
}

impl EmbeddedPlacement {
    /// Placement over `workers`.
    pub fn new(workers: impl IntoIterator<Item = WorkerSpec>) -> Self {
        let mut planner = Planner::default();
        for worker in workers {
            planner.add_worker(worker);
        }
        Self {
            planner: Mutex::new(planner),
        }
    }

    fn planner(&self) -> std::sync::MutexGuard<'_, Planner> {
        // Every planner method leaves it consistent before it can panic.
        self.planner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Placement for EmbeddedPlacement {
    fn place(&self, workflow: &WorkflowKey) -> Result<WorkerId, PlacementError> {
        self.planner().place(workflow)
    }

    fn place_replicas(
        &self,
        workflow: &WorkflowKey,
        replicas: usize,
    ) -> Result<Vec<WorkerId>, PlacementError> {
        self.planner().place_replicas(workflow, replicas)
    }

    fn remove(&self, workflow: &WorkflowKey) {
        self.planner().remove(workflow);
    }

    fn remove_worker(&self, worker: &WorkerId) -> Vec<WorkflowKey> {
        self.planner().remove_worker(worker)
    }

    fn replicas_of(&self, workflow: &WorkflowKey) -> Vec<WorkerId> {
        self.planner().replicas_of(workflow).to_vec()
    }

    fn placement_of(&self, workflow: &WorkflowKey) -> Option<WorkerId> {
        self.planner().placement_of(workflow).cloned()
    }
}
