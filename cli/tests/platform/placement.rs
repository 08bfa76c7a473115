//! Placement with several workers in one process: tenants packed, spill, failover,
//! replicas.

use crate::support::{Platform, TOKEN, client, repo, write_manifest};
use std::collections::BTreeMap;

/// Worker id -> the workflows on it, from `faas workers --output json`.
fn workers(platform: &Platform) -> BTreeMap<String, Vec<String>> {
    let output = platform.faas(&["workers", "--output", "json"]);
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    json["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let names = w["workflows"].as_array().unwrap().iter();
            (
                w["id"].as_str().unwrap().to_owned(),
                names.map(|n| n.as_str().unwrap().to_owned()).collect(),
            )
        })
        .collect()
}

fn worker_of(platform: &Platform, workflow: &str) -> String {
    workers(platform)
        .into_iter()
        .find(|(_, names)| names.iter().any(|n| n == workflow))
        .map(|(id, _)| id)
        .unwrap_or_else(|| panic!("{workflow} is on no worker"))
}

#[test]
fn a_tenants_workflows_share_a_worker_until_it_is_full_then_spill() {
    let platform = Platform::start_with(&["--no-demo", "--workers", "2", "--worker-capacity", "2"]);
    for manifest in ["hello", "kv-counter", "wasi-hello"] {
        platform.deploy(&repo(&format!("functions/{manifest}/workflow.toml")));
    }
    let home = worker_of(&platform, "hello");
    assert_eq!(
        worker_of(&platform, "kv-counter"),
        home,
        "same tenant, same worker"
    );
    assert_ne!(
        worker_of(&platform, "wasi-hello"),
        home,
        "spilled when full"
    );
    for path in ["/hello", "/wasi-hello", "/counter/x"] {
        assert_eq!(platform.get(path).status(), 200, "{path}");
    }
}

#[test]
fn another_tenant_goes_to_the_least_loaded_worker() {
    let platform = Platform::start_with(&["--no-demo", "--workers", "2"]);
    platform.deploy(&repo("functions/hello/workflow.toml"));
    platform.deploy(&repo("functions/misbehave/workflow.toml"));
    assert_ne!(
        worker_of(&platform, "hello"),
        worker_of(&platform, "misbehave")
    );
}

#[test]
fn a_removed_workers_workflows_are_placed_again_and_keep_serving() {
    let platform = Platform::start_with(&["--no-demo", "--workers", "2"]);
    platform.deploy(&repo("functions/wordcount/workflow.toml"));
    let before = worker_of(&platform, "wordcount");
    let removed = client()
        .delete(platform.at(&format!("/admin/v1/workers/{before}")))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(removed.status(), 200);
    let after = worker_of(&platform, "wordcount");
    assert_ne!(after, before);
    assert!(!workers(&platform).contains_key(&before));
    let response = platform.post("/wordcount", "a b a");
    assert_eq!(response.status(), 200);
    let result: serde_json::Value = response.json().unwrap();
    assert_eq!(result["total"], 3);
}

#[test]
fn replicas_are_whole_copies_on_distinct_workers() {
    let platform = Platform::start_with(&["--no-demo", "--workers", "3"]);
    let dir = faas_testing::temp_dir();
    let manifest = write_manifest(dir.path(), "twice", "t", "misbehave", "/misbehave/...", "");
    let text = std::fs::read_to_string(&manifest).unwrap() + "\n[workflow]\nreplicas = 2\n";
    std::fs::write(&manifest, text).unwrap();
    platform.deploy(&manifest);
    let status = platform.faas(&["status", "twice", "--output", "json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let on: Vec<&str> = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(on.len(), 2);
    assert_ne!(on[0], on[1]);
    for _ in 0..4 {
        assert_eq!(platform.get("/misbehave/count").text().unwrap(), "1\n");
    }
}
