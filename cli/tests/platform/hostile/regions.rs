//! Regions as a weapon: pages placed twice, host writes into read-only pages, memory
//! files pinned past the memory limit, and floods of regions.

use super::{Watch, assert_bystander_served, deploy_bystander};
use crate::regions::{
    MEMORIES, deploy_example, deploy_manifest, deploy_probe, expected_sum, pairs, probe_as, start,
    transfer,
};
use crate::support::error_of;

/// Posts a run of `len` bytes to `route` and returns its error message, asserting that
/// the consumer step failed (and nothing else did).
fn consumer_failure(platform: &crate::support::Platform, route: &str, len: usize) -> String {
    let error = error_of(platform.post(route, len.to_string()));
    assert_eq!(error["kind"], "step_failed", "{len}: {error}");
    let message = error["message"].as_str().unwrap().to_owned();
    assert!(message.contains("`consume`"), "{len}: {message}");
    message
}

#[test]
fn placing_a_read_only_input_again_over_its_pages_fails_that_step_only() {
    let dir = faas_testing::temp_dir();
    let platform = start(&[]);
    deploy_bystander(&platform, dir.path());
    let probe = probe_as("consume", "replace-read-only");
    deploy_manifest(&platform, dir.path(), MEMORIES, &pairs(&probe));
    let watch = Watch::start(&platform);
    // Copied (1,000 B) and mapped (4 MiB + 1): the second placement would write into
    // read-only pages from host code, which the kernel answers by killing the process.
    for len in [1_000, (4 << 20) + 1] {
        let message = consumer_failure(&platform, "/regions-memories", len);
        assert!(
            message.contains("already hold a region"),
            "{len}: {message}"
        );
    }
    watch.finish();
    assert_bystander_served(&platform);
}

#[test]
fn a_host_call_result_aimed_at_read_only_pages_neither_faults_nor_unprotects_them() {
    let dir = faas_testing::temp_dir();
    let platform = start(&[]);
    deploy_bystander(&platform, dir.path());
    let probe = probe_as("consume", "host-writes-read-only");
    deploy_manifest(&platform, dir.path(), MEMORIES, &pairs(&probe));
    let watch = Watch::start(&platform);
    for len in [1_000, (4 << 20) + 1] {
        // The host wrote the call's result where the guest asked (its private copy of
        // the page); back in the guest the pages are read-only again, so the guest's own
        // write after the call traps.
        let message = consumer_failure(&platform, "/regions-memories", len);
        assert!(message.contains("trap"), "{len}: {message}");
        assert!(message.contains("host call returned"), "{len}: {message}");
    }
    watch.finish();
    assert_bystander_served(&platform);
    // The producer's value was not changed for anyone: a plain consumer reads it whole.
    deploy_manifest(&platform, dir.path(), MEMORIES, &[]);
    let len = (4 << 20) + 1;
    assert_eq!(
        transfer(&platform, "/regions-memories", len)["sum"],
        expected_sum(len)
    );
}

#[test]
fn a_region_over_pages_that_already_hold_one_is_refused() {
    // Each `create-in` over the same pages used to pin a new memory file, so a 64 MiB
    // function could hold gigabytes of shared memory that no limit saw.
    let dir = faas_testing::temp_dir();
    let platform = start(&[]);
    deploy_bystander(&platform, dir.path());
    deploy_probe(&platform, dir.path(), "recreate", "");
    let message = consumer_failure(&platform, "/regions", 1000);
    assert!(message.contains("already hold a region"), "{message}");
    assert_bystander_served(&platform);
}

#[test]
fn a_flood_of_regions_stops_at_the_instance_limit_then_at_the_worker_file_limit() {
    let dir = faas_testing::temp_dir();
    let platform = start(&[
        "--max-regions-per-instance",
        "64",
        "--max-region-files",
        "1000",
    ]);
    deploy_bystander(&platform, dir.path());
    deploy_probe(&platform, dir.path(), "flood", "");
    let watch = Watch::start(&platform);
    let message = consumer_failure(&platform, "/regions", 1000);
    assert!(message.contains("region limit"), "{message}");
    assert!(message.contains("at most 64 regions"), "{message}");
    watch.finish();

    let platform = start(&[
        "--max-regions-per-instance",
        "100000",
        "--max-region-files",
        "40",
    ]);
    deploy_bystander(&platform, dir.path());
    deploy_probe(&platform, dir.path(), "flood", "");
    for _ in 0..3 {
        // Each run is stopped at the worker's budget, and gives its files back.
        let message = consumer_failure(&platform, "/regions", 1000);
        assert!(message.contains("40 region memory files open"), "{message}");
    }
    assert_bystander_served(&platform);
    deploy_example(&platform, dir.path(), &[]);
    assert_eq!(
        transfer(&platform, "/regions", 1000)["sum"],
        expected_sum(1000)
    );
}
