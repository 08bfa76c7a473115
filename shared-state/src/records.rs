//! The records kept in Redis, as JSON.

use faas_invoke::{FunctionSummary, LoadErrorKind};
use faas_workflow::Workflow;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A registered worker: where the gateway reaches it and how much it may hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// Its id, unique among the workers.
    pub id: String,
    /// `host:port` of its internal API.
    pub addr: String,
    /// How many workflows it may hold.
    pub capacity: usize,
    /// Identifies the machine it runs on (its boot id by default): workers with the
    /// same host id pass regions to each other as memory file descriptors.
    #[serde(default)]
    pub host: String,
    /// Its Unix socket for descriptor passing, on that host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// It is stopping: it serves what it holds until its workflows are placed and
    /// loaded elsewhere, and takes nothing new.
    #[serde(default)]
    pub draining: bool,
}

/// One deployed version of a workflow, as the gateway accepted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentRecord {
    /// The parsed, validated manifest (memories resolved).
    pub workflow: Workflow,
    /// Hash of manifest, schemas and components: equal digests mean an identical deploy.
    pub digest: String,
    /// The revision across services mode, increasing with every deploy that changed something.
    pub revision: u64,
    /// Seconds since the Unix epoch when it was deployed.
    pub deployed_at: u64,
    /// The SHA-256 of each function's component (stored apart, once per digest).
    pub components: BTreeMap<String, String>,
}

/// Where the scheduler placed a workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementRecord {
    /// Its tenant (the affinity key).
    pub tenant: String,
    /// One whole replica on each of these workers (by id).
    pub workers: Vec<String>,
}

/// What a worker did with the workflow placed on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadStatus {
    /// The revision it loaded (or tried to).
    pub revision: u64,
    /// Why loading failed; `None` when the revision is ready to serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whose the failure is to fix, for the deploy's error `kind`; `None` from a worker
    /// older than this field, whose failures were all reported as `component`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<LoadErrorKind>,
    /// Each function as loaded, for the admin API.
    #[serde(default)]
    pub functions: Vec<FunctionSummary>,
}

impl LoadStatus {
    /// Whether `revision` is loaded and ready.
    pub fn is_ready(&self, revision: u64) -> bool {
        self.revision == revision && self.error.is_none()
    }
}
