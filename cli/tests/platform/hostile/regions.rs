//! Regions as a weapon: pages placed twice, host writes into read-only pages, memory
//! files pinned past the memory limit, and floods of regions.

use super::{BYSTANDER_ROUTE, Watch, assert_bystander_served, deploy_bystander};
use crate::regions::{
    MEMORIES, deploy_example, deploy_manifest, deploy_probe, expected_sum, pairs, probe_as, start,
    transfer,
};
use crate::support::error_of;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
fn a_region_limit_the_handle_limit_would_preempt_is_refused_at_start() {
    // An instance's regions are among its handles: past the handle limit it traps, so
    // a region limit above it would promise what the worker never allows.
    let dir = faas_testing::temp_dir();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_faas"))
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--max-regions-per-instance", "4096"])
        .output()
        .expect("running faas up");
    assert!(!output.status.success(), "faas up started");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "--max-regions-per-instance (4096) must be below --max-handles-per-instance (2048)"
        ),
        "{stderr}"
    );
}

#[test]
fn a_flood_of_regions_stops_at_the_instance_limit_then_at_its_tenants_share_of_the_worker_file_limit()
 {
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
        "1000",
        "--max-region-files",
        "40",
    ]);
    deploy_bystander(&platform, dir.path());
    deploy_probe(&platform, dir.path(), "flood", "");
    for _ in 0..3 {
        // Each run is stopped at its tenant's share of the worker's budget (a
        // quarter), and gives its files back.
        let message = consumer_failure(&platform, "/regions", 1000);
        assert!(
            message.contains("10 region memory files open for this tenant"),
            "{message}"
        );
    }
    assert_bystander_served(&platform);
    deploy_example(&platform, dir.path(), &[]);
    assert_eq!(
        transfer(&platform, "/regions", 1000)["sum"],
        expected_sum(1000)
    );
}

#[test]
fn a_region_never_replaces_a_components_initial_data() {
    // The probe offers its own initial data (a data segment, mapped copy-on-write from
    // the component's image) as region pages. Replaced by a mapping and then by the
    // zero pages put back after every event, that data would read as zeros in the
    // component's next instance in the same slot (one slot here, so it is the same).
    let dir = faas_testing::temp_dir();
    // 100 kB values would be mapped anywhere else.
    let platform = start(&["--region-map-threshold", "4096", "--max-instances", "1"]);
    deploy_bystander(&platform, dir.path());
    let watch = Watch::start(&platform);
    let probe = probe_as("consume", "initial-data");
    for (manifest, route) in [
        (crate::regions::EXAMPLE, "/regions"),
        (MEMORIES, "/regions-memories"),
    ] {
        deploy_manifest(&platform, dir.path(), manifest, &pairs(&probe));
        for run in 0..3 {
            let report = transfer(&platform, route, 100_000);
            assert_eq!(report["intact"], true, "{route}, run {run}: {report}");
            // The value is copied there (and protected in place if read-only).
            assert_eq!(report["placed"], "placed", "{route}, run {run}: {report}");
            // No region is made there; before Linux 6.11 the worker maps no images
            // (it could not tell their pages apart), so there is nothing to protect.
            let created = report["created"].as_str().unwrap();
            assert!(
                created.contains("initial data")
                    || created.contains("already hold a region")
                    || (!kernel_maps_images() && created == "created"),
                "{route}, run {run}: {report}"
            );
        }
    }
    watch.finish();
    assert_bystander_served(&platform);
}

/// Whether this kernel answers `PROCMAP_QUERY` (Linux 6.11+), so that the worker maps
/// components' initial data copy-on-write.
fn kernel_maps_images() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release
        .split(['.', '-'])
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    (major, minor) >= (6, 11)
}

#[test]
fn a_region_type_longer_than_any_declared_fails_the_event_before_the_host_keeps_it() {
    // The host keeps each region's type with it, outside every memory limit: 64
    // regions typed with 16 MiB of text each held a gigabyte of the worker's memory.
    let dir = faas_testing::temp_dir();
    let platform = start(&[]);
    deploy_bystander(&platform, dir.path());
    deploy_probe(&platform, dir.path(), "long-type", "");
    let watch = Watch::start(&platform);
    let message = consumer_failure(&platform, "/regions", 1000);
    assert!(message.contains("region limit"), "{message}");
    assert!(
        message.contains(&format!(
            "a region type of {} bytes is longer than the 512 allowed",
            16 << 20
        )),
        "{message}"
    );
    watch.finish();
    assert_bystander_served(&platform);
}

/// The memories example as `tenant`'s workflow `name`, its consumer the probe `probe`
/// with `config` (TOML key-value pairs after the probe's).
fn deploy_consumer_probe(
    platform: &crate::support::Platform,
    dir: &std::path::Path,
    tenant: &str,
    name: &str,
    probe: &str,
    config: &str,
) {
    let [component, _] = probe_as("consume", probe);
    let replacements = [
        component,
        (
            "config = { role = \"consume\" }".to_owned(),
            format!("config = {{ probe = \"{probe}\"{config} }}"),
        ),
        (
            "tenant = \"demo\"".to_owned(),
            format!("tenant = \"{tenant}\""),
        ),
        (
            "name = \"regions-memories\"".to_owned(),
            format!("name = \"{name}\""),
        ),
        (
            "route = \"/regions-memories\"".to_owned(),
            format!("route = \"/{name}\""),
        ),
    ];
    deploy_manifest(platform, dir, MEMORIES, &pairs(&replacements));
}

#[test]
fn a_guest_placing_its_input_over_and_over_stops_at_its_instance_limit_and_its_tenants_share_of_mappings()
 {
    // Each placement of a read-only value leaves a protected range, which splits the
    // process's memory maps; past the kernel's `vm.max_map_count` every mmap and
    // mprotect of the process fails, for every tenant.
    let dir = faas_testing::temp_dir();
    let platform = start(&["--max-regions-per-instance", "64"]);
    deploy_consumer_probe(&platform, dir.path(), "demo", "scatter", "scatter", "");
    let message = consumer_failure(&platform, "/scatter", 1000);
    assert!(message.contains("region limit"), "{message}");
    assert!(
        message.contains("place region values at most 64 times"),
        "{message}"
    );

    // 160 ranges in all, 40 per tenant. One run of the attacker holds 30 of its
    // tenant's 40 while a second one asks for 100.
    let platform = start(&["--max-region-mappings", "160"]);
    deploy_bystander(&platform, dir.path());
    deploy_consumer_probe(
        &platform,
        dir.path(),
        "demo",
        "scatter-hold",
        "scatter",
        ", pairs = \"30\", hold_ms = \"4000\"",
    );
    deploy_consumer_probe(&platform, dir.path(), "demo", "scatter", "scatter", "");
    deploy_consumer_probe(
        &platform,
        dir.path(),
        "victim",
        "victim-reads",
        "scatter",
        ", pairs = \"30\"",
    );
    let holder = {
        let url = platform.at("/scatter-hold");
        std::thread::spawn(move || {
            reqwest::blocking::Client::new()
                .post(url)
                .body("1000")
                .send()
        })
    };
    // Until the holder's 30 placements are made (its step sleeps after them).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let watch = Watch::start(&platform);
    let message = consumer_failure(&platform, "/scatter", 1000);
    assert!(
        message.contains("the worker holds 40 region page mappings for this tenant"),
        "{message}"
    );
    // Another tenant places its 30 read-only values (mapped, past the map threshold)
    // while the attacker holds its share.
    let victim = transfer(&platform, "/victim-reads", (4 << 20) + 1);
    assert_eq!(victim["placed"], 30, "{victim}");
    watch.finish();
    assert_bystander_served(&platform);
    let held = holder.join().unwrap().expect("the holder's run");
    assert_eq!(held.status(), 200, "{:?}", held.text());
    // The mappings are given back with the stores: the attacker's tenant places again.
    assert_eq!(transfer(&platform, "/scatter-hold", 1000)["placed"], 30);
}

/// TLB shootdowns the kernel has counted on every core so far (x86's `TLB` line of
/// `/proc/interrupts`); `None` where it counts none.
fn tlb_shootdowns() -> Option<u64> {
    let interrupts = std::fs::read_to_string("/proc/interrupts").ok()?;
    let line = interrupts
        .lines()
        .find(|line| line.trim_start().starts_with("TLB:"))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .map_while(|field| field.parse::<u64>().ok())
            .sum(),
    )
}

#[test]
fn host_calls_amid_scattered_read_only_inputs_interrupt_other_cores_once_each_not_once_per_input() {
    // Read-only inputs are writable while the host runs and protected again when each
    // host call returns; protecting them one by one made every host call of a guest
    // with 100 scattered read-only inputs interrupt the other cores (which serve other
    // tenants) 100 times, for a TLB shootdown each.
    let Some(before) = tlb_shootdowns() else {
        eprintln!("this kernel counts no TLB shootdowns: nothing to check");
        return;
    };
    let dir = faas_testing::temp_dir();
    let platform = start(&[]);
    deploy_bystander(&platform, dir.path());
    deploy_consumer_probe(
        &platform,
        dir.path(),
        "demo",
        "host-calls",
        "host-calls",
        ", pairs = \"100\", ms = \"2000\"",
    );
    // Another tenant's requests, one after another, keep the other core running the
    // platform's threads, which the shootdowns then interrupt.
    let watch = Watch::start(&platform);
    let attacking = Arc::new(AtomicBool::new(true));
    let load = {
        let (url, attacking) = (platform.at(BYSTANDER_ROUTE), attacking.clone());
        std::thread::spawn(move || {
            let client = crate::support::client();
            let mut served = 0u32;
            while attacking.load(Ordering::Relaxed) {
                served += u32::from(client.get(&url).send().is_ok_and(|r| r.status() == 200));
            }
            served
        })
    };
    let response = platform.post("/host-calls", "1000");
    let after = tlb_shootdowns().unwrap();
    attacking.store(false, Ordering::Relaxed);
    assert!(
        load.join().unwrap() > 0,
        "the other tenant was served under the attack"
    );
    watch.finish();
    assert_eq!(response.status(), 200);
    let report: serde_json::Value = response.json().unwrap();
    assert_eq!(report["placed"], 100, "{report}");
    // Each loop of the guest makes a few host calls (a clock reading, a config read).
    let loops = report["calls"].as_u64().unwrap();
    assert!(loops > 0, "{report}");
    let shootdowns = after - before;
    assert!(
        shootdowns < loops * 20,
        "{shootdowns} TLB shootdowns for {loops} loops of host calls with 100 read-only inputs"
    );
    assert_bystander_served(&platform);
}

#[test]
fn one_tenants_waiting_values_hold_at_most_its_share_of_region_files_and_another_tenant_gets_its_own()
 {
    // Region memory files had one budget for the whole worker: a tenant whose runs held
    // their values (waiting out a consumer's retry backoff, or at a join) could hold
    // every file, and every other tenant's regions were refused.
    let dir = faas_testing::temp_dir();
    let platform = start(&["--max-region-files", "8"]);
    let mut hog = vec![(
        "tenant = \"demo\"".to_owned(),
        "tenant = \"hog\"".to_owned(),
    )];
    hog.extend(probe_as("consume", "fail"));
    hog.extend([
        (
            "output = \"json\"".into(),
            "output = \"json\"\nretries = { attempts = 10, backoff_ms = 60000 }".into(),
        ),
        ("timeout_ms = 120000".into(), "timeout_ms = 15000".into()),
    ]);
    deploy_example(&platform, dir.path(), &pairs(&hog));
    deploy_example(
        &platform,
        dir.path(),
        &[
            ("tenant = \"demo\"", "tenant = \"other\""),
            ("name = \"regions\"", "name = \"their-regions\""),
            ("route = \"/regions\"", "route = \"/their-regions\""),
        ],
    );
    // Eight runs at once, each holding its value's file until its deadline if it can.
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let url = platform.at("/regions");
            std::thread::spawn(move || {
                let response = crate::support::client().post(url).body("1000").send();
                response.unwrap().text().unwrap()
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_secs(3));
    // The other tenant's value still gets a file, while the runs wait.
    let report = transfer(&platform, "/their-regions", 1000);
    assert_eq!(report["sum"], expected_sum(1000), "{report}");
    let ended: Vec<String> = runs.into_iter().map(|run| run.join().unwrap()).collect();
    let refused = ended
        .iter()
        .filter(|body| body.contains("2 region memory files open for this tenant"))
        .count();
    assert!(refused >= 6, "{ended:#?}");
}

/// `bytes` copies a value into the host before Wasmtime asks the consumer for room for
/// it: a consumer allowed 16 MiB that asked for a copy of a 512 MiB value made the host
/// allocate and fill 512 MiB (per consumer at once, counted by no budget), only to fail
/// when its memory could not take them. Now a value its memory could never hold fails
/// the consumer before the host copies anything.
#[test]
fn a_copy_of_a_value_larger_than_its_consumers_memory_is_refused_before_the_host_makes_it() {
    let dir = faas_testing::temp_dir();
    let platform = start(&[]);
    deploy_bystander(&platform, dir.path());
    let mut replacements = probe_as("consume", "copy-in").to_vec();
    replacements.push((
        "config = { probe = \"copy-in\" }\nmemory_mb = 1100".to_owned(),
        "config = { probe = \"copy-in\" }\nmemory_mb = 16".to_owned(),
    ));
    deploy_example(&platform, dir.path(), &pairs(&replacements));
    // A copy its memory can hold is made.
    let small = platform.post("/regions", "1000");
    assert_eq!(small.status(), 200);
    let report: serde_json::Value = small.json().unwrap();
    assert!(report["copied"].as_u64().unwrap() > 1000, "{report}");
    let peak_before = platform.memory("VmHWM");
    let watch = Watch::start(&platform);
    let message = consumer_failure(&platform, "/regions", 512 << 20);
    assert!(message.contains("memory limit"), "{message}");
    watch.finish();
    let grew = platform.memory("VmHWM").saturating_sub(peak_before) >> 20;
    assert!(
        grew < 800,
        "the platform's peak memory grew by {grew} MiB (the value is 512 MiB)"
    );
    assert_bystander_served(&platform);
}
