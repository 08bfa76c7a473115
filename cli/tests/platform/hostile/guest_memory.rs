//! Guest memory in all: each instance is bounded by its `memory_mb`, but a tenant may
//! run hundreds of instances on a worker at once, and together they could take the
//! machine's memory. A tenant's instances hold at most its share of the worker's guest
//! memory (`--tenant-guest-memory-mb`): past it a guest's growth traps, its event fails
//! with 503 `memory_budget` naming the flag, the platform's memory grows by the share
//! at most, and another tenant is served throughout.

use super::{Watch, assert_bystander_served, deploy_bystander};
use crate::support::{Platform, client, write_manifest};

/// Each hold's memory, in MiB: within the function's default limit (128 MiB).
const HOLD_MB: u64 = 100;
/// How many holds run at once: 800 MiB in all, more than three times the share.
const HOLDS: usize = 8;

#[test]
fn a_tenants_instances_hold_at_most_its_share_of_guest_memory_and_another_is_served() {
    let dir = faas_testing::temp_dir();
    let platform = Platform::start_with(&["--tenant-guest-memory-mb", "256"]);
    deploy_bystander(&platform, dir.path());
    let manifest = write_manifest(dir.path(), "hog", "hog", "misbehave", "/misbehave/...", "");
    platform.deploy(&manifest);
    let peak_before = platform.memory("VmHWM");

    let watch = Watch::start(&platform);
    let holds: Vec<_> = (0..HOLDS)
        .map(|_| {
            let url = platform.at(&format!("/misbehave/hold?mb={HOLD_MB}&ms=2000"));
            std::thread::spawn(move || {
                let response = client().get(url).send().unwrap();
                (response.status().as_u16(), response.text().unwrap())
            })
        })
        .collect();
    let mut held = 0;
    for hold in holds {
        match hold.join().unwrap() {
            (200, _) => held += 1,
            (status, body) => {
                assert_eq!(status, 503, "{body}");
                let error: serde_json::Value = serde_json::from_str(&body).unwrap();
                assert_eq!(error["error"]["kind"], "memory_budget", "{body}");
                assert!(body.contains("--tenant-guest-memory-mb"), "{body}");
            }
        }
    }
    watch.finish();
    assert_bystander_served(&platform);

    let grew = platform.memory("VmHWM").saturating_sub(peak_before) >> 20;
    // Without the budget all eight run, and it grows by about 800 MiB.
    assert!(grew < 400, "the platform's peak memory grew by {grew} MiB");
    // Two of 100 MiB (and their instances' own few MiB) fit a share of 256 MiB; a
    // third does not.
    assert!((1..=2).contains(&held), "{held} holds of {HOLD_MB} MiB ran");
}
