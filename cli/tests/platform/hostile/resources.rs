//! Host memory held through WASI resources: `resource-hog` keeps header fields, unsent
//! request bodies (each buffering what was written to it) and bare handles, which all
//! live in the host, outside the instance's memory limit. With Wasmtime's defaults one
//! such event held gigabytes until its deadline; now each is stopped at the instance's
//! handle limit long before it (one set of fields grown without end, at the fields
//! limit), the platform's memory grows by a bounded amount, and the other tenant is
//! served throughout.

use super::{Watch, assert_bystander_served, deploy_bystander};
use crate::support::{Platform, client, write_manifest};
use std::time::{Duration, Instant};

/// The hog's deadline: an attack that only its deadline stopped takes this long. Far
/// above the second or so the attacks take to reach the handle limit on a quiet
/// machine: they compute while another tenant is served, so they run at the lowest
/// priority, and a parallel test run's other processes (at normal priority) slowed
/// one past 5 s on a 2-core CI machine.
const DEADLINE: Duration = Duration::from_secs(60);

#[test]
fn a_guest_holding_host_memory_through_resources_is_stopped_at_its_limits() {
    let dir = faas_testing::temp_dir();
    let platform = Platform::start();
    deploy_bystander(&platform, dir.path());
    let extra = format!("timeout_ms = {}", DEADLINE.as_millis());
    let manifest = write_manifest(
        dir.path(),
        "hog",
        "hog",
        "resource-hog",
        "/resource-hog/...",
        &extra,
    );
    platform.deploy(&manifest);
    let resident_before = platform.memory("VmRSS");

    let watch = Watch::start(&platform);
    // Each attack with the limit that must stop it.
    let attacks: Vec<_> = [
        ("handles", "handle_limit", "--max-handles-per-instance"),
        ("headers", "handle_limit", "--max-handles-per-instance"),
        ("bodies", "handle_limit", "--max-handles-per-instance"),
        ("wide-headers", "fields_limit", "64 KiB"),
    ]
    .into_iter()
    .map(|(route, kind, named)| {
        let url = platform.at(&format!("/resource-hog/{route}"));
        std::thread::spawn(move || {
            let started = Instant::now();
            let response = client().get(url).send().unwrap();
            let status = response.status().as_u16();
            let body = response.text().unwrap();
            (route, kind, named, status, body, started.elapsed())
        })
    })
    .collect();
    for attack in attacks {
        let (route, kind, named, status, body, took) = attack.join().unwrap();
        assert_eq!(status, 500, "{route}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            error["error"]["kind"], kind,
            "{route} was not stopped by its limit: {body}"
        );
        assert!(body.contains(named), "{body}");
        assert!(took < DEADLINE, "{route} ran until its deadline: {took:?}");
    }
    watch.finish();
    assert_bystander_served(&platform);

    // Three instances' worth of handles at most (about 128 MiB each at the defaults),
    // where one unbounded attack held gigabytes.
    let grew = platform.memory("VmHWM").saturating_sub(resident_before);
    assert!(grew < 768 << 20, "the platform grew by {} MiB", grew >> 20);
}
