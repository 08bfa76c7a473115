//! Guest memory in all: each instance is bounded by its `memory_mb` and its handles, but
//! a tenant may run hundreds of instances on a worker at once, and together they could
//! take the machine's memory. A tenant's instances hold at most its share of the
//! worker's guest memory (`--tenant-guest-memory-mb`), their linear memory and what
//! they hold in the host through handles alike: past it a guest's growth traps, its
//! event fails with 503 `memory_budget` naming the flag, the platform's memory grows by
//! the share at most, and another tenant is served throughout. An operator may give a
//! tenant a share of its own, smaller or larger (`faas tenant set --guest-memory-mb`).

use super::{Watch, assert_bystander_served, deploy_bystander};
use crate::support::{Platform, client, write_manifest};

/// How many holds run at once: each holds 70-100 MiB, so together more than twice the
/// share.
const HOLDS: usize = 8;
/// The share of guest memory the attacking tenant gets.
const SHARE_MB: &str = "256";

/// A platform with the attacker's `function` deployed at `route` beside the bystander,
/// its tenant's share at [`SHARE_MB`]. Its deadline is far above what a hold takes
/// (2 s), so that only the budget can fail a hold, however slow a parallel test run
/// makes the machine.
fn platform_with(dir: &std::path::Path, function: &str, route: &str) -> Platform {
    let platform = Platform::start_with(&["--tenant-guest-memory-mb", SHARE_MB]);
    deploy_bystander(&platform, dir);
    let extra = "timeout_ms = 60000";
    platform.deploy(&write_manifest(dir, "hog", "hog", function, route, extra));
    platform
}

/// Sends `holds` requests to `path` at once, while the bystander is watched. Each
/// either runs (200) or fails with 503 `memory_budget` naming the flag. Returns how
/// many ran and how much the platform's peak memory grew, in MiB.
fn hold_at_once(platform: &Platform, path: &str, holds: usize) -> (usize, u64) {
    let peak_before = platform.memory("VmHWM");
    let watch = Watch::start(platform);
    let mut held = 0;
    for answer in get_at_once(platform, path, holds) {
        match answer {
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
    assert_bystander_served(platform);
    let grew = platform.memory("VmHWM").saturating_sub(peak_before) >> 20;
    (held, grew)
}

/// Sends `count` GET requests to `path` at once; returns each one's status and body.
pub(super) fn get_at_once(platform: &Platform, path: &str, count: usize) -> Vec<(u16, String)> {
    let requests: Vec<_> = (0..count)
        .map(|_| {
            let url = platform.at(path);
            std::thread::spawn(move || {
                let response = client().get(url).send().unwrap();
                (response.status().as_u16(), response.text().unwrap())
            })
        })
        .collect();
    requests
        .into_iter()
        .map(|request| request.join().unwrap())
        .collect()
}

#[test]
fn a_tenants_instances_hold_at_most_its_share_of_guest_memory_and_another_is_served() {
    let dir = faas_testing::temp_dir();
    let platform = platform_with(dir.path(), "misbehave", "/misbehave/...");
    // Each hold writes 100 MiB of fresh linear memory, within the function's default
    // limit (128 MiB).
    let (held, grew) = hold_at_once(&platform, "/misbehave/hold?mb=100&ms=2000", HOLDS);
    // Without the budget all eight run, and it grows by about 800 MiB.
    assert!(grew < 400, "the platform's peak memory grew by {grew} MiB");
    // Two of 100 MiB (and their instances' own few MiB) fit a share of 256 MiB; a
    // third does not.
    assert!((1..=2).contains(&held), "{held} holds of 100 MiB ran");
}

#[test]
fn what_a_tenants_instances_hold_through_handles_counts_in_its_share_too() {
    let dir = faas_testing::temp_dir();
    let platform = platform_with(dir.path(), "resource-hog", "/resource-hog/...");
    // Each hold keeps 1,500 header fields of 48 KiB in the host, within the instance's
    // handle limit (2,048) and outside its linear memory; each handle is claimed as
    // 64 KiB, so a hold claims about 94 MiB.
    let (held, grew) = hold_at_once(&platform, "/resource-hog/hold?count=1500&ms=2000", HOLDS);
    // Without the claim all eight run, and it grows by about 600 MiB.
    assert!(grew < 300, "the platform's peak memory grew by {grew} MiB");
    // Two fit a share of 256 MiB; a third does not.
    assert!((1..=2).contains(&held), "{held} holds of 1,500 fields ran");
}

/// Gives the attacking tenant a share of guest memory of its own, or (`default`) the
/// worker's back.
fn set_share(platform: &Platform, mb: &str) {
    let set = platform.faas(&["tenant", "set", "hog", "--guest-memory-mb", mb]);
    assert!(set.status.success(), "{set:?}");
}

#[test]
fn a_tenants_own_share_of_guest_memory_holds_in_place_of_the_workers() {
    let dir = faas_testing::temp_dir();
    let platform = platform_with(dir.path(), "misbehave", "/misbehave/...");
    let hold = "/misbehave/hold?mb=100&ms=2000";
    // Below the worker's share (256 MiB), one hold of 100 MiB no longer fits, and the
    // refusal says how the tenant's share is raised.
    set_share(&platform, "64");
    let response = client()
        .get(platform.at("/misbehave/hold?mb=100&ms=10"))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    let body = response.text().unwrap();
    assert!(body.contains("64 MiB"), "{body}");
    assert!(
        body.contains("`faas tenant set hog --guest-memory-mb N`"),
        "{body}"
    );
    assert_bystander_served(&platform);
    // Above it, three holds at once fit, where the worker's share fits two.
    set_share(&platform, "400");
    let (held, _) = hold_at_once(&platform, hold, 3);
    assert_eq!(held, 3, "holds of 100 MiB that ran in a share of 400 MiB");
    // Given the worker's share back, a third does not fit again.
    set_share(&platform, "default");
    let (held, _) = hold_at_once(&platform, hold, 3);
    assert!((1..=2).contains(&held), "{held} holds of 100 MiB ran");
}

#[test]
fn a_copied_value_waiting_for_its_consumer_stays_in_its_tenants_share() {
    // A value copied with `from-bytes` was counted only while its producer's store
    // lived: once the producer returned, a run waiting out its consumer's retry backoff
    // held the bytes uncounted, and a tenant's runs could hold any number of them.
    let platform = crate::regions::start(&["--tenant-guest-memory-mb", "128"]);
    let [produce, produce_config] = crate::regions::probe_as("produce", "copy-out");
    let produce_config = (
        produce_config.0,
        produce_config.1.replace(" }", ", mb = \"32\" }"),
    );
    let (ended, _) = values_waiting_for_consumers(&platform, &[produce, produce_config], "1");
    assert_a_later_value_found_the_share_full(&platform, &ended, "1");
}

#[test]
fn a_mapped_value_waiting_for_its_consumer_stays_in_its_tenants_share() {
    // A value in a memory file was counted only through its producer's store, which the
    // worker tears down early when the tenant's instance slots run short (here, a slot
    // of its own for each of its events): a run waiting out its consumer's retry
    // backoff then held the file's pages uncounted. Five such runs held 160 MiB of
    // memory files beside a share of 128.
    let platform = crate::regions::start(&["--tenant-guest-memory-mb", "128"]);
    release_producers_early(&platform);
    let body = (32 << 20).to_string();
    let (ended, most_held) = values_waiting_for_consumers(&platform, &[], &body);
    assert!(
        most_held <= (128 + 16) << 20,
        "the tenant's memory files held {} MiB at once",
        most_held >> 20
    );
    assert_a_later_value_found_the_share_full(&platform, &ended, &body);
}

#[test]
fn a_value_sealed_short_of_its_pages_holds_only_its_own_pages() {
    // A producer may fill a region's whole capacity and seal a byte of it. Its memory
    // file kept every page, though only the value is counted once the producer is gone:
    // five such runs held 160 MiB.
    let platform = crate::regions::start(&["--tenant-guest-memory-mb", "128"]);
    release_producers_early(&platform);
    let [produce, produce_config] = crate::regions::probe_as("produce", "seal-short");
    let produce_config = (
        produce_config.0,
        produce_config.1.replace(" }", ", mb = \"32\" }"),
    );
    let (ended, most_held) =
        values_waiting_for_consumers(&platform, &[produce, produce_config], "1");
    assert!(
        most_held < 8 << 20,
        "the tenant's one-byte values held {} MiB of memory files",
        most_held >> 20
    );
    // Each run waited for its consumer until its deadline; none found the share full.
    for body in &ended {
        assert!(body.contains("run_timeout"), "{body}");
    }
}

/// Gives the regions example's tenant one instance slot, so that each step's store
/// takes the previous one's: the worker then tears its retired producers down early,
/// and their values live on without them.
fn release_producers_early(platform: &Platform) {
    let quota = platform.faas(&["tenant", "set", "demo", "--max-instances", "1"]);
    assert!(quota.status.success(), "{quota:?}");
}

/// Posts `body` to the regions example five times, one run after another once the
/// previous producer has returned (1.5 s is far more than a producer takes, on a loaded
/// machine too): its 32 MiB value then waits in the run, its consumer failing and
/// backing off until the run's deadline. `producer` replaces the producer. Returns each
/// run's answer, and the most the platform's region memory files held at once meanwhile.
fn values_waiting_for_consumers(
    platform: &Platform,
    producer: &[(String, String)],
    body: &str,
) -> (Vec<String>, u64) {
    let dir = faas_testing::temp_dir();
    deploy_bystander(platform, dir.path());
    let mut replacements = producer.to_vec();
    replacements.extend(crate::regions::probe_as("consume", "fail"));
    replacements.extend([
        ("memory_mb = 1100".into(), "memory_mb = 128".into()),
        (
            "output = \"json\"".into(),
            "output = \"json\"\nretries = { attempts = 10, backoff_ms = 60000 }".into(),
        ),
        ("timeout_ms = 120000".into(), "timeout_ms = 15000".into()),
    ]);
    crate::regions::deploy_example(platform, dir.path(), &crate::regions::pairs(&replacements));
    let watch = Watch::start(platform);
    let mut most_held = 0;
    let runs: Vec<_> = (0..5)
        .map(|_| {
            let url = platform.at("/regions");
            let body = body.to_owned();
            let run = std::thread::spawn(move || {
                client()
                    .post(url)
                    .body(body)
                    .send()
                    .unwrap()
                    .text()
                    .unwrap()
            });
            std::thread::sleep(std::time::Duration::from_millis(1500));
            most_held = most_held.max(region_file_bytes(platform));
            run
        })
        .collect();
    let ended = runs.into_iter().map(|run| run.join().unwrap()).collect();
    watch.finish();
    assert_bystander_served(platform);
    (ended, most_held)
}

/// Asserts that the first of the runs `ended` fit its tenant's share of guest memory
/// and a later one found it full (each alone, 32 MiB of its own memory and 32 of value,
/// fits it easily), and that once the runs are over their values were given back.
fn assert_a_later_value_found_the_share_full(platform: &Platform, ended: &[String], body: &str) {
    let refused = |body: &str| body.contains("hold its whole share of guest memory");
    assert!(!refused(&ended[0]), "{}", ended[0]);
    assert!(
        ended
            .iter()
            .any(|body| refused(body) && body.contains("--tenant-guest-memory-mb")),
        "{ended:#?}"
    );
    let again = platform.post("/regions", body.to_owned()).text().unwrap();
    assert!(!refused(&again), "{again}");
}

/// The bytes the platform's region memory files hold in memory, read from the sizes of
/// the files it has open.
fn region_file_bytes(platform: &Platform) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let fds = std::fs::read_dir(format!("/proc/{}/fd", platform.pid())).unwrap();
    fds.filter_map(Result::ok)
        .filter(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|link| link.to_string_lossy().starts_with("/memfd:faas-region"))
        })
        .filter_map(|fd| std::fs::metadata(fd.path()).ok())
        .map(|file| file.blocks() * 512)
        .sum()
}

/// A platform with the bystander and tenant `tenant`'s workflow of `function` at
/// `route`, with a deadline far above what any of these attacks takes and `extra`
/// function settings.
fn beside_the_bystander(tenant: &str, function: &str, route: &str, extra: &str) -> Platform {
    let dir = faas_testing::temp_dir();
    let platform = Platform::start_with(&["--no-demo"]);
    deploy_bystander(&platform, dir.path());
    let extra = format!("timeout_ms = 60000\n{extra}");
    platform.deploy(&write_manifest(
        dir.path(),
        tenant,
        tenant,
        function,
        route,
        &extra,
    ));
    platform
}

/// A guest's log line is cut to 4 KiB, and the platform keeps only those 4 KiB. It
/// kept the whole allocation of the guest's text (`String::truncate`), which the log
/// store then held with the line: one event logging 240 lines of 4 MiB held 960 MiB of
/// the platform's memory, charged to the log budget as 1 MiB.
#[test]
fn a_long_log_line_holds_only_what_is_kept_of_it() {
    let platform = beside_the_bystander("loud", "misbehave", "/misbehave/...", "");
    // Once first, so that the allocator holds what one event uses for a moment.
    assert_eq!(
        platform.get("/misbehave/shout?kib=4096&lines=1").status(),
        200
    );
    let before = platform.memory("VmRSS");
    let watch = Watch::start(&platform);
    for _ in 0..4 {
        let response = platform.get("/misbehave/shout?kib=4096&lines=60");
        assert_eq!(response.status(), 200);
    }
    watch.finish();
    let grew = platform.memory("VmRSS").saturating_sub(before);
    assert!(
        grew < 128 << 20,
        "240 log lines of 4 MiB grew the platform by {} MiB",
        grew >> 20
    );
    assert_bystander_served(&platform);
}

/// A host call holds its guest's arguments while it waits on Redis: the lists
/// Wasmtime lifted and the command made of them, outside the guest's linear memory. A
/// batch's lists may all point at the same guest bytes, so 16 messages of 1 MiB cost
/// the guest 1 MiB and the host some 48 MiB. With Redis stopped, calls wait 5 s each,
/// and a tenant's instances held that many times over, counted by no budget. Now each
/// call claims what it holds in its tenant's share: past it, the guest traps (503
/// `memory_budget`), and the platform grows by about the share at most.
#[test]
fn a_batch_of_messages_that_all_point_at_the_same_bytes_counts_in_its_tenants_share() {
    let redis = faas_testing::RedisServer::start();
    let url = redis.url();
    let dir = faas_testing::temp_dir();
    let platform = Platform::start_with(&[
        "--no-demo",
        "--redis",
        &url,
        "--tenant-guest-memory-mb",
        "128",
    ]);
    deploy_bystander(&platform, dir.path());
    let manifest = write_manifest(
        dir.path(),
        "messenger",
        "mallory",
        "messenger",
        "/mallory/messenger",
        "timeout_ms = 60000",
    );
    platform.deploy(&manifest);
    redis.pause();
    // 12 calls of 16 MiB at once, each held until Redis times out (5 s): 576 MiB in
    // the host, were they not counted. 48 MiB each, two fit a share of 128 MiB.
    let peak_before = platform.memory("VmHWM");
    let watch = Watch::start(&platform);
    let path = "/mallory/messenger?op=publish-all-aliased&name=news&count=16&kib=1024";
    let mut held = 0;
    for answer in get_at_once(&platform, path, 12) {
        match answer {
            // It held its batch until Redis timed out.
            (502, body) => {
                assert!(body.contains("timed out"), "{body}");
                held += 1;
            }
            (status, body) => {
                assert_eq!(status, 503, "{body}");
                assert!(body.contains("memory_budget"), "{body}");
            }
        }
    }
    watch.finish();
    redis.resume();
    let grew = platform.memory("VmHWM").saturating_sub(peak_before) >> 20;
    assert!(grew < 300, "the platform's peak memory grew by {grew} MiB");
    assert!(
        (1..=2).contains(&held),
        "{held} calls held 48 MiB each at once"
    );
    assert_bystander_served(&platform);
}

/// A guest may answer with an error code instead of a response, and the code may hold
/// a string as long as the guest's memory. Its description (`Debug`, six bytes for
/// each control character) was copied whole through the worker's failure, its log line
/// and the error body: for each event, some twenty times the string in host memory,
/// counted by no budget, and an error body of a hundred megabytes. Now the description
/// stops at 4 KiB: the event fails with 500 `bad_response`, the platform does not grow
/// by the strings, and the bystander is served.
#[test]
fn an_error_code_holding_a_huge_string_costs_the_host_a_few_kib_to_describe() {
    let platform = beside_the_bystander("mallory", "linger", "/linger/...", "");
    let peak_before = platform.memory("VmHWM");
    let watch = Watch::start(&platform);
    for (status, body) in get_at_once(&platform, "/linger/error?mib=16", 4) {
        assert_eq!(status, 500, "{body:.300}");
        assert!(
            body.contains("bad_response") && body.contains("InternalError"),
            "{body:.300}"
        );
        assert!(
            body.len() < 16 << 10,
            "an error body of {} bytes",
            body.len()
        );
    }
    watch.finish();
    // The strings themselves: 16 MiB in each guest's memory and its copy lifted into
    // the host, 128 MiB for the four.
    let grew = platform.memory("VmHWM").saturating_sub(peak_before) >> 20;
    assert!(grew < 400, "the platform's peak memory grew by {grew} MiB");
    assert_bystander_served(&platform);
}

/// Wasmtime copies a host call's list arguments into host memory before any host
/// function sees them, and lists in a list may all point at the same bytes: a guest
/// allowed 512 MiB that holds 2 MiB made the host allocate 500 MiB per call (a batch of
/// 500 messages, each the same 1 MiB) before `publish-all` refused the batch, counted
/// by no budget. Now a call may copy no more than the guest's memory holds (32 MiB at
/// least): past that the guest traps, and the platform does not grow by the batch.
#[test]
fn a_list_of_lists_that_all_point_at_the_same_bytes_is_copied_no_further_than_the_guests_memory() {
    let extra = "memory_mb = 512";
    let platform = beside_the_bystander("mallory", "messenger", "/mallory/messenger", extra);
    let peak_before = platform.memory("VmHWM");
    let watch = Watch::start(&platform);
    let path = "/mallory/messenger?op=publish-all-aliased&name=news&count=500&kib=1024";
    for (status, body) in get_at_once(&platform, path, 3) {
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("fuel"), "{body}");
    }
    watch.finish();
    let grew = platform.memory("VmHWM").saturating_sub(peak_before) >> 20;
    assert!(grew < 300, "the platform's peak memory grew by {grew} MiB");
    assert_bystander_served(&platform);
}
