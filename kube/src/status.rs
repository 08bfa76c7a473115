//! A Workflow's `status`, written by the operator only.
//!
//! Field names follow Kubernetes' conventions (`observedGeneration`, `conditions`), so
//! generic tools (`kubectl wait --for=condition=Ready`, kstatus) read it as they read
//! any other resource.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The condition that says every placed worker serves the current revision.
pub const READY: &str = "Ready";
/// The condition that says the workflow has workers (or why not).
pub const PLACED: &str = "Placed";
/// The condition that says something is wrong with the spec or its components (reason
/// in `reason`, details in `message`).
pub const DEGRADED: &str = "Degraded";

/// The `reason`s of the conditions, as the operator sets them and the gateway reads them.
pub mod reason {
    /// The spec does not validate (the message names the field).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The namespace is no tenant of the platform.
    pub const UNKNOWN_TENANT: &str = "UnknownTenant";
    /// Another tenant's workflow has the name.
    pub const NAME_CONFLICT: &str = "NameConflict";
    /// The tenant is at one of its quotas (`max_workflows`, `code_max_mb`, its Redis
    /// consumers).
    pub const QUOTA: &str = "Quota";
    /// A route overlaps another tenant's.
    pub const ROUTE_CONFLICT: &str = "RouteConflict";
    /// A component is neither stored nor given a `url`.
    pub const COMPONENT_MISSING: &str = "ComponentMissing";
    /// Fetching a component from its `url` failed.
    pub const COMPONENT_FETCH_FAILED: &str = "ComponentFetchFailed";
    /// A fetched component's SHA-256 is not the one given.
    pub const DIGEST_MISMATCH: &str = "DigestMismatch";
    /// A component is not a WebAssembly component.
    pub const INVALID_COMPONENT: &str = "InvalidComponent";
    /// A worker could not load the workflow.
    pub const LOAD_FAILED: &str = "LoadFailed";
    /// The placed workers are loading the current revision.
    pub const LOADING: &str = "Loading";
    /// No worker is registered.
    pub const NO_WORKERS: &str = "NoWorkers";
    /// The workers are scaled to zero; the next event brings them back.
    pub const SCALED_TO_ZERO: &str = "ScaledToZero";
    /// Every worker is full.
    pub const NO_CAPACITY: &str = "NoCapacity";
    /// Nothing of it is deployed yet.
    pub const NOT_DEPLOYED: &str = "NotDeployed";
    /// Everything is as it should be.
    pub const AS_EXPECTED: &str = "AsExpected";
}

/// What the operator last saw of a Workflow.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Placed` and `Degraded`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The platform's revision of this deployment: it rises with every change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// The workers its replicas are placed on (worker ids: pod names).
    #[serde(default)]
    pub placement: Vec<String>,
    /// The revision each placed worker has loaded.
    #[serde(default)]
    pub loaded: BTreeMap<String, u64>,
    /// Replicas that serve the current revision (the scale subresource's status).
    #[serde(default)]
    pub replicas: i32,
    /// Its HTTP routes.
    #[serde(default)]
    pub routes: Vec<String>,
}

impl WorkflowStatus {
    /// The condition of type `kind`, if set.
    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == kind)
    }

    /// Whether condition `kind` is `True`.
    pub fn is(&self, kind: &str) -> bool {
        self.condition(kind).is_some_and(|c| c.status == "True")
    }

    /// Sets condition `kind`, keeping its `lastTransitionTime` unless its status
    /// changes (as Kubernetes' conventions ask), so that an unchanged status patches
    /// nothing.
    pub fn set_condition(
        &mut self,
        kind: &str,
        status: bool,
        reason: &str,
        message: String,
        now: Time,
        generation: Option<i64>,
    ) {
        let status = if status { "True" } else { "False" }.to_owned();
        let last_transition_time = match self.condition(kind) {
            Some(old) if old.status == status => old.last_transition_time.clone(),
            _ => now,
        };
        let condition = Condition {
            type_: kind.to_owned(),
            status,
            reason: reason.to_owned(),
            message,
            last_transition_time,
            observed_generation: generation,
        };
        match self.conditions.iter_mut().find(|c| c.type_ == kind) {
            Some(old) => *old = condition,
            None => self.conditions.push(condition),
        }
    }
}
