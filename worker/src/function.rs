//! Loaded functions: a component compiled once and pre-instantiated, ready to give
//! every event a fresh instance.

use crate::config::Limits;
use crate::host::StepFunctionPre;
use crate::placement::Placement;
use crate::region::Region;
use crate::state::InstanceState;
use faas_invoke::FunctionSummary;
use faas_workflow::{Edge, FunctionKind, Workflow};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use wasmtime::{Engine, Store};
use wasmtime_wasi_http::p2::bindings::ProxyPre;

/// How a loaded function is entered.
pub(crate) enum Entry {
    /// Through `wasi:http/incoming-handler`.
    Http(ProxyPre<InstanceState>),
    /// Through the platform's step `handler` (run by the workflow executor).
    Step(StepFunctionPre<InstanceState>),
}

impl Entry {
    /// The engine it was linked on, which its stores must belong to.
    pub(crate) fn engine(&self) -> &Engine {
        match self {
            Self::Http(pre) => pre.engine(),
            Self::Step(pre) => pre.engine(),
        }
    }

    /// The component it instantiates.
    pub(crate) fn component(&self) -> &wasmtime::component::Component {
        match self {
            Self::Http(pre) => pre.instance_pre().component(),
            Self::Step(pre) => pre.instance_pre().component(),
        }
    }

    pub(crate) fn kind(&self) -> FunctionKind {
        match self {
            Self::Http(_) => FunctionKind::Http,
            Self::Step(_) => FunctionKind::Step,
        }
    }
}

/// One function of a deployed workflow, compiled and linked.
pub struct LoadedFunction {
    pub(crate) name: Arc<str>,
    pub(crate) digest: String,
    /// Its entry (shared with every other function of its engine that runs the same
    /// bytes: `linked.rs`; on a fuel-metered engine only if it has a fuel limit), and
    /// whether it moved to whole slot resets.
    pub(crate) placement: Arc<Placement>,
    pub(crate) limits: Limits,
    pub(crate) config: Arc<BTreeMap<String, String>>,
    /// Its `allowed_outbound_hosts` (see `outbound.rs`).
    pub(crate) allowed_outbound_hosts: Arc<faas_workflow::AllowedOutboundHosts>,
    /// Its instance starts, compiles and region bytes.
    pub(crate) metrics: Arc<crate::metrics::FunctionCounters>,
}

impl LoadedFunction {
    /// The function's name in workflow.toml.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// SHA-256 of the component's bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// What kind of function this is.
    pub fn kind(&self) -> FunctionKind {
        self.entry().kind()
    }

    /// What its next event starts an instance from.
    pub(crate) fn entry(&self) -> Arc<Entry> {
        self.placement.entry()
    }

    /// Whether its memory slots are reset whole after each event because its events
    /// kept faulting pages in under the default reset (see `placement.rs`).
    pub fn moved_to_whole_resets(&self) -> bool {
        self.placement.probe.resets_whole()
    }

    /// The limits each of its instances runs under.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Whether its code counts fuel: true only if it was compiled for the worker's
    /// fuel-metered engine, which only functions with a fuel limit are.
    pub fn fuel_metered(&self) -> bool {
        // `Config` does not tell; a store of an engine without metering has no fuel.
        Store::new(self.entry().engine(), ()).get_fuel().is_ok()
    }
}

/// Every function of one workflow version. Requests hold it by `Arc`, so replacing a
/// workflow never disturbs the requests still running on the old version.
pub struct LoadedWorkflow {
    pub(crate) manifest: Arc<Workflow>,
    /// The steps in execution order, each with the edge leading into it: derived from
    /// the manifest's graph once, at load, rather than on every run.
    pub(crate) chain: Arc<[(String, Option<Edge>)]>,
    pub(crate) tenant: Arc<str>,
    pub(crate) name: Arc<str>,
    pub(crate) functions: HashMap<String, Arc<LoadedFunction>>,
    /// Its series, held (never read) so that they are served while it is loaded.
    pub(crate) _metrics: Arc<crate::metrics::WorkflowCounters>,
}

impl LoadedWorkflow {
    /// The tenant that owns the workflow.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The workflow's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The manifest it was loaded from.
    pub fn manifest(&self) -> &Workflow {
        &self.manifest
    }

    /// The function called `name`, if the workflow has one.
    pub fn function(&self, name: &str) -> Option<&Arc<LoadedFunction>> {
        self.functions.get(name)
    }

    /// The workflow's functions, in no particular order.
    pub fn functions(&self) -> impl Iterator<Item = &Arc<LoadedFunction>> {
        self.functions.values()
    }

    /// Each function as the admin API shows it, sorted by name.
    pub fn summaries(&self) -> Vec<FunctionSummary> {
        let mut summaries: Vec<FunctionSummary> = self
            .functions()
            .map(|function| FunctionSummary {
                name: function.name().to_owned(),
                kind: function.kind(),
                digest: function.digest().to_owned(),
                memory_mb: function.limits().memory_mb,
                timeout_ms: function.limits().timeout.as_millis() as u64,
                fuel: function.limits().fuel,
            })
            .collect();
        summaries.sort_by(|a, b| a.name.cmp(&b.name));
        summaries
    }

    /// `payload` as an input region of the entry step (an event's body or message),
    /// kept where it arrived if it is large ([`Region::received`]).
    pub fn entry_input(&self, payload: bytes::Bytes) -> Region {
        let input_type = self
            .manifest
            .entry_step()
            .map(|entry| self.manifest.steps[entry].input.to_string())
            .unwrap_or_default();
        let len = payload.len();
        Region::received(input_type, payload, len)
    }
}
