//! A guest's text never makes lines of its own in the platform's log: a failure
//! message that carries the guest's output (a panic's lines) is printed escaped and
//! cut there, and the guest's log lines go to its tenant only (`faas logs`).

use super::{Watch, assert_bystander_served, deploy_bystander};
use crate::support::{Platform, repo};
use std::time::{Duration, Instant};

/// The line misbehave's `/misbehave/trap` panics with, on a line of its own in its
/// output.
const PANIC_LINE: &str = "trapping on purpose";

#[test]
fn a_guests_output_neither_forges_nor_floods_lines_of_the_platforms_log() {
    let dir = faas_testing::temp_dir();
    let platform = Platform::start_logging();
    deploy_bystander(&platform, dir.path());
    platform.deploy(&repo("functions/misbehave/workflow.toml"));
    let watch = Watch::start(&platform);
    const ROUNDS: usize = 20;
    for _ in 0..ROUNDS {
        assert_eq!(platform.get("/misbehave/trap").status(), 500);
        // 1000 log lines of 8 KiB each.
        assert_eq!(platform.get("/misbehave/shout").status(), 200);
    }
    watch.finish();

    // The operator is still told of each failure, in one line.
    let failed = |log: &[String]| {
        log.iter()
            .filter(|line| line.contains("function failed"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = platform.log();
        if failed(&log) >= ROUNDS || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(failed(&log), ROUNDS, "{log:#?}");
    for line in log.iter().filter(|line| line.contains("function failed")) {
        assert!(line.contains("trap"), "{line}");
        assert!(line.contains(PANIC_LINE), "the cause, escaped: {line}");
        assert!(line.len() < 1024, "{} bytes: {line}", line.len());
    }
    // The guest's text starts no line, and its log lines are not there.
    let forged: Vec<_> = log
        .iter()
        .filter(|line| line.starts_with(PANIC_LINE) || line.starts_with("note: run with"))
        .collect();
    assert!(forged.is_empty(), "lines the guest wrote: {forged:#?}");
    assert!(
        !log.iter().any(|line| line.contains(&"x".repeat(64))),
        "the guest's log lines reached the platform's log"
    );
    let bytes: usize = log.iter().map(String::len).sum();
    assert!(bytes < 64 << 10, "{bytes} bytes of platform log");
    assert_bystander_served(&platform);
}
