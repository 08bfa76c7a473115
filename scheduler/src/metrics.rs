//! Prometheus metrics of placement, kept by the rounds that `faas scheduler` and the
//! Kubernetes operator both run ([`crate::service`]): each process registers them under
//! its own prefix (`faas_scheduler_`, `faas_operator_`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct ResultLabel {
    pub(crate) result: &'static str,
}

impl ResultLabel {
    /// Both results, so that every series exists from the start (a rate over a fresh
    /// process is defined).
    pub(crate) const BOTH: [Self; 2] = [Self { result: "ok" }, Self { result: "error" }];

    pub(crate) fn of(ok: bool) -> Self {
        Self {
            result: if ok { "ok" } else { "error" },
        }
    }
}

/// What placement rounds count. Cheap to clone: clones count into the same series.
#[derive(Clone)]
pub struct PlacementMetrics {
    rounds: Family<ResultLabel, Counter>,
    workers: Gauge,
    placed: Gauge,
    unplaced: Gauge,
    workers_lost: Counter,
    components_deleted: Counter,
}

impl Default for PlacementMetrics {
    fn default() -> Self {
        let metrics = Self {
            rounds: Family::default(),
            workers: Gauge::default(),
            placed: Gauge::default(),
            unplaced: Gauge::default(),
            workers_lost: Counter::default(),
            components_deleted: Counter::default(),
        };
        for label in ResultLabel::BOTH {
            metrics.rounds.get_or_create(&label).inc_by(0);
        }
        metrics
    }
}

impl PlacementMetrics {
    /// Registers every series in `registry` (under its prefix).
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "placement_rounds",
            "Placement rounds, by result (an error is retried at the next round)",
            self.rounds.clone(),
        );
        registry.register(
            "workers_live",
            "Workers that heartbeat and take work (draining ones not counted)",
            self.workers.clone(),
        );
        registry.register(
            "workflows_placed",
            "Workflows (live or staged) placed on at least one worker",
            self.placed.clone(),
        );
        registry.register(
            "workflows_unplaced",
            "Workflows that fit on no worker now (placed once one has room)",
            self.unplaced.clone(),
        );
        registry.register(
            "workers_lost",
            "Workers that left (heartbeat expired, drained or deleted), their workflows placed again",
            self.workers_lost.clone(),
        );
        registry.register(
            "components_deleted",
            "Components deleted from Redis because no deployment names them",
            self.components_deleted.clone(),
        );
    }

    pub(crate) fn round(&self, ok: bool) {
        self.rounds.get_or_create(&ResultLabel::of(ok)).inc();
    }

    pub(crate) fn placement(&self, workers: usize, placed: usize, unplaced: usize) {
        self.workers.set(workers as i64);
        self.placed.set(placed as i64);
        self.unplaced.set(unplaced as i64);
    }

    pub(crate) fn workers_lost(&self, count: usize) {
        self.workers_lost.inc_by(count as u64);
    }

    pub(crate) fn components_deleted(&self, count: usize) {
        self.components_deleted.inc_by(count as u64);
    }
}

/// The scheduler process's metrics (`faas scheduler --metrics-listen`).
pub struct SchedulerMetrics {
    registry: Registry,
    /// What its placement rounds count.
    pub placement: PlacementMetrics,
}

impl Default for SchedulerMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("faas_scheduler");
        let placement = PlacementMetrics::default();
        placement.register(&mut registry);
        Self {
            registry,
            placement,
        }
    }
}

impl SchedulerMetrics {
    /// The text exposition, for a scrape.
    pub fn render(&self) -> String {
        encode(&self.registry)
    }
}

/// `registry`'s text exposition.
pub(crate) fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    text
}
