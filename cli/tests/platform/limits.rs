//! A misbehaving guest fails its own request only.

use crate::support::{Platform, error_of, repo, write_manifest};
use std::time::{Duration, Instant};

fn misbehaving_platform() -> Platform {
    let platform = Platform::start();
    platform.deploy(&repo("functions/misbehave/workflow.toml"));
    platform
}

#[test]
fn a_trap_gives_500_naming_the_function_and_the_next_request_succeeds() {
    let platform = misbehaving_platform();
    let response = platform.get("/misbehave/trap");
    assert_eq!(response.status(), 500);
    let error = error_of(response);
    assert_eq!(error["kind"], "trap");
    assert_eq!(error["function"], "misbehave");
    assert_eq!(error["workflow"], "misbehave");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("unreachable"), "{message}");
    assert!(
        message.contains("trapping on purpose"),
        "the guest's panic message is kept: {message}"
    );
    assert_eq!(platform.get("/misbehave/ok").status(), 200);
}

#[test]
fn an_endless_loop_gives_504_within_its_deadline_and_the_next_request_succeeds() {
    let platform = misbehaving_platform();
    let started = Instant::now();
    let response = platform.get("/misbehave/loop");
    let elapsed = started.elapsed();
    assert_eq!(response.status(), 504);
    assert_eq!(error_of(response)["kind"], "timeout");
    // The manifest sets timeout_ms = 1000: interrupted after it, and not much later.
    assert!(elapsed >= Duration::from_millis(1000), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert_eq!(platform.get("/misbehave/ok").status(), 200);
}

#[test]
fn a_memory_hog_hits_its_memory_limit_and_the_next_request_succeeds() {
    let platform = misbehaving_platform();
    let response = platform.get("/misbehave/hog");
    assert_eq!(response.status(), 500);
    let error = error_of(response);
    assert_eq!(error["kind"], "memory_limit");
    assert!(error["message"].as_str().unwrap().contains("32 MiB"));
    assert_eq!(platform.get("/misbehave/ok").status(), 200);
}

#[test]
fn running_out_of_fuel_fails_the_event() {
    let platform = Platform::start();
    let dir = faas_testing::temp_dir();
    let manifest = write_manifest(
        dir.path(),
        "burner",
        "t",
        "misbehave",
        "/misbehave/...",
        "fuel = 1000000",
    );
    platform.deploy(&manifest);
    let response = platform.get("/misbehave/loop");
    assert_eq!(response.status(), 500);
    assert_eq!(error_of(response)["kind"], "out_of_fuel");
    assert_eq!(platform.get("/misbehave/ok").status(), 200);
}

#[test]
fn an_oversized_body_gets_413_and_a_body_within_the_limit_passes() {
    let platform = Platform::start_with(&["--no-demo", "--max-body-bytes", "1024"]);
    platform.deploy(&repo("functions/hello/workflow.toml"));
    let too_big = platform.post("/hello", vec![b'x'; 2048]);
    assert_eq!(too_big.status(), 413);
    assert_eq!(error_of(too_big)["kind"], "body_too_large");

    // Without a Content-Length the limit is enforced while reading.
    let chunked = reqwest::blocking::Body::new(std::io::Cursor::new(vec![b'x'; 4096]));
    let streamed = platform.post("/hello", chunked);
    assert_eq!(streamed.status(), 413);

    assert_eq!(platform.post("/hello", vec![b'x'; 512]).status(), 200);
}

#[test]
fn a_burst_beyond_the_instance_slots_waits_for_a_slot_instead_of_failing() {
    let platform = Platform::start_with(&["--no-demo", "--max-instances", "1"]);
    platform.deploy(&repo("functions/misbehave/workflow.toml"));
    let started = Instant::now();
    let burst: Vec<_> = (0..3)
        .map(|_| {
            let url = platform.at("/misbehave/slow?ms=300");
            std::thread::spawn(move || crate::support::client().get(url).send().unwrap().status())
        })
        .collect();
    for request in burst {
        assert_eq!(request.join().unwrap(), 200);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "one at a time"
    );
}

#[test]
fn an_event_that_gets_no_slot_within_its_deadline_gets_503() {
    let platform = Platform::start_with(&["--no-demo", "--max-instances", "1"]);
    platform.deploy(&repo("functions/misbehave/workflow.toml"));
    let dir = faas_testing::temp_dir();
    let quick = write_manifest(
        dir.path(),
        "quick",
        "t",
        "hello",
        "/quick",
        "timeout_ms = 200",
    );
    platform.deploy(&quick);
    let url = platform.at("/misbehave/slow?ms=900");
    let holder =
        std::thread::spawn(move || crate::support::client().get(url).send().unwrap().status());
    std::thread::sleep(Duration::from_millis(150));
    let response = platform.get("/quick");
    assert_eq!(response.status(), 503);
    let error = error_of(response);
    assert_eq!(error["kind"], "overloaded");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("instance slots stayed busy")
    );
    assert_eq!(holder.join().unwrap(), 200);
}

#[test]
fn hoarding_host_memory_through_regions_hits_the_memory_limit() {
    let platform = misbehaving_platform();
    let response = platform.get("/misbehave/hoard");
    assert_eq!(response.status(), 500);
    assert_eq!(error_of(response)["kind"], "memory_limit");
    assert_eq!(platform.get("/misbehave/ok").status(), 200);
}
