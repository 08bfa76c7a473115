//! Logging and, when the standard `OTEL_EXPORTER_OTLP_*` variables ask for it, OpenTelemetry
//! trace export over OTLP (HTTP/protobuf).
//!
//! Export is off unless `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`
//! is set (and `OTEL_SDK_DISABLED` is not `true`): then no exporter, no processor thread and
//! no OpenTelemetry layer exist at all, so a process that exports nothing pays nothing for it.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::FilterExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The variables that switch export on; the SDK itself reads them (and the other standard
/// `OTEL_*` ones: headers, timeout, batch sizes, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`).
const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Keeps the tracer provider so that the spans still in its batch are sent before the
/// process exits; holds nothing when export is off.
#[must_use = "dropping the guard does not flush; call `shutdown` when the process ends"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends what is left in the batch and stops the exporter (a no-op when export is off).
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(err) = provider.shutdown()
        {
            eprintln!("warning: flushing OpenTelemetry spans: {err}");
        }
    }
}

/// Whether the environment asks for trace export.
fn export_configured() -> bool {
    let disabled = std::env::var("OTEL_SDK_DISABLED")
        .is_ok_and(|value| value.trim().eq_ignore_ascii_case("true"));
    !disabled
        && ENDPOINT_VARS
            .iter()
            .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}

/// Builds the exporting provider, named `service_name` unless `OTEL_SERVICE_NAME` says
/// otherwise.
fn provider(service_name: &str) -> anyhow::Result<SdkTracerProvider> {
    use anyhow::Context as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .context("configuring the OTLP span exporter from OTEL_EXPORTER_OTLP_*")?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service_name.to_owned());
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

/// Installs the process's `tracing` subscriber: log lines to stderr filtered by `FAAS_LOG`,
/// and, for a platform process (`service_name` given) whose environment configures OTLP,
/// an OpenTelemetry layer exporting its spans. W3C trace context is the propagator either
/// way, so a `traceparent` passes through a process that exports nothing.
pub fn init(service_name: Option<&str>) -> Telemetry {
    let chosen = tracing_subscriber::EnvFilter::try_from_env("FAAS_LOG").ok();
    // Unless the operator chose, the log prints events without the spans they happened
    // in: formatting each request's span (and each step's and host call's) for the log
    // cost a hello 1-14% of its throughput (`FAAS_LOG=info` against `warn`, alternating
    // runs of wrk on one core's worth of connections), and the lines a request can
    // cause name what they are about. `FAAS_LOG=info` prints the spans too.
    let spans_in_log = chosen.is_some();
    // `wasmtime_wasi_http` warns of each failed outbound request of a guest's, which a
    // guest makes as often as it likes; the guest is told, and the worker logs them at
    // `debug` (`worker/src/outbound.rs`).
    let filter = chosen.unwrap_or_else(|| {
        tracing_subscriber::EnvFilter::new(
            "info,cranelift=warn,wasmtime=warn,wasmtime_wasi_http=error",
        )
    });
    let events_or_chosen =
        tracing_subscriber::filter::filter_fn(move |metadata| spans_in_log || metadata.is_event())
            // Without a hint the pair has none, and every disabled `trace!` in hyper,
            // tokio and Wasmtime would be checked at run time instead of skipped by
            // the global maximum level.
            .with_max_level_hint(tracing_subscriber::filter::LevelFilter::TRACE);
    let filter = filter.and(events_or_chosen);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let (provider, failure) = match service_name.filter(|_| export_configured()) {
        None => (None, None),
        Some(name) => match provider(name) {
            Ok(provider) => (Some(provider), None),
            Err(err) => (None, Some(err)),
        },
    };
    // The log filter applies to the log lines only: spans go to the exporter whatever
    // `FAAS_LOG` says, so turning logs down does not cut traces.
    let otel = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("faas"))
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
    });
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .init();
    if let Some(err) = failure {
        tracing::warn!("OpenTelemetry export is off: {err:#}");
    }
    Telemetry { provider }
}
