//! Spans leave a `faas up` process over OTLP/HTTP and reach a real OpenTelemetry
//! Collector (built by testing/otel/install-collector), continuing the caller's trace.

use std::ffi::OsStr;
use std::time::Duration;

use faas_testing::otel::{Collector, Span};

use crate::support::{Platform, client, repo};

/// The caller's trace and span, as a `traceparent` names them.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";
/// How long exported spans may take to reach the collector's file (the batch is sent
/// every 100 ms, the file flushed every 20 ms).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(30);

/// The `request` spans of the trace `trace_id`.
fn requests_in<'a>(spans: &'a [Span], trace_id: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|span| span.name == "request" && span.trace_id == trace_id)
        .collect()
}

#[test]
fn request_span_continues_the_callers_trace_at_a_real_collector() {
    let collector = Collector::start();
    let endpoint = collector.endpoint();
    let platform = Platform::start_with_env(
        &["--no-demo"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", OsStr::new(&endpoint)),
            ("OTEL_BSP_SCHEDULE_DELAY", OsStr::new("100")),
        ],
    );
    platform.deploy(&repo("functions/hello/workflow.toml"));

    let response = client()
        .get(platform.at("/hello"))
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"))
        .send()
        .expect("GET /hello");
    assert_eq!(
        response.status(),
        200,
        "{}",
        response.text().unwrap_or_default()
    );
    // A second request without a caller's trace starts one of its own.
    let response = client()
        .get(platform.at("/hello"))
        .send()
        .expect("GET /hello");
    assert_eq!(response.status(), 200);

    let spans = collector.wait_for_spans(EXPORT_TIMEOUT, |spans| {
        !requests_in(spans, TRACE_ID).is_empty()
            && spans
                .iter()
                .any(|span| span.name == "request" && span.trace_id != TRACE_ID)
    });
    let continued = requests_in(&spans, TRACE_ID);
    assert_eq!(
        continued.len(),
        1,
        "one request span in the caller's trace: {spans:#?}"
    );
    let request = continued[0];
    assert_eq!(request.parent_span_id, CALLER_SPAN_ID, "{request:?}");
    assert_ne!(request.span_id, CALLER_SPAN_ID, "{request:?}");
    assert_eq!(request.service, "faas", "{request:?}");
    assert_eq!(request.kind, "server", "{request:?}");
    assert_eq!(
        request.attributes.get("url.path").map(String::as_str),
        Some("/hello")
    );
    assert_eq!(
        request
            .attributes
            .get("http.response.status_code")
            .map(String::as_str),
        Some("200"),
        "{request:?}"
    );

    let own = spans
        .iter()
        .find(|span| span.name == "request" && span.trace_id != TRACE_ID)
        .expect("waited for it");
    assert_eq!(
        own.parent_span_id, "",
        "a request without traceparent is a root: {own:?}"
    );
}
