//! What a guest's response head does to the HTTP/2 connection a gateway shares with a
//! worker in services mode: every tenant's events to that worker travel on it, so a
//! head the connection cannot carry must fail its own event only. An informational
//! status (1xx) followed by a body is a connection error in HTTP/2, which failed every
//! event in flight on it; headers past HTTP/2's default 16 KiB list reset the stream,
//! though a guest may write 64 KiB of them, as embedded mode serves.

use crate::services::Services;
use crate::support::{Platform, deploy_at, write_manifest};
use std::time::Duration;

/// Deploys the attacker (`linger`, tenant `mallory`) and the bystander (`misbehave`,
/// whose `/misbehave/slow` holds its request in flight) through the gateway at `url`.
fn deploy_both(url: &str, dir: &std::path::Path) {
    let attacker = write_manifest(dir, "answers", "mallory", "linger", "/linger/...", "");
    deploy_at(url, &attacker);
    let bystander = write_manifest(
        dir,
        "patient",
        "bystander",
        "misbehave",
        "/misbehave/...",
        "",
    );
    deploy_at(url, &bystander);
}

#[test]
fn a_guests_informational_status_fails_its_own_event_and_no_one_elses() {
    let dir = faas_testing::temp_dir();
    let services = Services::start(&["w1"]);
    deploy_both(&services.url, dir.path());
    // In flight on the gateway's connection to w1 while the attack runs.
    let url = services.url.clone();
    let slow = std::thread::spawn(move || {
        let response = crate::support::client()
            .get(format!("{url}/misbehave/slow?ms=3000"))
            .timeout(Duration::from_secs(30))
            .send()
            .unwrap();
        (response.status(), response.text().unwrap_or_default())
    });
    std::thread::sleep(Duration::from_millis(500));
    for status in [100, 103, 199] {
        let response = services.get(&format!("/linger/answer?status={status}"));
        assert_eq!(response.status(), 500, "status {status}");
        let body = response.text().unwrap();
        assert!(
            body.contains("bad_response") && body.contains(&status.to_string()),
            "{body}"
        );
    }
    let (status, text) = slow.join().unwrap();
    assert_eq!(status, 200, "the bystander's request in flight: {text}");
    assert!(text.contains("slept 3000 ms"), "{text}");
    // A final status still goes through.
    let response = services.get("/linger/answer?status=201");
    assert_eq!(response.status(), 201);

    // Embedded mode refuses it the same way.
    let platform = Platform::start_with(&["--no-demo"]);
    deploy_both(&platform.url, dir.path());
    let response = platform.get("/linger/answer?status=103");
    assert_eq!(response.status(), 500);
    assert!(response.text().unwrap().contains("bad_response"));
}

#[test]
fn a_response_head_as_large_as_a_guest_may_write_crosses_the_workers_connection() {
    let dir = faas_testing::temp_dir();
    let services = Services::start(&["w1"]);
    deploy_both(&services.url, dir.path());
    let platform = Platform::start_with(&["--no-demo"]);
    deploy_both(&platform.url, dir.path());
    for url in [&services.url, &platform.url] {
        let response = crate::support::client()
            .get(format!("{url}/linger/answer?header-kib=40"))
            .send()
            .unwrap();
        assert_eq!(response.status(), 200, "{url}");
        assert!(response.headers().len() >= 40, "{url}");
        assert_eq!(response.text().unwrap(), "answered\n");
    }
}
