//! Deploying, invoking, redeploying and removing workflows.

use crate::support::{Platform, error_of, repo, write_manifest};
use std::time::Duration;

#[test]
fn a_workflow_is_deployed_invoked_redeployed_and_removed_through_the_cli() {
    let platform = Platform::start();
    let out = platform.deploy(&repo("functions/hello/workflow.toml"));
    assert!(out.contains("deployed hello"), "{out}");
    assert!(out.contains(&format!("{}/hello", platform.url)), "{out}");

    assert_eq!(
        platform.get("/hello?name=Ada").text().unwrap(),
        "Hello, Ada!\n"
    );
    let invoked = platform.faas(&["invoke", "/hello?name=Bo"]);
    assert!(invoked.status.success());
    assert_eq!(String::from_utf8_lossy(&invoked.stdout), "Hello, Bo!\n");
    let by_name = platform.faas(&["invoke", "hello"]);
    assert_eq!(String::from_utf8_lossy(&by_name.stdout), "Hello, world!\n");

    let again = platform.deploy(&repo("functions/hello/workflow.toml"));
    assert!(again.contains("unchanged hello"), "{again}");
    assert!(again.contains("revision 1"), "{again}");

    let dir = faas_testing::temp_dir();
    let changed = write_manifest(
        dir.path(),
        "hello",
        "demo",
        "hello",
        "/hello",
        "config = { greeting = \"Bonjour\" }",
    );
    let redeployed = platform.deploy(&changed);
    assert!(redeployed.contains("deployed hello"), "{redeployed}");
    assert!(redeployed.contains("revision 2"), "{redeployed}");
    assert_eq!(
        platform.get("/hello?name=Ada").text().unwrap(),
        "Bonjour, Ada!\n"
    );

    let list = platform.faas(&["ls", "--output", "json"]);
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).expect("JSON list");
    assert_eq!(list["workflows"][0]["name"], "hello");
    assert_eq!(list["workflows"][0]["revision"], 2);
    assert_eq!(list["workflows"][0]["state"], "ready");

    let removed = platform.faas(&["rm", "hello"]);
    assert!(removed.status.success());
    let gone = platform.get("/hello");
    assert_eq!(gone.status(), 404);
    assert_eq!(error_of(gone)["kind"], "no_route");
    assert!(!platform.faas(&["status", "hello"]).status.success());
}

#[test]
fn requests_in_flight_finish_on_the_version_they_started_on() {
    let platform = Platform::start();
    let dir = faas_testing::temp_dir();
    let route = "/misbehave/...";
    let v1 = write_manifest(
        dir.path(),
        "slow",
        "t",
        "misbehave",
        route,
        "config = { label = \"v1\" }",
    );
    let v2 = write_manifest(
        dir.path(),
        "slow",
        "t",
        "misbehave",
        route,
        "config = { label = \"v2\" }",
    );
    platform.deploy(&v1);

    let slow_url = platform.at("/misbehave/slow?ms=1500");
    let in_flight = std::thread::spawn(move || {
        crate::support::client()
            .get(slow_url)
            .send()
            .unwrap()
            .text()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(300));
    platform.deploy(&v2);
    assert_eq!(
        platform.get("/misbehave/slow?ms=0").text().unwrap(),
        "slept 0 ms as v2\n",
        "new requests see the new version at once"
    );
    assert_eq!(in_flight.join().unwrap(), "slept 1500 ms as v1\n");
}

#[test]
fn every_request_gets_a_fresh_instance() {
    let platform = Platform::start();
    platform.deploy(&repo("functions/misbehave/workflow.toml"));
    for _ in 0..3 {
        assert_eq!(platform.get("/misbehave/count").text().unwrap(), "1\n");
    }
}

#[test]
fn a_plain_wasi_http_component_runs_unchanged() {
    let platform = Platform::start();
    platform.deploy(&repo("functions/wasi-hello/workflow.toml"));
    let body = platform.get("/wasi-hello").text().unwrap();
    assert_eq!(
        body,
        "Hello from a plain wasi:http component at /wasi-hello\n"
    );
}

#[test]
fn key_value_is_shared_within_a_tenant_and_isolated_between_tenants() {
    let platform = Platform::start();
    platform.deploy(&repo("functions/kv-counter/workflow.toml"));
    let dir = faas_testing::temp_dir();
    let other = write_manifest(
        dir.path(),
        "other-counter",
        "other",
        "kv-counter",
        "/other/...",
        "",
    );
    platform.deploy(&other);

    assert_eq!(platform.post("/counter/visits", "").text().unwrap(), "1\n");
    assert_eq!(
        platform.post("/counter/visits", "41").text().unwrap(),
        "42\n"
    );
    assert_eq!(platform.get("/other/visits").text().unwrap(), "0\n");
    assert_eq!(platform.post("/other/visits", "").text().unwrap(), "1\n");
    assert_eq!(platform.get("/counter/visits").text().unwrap(), "42\n");
}

#[test]
fn a_route_taken_by_another_workflow_is_refused() {
    let platform = Platform::start();
    platform.deploy(&repo("functions/hello/workflow.toml"));
    let dir = faas_testing::temp_dir();
    let thief = write_manifest(dir.path(), "thief", "demo", "hello", "/hello", "");
    let output = platform.faas(&["deploy", thief.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("route `/hello` is already served by workflow `hello`"),
        "{stderr}"
    );
}

#[test]
fn a_workflow_name_of_another_tenant_is_refused() {
    let platform = Platform::start();
    platform.deploy(&repo("functions/hello/workflow.toml"));
    let dir = faas_testing::temp_dir();
    let other = write_manifest(dir.path(), "hello", "mallory", "hello", "/hello", "");
    let output = platform.faas(&["deploy", other.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("belongs to tenant `demo`"), "{stderr}");
    assert_eq!(platform.get("/hello").text().unwrap(), "Hello, world!\n");
}
