//! The worker process's Prometheus metrics (services mode): what it runs right now,
//! and its guests' series per workflow (`crate::metrics`).
//! Served on `GET /metrics` of its own HTTP/1.1 listener (`faas_metrics_endpoint`),
//! for scrapers that do not speak the internal HTTP/2 API.

use super::node::Node;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio::net::TcpListener;

/// The gauges, read from the node at every scrape, and the guests' series.
struct Gauges {
    registry: Registry,
    instances: Gauge,
    workflows: Gauge,
    draining: Gauge,
}

impl Gauges {
    fn new(node: &Node) -> Self {
        let mut registry = Registry::with_prefix("faas");
        registry.register_collector(node.worker().metrics().collector());
        let (instances, workflows, draining) =
            (Gauge::default(), Gauge::default(), Gauge::default());
        registry.register(
            "instances_active",
            "Instances alive on this worker (0 when idle)",
            instances.clone(),
        );
        registry.register(
            "workflows_loaded",
            "Workflows compiled and linked on this worker",
            workflows.clone(),
        );
        registry.register(
            "worker_draining",
            "1 while the worker hands its workflows over before stopping",
            draining.clone(),
        );
        Self {
            registry,
            instances,
            workflows,
            draining,
        }
    }

    fn render(&self, node: &Node) -> String {
        self.instances.set(node.worker().active_instances() as i64);
        self.workflows.set(node.workflows_loaded() as i64);
        self.draining.set(i64::from(node.is_draining()));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// Serves `/metrics`, and `/readyz` ([`Node::ready`]), on `listener` until the task is
/// dropped.
pub(super) async fn serve(listener: TcpListener, node: Arc<Node>) {
    let gauges = Gauges::new(&node);
    let ready = {
        let node = node.clone();
        Arc::new(move || node.ready())
    };
    let render = Arc::new(move || gauges.render(&node));
    faas_metrics_endpoint::serve_with_readiness(listener, render, ready).await;
}
