//! Prometheus metrics: requests and latency per workflow, failures per cause.

use faas_invoke::{RunRecord, RunStatus};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    workflow: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkflowLabels {
    workflow: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    workflow: String,
    function: String,
    cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    workflow: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    workflow: String,
    step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepOutcomeLabels {
    workflow: String,
    step: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActivatorLabels {
    outcome: String,
}

/// The gateway's metrics and the registry that exposes them.
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<WorkflowLabels, Histogram>,
    failures: Family<FailureLabels, Counter>,
    workflows: Gauge,
    instances: Gauge,
    runs: Family<RunLabels, Counter>,
    run_latency: Family<WorkflowLabels, Histogram>,
    step_latency: Family<StepLabels, Histogram>,
    steps: Family<StepOutcomeLabels, Counter>,
    step_attempts: Family<StepLabels, Counter>,
    connections_refused: Counter,
    activator_held: Gauge,
    activator_requests: Family<ActivatorLabels, Counter>,
}

fn latency_histogram() -> Histogram {
    // 50 us to ~26 s: covers a warm hello world and a function at its deadline.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("faas");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<WorkflowLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let failures = Family::<FailureLabels, Counter>::default();
        let workflows = Gauge::default();
        let instances = Gauge::default();
        registry.register(
            "requests",
            "Invocations by workflow and response status",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from request to response head, by workflow",
            latency.clone(),
        );
        registry.register(
            "function_failures",
            "Invocations a function failed, by cause (trap, timeout, memory_limit, ...)",
            failures.clone(),
        );
        registry.register(
            "deployed_workflows",
            "Workflows currently deployed",
            workflows.clone(),
        );
        registry.register(
            "instances_active",
            "Wasm instances alive now (0 when idle: scale-to-zero)",
            instances.clone(),
        );
        let runs = Family::<RunLabels, Counter>::default();
        let run_latency = Family::<WorkflowLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let step_latency = Family::<StepLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let steps = Family::<StepOutcomeLabels, Counter>::default();
        let step_attempts = Family::<StepLabels, Counter>::default();
        registry.register("runs", "Workflow runs by outcome", runs.clone());
        registry.register(
            "run_duration_seconds",
            "Duration of whole workflow runs",
            run_latency.clone(),
        );
        registry.register(
            "step_duration_seconds",
            "Duration of one step in one branch, retries included",
            step_latency.clone(),
        );
        registry.register(
            "steps",
            "Step invocations (per branch) by outcome",
            steps.clone(),
        );
        registry.register(
            "step_attempts",
            "Step attempts, retries included",
            step_attempts.clone(),
        );
        let connections_refused = Counter::default();
        registry.register(
            "connections_refused",
            "Connections closed on accept because their client address, or the gateway, \
             held as many as it may",
            connections_refused.clone(),
        );
        let activator_held = Gauge::default();
        registry.register(
            "activator_held",
            "Events held now because their workflow has no ready replica (services mode)",
            activator_held.clone(),
        );
        let activator_requests = Family::<ActivatorLabels, Counter>::default();
        registry.register(
            "activator_requests",
            "Events the activator held or refused, by outcome (forwarded, timeout, full, \
             cancelled, removed)",
            activator_requests.clone(),
        );
        Self {
            registry,
            requests,
            latency,
            failures,
            workflows,
            instances,
            runs,
            run_latency,
            step_latency,
            steps,
            step_attempts,
            connections_refused,
            activator_held,
            activator_requests,
        }
    }

    /// Counts one event the activator settled with `outcome`.
    pub(crate) fn activator_outcome(&self, outcome: &str) {
        self.activator_requests
            .get_or_create(&ActivatorLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Counts an event starting (`+1`) or ending (`-1`) its wait in the activator.
    pub(crate) fn activator_held(&self, delta: i64) {
        self.activator_held.inc_by(delta);
    }

    /// Counts one invocation of `workflow` and its latency.
    pub(crate) fn observe_request(&self, workflow: &str, status: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                workflow: workflow.to_owned(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&WorkflowLabels {
                workflow: workflow.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one function failure.
    pub(crate) fn observe_failure(&self, workflow: &str, function: &str, cause: &str) {
        self.failures
            .get_or_create(&FailureLabels {
                workflow: workflow.to_owned(),
                function: function.to_owned(),
                cause: cause.to_owned(),
            })
            .inc();
    }

    /// Counts one workflow run and each of its steps.
    pub(crate) fn observe_run(&self, run: &RunRecord) {
        let workflow = run.workflow.clone();
        let status = match run.status {
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
        };
        self.runs
            .get_or_create(&RunLabels {
                workflow: workflow.clone(),
                status: status.to_owned(),
            })
            .inc();
        self.run_latency
            .get_or_create(&WorkflowLabels {
                workflow: workflow.clone(),
            })
            .observe(run.duration_ms / 1e3);
        for step in &run.steps {
            let labels = StepLabels {
                workflow: workflow.clone(),
                step: step.step.clone(),
            };
            self.step_latency
                .get_or_create(&labels)
                .observe(step.duration_ms / 1e3);
            self.step_attempts
                .get_or_create(&labels)
                .inc_by(u64::from(step.attempts));
            self.steps
                .get_or_create(&StepOutcomeLabels {
                    workflow: workflow.clone(),
                    step: step.step.clone(),
                    outcome: if step.succeeded {
                        "succeeded"
                    } else {
                        "failed"
                    }
                    .to_owned(),
                })
                .inc();
        }
    }

    /// Counts a connection refused by the connection limits.
    pub(crate) fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// Records how many workflows are deployed.
    pub(crate) fn set_workflows(&self, count: usize) {
        self.workflows.set(count as i64);
    }

    /// Records how many instances are alive.
    pub(crate) fn set_instances(&self, count: usize) {
        self.instances.set(count as i64);
    }

    /// The OpenMetrics text exposition.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
