//! The gateway's server behaviour: HTTP/2, probes, metrics, shutdown, `faas up`.

use crate::support::{Platform, repo};
use std::time::Duration;

#[test]
fn http2_with_prior_knowledge_is_served() {
    let platform = Platform::start();
    platform.deploy(&repo("functions/hello/workflow.toml"));
    let h2 = reqwest::blocking::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let response = h2.get(platform.at("/hello?name=h2")).send().unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.text().unwrap(), "Hello, h2!\n");
}

#[test]
fn probes_answer_and_metrics_count_per_tenant_and_workflow_until_it_is_removed() {
    let data = faas_testing::temp_dir();
    // A compiled-code cache of its own, so that the first load is a cold one.
    let cache = data.path().join("cache");
    let args = ["--no-demo", "--cache-dir", cache.to_str().unwrap()];
    let mut platform = Platform::start_in(data.path(), &args);
    assert_eq!(platform.get("/healthz").status(), 200);
    assert_eq!(platform.get("/readyz").status(), 200);
    platform.deploy(&repo("functions/hello/workflow.toml"));
    for _ in 0..3 {
        assert_eq!(platform.get("/hello").status(), 200);
    }
    let hello = r#"tenant="demo",workflow="hello""#;
    let count = |platform: &Platform, name: &str, more: &str| {
        platform.metric(&format!("faas_{name}{{{hello}{more}}}"))
    };
    // Statuses go by class: a guest picks its status and must not mint series.
    assert_eq!(count(&platform, "requests_total", r#",status="2xx""#), 3.0);
    assert_eq!(count(&platform, "request_duration_seconds_count", ""), 3.0);
    // Each event got a fresh instance, whose slot was reset by the pages it wrote (a
    // hello writes few), and the component was compiled once.
    let function = r#",function="hello""#;
    let of_hello = |platform: &Platform, name: &str, label: &str, value: &str| {
        count(platform, name, &format!(r#"{function},{label}="{value}""#))
    };
    let starts = "instance_starts_total";
    assert_eq!(
        of_hello(&platform, starts, "slot_reset", "written-pages"),
        3.0
    );
    assert_eq!(of_hello(&platform, starts, "slot_reset", "whole"), 0.0);
    let compiles = |platform: &Platform, cache: &str| {
        of_hello(platform, "component_compiles_total", "cache", cache)
    };
    assert_eq!(compiles(&platform, "cold"), 1.0);
    assert_eq!(compiles(&platform, "warm"), 0.0);
    assert_eq!(platform.metric("faas_deployed_workflows"), 1.0);

    // Restarted on the same data, the saved deployment loads its compiled code.
    assert!(platform.terminate().success());
    let platform = Platform::start_in(data.path(), &args);
    assert_eq!(platform.get("/hello").status(), 200);
    assert_eq!(compiles(&platform, "warm"), 1.0);
    assert_eq!(compiles(&platform, "cold"), 0.0);
    assert_eq!(platform.metric("faas_deployed_workflows"), 1.0);

    // A removed workflow takes every one of its series with it, the worker's too (they
    // go once nothing holds the loaded workflow: this found a restored one kept loaded).
    assert!(platform.faas(&["rm", "hello"]).status.success());
    let metrics = platform.metrics();
    assert!(!metrics.contains(r#"workflow="hello""#), "{metrics}");
    assert!(metrics.contains("faas_deployed_workflows 0"), "{metrics}");
}

#[test]
fn shutdown_lets_requests_in_flight_finish() {
    let mut platform = Platform::start();
    platform.deploy(&repo("functions/misbehave/workflow.toml"));
    let url = platform.at("/misbehave/slow?ms=800");
    let in_flight = std::thread::spawn(move || crate::support::client().get(url).send());
    std::thread::sleep(Duration::from_millis(200));
    let status = platform.terminate();
    let response = in_flight
        .join()
        .unwrap()
        .expect("the request in flight completed");
    assert_eq!(response.status(), 200);
    assert!(status.success(), "faas up exited with {status}");
    assert!(
        platform.stdout().iter().any(|line| line == "shutting down"),
        "faas up announced the shutdown"
    );
}

#[test]
fn faas_up_serves_the_demo_workflows() {
    let platform = Platform::start_with(&[]);
    assert_eq!(
        platform.get("/hello?name=demo").text().unwrap(),
        "Hello, demo!\n"
    );
    assert!(
        platform
            .get("/wasi-hello")
            .text()
            .unwrap()
            .starts_with("Hello from a plain")
    );
    assert_eq!(platform.post("/counter/demo", "").text().unwrap(), "1\n");
    let counted: serde_json::Value = platform
        .post("/wordcount", "to be or not to be")
        .json()
        .unwrap();
    assert_eq!(counted["total"], 6);
}

#[test]
fn no_instance_outlives_its_request() {
    let platform = Platform::start();
    platform.deploy(&repo("functions/hello/workflow.toml"));
    platform.deploy(&repo("functions/wordcount/workflow.toml"));
    for _ in 0..5 {
        assert_eq!(platform.get("/hello").status(), 200);
        assert_eq!(platform.post("/wordcount", "a b").status(), 200);
    }
    // A response body may still be finishing when the client has it: allow a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = platform.metrics();
        if metrics.contains("faas_instances_active 0\n") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "instances left: {metrics}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_metric_the_grafana_dashboard_queries_is_served() {
    let platform = Platform::start();
    let metrics = platform.metrics();
    let mut queried = faas_testing::dashboard_families("faas_");
    assert!(queried.len() >= 10, "{queried:?}");
    // Embedded mode has no activator: its outcomes are checked in `activator.rs`; nor
    // an operator, whose series `faas_scheduler::operator::metrics` checks.
    queried.retain(|family| {
        family != "faas_activator_requests" && !family.starts_with("faas_operator_")
    });
    for family in queried {
        assert!(
            metrics.contains(&format!("# TYPE {family} ")),
            "the dashboard queries {family}, which /metrics does not have:\n{metrics}"
        );
    }
}
