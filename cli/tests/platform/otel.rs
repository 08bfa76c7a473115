//! Spans leave the platform's processes over OTLP/HTTP and reach a real OpenTelemetry
//! Collector (built by testing/otel/install-collector), continuing the caller's trace:
//! from `faas up`, and across the gateway-to-worker hop in services mode.

use std::ffi::OsStr;
use std::time::Duration;

use faas_testing::otel::{Collector, Span, parents_arrived};

use crate::redis::{connect, ns, payloads, relay_manifest};
use crate::services::Services;
use crate::support::{Platform, TOKEN, client, deploy_at, repo};
use redis::Commands as _;

/// The caller's trace and span, as a `traceparent` names them.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";
/// How long exported spans may take to reach the collector's file (the batch is sent
/// every 100 ms, the file flushed every 20 ms).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(30);

/// A platform started with `args` that sends its spans to `collector`, a batch every
/// 100 ms.
fn exporting_to(collector: &Collector, args: &[&str]) -> Platform {
    let endpoint = collector.endpoint();
    Platform::start_with_env(
        args,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", OsStr::new(&endpoint)),
            ("OTEL_BSP_SCHEDULE_DELAY", OsStr::new("100")),
        ],
    )
}

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
    let platform = exporting_to(&collector, &["--no-demo"]);
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

/// `span` and its ancestors in `spans`, nearest first, as far as they are there.
fn ancestry<'a>(spans: &'a [Span], span: &'a Span) -> Vec<&'a Span> {
    let mut chain = vec![span];
    while let Some(parent) = spans
        .iter()
        .find(|candidate| candidate.span_id == chain[chain.len() - 1].parent_span_id)
    {
        chain.push(parent);
    }
    chain
}

#[test]
fn a_fan_out_run_is_one_trace_across_the_gateway_to_worker_hop() {
    let collector = Collector::start();
    let endpoint = collector.endpoint();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", OsStr::new(&endpoint)),
        ("OTEL_BSP_SCHEDULE_DELAY", OsStr::new("100")),
    ];
    let services = Services::start_with_env(&["w1"], &[], &[], &env);
    deploy_at(&services.url, &repo("functions/wordcount/workflow.toml"));
    // Enough words for the split step to fan out over several `count` branches.
    let text = "the quick brown fox jumps over the lazy dog ".repeat(40);
    let response = client()
        .post(format!("{}/wordcount", services.url))
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"))
        .body(text)
        .send()
        .expect("POST /wordcount");
    assert_eq!(response.status(), 200);
    let run_id = response.headers()["x-faas-run-id"]
        .to_str()
        .unwrap()
        .to_owned();

    let merged = |spans: &[Span]| {
        spans.iter().any(|span| {
            span.trace_id == TRACE_ID
                && span.name == "step"
                && span.attributes.get("step").map(String::as_str) == Some("merge")
        })
    };
    let spans = collector.wait_for_spans(EXPORT_TIMEOUT, |spans| {
        merged(spans)
            && !requests_in(spans, TRACE_ID).is_empty()
            && parents_arrived(spans, TRACE_ID, CALLER_SPAN_ID)
    });
    let trace: Vec<Span> = spans
        .into_iter()
        .filter(|span| span.trace_id == TRACE_ID)
        .collect();
    let named = |name: &str| -> Vec<&Span> { trace.iter().filter(|s| s.name == name).collect() };

    // The gateway's request continues the caller's trace and hands the run over.
    let [request] = named("request")[..] else {
        panic!("one request span: {trace:#?}")
    };
    assert_eq!(request.parent_span_id, CALLER_SPAN_ID);
    assert_eq!(request.service, "faas-gateway");
    let [handover] = named("handover")[..] else {
        panic!("one handover span: {trace:#?}")
    };
    assert_eq!(handover.kind, "client");
    assert_eq!(ancestry(&trace, handover)[1].span_id, request.span_id);
    // Across the hop, the worker's span is the hand-over's child.
    let [worker] = named("worker")[..] else {
        panic!("one worker span: {trace:#?}")
    };
    assert_eq!(worker.service, "faas-worker");
    assert_eq!(worker.parent_span_id, handover.span_id);
    let [run] = named("run")[..] else {
        panic!("one run span: {trace:#?}")
    };
    assert_eq!(run.attributes.get("run_id"), Some(&run_id), "{run:?}");
    assert!(
        ancestry(&trace, run)
            .iter()
            .any(|s| s.span_id == worker.span_id)
    );

    // Each `count` branch is a child of the run, with its step attempt inside.
    let branches = named("branch");
    assert!(branches.len() >= 2, "a fan-out: {trace:#?}");
    for branch in &branches {
        assert_eq!(branch.parent_span_id, run.span_id, "{branch:?}");
    }
    let counts: Vec<&Span> = named("step")
        .into_iter()
        .filter(|s| s.attributes.get("step").map(String::as_str) == Some("count"))
        .collect();
    assert_eq!(counts.len(), branches.len(), "{trace:#?}");
    for count in counts {
        let parents = ancestry(&trace, count);
        assert_eq!(parents[1].name, "branch", "{count:?}");
        // Every span of the run leads back, across the hop, to the caller's request.
        assert_eq!(parents.last().unwrap().span_id, request.span_id);
    }

    // A step reads its trace id: the merge step logs it beside its line.
    let lines = crate::logs::log_lines(&services.url, TOKEN, &["wordcount", "--run", &run_id]);
    assert!(
        lines.iter().any(|line| line["text"]
            .as_str()
            .unwrap()
            .ends_with(&format!("(trace {TRACE_ID})"))),
        "{lines:?}"
    );
}

#[test]
fn a_stream_entry_carries_its_trace_into_the_run_and_on_to_what_the_run_appends() {
    let collector = Collector::start();
    let redis = faas_testing::RedisServer::start();
    let platform = exporting_to(&collector, &["--no-demo", "--redis", &redis.url()]);
    let dir = faas_testing::temp_dir();
    let triggers = "[[triggers.stream]]\nstream = \"orders\"\nstep = \"relay\"\n";
    platform.deploy(&relay_manifest(dir.path(), "orders", triggers));
    // An entry appended by a producer that traces: its `traceparent` field.
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01");
    let _: String = connect(&redis)
        .xadd(
            ns("orders"),
            "*",
            &[("payload", "first"), ("traceparent", traceparent.as_str())],
        )
        .unwrap();
    payloads(&redis, &ns("orders:out"), 1, Duration::from_secs(30));

    let spans = collector.wait_for_spans(EXPORT_TIMEOUT, |spans| {
        spans
            .iter()
            .any(|span| span.trace_id == TRACE_ID && span.name == "append")
            && parents_arrived(spans, TRACE_ID, CALLER_SPAN_ID)
    });
    let trace: Vec<&Span> = spans.iter().filter(|s| s.trace_id == TRACE_ID).collect();
    let message = trace
        .iter()
        .find(|span| span.name == "message")
        .unwrap_or_else(|| panic!("a message span: {trace:#?}"));
    assert_eq!(message.parent_span_id, CALLER_SPAN_ID);
    assert_eq!(message.kind, "consumer");
    assert_eq!(
        message
            .attributes
            .get("messaging.destination.name")
            .map(String::as_str),
        Some("orders")
    );
    let append = trace.iter().find(|span| span.name == "append").unwrap();
    assert_eq!(append.kind, "producer");

    // The entry the run appended carries the run's trace for its own consumers.
    let out: redis::streams::StreamRangeReply =
        connect(&redis).xrange_all(ns("orders:out")).unwrap();
    let carried: String = out.ids[0].get("traceparent").expect("a traceparent field");
    assert!(carried.starts_with(&format!("00-{TRACE_ID}-")), "{carried}");
    assert!(
        carried.contains(&append.span_id),
        "{carried} names the append span"
    );
}

#[test]
fn a_region_handoff_is_a_span_of_the_consuming_step_saying_how_it_crossed() {
    let collector = Collector::start();
    // The example's instances may have 1100 MiB.
    let platform = exporting_to(&collector, &["--no-demo", "--max-memory-mb", "1100"]);
    let dir = faas_testing::temp_dir();
    crate::regions::deploy_example(&platform, dir.path(), &[]);
    // Above the map threshold: mapped, not copied.
    let len = (4 << 20) + 1;
    crate::regions::transfer(&platform, "/regions", len);

    let spans = collector.wait_for_spans(EXPORT_TIMEOUT, |spans| {
        spans.iter().any(|handoff| {
            handoff.name == "region handoff" && parents_arrived(spans, &handoff.trace_id, "")
        })
    });
    let handoff = spans
        .iter()
        .find(|span| span.name == "region handoff")
        .expect("waited for it");
    assert_eq!(
        handoff
            .attributes
            .get("faas.region.handoff")
            .map(String::as_str),
        Some("mapped"),
        "{handoff:?}"
    );
    let bytes: usize = handoff.attributes["faas.region.bytes"].parse().unwrap();
    assert!(bytes > len, "the value and its Karmem header: {handoff:?}");
    let step = spans
        .iter()
        .find(|span| span.span_id == handoff.parent_span_id)
        .unwrap_or_else(|| panic!("the handoff's parent: {spans:#?}"));
    assert_eq!(step.name, "step");
    assert_eq!(
        step.attributes.get("step").map(String::as_str),
        Some("consume")
    );
}

#[test]
fn a_clients_long_path_and_trace_state_are_not_copied_into_every_span() {
    // Any client could send a 60 KB path, or a 60 KB `tracestate`, which was copied
    // into the request's span, and the trace state into every span of the trace (the
    // workers' and the guests' host calls' too), each held in the exporter's queue and
    // sent with every batch: everyone's traces were then dropped with the batches.
    let collector = Collector::start();
    let platform = exporting_to(&collector, &["--no-demo"]);
    let dir = faas_testing::temp_dir();
    let manifest = crate::support::write_manifest(
        dir.path(),
        "prefix",
        "demo",
        "misbehave",
        "/misbehave/...",
        "",
    );
    platform.deploy(&manifest);
    let long = "a".repeat(16 << 10);
    let state = (0..2000)
        .map(|index| format!("k{index}=v{index}"))
        .collect::<Vec<_>>()
        .join(",");
    let short_state = "vendor=opaque";
    for trace_state in [state.as_str(), short_state] {
        let response = client()
            .get(platform.at(&format!("/misbehave/{long}")))
            .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"))
            .header("tracestate", trace_state)
            .send()
            .expect("GET a long path");
        assert!(response.status().as_u16() < 500, "{:?}", response.text());
    }
    let spans = collector.wait_for_spans(EXPORT_TIMEOUT, |spans| {
        requests_in(spans, TRACE_ID).len() == 2
    });
    for span in &spans {
        for (key, value) in &span.attributes {
            assert!(
                value.len() <= 256,
                "{}: {key} is {} bytes",
                span.name,
                value.len()
            );
        }
        assert!(
            span.trace_state.len() <= 512,
            "{}: {}",
            span.name,
            span.trace_state.len()
        );
    }
    let requests = requests_in(&spans, TRACE_ID);
    assert!(
        requests.iter().any(|span| span.trace_state == short_state),
        "a short trace state still goes on: {requests:#?}"
    );
    assert!(
        requests
            .iter()
            .all(|span| span.attributes["url.path"].starts_with("/misbehave/aaa")),
        "{requests:#?}"
    );
}
