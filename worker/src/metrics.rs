//! What the worker counts about the guests it runs, per tenant, workflow and function:
//! instance starts (by how their memory slot is reset: by written pages or whole, so
//! an operator sees which functions moved to whole resets, whose idle slots each keep
//! up to `--whole-slot-reset-mb` resident), compiles (cold: compiled now; warm: loaded
//! from the component cache) and region bytes handed over (mapped or copied).
//!
//! A loaded workflow holds its series, and they are dropped at the first scrape after
//! no loaded workflow does ([`PerWorkflow::dropping_unheld`]). The gateway serves them
//! in embedded mode, the worker process's `/metrics` in services mode.

use crate::region::Handoff;
use faas_invoke::metrics::{Descriptor, PerWorkflow, SeriesEncoder, WorkflowSeries};
use prometheus_client::collector::Collector;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

/// The series of every workflow loaded on one or more workers. Cloning shares them:
/// give every worker of a process the same one, and register it once.
#[derive(Debug, Clone)]
pub struct GuestMetrics(Arc<PerWorkflow<WorkflowCounters>>);

impl Default for GuestMetrics {
    fn default() -> Self {
        Self(Arc::new(PerWorkflow::dropping_unheld()))
    }
}

impl GuestMetrics {
    /// What a registry encodes these series with
    /// (`Registry::register_collector`).
    pub fn collector(&self) -> Box<dyn Collector> {
        Box::new(self.0.clone())
    }

    /// The series of `workflow` of `tenant`, which its loaded copy holds.
    pub(crate) fn workflow(&self, tenant: &str, workflow: &str) -> Arc<WorkflowCounters> {
        self.0.get(tenant, workflow)
    }
}

/// One workflow's series: its functions'.
#[derive(Debug, Default)]
pub(crate) struct WorkflowCounters {
    functions: Mutex<BTreeMap<String, Arc<FunctionCounters>>>,
}

impl WorkflowCounters {
    /// The series of `function`, which its loaded copy holds.
    pub(crate) fn function(&self, function: &str) -> Arc<FunctionCounters> {
        self.lock().entry(function.to_owned()).or_default().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<FunctionCounters>>> {
        self.functions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One function's counters.
#[derive(Debug, Default)]
pub(crate) struct FunctionCounters {
    /// Instances whose slot is reset by written pages (index 0) or whole (index 1).
    instance_starts: [Counter; 2],
    /// Compiled now (index 0) or loaded from the cache (index 1).
    compiles: [Counter; 2],
    /// Mapped (index 0) or copied (index 1).
    region_bytes: [Counter; 2],
}

impl FunctionCounters {
    /// Counts one instance made for an event: `whole` if its engine resets its memory
    /// slot whole after it (`runtimes.rs`).
    pub(crate) fn instance_started(&self, whole: bool) {
        self.instance_starts[usize::from(whole)].inc();
    }

    /// Counts one load of the function's component: `warm` if the compiled code came
    /// from the cache.
    pub(crate) fn loaded(&self, warm: bool) {
        self.compiles[usize::from(warm)].inc();
    }

    /// Counts `bytes` of a region handed to this function.
    pub(crate) fn region_placed(&self, handoff: Handoff, bytes: usize) {
        self.region_bytes[usize::from(handoff == Handoff::Copied)].inc_by(bytes as u64);
    }
}

impl WorkflowSeries for WorkflowCounters {
    const METRICS: &'static [Descriptor] = &[
        Descriptor {
            name: "instance_starts",
            help: "Instances made for events (each event gets a fresh one), by how their \
                   memory slot is reset after it: written-pages or whole",
            metric_type: MetricType::Counter,
        },
        Descriptor {
            name: "component_compiles",
            help: "Component loads by cache: cold (compiled now) or warm (compiled code \
                   loaded from the worker's cache)",
            metric_type: MetricType::Counter,
        },
        Descriptor {
            name: "region_bytes",
            help: "Bytes of regions handed to a function, by mode: mapped (memory file \
                   mapped copy-on-write) or copied",
            metric_type: MetricType::Counter,
        },
    ];

    fn new() -> Self {
        Self::default()
    }

    fn encode(&self, metric: &str, out: &mut SeriesEncoder<'_, '_>) -> fmt::Result {
        let functions = self.lock().clone();
        for (function, counters) in &functions {
            // Whether the first series is served from the load on, at 0: a loaded
            // function's written-page starts are (as its starts were before they had a
            // label), so that a rate sees its first one; the others appear when counted.
            let (pairs, label, values, first_from_load) = match metric {
                "instance_starts" => (
                    &counters.instance_starts,
                    "slot_reset",
                    ["written-pages", "whole"],
                    true,
                ),
                "component_compiles" => (&counters.compiles, "cache", ["cold", "warm"], false),
                "region_bytes" => (
                    &counters.region_bytes,
                    "mode",
                    [Handoff::Mapped.as_str(), Handoff::Copied.as_str()],
                    false,
                ),
                _ => continue,
            };
            for (i, (counter, value)) in pairs.iter().zip(values).enumerate() {
                if (first_from_load && i == 0) || counter.get() > 0 {
                    out.series(counter, &[("function", function), (label, value)])?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    /// What a scrape of `metrics` reads.
    fn scrape(metrics: &GuestMetrics) -> String {
        let mut registry = Registry::with_prefix("faas");
        registry.register_collector(metrics.collector());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn a_loaded_functions_starts_are_served_from_zero_and_whole_ones_once_counted() {
        let metrics = GuestMetrics::default();
        let workflow = metrics.workflow("t", "w");
        let function = workflow.function("f");
        let series = |slot_reset: &str, count: u64| {
            format!(
                "faas_instance_starts_total{{tenant=\"t\",workflow=\"w\",function=\"f\",\
                 slot_reset=\"{slot_reset}\"}} {count}\n"
            )
        };
        let text = scrape(&metrics);
        assert!(text.contains(&series("written-pages", 0)), "{text}");
        assert!(!text.contains("slot_reset=\"whole\""), "{text}");

        function.instance_started(true);
        function.instance_started(false);
        function.instance_started(true);
        let text = scrape(&metrics);
        assert!(text.contains(&series("written-pages", 1)), "{text}");
        assert!(text.contains(&series("whole", 2)), "{text}");
    }
}
