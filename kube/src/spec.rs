//! A Workflow's `spec`: workflow.toml written as YAML.
//!
//! The field names are the TOML's own (`memory_mb`, `timeout_ms`), so a user moves
//! between `faas deploy` and `kubectl apply` without learning a second vocabulary, and
//! the operator validates a spec with `faas_workflow`'s one validator (see
//! [`crate::convert`]). Three differences: the name is `metadata.name`, the tenant is the
//! namespace, and a function's `component` says where the bytes come from instead of a
//! path on the deployer's disk. Values are checked by that validator, not here, so the
//! types below only fix the shape (`deny_unknown_fields` keeps a misspelt field from
//! being dropped silently) and the validator's most items of each kind, which the API
//! server then enforces itself: a resource with more is refused before it is stored.

use crate::status::WorkflowStatus;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most a `u32` field may hold, as the CRD tells the API server: its schema's
/// `format: uint32` is a hint the API server does not check, and a larger number it
/// stored would fail to decode, and with it every list of Workflows the operator and
/// the gateways make (kube decodes a list whole): one tenant's Workflow would stop
/// every tenant's deploys.
const U32_MAX: u32 = u32::MAX;

/// What a Workflow deploys: functions, steps, edges, run settings and triggers
/// (workflow.toml's fields; the derive makes `Workflow`, the resource itself, whose
/// namespace is its tenant).
// kube's printcolumn(...) repeats `type_ = "string"`, which clippy takes for a
// duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "faas.dev",
    version = "v1alpha1",
    kind = "Workflow",
    plural = "workflows",
    shortname = "wf",
    namespaced,
    status = "WorkflowStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A workflow of WebAssembly functions, deployed in its tenant's namespace.",
    scale(
        spec_replicas_path = ".spec.workflow.replicas",
        status_replicas_path = ".status.replicas"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(name = "Revision", type_ = "integer", json_path = ".status.revision"),
    printcolumn(name = "Workers", type_ = "string", json_path = ".status.placement"),
    printcolumn(name = "Routes", type_ = "string", json_path = ".status.routes"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(deny_unknown_fields)]
pub struct WorkflowSpec {
    /// What the workflow does, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The functions, by name.
    #[schemars(extend("maxProperties" = faas_workflow::MAX_FUNCTIONS))]
    pub functions: BTreeMap<String, FunctionSpec>,
    /// The steps of a chained workflow, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = faas_workflow::MAX_STEPS))]
    pub steps: BTreeMap<String, StepSpec>,
    /// How the steps chain, fan out and join.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = faas_workflow::MAX_EDGES))]
    pub edges: Vec<EdgeSpec>,
    /// Limits of a run and the number of replicas (`[workflow]` in workflow.toml).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<SettingsSpec>,
    /// What starts the workflow: HTTP routes, Redis channels and streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triggers: Option<TriggersSpec>,
    /// The text of each Karmem schema a step's `interface` names, by file name
    /// (`blob.km`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub schemas: BTreeMap<String, String>,
}

/// `[functions.<name>]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    /// Where the component comes from.
    pub component: ComponentSource,
    /// `http` (a `wasi:http` handler) or `step` (a workflow step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Memory limit of one instance, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = U32_MAX))]
    pub memory_mb: Option<u32>,
    /// Deadline of one event, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Fuel limit of one event (off when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// Configuration values the function reads.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// Where it may send HTTP requests (Spin's syntax, e.g. `https://api.example.com`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_outbound_hosts: Vec<String>,
}

/// Where a function's component comes from: uploaded through the gateway (stored
/// content-addressed, so only its digest is named) or fetched from a URL, and in both
/// cases checked against `sha256`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComponentSource {
    /// The SHA-256 of the component's bytes, in lowercase hex.
    pub sha256: String,
    /// Where the operator fetches it when it is not stored yet (http or https).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// `[steps.<name>]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// The step function it runs.
    pub function: String,
    /// The type of its input region (`bytes`, `text`, `json` or a Karmem type).
    pub input: String,
    /// The type of its output region.
    pub output: String,
    /// Retries of a failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<RetriesSpec>,
    /// The Karmem interface function it implements (`file.km:interface.function`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
}

/// `retries = { attempts, backoff_ms }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetriesSpec {
    /// Attempts in all, the first included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = U32_MAX))]
    pub attempts: Option<u32>,
    /// Backoff before the first retry, doubled for each further one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<u64>,
}

/// `[[edges]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EdgeSpec {
    /// The producing step.
    pub from: String,
    /// The consuming step.
    pub to: String,
    /// The type of the region passed along it.
    #[serde(rename = "type")]
    pub schema_type: String,
    /// `each` (one branch per element) or a number of branches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0, "maximum" = i32::MAX))]
    pub fan_out: Option<IntOrString>,
    /// Where the branches meet again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<JoinSpec>,
}

/// `join = { timeout_ms, on_failure }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JoinSpec {
    /// How long the join waits for its branches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// `fail` or `continue` when a branch fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
}

/// `[workflow]`: run settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsSpec {
    /// Most step instances running at once in one run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = U32_MAX))]
    pub concurrency: Option<u32>,
    /// Deadline of a whole run, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Whole copies of the workflow, each on its own worker (the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = U32_MAX))]
    pub replicas: Option<u32>,
    /// Whether fan-out branches run on every replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_branches: Option<bool>,
}

/// `[triggers]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggersSpec {
    /// HTTP routes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = faas_workflow::MAX_HTTP_TRIGGERS))]
    pub http: Vec<HttpTriggerSpec>,
    /// Redis pub/sub channels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = faas_workflow::MAX_REDIS_TRIGGERS))]
    pub redis: Vec<RedisTriggerSpec>,
    /// Redis streams.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = faas_workflow::MAX_STREAM_TRIGGERS))]
    pub stream: Vec<StreamTriggerSpec>,
}

/// `[[triggers.http]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpTriggerSpec {
    /// The route (`/hello`, `/files/...`). The API server refuses one past the
    /// length a manifest may declare, before the operator reads it.
    #[schemars(length(max = faas_workflow::MAX_ROUTE_LEN))]
    pub route: String,
    /// The HTTP function it calls (or `step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// The entry step of the run it starts (or `function`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// `[[triggers.redis]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisTriggerSpec {
    /// The channel (the tenant's own).
    #[schemars(length(max = faas_workflow::MAX_REDIS_NAME_LEN))]
    pub channel: String,
    /// The entry step.
    pub step: String,
}

/// `[[triggers.stream]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamTriggerSpec {
    /// The stream (the tenant's own).
    #[schemars(length(max = faas_workflow::MAX_REDIS_NAME_LEN))]
    pub stream: String,
    /// The entry step.
    pub step: String,
    /// The consumer group (the workflow's name by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = faas_workflow::MAX_REDIS_NAME_LEN))]
    pub group: Option<String>,
    /// Deliveries before a message goes to the dead-letter stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = U32_MAX))]
    pub max_deliveries: Option<u32>,
    /// The dead-letter stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<String>,
    /// How long a message stays pending before another consumer claims it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_idle_ms: Option<u64>,
    /// Messages read at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = U32_MAX))]
    pub batch: Option<u32>,
}
