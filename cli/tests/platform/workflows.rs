//! Workflow runs end to end through the gateway: chains, fan-out, joins, retries.

use crate::support::{Platform, copy_manifest, error_of, repo};
use std::collections::BTreeMap;

fn deployed(manifests: &[&str]) -> Platform {
    let platform = Platform::start();
    for manifest in manifests {
        platform.deploy(&repo(manifest));
    }
    platform
}

const TEXT: &str = "the quick brown fox jumps over the lazy dog\n\
    The dog sleeps; the fox runs. Ünïcödé wörds count too: wörds wörds\n\
    one two three two three three";

#[test]
fn word_count_map_reduce_equals_a_direct_count() {
    let platform = deployed(&["functions/wordcount/workflow.toml"]);
    let response = platform.post("/wordcount", TEXT);
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.headers().contains_key("x-faas-run-id"));
    let result: serde_json::Value = response.json().unwrap();

    let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
    for word in TEXT.split_whitespace() {
        *expected.entry(word).or_default() += 1;
    }
    assert_eq!(result["total"], TEXT.split_whitespace().count());
    assert_eq!(result["distinct"], expected.len());
    let counts: BTreeMap<String, u64> = serde_json::from_value(result["counts"].clone()).unwrap();
    let expected: BTreeMap<String, u64> = expected
        .into_iter()
        .map(|(w, n)| (w.to_owned(), n))
        .collect();
    assert_eq!(counts, expected);
}

#[test]
fn runs_are_listed_with_per_step_durations_and_counted_in_metrics() {
    let platform = deployed(&["functions/wordcount/workflow.toml"]);
    assert_eq!(platform.post("/wordcount", TEXT).status(), 200);
    let runs = platform.faas(&["runs", "wordcount", "--output", "json"]);
    assert!(runs.status.success());
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    let run = &runs["runs"][0];
    assert_eq!(run["status"], "succeeded");
    let steps = run["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert_eq!(names.iter().filter(|n| **n == "split").count(), 1);
    assert_eq!(
        names.iter().filter(|n| **n == "count").count(),
        4,
        "one per chunk"
    );
    assert_eq!(names.iter().filter(|n| **n == "merge").count(), 1);
    assert!(
        steps
            .iter()
            .all(|s| s["duration_ms"].as_f64().unwrap() > 0.0)
    );

    let text = platform.faas(&["runs", "wordcount"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("succeeded") && text.contains("count[3]"),
        "{text}"
    );

    let metrics = platform.metrics();
    assert!(
        metrics.contains(
            r#"faas_steps_total{tenant="demo",workflow="wordcount",step="count",outcome="succeeded"} 4"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"faas_runs_total{tenant="demo",workflow="wordcount",status="succeeded"} 1"#
        )
    );
}

/// A 300x200 RGB gradient as PNG.
fn test_png() -> Vec<u8> {
    let (width, height) = (300u32, 200u32);
    let mut pixels = Vec::with_capacity((width * height * 3) as usize);
    for y in 0..height {
        for x in 0..width {
            pixels.extend_from_slice(&[(x % 256) as u8, (y % 256) as u8, ((x + y) % 256) as u8]);
        }
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .write_header()
        .unwrap()
        .write_image_data(&pixels)
        .unwrap();
    out
}

#[test]
fn the_image_pipeline_makes_three_thumbnails_in_parallel_and_summarizes_them() {
    let platform = deployed(&["functions/thumbnails/workflow.toml"]);
    let response = platform.post("/thumbnails", test_png());
    assert_eq!(response.status(), 200);
    let summary: serde_json::Value = response.json().unwrap();
    assert_eq!(
        summary["source"],
        serde_json::json!({"width": 300, "height": 200})
    );
    let thumbnails = summary["thumbnails"].as_array().unwrap();
    let dims: Vec<(u64, u64, u64)> = thumbnails
        .iter()
        .map(|t| {
            (
                t["size"].as_u64().unwrap(),
                t["width"].as_u64().unwrap(),
                t["height"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(dims, vec![(16, 16, 11), (32, 32, 21), (64, 64, 43)]);
    let mut checksums: Vec<&str> = thumbnails
        .iter()
        .map(|t| t["sha256"].as_str().unwrap())
        .collect();
    assert!(
        checksums
            .iter()
            .all(|c| c.len() == 64 && c.chars().all(|ch| ch.is_ascii_hexdigit()))
    );
    checksums.dedup();
    assert_eq!(checksums.len(), 3);
    assert!(thumbnails.iter().all(|t| t["bytes"].as_u64().unwrap() > 60));
}

#[test]
fn a_step_that_fails_once_succeeds_on_retry() {
    let platform = deployed(&["functions/retry-chain/workflow.toml"]);
    let response = platform.post("/retry-chain", "");
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().unwrap(), "first,flaky(attempt 2),last");
    let runs = platform.faas(&["runs", "retry-chain", "--output", "json"]);
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    let flaky = runs["runs"][0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "flaky")
        .unwrap()
        .clone();
    assert_eq!(flaky["attempts"], 2);
    assert_eq!(flaky["succeeded"], true);
}

/// The retry-chain manifest with the flaky step's retries taken away.
fn without_retries(dir: &std::path::Path) -> std::path::PathBuf {
    copy_manifest(
        dir,
        "functions/retry-chain/workflow.toml",
        &[
            ("retries = { attempts = 3, backoff_ms = 10 }", ""),
            ("name = \"retry-chain\"", "name = \"no-retry\""),
            ("route = \"/retry-chain\"", "route = \"/no-retry\""),
        ],
    )
}

#[test]
fn a_step_that_keeps_failing_fails_the_run_naming_the_step_and_the_cause() {
    let platform = Platform::start();
    let dir = faas_testing::temp_dir();
    platform.deploy(&without_retries(dir.path()));
    let response = platform.post("/no-retry", "");
    assert_eq!(response.status(), 500);
    let error = error_of(response);
    assert_eq!(error["kind"], "step_failed");
    assert_eq!(error["workflow"], "no-retry");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("step `flaky`"), "{message}");
    assert!(
        message.contains("failing on purpose on attempt 1"),
        "{message}"
    );
    let runs = platform.faas(&["runs", "no-retry", "--output", "json"]);
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(runs["runs"][0]["status"], "failed");
    assert_eq!(runs["runs"][0]["run_id"], error["run_id"]);
}

/// The thumbnails manifest with two sizes for three branches (the third fails) and
/// the given join policy.
fn two_sizes_for_three_branches(dir: &std::path::Path, on_failure: &str) -> std::path::PathBuf {
    copy_manifest(
        dir,
        "functions/thumbnails/workflow.toml",
        &[
            ("sizes = \"16,32,64\"", "sizes = \"16,32\""),
            (
                "on_failure = \"fail\"",
                &format!("on_failure = \"{on_failure}\""),
            ),
            (
                "name = \"thumbnails\"",
                &format!("name = \"thumbs-{on_failure}\""),
            ),
            (
                "route = \"/thumbnails\"",
                &format!("route = \"/thumbs-{on_failure}\""),
            ),
        ],
    )
}

#[test]
fn a_failed_branch_fails_the_run_when_the_join_policy_says_fail() {
    let platform = Platform::start();
    let dir = faas_testing::temp_dir();
    platform.deploy(&two_sizes_for_three_branches(dir.path(), "fail"));
    let response = platform.post("/thumbs-fail", test_png());
    assert_eq!(response.status(), 500);
    let message = error_of(response)["message"].as_str().unwrap().to_owned();
    assert!(message.contains("step `resize` (branch 2)"), "{message}");
}

#[test]
fn the_join_continues_with_the_branches_that_succeeded_when_told_to() {
    let platform = Platform::start();
    let dir = faas_testing::temp_dir();
    platform.deploy(&two_sizes_for_three_branches(dir.path(), "continue"));
    let response = platform.post("/thumbs-continue", test_png());
    assert_eq!(response.status(), 200);
    let summary: serde_json::Value = response.json().unwrap();
    assert_eq!(summary["thumbnails"].as_array().unwrap().len(), 2);
}

#[test]
fn a_step_returning_another_type_than_declared_fails() {
    let platform = Platform::start();
    let dir = faas_testing::temp_dir();
    let manifest = format!(
        "name = \"liar\"\ntenant = \"t\"\n\n[functions.first]\ncomponent = \"{}\"\nkind = \"step\"\nconfig = {{ role = \"first\" }}\n\n[steps.first]\nfunction = \"first\"\ninput = \"text\"\noutput = \"json\"\n\n[[triggers.http]]\nroute = \"/liar\"\nstep = \"first\"\n",
        faas_testing::component_path("retry-chain").display()
    );
    let path = dir.path().join("liar.toml");
    std::fs::write(&path, manifest).unwrap();
    platform.deploy(&path);
    let response = platform.post("/liar", "");
    assert_eq!(response.status(), 500);
    let message = error_of(response)["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("returned a region of type `text`, but the step's output type is `json`"),
        "{message}"
    );
}
