//! The validated, deployable workflow. These types are what the CLI, gateway and worker
//! pass around (as JSON between processes); they carry no TOML spans.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{ManifestError, Source};
use crate::memory::{InterfaceRef, StepMemories};
use crate::outbound::AllowedOutboundHosts;
use crate::route::Route;
use crate::schema_type::SchemaType;

/// Who deploys a manifest, which decides the tenant it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantScope<'a> {
    /// The manifest must name its tenant: an operator (admin credential) deploys for
    /// whichever tenant it names. What [`Workflow::parse`] and friends use.
    Named,
    /// A tenant's own deploy: the manifest names this tenant or leaves `tenant` out; any
    /// other tenant is a [`ManifestError::TenantMismatch`].
    Own(&'a str),
    /// A check before anyone knows the deploying credential (the CLI, ahead of the
    /// upload): a tenant left out reads as this placeholder; the server decides.
    Unchecked(&'a str),
}

/// Where a manifest comes from, which decides whether limits the format gained later
/// apply to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// A deploy, or a resource a tenant wrote: every limit applies.
    New,
    /// A deployment the platform accepted and saved earlier, read back to serve it
    /// again: limits added since (the length of a route) do not apply, or an upgrade
    /// would leave such a deployment out of service. Only for what the platform itself
    /// saved after checking it.
    Saved,
}

/// A parsed and validated `workflow.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workflow {
    /// Workflow name: `[a-z0-9-]`, 1 to 63 characters, starting with a letter.
    pub name: String,
    /// Tenant id, same rules as `name`.
    pub tenant: String,
    /// Free-form description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Functions by name (never empty once validated).
    pub functions: BTreeMap<String, Function>,
    /// `[steps.<name>]` by name; empty for a v1 manifest. Once validated the steps form
    /// one chain from the entry step, see [`Workflow::chain`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steps: BTreeMap<String, Step>,
    /// `[[edges]]` in file order: each step has at most one incoming and one outgoing
    /// edge, there are no cycles, and every step is reachable from the entry step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<Edge>,
    /// `[workflow]`: limits of one run of the steps.
    #[serde(default)]
    pub settings: RunSettings,
    /// `[[triggers.http]]` in file order; routes are unique and each names an `http`
    /// function or the entry step.
    #[serde(default)]
    pub http_triggers: Vec<HttpTrigger>,
    /// `[[triggers.redis]]` in file order: Redis pub/sub channels whose messages start a
    /// run at the entry step. Channels are unique.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redis_triggers: Vec<RedisTrigger>,
    /// `[[triggers.stream]]` in file order: Redis Streams read through a consumer group,
    /// whose messages start a run at the entry step. Each (stream, group) pair is unique.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stream_triggers: Vec<StreamTrigger>,
}

/// One `[functions.<name>]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Function {
    /// The component file, exactly as written: relative paths are relative to the
    /// directory holding the `workflow.toml` and are *not* resolved by the parser (the
    /// parsed workflow is sent to other machines, where the manifest's directory means
    /// nothing). Use [`Function::component_path`] to resolve it.
    pub component: PathBuf,
    /// Shell command that builds `component`, run in the manifest's directory before the
    /// component is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    /// Which interface the component exports.
    #[serde(default)]
    pub kind: FunctionKind,
    /// Per-function overrides of the platform's default limits.
    #[serde(default)]
    pub limits: Limits,
    /// String settings exposed to the function.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// `allowed_outbound_hosts`: where its outbound HTTP requests may go; empty (the
    /// default) denies them all. See [`crate::outbound`].
    #[serde(default, skip_serializing_if = "AllowedOutboundHosts::is_empty")]
    pub allowed_outbound_hosts: AllowedOutboundHosts,
}

/// Which interface a function's component exports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FunctionKind {
    /// Exports `wasi:http/incoming-handler`; reachable from HTTP triggers.
    #[default]
    Http,
    /// Exports the platform's workflow-step handler; invoked by the workflow engine, not
    /// by HTTP triggers.
    Step,
}

impl FunctionKind {
    /// The name used in `workflow.toml` (`http` or `step`).
    pub fn as_str(self) -> &'static str {
        match self {
            FunctionKind::Http => "http",
            FunctionKind::Step => "step",
        }
    }
}

/// Per-function limits; `None` means the platform default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Linear memory cap in MiB, within [`Limits::MEMORY_MB`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u32>,
    /// Wall-clock deadline per invocation in milliseconds, within [`Limits::TIMEOUT_MS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Wasmtime fuel per invocation; greater than 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
}

impl Limits {
    /// Accepted values of `memory_mb`.
    pub const MEMORY_MB: RangeInclusive<u32> = 1..=4096;
    /// Accepted values of `timeout_ms` (up to ten minutes).
    pub const TIMEOUT_MS: RangeInclusive<u64> = 1..=600_000;
}

/// One `[[triggers.http]]` entry: requests matching `route` go to `target`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpTrigger {
    /// Which request paths this trigger handles.
    pub route: Route,
    /// What handles them. Serialized inline, as in the manifest:
    /// `{"route": "/hello", "function": "hello"}` or `{"route": "/wc", "step": "split"}`.
    #[serde(flatten)]
    pub target: TriggerTarget,
}

/// What an HTTP trigger invokes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TriggerTarget {
    /// `function = "..."`: an `http` function handles the request.
    Function(String),
    /// `step = "..."`: the request body starts a run at this step, the entry step.
    Step(String),
}

impl fmt::Display for TriggerTarget {
    /// A function target displays as the function's name (as v1 printed it), a step
    /// target as `step <name>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TriggerTarget::Function(name) => f.write_str(name),
            TriggerTarget::Step(name) => write!(f, "step {name}"),
        }
    }
}

/// One `[[triggers.redis]]` entry: every message published on the Redis pub/sub
/// `channel` starts a run at `step`, the entry step, with the message payload as its
/// input.
///
/// Delivery is at most once, as in Spin: a message published while no worker is
/// subscribed, or whose run fails, is lost. Use a [`StreamTrigger`] when messages must
/// not be lost.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RedisTrigger {
    /// The channel to subscribe to (`SUBSCRIBE`, not a pattern), as written; see
    /// [`is_valid_redis_name`](crate::is_valid_redis_name).
    pub channel: String,
    /// The step the run starts at: the entry step.
    pub step: String,
}

/// One `[[triggers.stream]]` entry: messages added to the Redis stream `stream` are read
/// through the consumer group `group` (`XREADGROUP`), and each starts a run at `step`,
/// the entry step, with the message payload as its input.
///
/// Delivery is at least once: a message is acknowledged only once its run succeeded, a
/// consumer that dies leaves its messages pending until another one claims them after
/// [`reclaim_idle_ms`](StreamTrigger::reclaim_idle_ms), and a message that failed
/// [`max_deliveries`](StreamTrigger::max_deliveries) times is moved to the
/// [`dead_letter`](StreamTrigger::dead_letter) stream instead of being tried again.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StreamTrigger {
    /// The stream key to read, as written; see
    /// [`is_valid_redis_name`](crate::is_valid_redis_name).
    pub stream: String,
    /// The consumer group the workers read through; the workflow's name when not given
    /// (see [`StreamTrigger::default_group`]).
    pub group: String,
    /// The step the run starts at: the entry step.
    pub step: String,
    /// Failed deliveries of one message before it goes to `dead_letter`, within
    /// [`StreamTrigger::MAX_DELIVERIES`].
    pub max_deliveries: u32,
    /// The stream failed messages are moved to; never equal to `stream`. Defaults to
    /// `<stream>:dead`, see [`StreamTrigger::default_dead_letter`].
    pub dead_letter: String,
    /// How long a message may stay pending (delivered but not acknowledged, e.g. by a
    /// consumer that died) before another consumer claims it, in milliseconds, within
    /// [`StreamTrigger::RECLAIM_IDLE_MS`].
    pub reclaim_idle_ms: u64,
    /// Most messages read by one `XREADGROUP`, within [`StreamTrigger::BATCH`].
    pub batch: u32,
}

impl StreamTrigger {
    /// Accepted values of `max_deliveries`.
    pub const MAX_DELIVERIES: RangeInclusive<u32> = 1..=100;
    /// `max_deliveries` when not given.
    pub const DEFAULT_MAX_DELIVERIES: u32 = 5;
    /// What the default `dead_letter` appends to `stream`.
    pub const DEAD_LETTER_SUFFIX: &'static str = ":dead";
    /// Accepted values of `reclaim_idle_ms` (100 ms up to an hour).
    pub const RECLAIM_IDLE_MS: RangeInclusive<u64> = 100..=3_600_000;
    /// `reclaim_idle_ms` when not given (30 s).
    pub const DEFAULT_RECLAIM_IDLE_MS: u64 = 30_000;
    /// Accepted values of `batch`.
    pub const BATCH: RangeInclusive<u32> = 1..=1024;
    /// `batch` when not given.
    pub const DEFAULT_BATCH: u32 = 16;

    /// The `group` of a trigger of `workflow` that does not name one: the workflow's
    /// name, so two workflows reading one stream each get every entry rather than
    /// splitting them (workflow names are unique across the platform).
    pub fn default_group(workflow: &str) -> String {
        workflow.to_owned()
    }

    /// The `dead_letter` of a trigger on `stream` that does not name one:
    /// `<stream>:dead`.
    pub fn default_dead_letter(stream: &str) -> String {
        format!("{stream}{}", StreamTrigger::DEAD_LETTER_SUFFIX)
    }

    /// `reclaim_idle_ms` as a duration.
    pub fn reclaim_idle(&self) -> Duration {
        Duration::from_millis(self.reclaim_idle_ms)
    }
}

/// One `[steps.<name>]` entry: a `step` function invoked by the workflow engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The function it runs, of kind [`FunctionKind::Step`].
    pub function: String,
    /// The type of the regions it receives.
    pub input: SchemaType,
    /// The type of the regions it returns.
    pub output: SchemaType,
    /// How often a failed invocation is tried again.
    #[serde(default)]
    pub retry: RetryPolicy,
    /// `interface = "blob.km:transfer.consume"`: the function of a Karmem interface this
    /// step implements, whose memories bound its regions (see [`Step::memories`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<InterfaceRef>,
    /// The memories its regions live in, resolved from its own `interface` and its
    /// neighbours' by [`Workflow::parse_with_schemas`]. Unlimited (and writable) when
    /// no interface declares them, and always after a plain [`Workflow::parse`].
    #[serde(default, skip_serializing_if = "StepMemories::is_unlimited")]
    pub memories: StepMemories,
}

/// `retries = { attempts = 3, backoff_ms = 20 }`: how a failed step is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Total attempts, the first included, within [`RetryPolicy::ATTEMPTS`]; 1 means no
    /// retry.
    pub attempts: u32,
    /// Milliseconds to wait before the first retry, within [`RetryPolicy::BACKOFF_MS`];
    /// the wait doubles before each further retry.
    pub backoff_ms: u64,
}

impl RetryPolicy {
    /// Accepted values of `attempts`.
    pub const ATTEMPTS: RangeInclusive<u32> = 1..=10;
    /// Accepted values of `backoff_ms` (up to a minute).
    pub const BACKOFF_MS: RangeInclusive<u64> = 0..=60_000;

    /// The wait before the first retry.
    pub fn backoff(&self) -> Duration {
        Duration::from_millis(self.backoff_ms)
    }

    /// The wait before retry number `retry` (1 for the first retry, i.e. the second
    /// attempt): the backoff doubled `retry - 1` times. Zero for `retry == 0`.
    pub fn backoff_before(&self, retry: u32) -> Duration {
        let Some(doublings) = retry.checked_sub(1) else {
            return Duration::ZERO;
        };
        let factor = 1u64.checked_shl(doublings).unwrap_or(u64::MAX);
        Duration::from_millis(self.backoff_ms.saturating_mul(factor))
    }
}

impl Default for RetryPolicy {
    /// One attempt, no retry.
    fn default() -> Self {
        RetryPolicy {
            attempts: 1,
            backoff_ms: 0,
        }
    }
}

/// One `[[edges]]` entry: the outputs of step `from` become the input of step `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edge {
    /// The step whose outputs the edge carries.
    pub from: String,
    /// The step that receives them.
    pub to: String,
    /// The type of the regions carried: `from`'s output and `to`'s input.
    #[serde(rename = "type")]
    pub schema_type: SchemaType,
    /// Whether the edge passes the outputs on, fans out, or joins branches.
    #[serde(default)]
    pub mode: EdgeMode,
}

/// How an edge hands `from`'s outputs to `to`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeMode {
    /// `to` runs once in the current branch, with all of `from`'s outputs.
    #[default]
    Sequence,
    /// `fan_out = ...`: `to` (and the steps after it, up to the join) runs in several
    /// branches.
    FanOut(FanOut),
    /// `join = { ... }`: the branches of the preceding fan-out end here; `to` runs once
    /// with the outputs of every branch.
    Join(JoinPolicy),
}

/// How many branches a fan-out starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FanOut {
    /// `fan_out = "each"`: one branch per output region of `from`, which gets that region.
    Each,
    /// `fan_out = 4`: that many branches, each gets all of `from`'s outputs; within
    /// [`FanOut::STATIC`].
    Static(u32),
}

impl FanOut {
    /// Accepted numbers of branches of a static fan-out.
    pub const STATIC: RangeInclusive<u32> = 1..=1024;
}

/// `join = { timeout_ms = 5000, on_failure = "continue" }`: how branches are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinPolicy {
    /// How long to wait for the branches, in milliseconds, within
    /// [`JoinPolicy::TIMEOUT_MS`]; branches still running then count as failed.
    pub timeout_ms: u64,
    /// What a failed branch does to the run.
    pub on_failure: OnFailure,
}

impl JoinPolicy {
    /// Accepted values of `timeout_ms` (up to ten minutes).
    pub const TIMEOUT_MS: RangeInclusive<u64> = 1..=600_000;
    /// `timeout_ms` when not given.
    pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

    /// `timeout_ms` as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

impl Default for JoinPolicy {
    /// A 30 s timeout; a failed branch fails the run.
    fn default() -> Self {
        JoinPolicy {
            timeout_ms: JoinPolicy::DEFAULT_TIMEOUT_MS,
            on_failure: OnFailure::Fail,
        }
    }
}

/// What a join does when a branch fails (or times out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// `on_failure = "fail"`: the run fails.
    #[default]
    Fail,
    /// `on_failure = "continue"`: `to` runs with the outputs of the branches that
    /// succeeded.
    Continue,
}

/// `[workflow]`: limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Most step instances running at once in one run, within
    /// [`RunSettings::CONCURRENCY`]; a branch spread to another replica counts as one
    /// while it runs there.
    pub concurrency: u32,
    /// Deadline of a whole run in milliseconds, within [`RunSettings::TIMEOUT_MS`].
    pub timeout_ms: u64,
    /// Whole copies of the workflow to run, each on its own worker, within
    /// [`RunSettings::REPLICAS`]. Applies to HTTP functions too.
    #[serde(default = "RunSettings::default_replicas")]
    pub replicas: u32,
    /// Whether a fan-out's branches run on every replica of the workflow rather than
    /// all on the replica that runs the fan-out (services mode). Their regions reach the
    /// other replicas as memory file descriptors on the same host, and over the network
    /// in one copy otherwise.
    #[serde(default)]
    pub spread_branches: bool,
}

impl RunSettings {
    /// Accepted values of `concurrency`.
    pub const CONCURRENCY: RangeInclusive<u32> = 1..=1024;
    /// Accepted values of `timeout_ms` (up to an hour).
    pub const TIMEOUT_MS: RangeInclusive<u64> = 1..=3_600_000;
    /// `concurrency` when not given.
    pub const DEFAULT_CONCURRENCY: u32 = 16;
    /// `timeout_ms` when not given (a minute).
    pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;
    /// Accepted values of `replicas`.
    pub const REPLICAS: RangeInclusive<u32> = 1..=64;

    fn default_replicas() -> u32 {
        1
    }

    /// `timeout_ms` as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

impl Default for RunSettings {
    /// 16 step instances at once, a one-minute deadline, one replica, branches kept
    /// together.
    fn default() -> Self {
        RunSettings {
            concurrency: RunSettings::DEFAULT_CONCURRENCY,
            timeout_ms: RunSettings::DEFAULT_TIMEOUT_MS,
            replicas: RunSettings::default_replicas(),
            spread_branches: false,
        }
    }
}

impl Workflow {
    /// Parses and validates a manifest. `file_name` is only used in error messages.
    ///
    /// Returns the first problem in the file (by position) as
    /// [`ManifestError::Invalid`]; never [`ManifestError::Read`].
    ///
    /// A step's `interface` is only checked for its form here; its memories are left
    /// unlimited. [`Workflow::parse_with_schemas`] resolves them.
    pub fn parse(file_name: &str, text: &str) -> Result<Workflow, ManifestError> {
        Workflow::parse_scoped(file_name, text, None, TenantScope::Named)
    }

    /// The general form of [`Workflow::parse`] and [`Workflow::parse_with_schemas`]:
    /// resolves the steps' memories when `schemas` is given, and takes the tenant as
    /// `scope` says (a manifest may leave `tenant` out when its deployer's tenant is
    /// known).
    ///
    /// # Errors
    /// [`ManifestError::Invalid`] for a problem in the text,
    /// [`ManifestError::TenantMismatch`] when it names a tenant `scope` does not allow.
    pub fn parse_scoped(
        file_name: &str,
        text: &str,
        schemas: Option<&BTreeMap<String, String>>,
        scope: TenantScope<'_>,
    ) -> Result<Workflow, ManifestError> {
        Workflow::parse_as(file_name, text, schemas, scope, Provenance::New)
    }

    /// [`Workflow::parse_scoped`] for a deployment the platform saved after checking
    /// it (see [`Provenance::Saved`]), read back to serve it again.
    ///
    /// # Errors
    /// As for [`Workflow::parse_scoped`].
    pub fn parse_saved(
        file_name: &str,
        text: &str,
        schemas: Option<&BTreeMap<String, String>>,
        scope: TenantScope<'_>,
    ) -> Result<Workflow, ManifestError> {
        Workflow::parse_as(file_name, text, schemas, scope, Provenance::Saved)
    }

    fn parse_as(
        file_name: &str,
        text: &str,
        schemas: Option<&BTreeMap<String, String>>,
        scope: TenantScope<'_>,
        provenance: Provenance,
    ) -> Result<Workflow, ManifestError> {
        let source = Source {
            file: file_name,
            text,
        };
        crate::validate::parse(source, schemas, scope, provenance)
    }

    /// Like [`Workflow::parse`], and resolves every step's [`Step::memories`] from the
    /// Karmem interfaces the steps name (see [`crate::memory`]). `schemas` maps each
    /// `.km` file name, as written in the manifest (`blob.km`), to its text; only the
    /// files that `interface` fields name are read.
    ///
    /// A missing file, a `.km` that does not parse, an unknown interface or function,
    /// or a declaration that does not fit the step is a [`ManifestError`] at the step's
    /// `interface` field.
    pub fn parse_with_schemas(
        file_name: &str,
        text: &str,
        schemas: &BTreeMap<String, String>,
    ) -> Result<Workflow, ManifestError> {
        Workflow::parse_scoped(file_name, text, Some(schemas), TenantScope::Named)
    }

    /// Reads and parses the manifest at `path`; errors name the file by `path` as given.
    ///
    /// Component paths stay relative: resolve them against `path`'s directory with
    /// [`Function::component_path`] or [`Workflow::component_path`].
    pub fn from_file(path: &Path) -> Result<Workflow, ManifestError> {
        Workflow::from_file_scoped(path, TenantScope::Named)
    }

    /// [`Workflow::from_file`] taking the tenant as `scope` says (see
    /// [`Workflow::parse_scoped`]).
    pub fn from_file_scoped(
        path: &Path,
        scope: TenantScope<'_>,
    ) -> Result<Workflow, ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_owned(),
            source,
        })?;
        Workflow::parse_scoped(&path.display().to_string(), &text, None, scope)
    }

    /// The component file of `function`, resolved against `manifest_dir` (the directory
    /// holding the `workflow.toml`); `None` if there is no such function.
    pub fn component_path(&self, manifest_dir: &Path, function: &str) -> Option<PathBuf> {
        self.functions
            .get(function)
            .map(|f| f.component_path(manifest_dir))
    }

    /// The HTTP trigger handling request path `path` (without query string): the most
    /// specific matching route, see [`Route::specificity`].
    pub fn route_for(&self, path: &str) -> Option<&HttpTrigger> {
        self.http_triggers
            .iter()
            .filter(|t| t.route.matches(path))
            .max_by_key(|t| t.route.specificity())
    }

    /// The step runs start at: the one no edge leads into. `None` when there are no
    /// steps.
    pub fn entry_step(&self) -> Option<&str> {
        self.steps
            .keys()
            .find(|name| !self.edges.iter().any(|edge| edge.to == **name))
            .map(String::as_str)
    }

    /// The steps in execution order from the entry step, each with the edge leading
    /// into it (`None` for the entry step). Empty when there are no steps.
    ///
    /// A validated workflow's steps form a single chain, so this lists every step once;
    /// the edges' [`EdgeMode`] says where branches fan out and join.
    pub fn chain(&self) -> Vec<(&str, Option<&Edge>)> {
        let Some(entry) = self.entry_step() else {
            return Vec::new();
        };
        let mut chain = vec![(entry, None)];
        let mut current = entry;
        // Bounded by the edge count, so an unvalidated cyclic workflow cannot loop.
        for _ in 0..self.edges.len() {
            let Some(edge) = self.edges.iter().find(|edge| edge.from == current) else {
                break;
            };
            chain.push((edge.to.as_str(), Some(edge)));
            current = &edge.to;
        }
        chain
    }

    /// Every Karmem schema file a step or edge type or a step's `interface` mentions,
    /// as written.
    pub fn karmem_files(&self) -> BTreeSet<String> {
        let step_types = self
            .steps
            .values()
            .flat_map(|step| [&step.input, &step.output]);
        let edge_types = self.edges.iter().map(|edge| &edge.schema_type);
        let interfaces = self
            .steps
            .values()
            .filter_map(|step| step.interface.as_ref())
            .map(|reference| reference.file.as_str());
        step_types
            .chain(edge_types)
            .filter_map(SchemaType::karmem_file)
            .chain(interfaces)
            .map(str::to_owned)
            .collect()
    }
}

impl Function {
    /// `component` resolved against `manifest_dir` (the directory holding the
    /// `workflow.toml`); absolute paths are returned unchanged.
    pub fn component_path(&self, manifest_dir: &Path) -> PathBuf {
        manifest_dir.join(&self.component)
    }
}
