//! Prometheus series kept per workflow, labelled by its tenant and name, and dropped
//! with the workflow.
//!
//! Both sides keep such series: the gateway counts requests and runs
//! (`faas-gateway`'s metrics), a worker counts instance starts, compiles and region
//! bytes (`faas-worker`). [`PerWorkflow`] holds one set of series (a [`WorkflowSeries`])
//! per workflow and encodes them as one metric family per name, so a workflow that is
//! removed takes all of its series with it: [`PerWorkflow::retain`] (the gateway, by
//! its registry) or [`PerWorkflow::dropping_unheld`] (a worker, once no loaded workflow
//! holds them).
//!
//! Cardinality stays bounded by what a deploy declares: tenants × workflows × their
//! functions or steps × a fixed set of outcomes. No run id, route, path or status code
//! is ever a label (status codes go by class, `2xx`).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

/// One metric of a [`WorkflowSeries`]: its name (without the `faas_` prefix or a
/// counter's `_total`), help text and type.
#[derive(Debug, Clone, Copy)]
pub struct Descriptor {
    /// The metric's name.
    pub name: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Counter, gauge or histogram.
    pub metric_type: MetricType,
}

/// The series one workflow has, encoded metric by metric.
pub trait WorkflowSeries: Send + Sync + fmt::Debug + 'static {
    /// Every metric, in the order they are written.
    const METRICS: &'static [Descriptor];

    /// A workflow's series before anything was counted.
    fn new() -> Self;

    /// Encodes this workflow's series of the metric named `metric` (one of
    /// [`Self::METRICS`]) with [`SeriesEncoder::series`].
    ///
    /// # Errors
    /// When writing the text fails.
    fn encode(&self, metric: &str, encoder: &mut SeriesEncoder<'_, '_>) -> fmt::Result;
}

/// Writes one workflow's series of one metric, each labelled with the workflow's
/// tenant and name and its own labels.
pub struct SeriesEncoder<'e, 's> {
    tenant: &'e str,
    workflow: &'e str,
    encoder: &'e mut MetricEncoder<'s>,
}

impl SeriesEncoder<'_, '_> {
    /// Writes `metric` labelled with the workflow and `labels`.
    ///
    /// # Errors
    /// When writing the text fails.
    pub fn series(
        &mut self,
        metric: &impl EncodeMetric,
        labels: &[(&'static str, &str)],
    ) -> fmt::Result {
        let escaped: Vec<Cow<'_, str>> = labels
            .iter()
            .map(|(_, value)| escape_label_value(value))
            .collect();
        let mut all = Vec::with_capacity(2 + labels.len());
        all.extend([("tenant", self.tenant), ("workflow", self.workflow)]);
        all.extend(
            labels
                .iter()
                .zip(&escaped)
                .map(|((name, _), value)| (*name, &**value)),
        );
        metric.encode(self.encoder.encode_family(&all)?)
    }
}

/// `value` as a label value is written between quotes: with `\`, `"` and newlines
/// escaped, as the exposition formats require. `prometheus-client` writes values as
/// they are, and a value a tenant chooses (a stream's name may hold any printable
/// character) could otherwise close its quotes and add labels: a second `tenant` label
/// makes Prometheus refuse the whole scrape, every tenant's series with it. Tenant,
/// workflow, function and step names are plain names and need none.
fn escape_label_value(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(value);
    }
    let mut escaped = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    Cow::Owned(escaped)
}

/// The series of every workflow, by workflow name and tenant. A name is one tenant's
/// at a time, but a run of its former owner's may end after another tenant took it:
/// its series must not replace the new owner's. Register it once with
/// [`prometheus_client::registry::Registry::register_collector`].
#[derive(Debug)]
pub struct PerWorkflow<S> {
    series: RwLock<HashMap<String, HashMap<String, Arc<S>>>>,
    drop_unheld: bool,
}

impl<S: WorkflowSeries> Default for PerWorkflow<S> {
    fn default() -> Self {
        Self {
            series: RwLock::default(),
            drop_unheld: false,
        }
    }
}

impl<S: WorkflowSeries> PerWorkflow<S> {
    /// Series that are dropped, at the next scrape, once nothing but this collection
    /// holds them: for a worker, whose loaded workflows hold their series.
    pub fn dropping_unheld() -> Self {
        Self {
            drop_unheld: true,
            ..Self::default()
        }
    }

    /// The series of `workflow` of `tenant`, made on first use. A workflow of the same
    /// name deployed by another tenant has series of its own, from zero.
    pub fn get(&self, tenant: &str, workflow: &str) -> Arc<S> {
        if let Some(series) = self
            .read()
            .get(workflow)
            .and_then(|by_tenant| by_tenant.get(tenant))
        {
            return series.clone();
        }
        let mut all = self.series.write().unwrap_or_else(|p| p.into_inner());
        all.entry(workflow.to_owned())
            .or_default()
            .entry(tenant.to_owned())
            .or_insert_with(|| Arc::new(S::new()))
            .clone()
    }

    /// Keeps the series of the workflows for which `keep(tenant, workflow)` holds.
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        self.retain_series(|tenant, workflow, _| keep(tenant, workflow));
    }

    /// Keeps the series for which `keep(tenant, workflow, series)` holds.
    fn retain_series(&self, keep: impl Fn(&str, &str, &Arc<S>) -> bool) {
        let mut all = self.series.write().unwrap_or_else(|p| p.into_inner());
        all.retain(|workflow, by_tenant| {
            by_tenant.retain(|tenant, series| keep(tenant, workflow, series));
            !by_tenant.is_empty()
        });
    }

    /// How many workflows have series.
    pub fn len(&self) -> usize {
        self.read().values().map(HashMap::len).sum()
    }

    /// Whether no workflow has series.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, HashMap<String, Arc<S>>>> {
        self.series.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl<S: WorkflowSeries> Collector for PerWorkflow<S> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        if self.drop_unheld {
            self.retain_series(|_, _, series| Arc::strong_count(series) > 1);
        }
        let mut all: Vec<(String, String, Arc<S>)> = self
            .read()
            .iter()
            .flat_map(|(workflow, by_tenant)| {
                by_tenant
                    .iter()
                    .map(|(tenant, series)| (tenant.clone(), workflow.clone(), series.clone()))
            })
            .collect();
        all.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        for metric in S::METRICS {
            let mut family =
                encoder.encode_descriptor(metric.name, metric.help, None, metric.metric_type)?;
            for (tenant, workflow, series) in &all {
                series.encode(
                    metric.name,
                    &mut SeriesEncoder {
                        tenant,
                        workflow,
                        encoder: &mut family,
                    },
                )?;
            }
        }
        Ok(())
    }
}

/// HTTP status codes by class, the label a status gets (`2xx`): a guest chooses its
/// status, and a label per code would let it mint series.
pub const STATUS_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];

/// The index in [`STATUS_CLASSES`] of `status`'s class.
pub fn status_class(status: u16) -> usize {
    match status {
        100..=599 => usize::from(status / 100) - 1,
        _ => STATUS_CLASSES.len() - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::registry::Registry;

    #[derive(Debug)]
    struct Hits(Counter);

    impl WorkflowSeries for Hits {
        const METRICS: &'static [Descriptor] = &[Descriptor {
            name: "hits",
            help: "Hits",
            metric_type: MetricType::Counter,
        }];
        fn new() -> Self {
            Self(Counter::default())
        }
        fn encode(&self, _: &str, encoder: &mut SeriesEncoder<'_, '_>) -> fmt::Result {
            encoder.series(&self.0, &[("status", "2xx")])
        }
    }

    fn scrape(per_workflow: Arc<PerWorkflow<Hits>>) -> String {
        let mut registry = Registry::with_prefix("faas");
        registry.register_collector(Box::new(per_workflow));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[derive(Debug)]
    struct Lag(Counter);

    impl WorkflowSeries for Lag {
        const METRICS: &'static [Descriptor] = &[Descriptor {
            name: "lag",
            help: "Lag",
            metric_type: MetricType::Counter,
        }];
        fn new() -> Self {
            Self(Counter::default())
        }
        fn encode(&self, _: &str, encoder: &mut SeriesEncoder<'_, '_>) -> fmt::Result {
            encoder.series(&self.0, &[("stream", r#"x",tenant="victim\"#)])
        }
    }

    #[test]
    fn a_label_value_cannot_close_its_quotes_and_add_labels() {
        let all = Arc::new(PerWorkflow::<Lag>::default());
        all.get("evil", "w").0.inc();
        let mut registry = Registry::with_prefix("faas");
        registry.register_collector(Box::new(all));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"faas_lag_total{tenant="evil",workflow="w",stream="x\",tenant=\"victim\\"} 1"#
            ),
            "{text}"
        );
        assert_eq!(
            escape_label_value("plain-name"),
            Cow::Borrowed("plain-name")
        );
        assert_eq!(escape_label_value("a\nb"), r"a\nb");
    }

    #[test]
    fn each_workflow_has_its_series_until_it_is_dropped() {
        let all = Arc::new(PerWorkflow::<Hits>::default());
        all.get("acme", "shop").0.inc();
        all.get("acme", "shop").0.inc();
        all.get("globex", "mail").0.inc();
        let text = scrape(all.clone());
        assert!(
            text.contains(r#"faas_hits_total{tenant="acme",workflow="shop",status="2xx"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"faas_hits_total{tenant="globex",workflow="mail",status="2xx"} 1"#)
        );
        assert_eq!(
            text.matches("# TYPE faas_hits counter").count(),
            1,
            "{text}"
        );

        all.retain(|_, workflow| workflow != "shop");
        let text = scrape(all.clone());
        assert!(!text.contains("shop"), "{text}");
        // Another tenant's workflow of the same name does not continue its counts.
        all.get("acme", "mail").0.inc();
        assert!(scrape(all).contains(r#"tenant="acme",workflow="mail",status="2xx"} 1"#));
    }

    #[test]
    fn a_former_owners_late_count_leaves_the_new_owners_series_alone() {
        // A name passed from acme to globex while one of acme's runs went on: its end
        // made acme's series again in place of globex's, and globex's counts restarted
        // from zero at each such turn.
        let all = Arc::new(PerWorkflow::<Hits>::default());
        all.get("globex", "shop").0.inc();
        all.get("globex", "shop").0.inc();
        all.get("acme", "shop").0.inc();
        all.get("globex", "shop").0.inc();
        let text = scrape(all.clone());
        assert!(
            text.contains(r#"tenant="globex",workflow="shop",status="2xx"} 3"#),
            "{text}"
        );
        // The scrape keeps the name's owner only.
        all.retain(|tenant, _| tenant == "globex");
        let text = scrape(all);
        assert!(!text.contains("acme"), "{text}");
        assert!(text.contains(r#"tenant="globex",workflow="shop",status="2xx"} 3"#));
    }

    #[test]
    fn unheld_series_go_at_the_next_scrape() {
        let all = Arc::new(PerWorkflow::<Hits>::dropping_unheld());
        let held = all.get("acme", "shop");
        drop(all.get("acme", "gone"));
        let text = scrape(all.clone());
        assert!(text.contains("shop") && !text.contains("gone"), "{text}");
        drop(held);
        assert!(!scrape(all).contains("shop"));
    }

    #[test]
    fn statuses_go_by_class() {
        let class = |status| STATUS_CLASSES[status_class(status)];
        assert_eq!(
            [class(101), class(200), class(302), class(404), class(599)],
            ["1xx", "2xx", "3xx", "4xx", "5xx"]
        );
        assert_eq!([class(0), class(99), class(600), class(999)], ["other"; 4]);
    }
}
