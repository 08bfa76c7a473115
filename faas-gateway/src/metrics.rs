//! Prometheus metrics: requests, runs, steps, failures, held events and stream
//! triggers per tenant and workflow ([`WorkflowMetrics`]), and the gateway's own
//! gauges. In embedded mode the in-process worker's series are served here too.
//!
//! A workflow's series go with it: each scrape first drops those of workflows the
//! registry no longer has (see `faas_invoke::metrics` for the cardinality rules).

use crate::registry::Deployment;
use faas_invoke::metrics::{
    Descriptor, PerWorkflow, STATUS_CLASSES, SeriesEncoder, WorkflowSeries, status_class,
};
use faas_invoke::{RunRecord, RunStatus};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActivatorLabels {
    outcome: String,
}

/// The gateway's metrics and the registry that exposes them.
pub(crate) struct Metrics {
    registry: Registry,
    workflows: Arc<PerWorkflow<WorkflowMetrics>>,
    deployed: Gauge,
    instances: Gauge,
    connections_refused: Counter,
    requests_refused: Counter,
    deploys_refused: Counter,
    activator_requests: Family<ActivatorLabels, Counter>,
}

fn latency_histogram() -> Histogram {
    // 50 us to ~26 s: covers a warm hello world and a function at its deadline.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("faas");
        let workflows = Arc::new(PerWorkflow::default());
        registry.register_collector(Box::new(workflows.clone()));
        let deployed = Gauge::default();
        registry.register(
            "deployed_workflows",
            "Workflows currently deployed",
            deployed.clone(),
        );
        let instances = Gauge::default();
        registry.register(
            "instances_active",
            "Wasm instances alive now (0 when idle: scale-to-zero)",
            instances.clone(),
        );
        let connections_refused = Counter::default();
        registry.register(
            "connections_refused",
            "Connections closed on accept because their client address, or the gateway, \
             held as many as it may",
            connections_refused.clone(),
        );
        let requests_refused = Counter::default();
        registry.register(
            "requests_refused",
            "Requests answered 429 or 503 before they were handled because their client \
             address, or the gateway, had as many in flight as it may \
             (--max-requests-per-client, --max-requests)",
            requests_refused.clone(),
        );
        let deploys_refused = Counter::default();
        registry.register(
            "deploys_refused",
            "Deploys refused before their upload was read because their tenant had as \
             many in the gateway as it may (--max-deploys-per-tenant)",
            deploys_refused.clone(),
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
            workflows,
            deployed,
            instances,
            connections_refused,
            requests_refused,
            deploys_refused,
            activator_requests,
        }
    }

    /// Serves the in-process worker's series (embedded mode) with the gateway's.
    pub(crate) fn add_worker(&mut self, collector: Box<dyn Collector>) {
        self.registry.register_collector(collector);
    }

    /// The series of `workflow` of `tenant`.
    pub(crate) fn workflow(&self, tenant: &str, workflow: &str) -> Arc<WorkflowMetrics> {
        self.workflows.get(tenant, workflow)
    }

    /// The series of `deployment`'s workflow.
    pub(crate) fn of(&self, deployment: &Deployment) -> Arc<WorkflowMetrics> {
        self.workflow(&deployment.workflow.tenant, &deployment.workflow.name)
    }

    /// Counts one event the activator settled with `outcome`.
    pub(crate) fn activator_outcome(&self, outcome: &str) {
        self.activator_requests
            .get_or_create(&ActivatorLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Counts a connection refused by the connection limits.
    pub(crate) fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// Counts a request refused by the limits on requests in flight.
    pub(crate) fn request_refused(&self) {
        self.requests_refused.inc();
    }

    /// Counts a deploy refused by the tenant's limit of deploys at once.
    pub(crate) fn deploy_refused(&self) {
        self.deploys_refused.inc();
    }

    /// Records how many workflows are deployed (at each scrape).
    pub(crate) fn set_workflows(&self, count: usize) {
        self.deployed.set(count as i64);
    }

    /// Records how many instances are alive.
    pub(crate) fn set_instances(&self, count: usize) {
        self.instances.set(count as i64);
    }

    /// The OpenMetrics text exposition, without the series of workflows for which
    /// `deployed(tenant, workflow)` no longer holds.
    pub(crate) fn encode(&self, deployed: impl Fn(&str, &str) -> bool) -> String {
        self.workflows.retain(deployed);
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// How long before a tenant's scrape the render it is answered with may have begun.
/// Prometheus scrapes every 15 s or more; without this, a tenant scraping in a loop had
/// the gateway render every series of every tenant back to back, a core's worth.
pub(crate) const TENANT_SCRAPE_AGE: Duration = Duration::from_secs(1);

/// The exposition as last rendered. A tenant decides how many series there are (its
/// workflows' steps and functions: hundreds of thousands of lines), and each render
/// holds all of them and takes a core for as long as it writes them: so one render
/// runs at a time, off the async threads, and the scrapes that waited for it take its
/// text instead of each making its own. A text answers the operator's scrapes that
/// arrived before its render started, so each sees what happened before it asked, and
/// tenants' scrapes up to [`TENANT_SCRAPE_AGE`] later. A tenant's part of a text
/// ([`of_tenant`], a pass over all of it) is taken once per render, also off the async
/// threads: many scrapes at once made as many passes on the threads that serve
/// requests. A text no later scrape may take is dropped ([`Exposition::forget`]): kept
/// until the next scrape, it held memory at rest in proportion to the series, tens of
/// MB for a large tenant, and 0.4 MiB for 100 workflows of one step.
#[derive(Default)]
pub(crate) struct Exposition {
    last: Arc<tokio::sync::Mutex<Option<Rendered>>>,
}

/// One render, and the tenants' parts of it taken so far.
struct Rendered {
    started: tokio::time::Instant,
    text: Arc<String>,
    tenants: HashMap<String, Arc<String>>,
}

impl Exposition {
    /// The text `render` makes, or that of a recent enough render (see the type), for
    /// the operator (`tenant` is `None`) or that tenant's part of it; `None` if
    /// `render` panicked.
    pub(crate) async fn text(
        &self,
        render: impl FnOnce() -> String + Send + 'static,
        tenant: Option<&str>,
    ) -> Option<Arc<String>> {
        let arrived = tokio::time::Instant::now();
        let oldest = match tenant {
            None => arrived,
            Some(_) => arrived.checked_sub(TENANT_SCRAPE_AGE).unwrap_or(arrived),
        };
        let mut last = self.last.lock().await;
        let rendered = match last.take() {
            Some(rendered) if rendered.started >= oldest => rendered,
            _ => {
                let started = tokio::time::Instant::now();
                let text = Arc::new(tokio::task::spawn_blocking(render).await.ok()?);
                self.forget(started);
                Rendered {
                    started,
                    text,
                    tenants: HashMap::new(),
                }
            }
        };
        let rendered = last.insert(rendered);
        let Some(tenant) = tenant else {
            return Some(rendered.text.clone());
        };
        if let Some(part) = rendered.tenants.get(tenant) {
            return Some(part.clone());
        }
        let (text, owned) = (rendered.text.clone(), tenant.to_owned());
        let part = tokio::task::spawn_blocking(move || of_tenant(&text, &owned));
        let part = Arc::new(part.await.ok()?);
        rendered.tenants.insert(tenant.to_owned(), part.clone());
        Some(part)
    }

    /// Drops the render that began at `started`, with its tenants' parts, once it is
    /// [`TENANT_SCRAPE_AGE`] old, when no scrape that arrives from then on may take it.
    /// The scrapes that arrived before it began and wait for the lock still take it:
    /// they queue for the lock ahead of this (tokio's lock is first come, first
    /// served).
    fn forget(&self, started: tokio::time::Instant) {
        let last = self.last.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(started + TENANT_SCRAPE_AGE).await;
            let mut last = last.lock().await;
            if last
                .as_ref()
                .is_some_and(|rendered| rendered.started == started)
            {
                *last = None;
            }
        });
    }
}

/// A rendered exposition as the bytes of a body, without a copy.
pub(crate) struct Text(pub Arc<String>);

impl AsRef<[u8]> for Text {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The part of an exposition (`text`, as [`Metrics::encode`] writes it) that `tenant`
/// may read: the metadata lines (`# HELP`, `# TYPE`, `# EOF`) and the samples labelled
/// `tenant="<tenant>"`. Process-wide series, which count every tenant's work, are left
/// out with the other tenants'.
///
/// A label value cannot forge the pair: quotes in values are escaped
/// (`faas_invoke::metrics::SeriesEncoder`).
pub(crate) fn of_tenant(text: &str, tenant: &str) -> String {
    let pair = format!("tenant=\"{tenant}\"");
    let labelled = |line: &str| {
        let Some((_, rest)) = line.split_once('{') else {
            return false;
        };
        let labels = rest.rsplit_once('}').map_or(rest, |(labels, _)| labels);
        labels.split(',').any(|label| label == pair)
    };
    let mut kept = String::with_capacity(text.len() / 2);
    for line in text
        .lines()
        .filter(|line| line.starts_with('#') || labelled(line))
    {
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// Outcomes of runs and steps, the label values of their counters.
const OUTCOMES: [&str; 2] = ["succeeded", "failed"];

/// One workflow's series on the gateway.
#[derive(Debug)]
pub(crate) struct WorkflowMetrics {
    /// Invocations by status class ([`STATUS_CLASSES`]).
    requests: [Counter; STATUS_CLASSES.len()],
    latency: Histogram,
    /// Function failures by function and cause (a `FailureKind`).
    failures: Mutex<BTreeMap<(String, &'static str), Counter>>,
    /// Runs by outcome ([`OUTCOMES`]).
    runs: [Counter; OUTCOMES.len()],
    run_latency: Histogram,
    steps: Mutex<BTreeMap<String, StepMetrics>>,
    held: Gauge,
    /// Entries moved to a dead-letter stream, by the trigger's stream.
    dead_letters: Mutex<BTreeMap<String, Counter>>,
    /// Entries of a trigger's group not yet delivered or not yet acknowledged.
    stream_lag: Mutex<BTreeMap<String, Gauge>>,
}

/// One step's series.
#[derive(Debug, Clone)]
struct StepMetrics {
    duration: Histogram,
    attempts: Counter,
    /// By outcome ([`OUTCOMES`]).
    outcomes: [Counter; OUTCOMES.len()],
}

impl WorkflowMetrics {
    /// Counts one invocation and its latency.
    pub(crate) fn observe_request(&self, status: u16, elapsed: Duration) {
        self.requests[status_class(status)].inc();
        self.latency.observe(elapsed.as_secs_f64());
    }

    /// Counts one failure of `function` (empty when the failure names none).
    pub(crate) fn observe_failure(&self, function: &str, cause: &'static str) {
        lock(&self.failures)
            .entry((function.to_owned(), cause))
            .or_default()
            .inc();
    }

    /// Counts one run and each of its steps.
    pub(crate) fn observe_run(&self, run: &RunRecord) {
        let outcome = usize::from(run.status != RunStatus::Succeeded);
        self.runs[outcome].inc();
        self.run_latency.observe(run.duration_ms / 1e3);
        let mut steps = lock(&self.steps);
        for step in &run.steps {
            let series = steps
                .entry(step.step.clone())
                .or_insert_with(|| StepMetrics {
                    duration: latency_histogram(),
                    attempts: Counter::default(),
                    outcomes: Default::default(),
                });
            series.duration.observe(step.duration_ms / 1e3);
            series.attempts.inc_by(u64::from(step.attempts));
            series.outcomes[usize::from(!step.succeeded)].inc();
        }
    }

    /// Counts an event starting (`+1`) or ending (`-1`) its wait in the activator.
    pub(crate) fn held(&self, delta: i64) {
        self.held.inc_by(delta);
    }

    /// Counts one entry of `stream`'s trigger moved to its dead-letter stream.
    pub(crate) fn dead_lettered(&self, stream: &str) {
        lock(&self.dead_letters)
            .entry(stream.to_owned())
            .or_default()
            .inc();
    }

    /// Records how many entries `stream`'s trigger has not run yet.
    pub(crate) fn set_stream_lag(&self, stream: &str, entries: u64) {
        lock(&self.stream_lag)
            .entry(stream.to_owned())
            .or_default()
            .set(i64::try_from(entries).unwrap_or(i64::MAX));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

const fn metric(name: &'static str, help: &'static str, metric_type: MetricType) -> Descriptor {
    Descriptor {
        name,
        help,
        metric_type,
    }
}

impl WorkflowSeries for WorkflowMetrics {
    const METRICS: &'static [Descriptor] = &[
        metric(
            "requests",
            "Invocations by response status class (2xx, 4xx, ...)",
            MetricType::Counter,
        ),
        metric(
            "request_duration_seconds",
            "Time from request to response head",
            MetricType::Histogram,
        ),
        metric(
            "function_failures",
            "Invocations a function failed, by cause (trap, timeout, memory_limit, ...; \
             body_cut: its response body ended with an error after its head)",
            MetricType::Counter,
        ),
        metric("runs", "Workflow runs by outcome", MetricType::Counter),
        metric(
            "run_duration_seconds",
            "Duration of whole workflow runs",
            MetricType::Histogram,
        ),
        metric(
            "step_duration_seconds",
            "Duration of one step in one branch, retries included",
            MetricType::Histogram,
        ),
        metric(
            "steps",
            "Step invocations (per branch) by outcome",
            MetricType::Counter,
        ),
        metric(
            "step_attempts",
            "Step attempts, retries included",
            MetricType::Counter,
        ),
        metric(
            "activator_held",
            "Events held now because their workflow has no ready replica (services mode)",
            MetricType::Gauge,
        ),
        metric(
            "dead_letters",
            "Stream entries moved to the trigger's dead-letter stream",
            MetricType::Counter,
        ),
        metric(
            "stream_lag_entries",
            "Entries of a stream trigger's group not yet delivered or not yet \
             acknowledged, sampled about once a second while consuming",
            MetricType::Gauge,
        ),
    ];

    fn new() -> Self {
        Self {
            requests: Default::default(),
            latency: latency_histogram(),
            failures: Mutex::default(),
            runs: Default::default(),
            run_latency: latency_histogram(),
            steps: Mutex::default(),
            held: Gauge::default(),
            dead_letters: Mutex::default(),
            stream_lag: Mutex::default(),
        }
    }

    fn encode(&self, metric: &str, out: &mut SeriesEncoder<'_, '_>) -> fmt::Result {
        let steps = || lock(&self.steps).clone();
        match metric {
            "requests" => {
                for (counter, class) in self.requests.iter().zip(STATUS_CLASSES) {
                    if counter.get() > 0 {
                        out.series(counter, &[("status", class)])?;
                    }
                }
            }
            "request_duration_seconds" => out.series(&self.latency, &[])?,
            "function_failures" => {
                for ((function, cause), counter) in lock(&self.failures).iter() {
                    out.series(counter, &[("function", function), ("cause", cause)])?;
                }
            }
            "runs" => {
                for (counter, outcome) in self.runs.iter().zip(OUTCOMES) {
                    if counter.get() > 0 {
                        out.series(counter, &[("status", outcome)])?;
                    }
                }
            }
            "run_duration_seconds" => out.series(&self.run_latency, &[])?,
            "step_duration_seconds" => {
                for (step, series) in steps() {
                    out.series(&series.duration, &[("step", &step)])?;
                }
            }
            "steps" => {
                for (step, series) in steps() {
                    for (counter, outcome) in series.outcomes.iter().zip(OUTCOMES) {
                        if counter.get() > 0 {
                            out.series(counter, &[("step", &step), ("outcome", outcome)])?;
                        }
                    }
                }
            }
            "step_attempts" => {
                for (step, series) in steps() {
                    out.series(&series.attempts, &[("step", &step)])?;
                }
            }
            "activator_held" => out.series(&self.held, &[])?,
            "dead_letters" => {
                for (stream, counter) in lock(&self.dead_letters).iter() {
                    out.series(counter, &[("stream", stream)])?;
                }
            }
            "stream_lag_entries" => {
                for (stream, gauge) in lock(&self.stream_lag).iter() {
                    out.series(gauge, &[("stream", stream)])?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn scrapes_waiting_for_a_render_share_it_and_a_later_one_renders_again() {
        let exposition = Arc::new(Exposition::default());
        // Held while the scrapes arrive, as a render under way would.
        let busy = exposition.last.lock().await;
        let renders = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let scrape = || {
            let (exposition, renders) = (exposition.clone(), renders.clone());
            tokio::spawn(async move {
                exposition
                    .text(
                        move || {
                            renders.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(100));
                            "text".to_owned()
                        },
                        None,
                    )
                    .await
            })
        };
        let scrapes: Vec<_> = (0..8).map(|_| scrape()).collect();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        drop(busy);
        for scrape in scrapes {
            assert_eq!(scrape.await.unwrap().unwrap().as_str(), "text");
        }
        assert_eq!(renders.load(std::sync::atomic::Ordering::SeqCst), 1);
        // One that comes after the render started sees what happened since.
        scrape().await.unwrap().unwrap();
        assert_eq!(renders.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    /// A tenant scraping in a loop, many scrapes at once: one render and one pass for
    /// its part until the render is [`TENANT_SCRAPE_AGE`] old, where each scrape made a
    /// render of its own and a pass on the async threads.
    #[tokio::test]
    async fn a_tenants_scrapes_share_a_recent_render_and_its_part_of_it() {
        let exposition = Arc::new(Exposition::default());
        let renders = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let scrape = |tenant: Option<&'static str>| {
            let (exposition, renders) = (exposition.clone(), renders.clone());
            async move {
                let render = move || {
                    let n = renders.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    format!("# EOF\nx{{tenant=\"a\"}} {n}\nx{{tenant=\"b\"}} {n}\n")
                };
                exposition.text(render, tenant).await.unwrap()
            }
        };
        let rendered = || renders.load(std::sync::atomic::Ordering::SeqCst);
        let first = scrape(Some("a")).await;
        assert_eq!(first.as_str(), "# EOF\nx{tenant=\"a\"} 0\n");
        for _ in 0..50 {
            let again = scrape(Some("a")).await;
            assert!(Arc::ptr_eq(&first, &again), "the part is taken once");
        }
        assert_eq!(
            scrape(Some("b")).await.as_str(),
            "# EOF\nx{tenant=\"b\"} 0\n"
        );
        assert_eq!(rendered(), 1);
        // The operator sees what happened before it asked.
        assert!(scrape(None).await.contains("x{tenant=\"b\"} 1"));
        assert_eq!(rendered(), 2);
        tokio::time::sleep(TENANT_SCRAPE_AGE + Duration::from_millis(1)).await;
        assert_eq!(
            scrape(Some("a")).await.as_str(),
            "# EOF\nx{tenant=\"a\"} 2\n"
        );
        assert_eq!(rendered(), 3);
    }

    /// Between scrapes (Prometheus's are 15 s or more apart) the gateway holds no text:
    /// one kept until the next scrape held memory at rest as large as all the series.
    #[tokio::test]
    async fn a_render_no_later_scrape_may_take_is_not_kept() {
        let exposition = Exposition::default();
        let text = exposition.text(|| "# EOF\n".to_owned(), Some("a")).await;
        assert_eq!(text.unwrap().as_str(), "# EOF\n");
        assert!(
            exposition.last.lock().await.is_some(),
            "kept for later scrapes"
        );
        tokio::time::sleep(TENANT_SCRAPE_AGE + Duration::from_millis(200)).await;
        assert!(
            exposition.last.lock().await.is_none(),
            "dropped once too old"
        );
    }

    use super::*;
    use faas_invoke::StepRecord;

    #[test]
    fn a_tenant_reads_its_own_series_only() {
        let metrics = Metrics::new();
        metrics
            .workflow("acme", "shop")
            .observe_request(200, Duration::from_millis(3));
        metrics
            .workflow("acme-2", "rival")
            .observe_request(200, Duration::from_millis(3));
        // A stream name is the tenant's to choose: it cannot pass for another tenant.
        metrics
            .workflow("evil", "w")
            .dead_lettered(r#"x",tenant="acme"#);
        metrics.connection_refused();
        let text = metrics.encode(|_, _| true);
        assert!(text.contains("rival") && text.contains("faas_connections_refused_total 1"));

        let own = of_tenant(&text, "acme");
        let samples: Vec<&str> = own.lines().filter(|line| !line.starts_with('#')).collect();
        assert!(!samples.is_empty());
        for sample in &samples {
            assert!(
                sample.contains(r#"tenant="acme",workflow="shop""#),
                "{sample}"
            );
        }
        assert!(
            samples
                .iter()
                .any(|line| line.starts_with("faas_request_duration_seconds_bucket{le="))
        );
        for absent in [
            "rival",
            "acme-2",
            "evil",
            "faas_connections_refused_total 1",
        ] {
            assert!(!own.contains(absent), "{absent} in\n{own}");
        }
        assert!(own.ends_with("# EOF\n"), "{own}");
    }

    #[test]
    fn every_workflow_metric_is_written_with_its_tenant_and_workflow() {
        let metrics = Metrics::new();
        let series = metrics.workflow("acme", "shop");
        series.observe_request(204, Duration::from_millis(3));
        series.observe_request(777, Duration::from_millis(3));
        series.observe_failure("pay", "trap");
        series.observe_run(&RunRecord {
            run_id: "r1".into(),
            workflow: "shop".into(),
            started_at_ms: 0,
            duration_ms: 12.0,
            status: RunStatus::Failed,
            error: None,
            steps: vec![StepRecord {
                step: "pay".into(),
                branch: 0,
                attempts: 3,
                duration_ms: 10.0,
                succeeded: false,
                error: None,
                worker: None,
                handoff: None,
            }],
            omitted_steps: 0,
        });
        series.held(1);
        series.dead_lettered("orders");
        series.set_stream_lag("orders", 7);
        let text = metrics.encode(|_, _| true);
        for metric in WorkflowMetrics::METRICS {
            let sample = format!("faas_{}", metric.name);
            assert!(
                text.lines().any(|line| line.starts_with(&sample)
                    && line.contains(r#"tenant="acme",workflow="shop""#)),
                "no {sample} series in {text}"
            );
        }
        for line in [
            r#"faas_requests_total{tenant="acme",workflow="shop",status="2xx"} 1"#,
            r#"faas_requests_total{tenant="acme",workflow="shop",status="other"} 1"#,
            r#"faas_function_failures_total{tenant="acme",workflow="shop",function="pay",cause="trap"} 1"#,
            r#"faas_runs_total{tenant="acme",workflow="shop",status="failed"} 1"#,
            r#"faas_steps_total{tenant="acme",workflow="shop",step="pay",outcome="failed"} 1"#,
            r#"faas_step_attempts_total{tenant="acme",workflow="shop",step="pay"} 3"#,
            r#"faas_activator_held{tenant="acme",workflow="shop"} 1"#,
            r#"faas_dead_letters_total{tenant="acme",workflow="shop",stream="orders"} 1"#,
            r#"faas_stream_lag_entries{tenant="acme",workflow="shop",stream="orders"} 7"#,
        ] {
            assert!(text.contains(line), "no `{line}` in {text}");
        }
        // Gone from the registry, gone from the scrape.
        assert!(!metrics.encode(|_, _| false).contains("shop"));
    }
}
