//! Regions end to end: a producer's Karmem value reaches its consumers intact, mapped
//! or copied, and no guest gets at memory that is not its own.

use crate::support::{Platform, copy_manifest, error_of};
use std::path::Path;

pub(crate) const EXAMPLE: &str = "functions/regions/workflow.toml";
/// The example under a Karmem interface: its consumer implements `transfer.consume` of
/// `blob.km`, which lets it only read its blob.
pub(crate) const MEMORIES: &str = "functions/regions/memories.toml";

/// The byte sum of a blob of `len` data bytes as the example's producer makes it.
pub(crate) fn expected_sum(len: usize) -> u64 {
    let seed = len as u64 ^ 0x5a;
    (0..len)
        .map(|index| u64::from((index as u8) ^ (seed as u8)))
        .sum()
}

pub(crate) fn transfer(platform: &Platform, route: &str, len: usize) -> serde_json::Value {
    let response = platform.post(route, len.to_string());
    assert_eq!(response.status(), 200, "{:?}", response.text());
    response.json().unwrap()
}

/// The example workflow, with each `(from, to)` text replacement applied, deployed.
pub(crate) fn deploy_example(platform: &Platform, dir: &Path, replacements: &[(&str, &str)]) {
    deploy_manifest(platform, dir, EXAMPLE, replacements);
}

/// The repository manifest `manifest` (with `blob.km` beside it), with each
/// `(from, to)` text replacement applied, deployed.
pub(crate) fn deploy_manifest(
    platform: &Platform,
    dir: &Path,
    manifest: &str,
    replacements: &[(&str, &str)],
) {
    platform.deploy(&copy_manifest(dir, manifest, replacements));
}

/// Replacements that make the example's function `role` the probe component with
/// config `probe`.
pub(crate) fn probe_as(role: &str, probe: &str) -> [(String, String); 2] {
    let component = |package| {
        format!(
            "[functions.{role}]\ncomponent = \"{}\"",
            faas_testing::component_path(package).display()
        )
    };
    [
        (component("region-transfer"), component("region-probe")),
        (
            format!("config = {{ role = \"{role}\" }}"),
            format!("config = {{ probe = \"{probe}\" }}"),
        ),
    ]
}

/// `owned` as the borrowed pairs `copy_manifest` takes.
pub(crate) fn pairs(owned: &[(String, String)]) -> Vec<(&str, &str)> {
    owned
        .iter()
        .map(|(from, to)| (from.as_str(), to.as_str()))
        .collect()
}

#[test]
fn every_byte_arrives_whether_mapped_or_copied() {
    let dir = faas_testing::temp_dir();
    let mapped = start(&[]);
    let copied = start(&["--region-map-threshold", "off"]);
    for platform in [&mapped, &copied] {
        deploy_example(platform, dir.path(), &[]);
        // Below the map threshold, a page multiple plus one byte, and well above it.
        for len in [0, 1_000, 4 * 65_536 + 1, 24 << 20] {
            let report = transfer(platform, "/regions", len);
            assert_eq!(report["len"], len, "{report}");
            assert_eq!(report["sum"], expected_sum(len), "{report}");
            assert_eq!(report["type"], "blob.km:Blob");
        }
    }
    // What the consumer was handed, by mode: the 24 MiB value mapped on one platform,
    // every value copied on the other.
    let bytes = |platform: &Platform, mode: &str| {
        platform.metric(&format!(
            r#"faas_region_bytes_total{{tenant="demo",workflow="regions",function="consume",mode="{mode}"}}"#
        ))
    };
    let all = (1_000 + 4 * 65_536 + 1 + (24 << 20)) as f64;
    assert!(bytes(&mapped, "mapped") >= (24 << 20) as f64);
    assert!(bytes(&mapped, "copied") < (1 << 20) as f64);
    assert_eq!(bytes(&copied, "mapped"), 0.0);
    assert!(bytes(&copied, "copied") >= all);
}

#[test]
fn fan_out_maps_one_region_into_every_branch_and_writes_stay_private() {
    let dir = faas_testing::temp_dir();
    let platform = start(&[]);
    // Four branches, one at a time, each overwriting its copy after checking it: if a
    // write reached the shared pages, a later branch would see it.
    let fan_out = r#"type = "blob.km:Blob"
fan_out = 4

[steps.gather]
function = "gather"
input = "json"
output = "json"

[functions.gather]
component = "GATHER"
kind = "step"
config = { role = "gather" }

[[edges]]
from = "consume"
to = "gather"
type = "json"
join = { timeout_ms = 30000, on_failure = "fail" }
"#;
    let component = faas_testing::component_path("region-transfer");
    let fan_out = fan_out.replace("GATHER", &component.display().to_string());
    deploy_example(
        &platform,
        dir.path(),
        &[
            ("type = \"blob.km:Blob\"\n", &fan_out),
            (
                "config = { role = \"consume\" }",
                "config = { role = \"consume\", mutate = \"true\" }",
            ),
            (
                "timeout_ms = 120000",
                "timeout_ms = 120000\nconcurrency = 1",
            ),
        ],
    );
    let len = 2 << 20;
    let response = platform.post("/regions", len.to_string());
    assert_eq!(response.status(), 200, "{:?}", response.text());
    let reports: Vec<serde_json::Value> = response.json().unwrap();
    assert_eq!(reports.len(), 4);
    for (branch, report) in reports.iter().enumerate() {
        assert_eq!(report["branch"], branch);
        assert_eq!(
            report["sum"],
            expected_sum(len),
            "branch {branch}: {report}"
        );
    }
}

/// The example's producer feeding the probe component (config `probe`), deployed.
pub(crate) fn deploy_probe(platform: &Platform, dir: &Path, probe: &str, producer_config: &str) {
    let mut replacements = vec![(
        "config = { role = \"produce\" }".to_owned(),
        format!("config = {{ role = \"produce\"{producer_config} }}"),
    )];
    replacements.extend(probe_as("consume", probe));
    deploy_example(platform, dir, &pairs(&replacements));
}

/// A platform whose instances may have the example's 1100 MiB.
pub(crate) fn start(extra: &[&str]) -> Platform {
    let mut args = vec!["--no-demo", "--max-memory-mb", "1100"];
    args.extend_from_slice(extra);
    Platform::start_with(&args)
}

#[test]
fn forged_handles_and_addresses_get_errors_not_memory() {
    let dir = faas_testing::temp_dir();
    let platform = start(&[]);
    for (probe, expected) in [
        ("forge-handle", "handle"),
        ("unaligned", "page boundary"),
        ("out-of-bounds", "out of bounds"),
        ("unsealed", "not sealed"),
    ] {
        deploy_probe(&platform, dir.path(), probe, "");
        let error = error_of(platform.post("/regions", "1000"));
        let message = error["message"].as_str().unwrap();
        assert_eq!(error["kind"], "step_failed", "{probe}: {error}");
        assert!(message.contains("`consume`"), "{probe}: {message}");
        assert!(message.contains(expected), "{probe}: {message}");
    }
    // The platform carries on: a well-behaved run still works.
    deploy_example(&platform, dir.path(), &[]);
    assert_eq!(
        transfer(&platform, "/regions", 1000)["sum"],
        expected_sum(1000)
    );
}

#[test]
fn the_last_page_tail_and_reused_slots_show_only_zeros() {
    only_zeros_in_reused_slots(&[]);
}

/// The same with slots reset whole (`--slot-reset whole`, no scan for written
/// pages): the 16 MiB scanned are all inside the reset part.
#[test]
fn slots_reset_whole_show_only_zeros_too() {
    only_zeros_in_reused_slots(&["--slot-reset", "whole"]);
}

fn only_zeros_in_reused_slots(extra: &[&str]) {
    let dir = faas_testing::temp_dir();
    // One instance at a time: the pool has two slots (see the engine), which the
    // producer and the consumer both used, so the scan below runs in a slot that held
    // a mapped payload.
    let platform = start(&[&["--max-instances", "1"], extra].concat());
    deploy_probe(&platform, dir.path(), "tail", ", dirty_tail = \"true\"");
    for len in [1_000, (4 << 20) + 123] {
        let report = transfer(&platform, "/regions", len);
        assert!(report["len"].as_u64().unwrap() > len as u64, "{report}");
        assert!(report["tail"].as_u64().unwrap() > 0, "{report}");
        assert_eq!(
            report["nonzero"], 0,
            "producer bytes past the value leaked: {report}"
        );
    }
    // 16 MiB of fresh pages in a reused slot: all zeros, no earlier payload.
    deploy_probe(&platform, dir.path(), "scan", "");
    let report = transfer(&platform, "/regions", 1_000);
    assert_eq!(report["scanned"], 256 * 65_536, "{report}");
    assert_eq!(
        report["nonzero"], 0,
        "a reused slot showed old data: {report}"
    );
}

#[test]
fn a_single_instance_slot_still_runs_a_chain_whose_producer_is_kept_for_its_consumer() {
    // The producer's instance is kept until the consumer placed its value; with one
    // slot the consumer would wait for it until its deadline, unless the worker tears
    // kept producers down when an event finds no free slot.
    let dir = faas_testing::temp_dir();
    let platform = start(&["--max-instances", "1"]);
    deploy_example(
        &platform,
        dir.path(),
        &[("timeout_ms = 60000", "timeout_ms = 5000")],
    );
    for len in [1_000, (4 << 20) + 1] {
        let started = std::time::Instant::now();
        assert_eq!(
            transfer(&platform, "/regions", len)["sum"],
            expected_sum(len)
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{len} bytes took {:?}: the consumer waited for the producer's slot",
            started.elapsed()
        );
    }
}

#[test]
fn a_read_only_interface_memory_is_read_in_place_and_a_write_to_it_traps() {
    let dir = faas_testing::temp_dir();
    let platform = start(&[]);
    // `transfer.consume` may only read its blob: reading works, copied or mapped.
    deploy_manifest(&platform, dir.path(), MEMORIES, &[]);
    for len in [1_000, (4 << 20) + 1] {
        let report = transfer(&platform, "/regions-memories", len);
        assert_eq!(report["sum"], expected_sum(len), "{report}");
    }
    // A write to it traps that step, copied or mapped.
    let probe = probe_as("consume", "write-read-only");
    for len in [1_000, (4 << 20) + 1] {
        deploy_manifest(&platform, dir.path(), MEMORIES, &pairs(&probe));
        let error = error_of(platform.post("/regions-memories", len.to_string()));
        let message = error["message"].as_str().unwrap();
        assert_eq!(error["kind"], "step_failed", "{len}: {error}");
        assert!(message.contains("`consume`"), "{len}: {message}");
        assert!(message.contains("trap"), "{len}: {message}");
    }
    // Under `scratch` (`export: readwrite`) the same write changes the step's own copy.
    let mut scratch = probe.to_vec();
    scratch.push((
        "blob.km:transfer.consume".to_owned(),
        "blob.km:scratch.consume".to_owned(),
    ));
    for len in [1_000, (4 << 20) + 1] {
        deploy_manifest(&platform, dir.path(), MEMORIES, &pairs(&scratch));
        let report = transfer(&platform, "/regions-memories", len);
        assert_eq!(report["wrote"], true, "{len}: {report}");
    }
}

#[test]
fn an_interface_memory_bounds_what_a_producer_may_create() {
    let dir = faas_testing::temp_dir();
    let platform = start(&[]);
    let small = (
        "blob.km:transfer.consume".to_owned(),
        "blob.km:small.consume".to_owned(),
    );
    let limit = "exceeds the 131072 bytes its Karmem memory";
    // The consumer's `payload` is at most 2 pages: a blob that fits goes through, and
    // the producer of a larger one is refused the pages for it.
    deploy_manifest(
        &platform,
        dir.path(),
        MEMORIES,
        &pairs(std::slice::from_ref(&small)),
    );
    assert_eq!(
        transfer(&platform, "/regions-memories", 1_000)["sum"],
        expected_sum(1_000)
    );
    let mut cases = vec![(
        vec![small.clone()],
        1 << 20,
        "`blob.km:small.payload` declares",
    )];
    // The probe asks for 4 pages: refused by the consumer's memory, or by the
    // producer's own (`small.make` writes into `made`).
    let mut oversize = probe_as("produce", "oversize").to_vec();
    oversize.push(small);
    cases.push((oversize, 1_000, "`blob.km:small.payload` declares"));
    let mut own = probe_as("produce", "oversize").to_vec();
    own.push((
        "input = \"text\"\n".to_owned(),
        "input = \"text\"\ninterface = \"blob.km:small.make\"\n".to_owned(),
    ));
    cases.push((own, 1_000, "`blob.km:small.made` declares"));
    for (replacements, len, memory) in cases {
        deploy_manifest(&platform, dir.path(), MEMORIES, &pairs(&replacements));
        let error = error_of(platform.post("/regions-memories", len.to_string()));
        let message = error["message"].as_str().unwrap();
        assert_eq!(error["kind"], "step_failed", "{error}");
        assert!(message.contains("`produce`"), "{message}");
        assert!(message.contains(limit), "{message}");
        assert!(message.contains(memory), "{message}");
    }
    // A reference to a function the interface does not have is refused at deploy.
    let bad = copy_manifest(
        dir.path(),
        MEMORIES,
        &[("transfer.consume", "transfer.consumer")],
    );
    let output = platform.faas(&["deploy", "--no-build", bad.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("steps.consume.interface"), "{stderr}");
    assert!(
        stderr.contains("interface `transfer` has no function `consumer`"),
        "{stderr}"
    );
}
