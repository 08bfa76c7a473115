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
fn probes_answer_and_metrics_count_requests_per_workflow() {
    let platform = Platform::start();
    assert_eq!(platform.get("/healthz").status(), 200);
    assert_eq!(platform.get("/readyz").status(), 200);
    platform.deploy(&repo("functions/hello/workflow.toml"));
    for _ in 0..3 {
        assert_eq!(platform.get("/hello").status(), 200);
    }
    let metrics = platform.get("/metrics").text().unwrap();
    assert!(
        metrics.contains(r#"faas_requests_total{workflow="hello",status="200"} 3"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"faas_request_duration_seconds_count{workflow="hello"} 3"#),
        "{metrics}"
    );
    assert!(metrics.contains("faas_deployed_workflows 1"), "{metrics}");
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
        let metrics = platform.get("/metrics").text().unwrap();
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
