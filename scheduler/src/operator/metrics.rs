//! The operator's Prometheus metrics (`faas operator --metrics-listen`): whether this
//! replica leads, its reconciles, the Workflows by state, and the worker Deployment's
//! scaling. Rendered at each scrape; served by `faas_metrics_endpoint`.

use crate::metrics::{PlacementMetrics, ResultLabel, encode};
use faas_kube::WorkflowStatus;
use faas_kube::status::{DEGRADED, READY};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// A Workflow's state as the metrics count it, from its conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum WorkflowState {
    /// `Ready` is true: a replica serves its revision.
    Ready,
    /// `Degraded` is true: refused, or its workers failed to load it.
    Degraded,
    /// Neither: placing, loading, or scaled to zero.
    Pending,
}

impl WorkflowState {
    const ALL: [Self; 3] = [Self::Ready, Self::Degraded, Self::Pending];

    /// The state `status` describes.
    pub(crate) fn of(status: &WorkflowStatus) -> Self {
        if status.is(READY) {
            Self::Ready
        } else if status.is(DEGRADED) {
            Self::Degraded
        } else {
            Self::Pending
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Degraded => "degraded",
            Self::Pending => "pending",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

/// The operator's metrics. Made before the election, so a replica that does not lead
/// answers scrapes too (with `faas_operator_leader 0`).
pub struct OperatorMetrics {
    registry: Registry,
    leader: Gauge,
    reconciles: Family<ResultLabel, Counter>,
    reconcile_seconds: Histogram,
    workflows: Family<StateLabel, Gauge>,
    /// Each Workflow's last state, by `namespace/name`, which `workflows` counts.
    states: Mutex<HashMap<String, WorkflowState>>,
    worker_replicas: Gauge,
    scalings: Family<DirectionLabel, Counter>,
    /// What the placement rounds the operator runs count.
    pub(crate) placement: PlacementMetrics,
}

impl Default for OperatorMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl OperatorMetrics {
    /// The metrics of an operator that has done nothing yet.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("faas_operator");
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the Lease and operates",
            leader.clone(),
        );
        let reconciles = Family::<ResultLabel, Counter>::default();
        registry.register(
            "reconciles",
            "Workflow reconciles, by result (an error is retried with backoff)",
            reconciles.clone(),
        );
        // 1 ms to about 16 s: a reconcile may fetch a component from its URL.
        let reconcile_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        registry.register(
            "reconcile_duration_seconds",
            "How long a Workflow reconcile took",
            reconcile_seconds.clone(),
        );
        let workflows = Family::<StateLabel, Gauge>::default();
        registry.register(
            "workflows",
            "Workflows by state (ready, degraded, pending), as their last status said",
            workflows.clone(),
        );
        let worker_replicas = Gauge::default();
        registry.register(
            "worker_replicas",
            "The worker Deployment's replicas, as the scaler last saw or set them",
            worker_replicas.clone(),
        );
        let scalings = Family::<DirectionLabel, Counter>::default();
        registry.register(
            "worker_scalings",
            "Times the workers were scaled to zero (down) or back on demand (up)",
            scalings.clone(),
        );
        let placement = PlacementMetrics::default();
        placement.register(&mut registry);
        let metrics = Self {
            registry,
            placement,
            leader,
            reconciles,
            reconcile_seconds,
            workflows,
            states: Mutex::default(),
            worker_replicas,
            scalings,
        };
        // Every series from the start, so a rate over a fresh operator is defined.
        for label in ResultLabel::BOTH {
            metrics.reconciles.get_or_create(&label).inc_by(0);
        }
        for direction in ["up", "down"] {
            metrics
                .scalings
                .get_or_create(&DirectionLabel { direction })
                .inc_by(0);
        }
        metrics.count_states(&HashMap::new());
        metrics
    }

    /// The text exposition, for a scrape.
    pub fn render(&self) -> String {
        encode(&self.registry)
    }

    /// Whether this replica leads.
    pub(crate) fn set_leader(&self, leads: bool) {
        self.leader.set(i64::from(leads));
    }

    /// A reconcile ended after `took`, successfully or not.
    pub(crate) fn reconciled(&self, ok: bool, took: Duration) {
        self.reconciles.get_or_create(&ResultLabel::of(ok)).inc();
        self.reconcile_seconds.observe(took.as_secs_f64());
    }

    /// Workflow `key` (`namespace/name`) is now in `state`, or gone (`None`).
    pub(crate) fn workflow_state(&self, key: &str, state: Option<WorkflowState>) {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        match state {
            Some(state) => states.insert(key.to_owned(), state),
            None => states.remove(key),
        };
        self.count_states(&states);
    }

    /// Keeps the state of the Workflows (`namespace/name`) `keep` keeps, only.
    pub(crate) fn retain_workflows(&self, keep: impl Fn(&String) -> bool) {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        states.retain(|key, _| keep(key));
        self.count_states(&states);
    }

    fn count_states(&self, states: &HashMap<String, WorkflowState>) {
        for state in WorkflowState::ALL {
            let count = states.values().filter(|s| **s == state).count();
            self.workflows
                .get_or_create(&StateLabel {
                    state: state.label(),
                })
                .set(count as i64);
        }
    }

    /// The worker Deployment has `replicas`.
    pub(crate) fn worker_replicas(&self, replicas: i32) {
        self.worker_replicas.set(i64::from(replicas));
    }

    /// The scaler set the worker Deployment's replicas from `from` to `to`.
    pub(crate) fn workers_scaled(&self, from: i32, to: i32) {
        let direction = if to > from { "up" } else { "down" };
        self.scalings
            .get_or_create(&DirectionLabel { direction })
            .inc();
        self.worker_replicas(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    /// Whether `text` holds the sample `series value`.
    fn has(text: &str, series: &str, value: u64) -> bool {
        text.lines().any(|line| line == format!("{series} {value}"))
    }

    fn state(ready: bool, degraded: bool) -> WorkflowState {
        let mut status = WorkflowStatus::default();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        status.set_condition(READY, ready, "R", String::new(), now.clone(), None);
        status.set_condition(DEGRADED, degraded, "D", String::new(), now, None);
        WorkflowState::of(&status)
    }

    #[test]
    fn workflows_are_counted_by_their_last_state_and_dropped_when_gone() {
        let metrics = OperatorMetrics::new();
        assert_eq!(state(true, false), WorkflowState::Ready);
        assert_eq!(state(false, true), WorkflowState::Degraded);
        assert_eq!(state(false, false), WorkflowState::Pending);
        metrics.workflow_state("a/one", Some(WorkflowState::Pending));
        metrics.workflow_state("a/two", Some(WorkflowState::Ready));
        metrics.workflow_state("a/one", Some(WorkflowState::Ready));
        metrics.workflow_state("b/three", Some(WorkflowState::Degraded));
        let text = metrics.render();
        let workflows = |state: &str| format!("faas_operator_workflows{{state=\"{state}\"}}");
        assert!(has(&text, &workflows("ready"), 2), "{text}");
        assert!(has(&text, &workflows("degraded"), 1), "{text}");
        assert!(has(&text, &workflows("pending"), 0), "{text}");
        metrics.workflow_state("a/two", None);
        assert!(has(&metrics.render(), &workflows("ready"), 1));
    }

    #[test]
    fn reconciles_and_scalings_are_counted_from_zero() {
        let metrics = OperatorMetrics::new();
        let reconciles =
            |result: &str| format!("faas_operator_reconciles_total{{result=\"{result}\"}}");
        let scalings = |direction: &str| {
            format!("faas_operator_worker_scalings_total{{direction=\"{direction}\"}}")
        };
        let text = metrics.render();
        assert!(has(&text, &reconciles("error"), 0), "{text}");
        assert!(has(&text, &scalings("up"), 0), "{text}");
        assert!(has(&text, "faas_operator_leader", 0), "{text}");
        metrics.set_leader(true);
        for ok in [true, false, true] {
            metrics.reconciled(ok, Duration::from_millis(3));
        }
        metrics.workers_scaled(1, 0);
        let text = metrics.render();
        assert!(has(&text, "faas_operator_leader", 1), "{text}");
        assert!(has(&text, &reconciles("ok"), 2), "{text}");
        assert!(has(&text, &reconciles("error"), 1), "{text}");
        assert!(
            has(&text, "faas_operator_reconcile_duration_seconds_count", 3),
            "{text}"
        );
        assert!(has(&text, &scalings("down"), 1), "{text}");
        assert!(has(&text, "faas_operator_worker_replicas", 0), "{text}");
    }

    /// The Grafana dashboard's operator panels query only series the operator serves.
    #[test]
    fn every_operator_series_the_dashboard_queries_is_served() {
        let text = OperatorMetrics::new().render();
        let queried = faas_testing::dashboard_families("faas_operator_");
        assert!(queried.len() >= 6, "{queried:?}");
        for family in queried {
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "the dashboard queries {family}, which the operator does not serve:\n{text}"
            );
        }
    }
}
