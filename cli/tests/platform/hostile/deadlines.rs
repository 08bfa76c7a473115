//! Deadlines hold to the end of an event: after the response head too.

use super::{Watch, assert_bystander_served, deploy_bystander};
use crate::logs::wait_for_line;
use crate::support::{Platform, TOKEN, client, write_manifest};
use std::io::Read;
use std::time::{Duration, Instant};

/// The platform's `faas_instances_active` gauge.
fn active_instances(platform: &Platform) -> u64 {
    let metrics = platform.metrics();
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("faas_instances_active "))
        .expect("the gauge is exported")
        .trim()
        .parse()
        .unwrap()
}

/// Reads a lingering response: its head and first chunk arrive, then the body is cut
/// at the function's deadline. Returns when the body ended, and how.
fn read_lingering(platform: &Platform, path: &str) -> (Duration, std::io::Result<usize>) {
    let started = Instant::now();
    let mut response = client().get(platform.at(path)).send().unwrap();
    assert_eq!(response.status(), 200);
    let mut body = Vec::new();
    let read = response.read_to_end(&mut body);
    assert!(
        String::from_utf8_lossy(&body).starts_with("first chunk"),
        "{body:?}"
    );
    (started.elapsed(), read)
}

#[test]
fn an_instance_that_lingers_after_its_head_is_stopped_at_its_deadline() {
    let dir = faas_testing::temp_dir();
    // Four instance slots, so that lingering instances would soon starve everyone.
    let platform = Platform::start_with(&["--no-demo", "--max-instances", "4"]);
    deploy_bystander(&platform, dir.path());
    let manifest = write_manifest(
        dir.path(),
        "linger",
        "lingerer",
        "linger",
        "/linger/...",
        "timeout_ms = 500",
    );
    platform.deploy(&manifest);

    let watch = Watch::start(&platform);
    // Eight at once, each wanting to sleep a minute in the host after its head (or to
    // spin, where the epoch deadline applies): each is cut at its 500 ms deadline.
    let attackers: Vec<_> = (0..8)
        .map(|index| {
            let url = platform.url.clone();
            std::thread::spawn(move || {
                let path = if index % 2 == 0 {
                    "/linger/sleep?ms=60000"
                } else {
                    "/linger/spin"
                };
                let started = Instant::now();
                let mut response = client().get(format!("{url}{path}")).send().unwrap();
                let mut body = Vec::new();
                let _ = response.read_to_end(&mut body);
                (response.status(), started.elapsed())
            })
        })
        .collect();
    for attacker in attackers {
        let (status, elapsed) = attacker.join().unwrap();
        // A 503 is fair when the lingering tenant's own requests found every slot taken
        // by its other requests; none may last much past the deadline.
        assert!(status == 200 || status == 503, "{status}");
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    }
    let latencies = watch.finish();
    assert_bystander_served(&platform);
    let slowest = latencies.iter().max().unwrap();
    assert!(
        *slowest < Duration::from_secs(3),
        "bystander waited {slowest:?}"
    );

    // One more, watched closely: the body ends with an error soon after the deadline,
    // and no instance is left.
    let (elapsed, read) = read_lingering(&platform, "/linger/sleep?ms=60000");
    assert!(
        read.is_err(),
        "a body cut by the deadline must not look complete"
    );
    assert!(elapsed >= Duration::from_millis(500), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    // Its response went out as a 200: the tenant's logs say why its body was cut.
    let cut = "function `main` did not finish its response body within 500ms";
    let lines = wait_for_line(&platform.url, TOKEN, &["linger"], cut);
    let line = lines.iter().find(|line| line["text"] == cut).unwrap();
    assert_eq!(
        (&line["source"], &line["level"], &line["function"]),
        (&"platform".into(), &"error".into(), &"main".into()),
        "{line}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while active_instances(&platform) != 0 {
        assert!(
            Instant::now() < deadline,
            "an instance outlived its deadline"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
