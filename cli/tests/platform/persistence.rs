//! Embedded mode loses nothing on restart: deployments made through the API and
//! key-value data are in `<data-dir>/faas.db`, so a `faas up` killed with SIGKILL and
//! started again on the same data dir serves them as they were.

use crate::support::{Platform, TOKEN, client, write_manifest};
use std::path::Path;

/// `GET /admin/v1/workflows/<name>`: the status code and, if found, the revision.
fn revision(platform: &Platform, name: &str) -> Option<u64> {
    let response = client()
        .get(platform.at(&format!("/admin/v1/workflows/{name}")))
        .bearer_auth(TOKEN)
        .send()
        .expect("GET workflow status");
    if response.status() == 404 {
        return None;
    }
    assert_eq!(response.status(), 200, "status of {name}");
    let status: serde_json::Value = response.json().expect("a JSON status");
    Some(status["revision"].as_u64().expect("a revision"))
}

/// `POST` to a counter of kv-counter: adds 1 and returns the new value.
fn count(platform: &Platform, path: &str) -> String {
    let response = platform.post(path, "");
    assert_eq!(response.status(), 200, "POST {path}");
    response.text().expect("a counter value").trim().to_owned()
}

/// A restart after SIGKILL on the same data dir, with nothing deployed at start.
fn restart(platform: &mut Platform, data: &Path) -> Platform {
    assert!(!platform.kill().success());
    Platform::start_in(data, &["--no-demo"])
}

#[test]
fn api_deploys_and_key_value_data_survive_a_kill() {
    let data = faas_testing::temp_dir();
    let manifests = faas_testing::temp_dir();
    let mut platform = Platform::start_in(data.path(), &["--no-demo"]);
    let counter = write_manifest(
        manifests.path(),
        "saved-counter",
        "demo",
        "kv-counter",
        "/saved/...",
        "",
    );
    platform.deploy(&counter);
    // A second revision (a changed manifest), so the saved one is not the first.
    let changed = write_manifest(
        manifests.path(),
        "saved-counter",
        "demo",
        "kv-counter",
        "/saved/...",
        "memory_mb = 64",
    );
    platform.deploy(&changed);
    let deployed = revision(&platform, "saved-counter").expect("deployed");
    for expected in ["1", "2", "3"] {
        assert_eq!(count(&platform, "/saved/counter/visits"), expected);
    }

    let mut platform = restart(&mut platform, data.path());
    assert_eq!(revision(&platform, "saved-counter"), Some(deployed));
    assert!(
        platform
            .stdout()
            .iter()
            .any(|line| line.starts_with("  restored saved-counter")),
        "{:?}",
        platform.stdout()
    );
    // The counter continues from its value: the key-value data came back too.
    assert_eq!(count(&platform, "/saved/counter/visits"), "4");
    // The next deploy is numbered above every saved revision.
    let other = write_manifest(
        manifests.path(),
        "saved-other",
        "demo",
        "hello",
        "/saved-other",
        "",
    );
    platform.deploy(&other);
    let other_revision = revision(&platform, "saved-other").expect("deployed");
    assert!(other_revision > deployed, "{other_revision} <= {deployed}");

    // Deploying the identical manifest at start changes nothing (`unchanged`).
    assert!(!platform.kill().success());
    let changed_path = changed.to_str().expect("UTF-8 path");
    let platform = Platform::start_in(data.path(), &["--deploy", changed_path]);
    assert_eq!(revision(&platform, "saved-counter"), Some(deployed));
    assert_eq!(revision(&platform, "saved-other"), Some(other_revision));
    assert_eq!(count(&platform, "/saved/counter/visits"), "5");
}

#[test]
fn a_removed_workflow_stays_removed_after_a_kill() {
    let data = faas_testing::temp_dir();
    let manifests = faas_testing::temp_dir();
    let mut platform = Platform::start_in(data.path(), &["--no-demo"]);
    for name in ["kept", "removed"] {
        let manifest = write_manifest(
            manifests.path(),
            name,
            "demo",
            "hello",
            &format!("/{name}"),
            "",
        );
        platform.deploy(&manifest);
    }
    let output = platform.faas(&["rm", "removed"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(platform.get("/removed").status(), 404);

    let platform = restart(&mut platform, data.path());
    assert_eq!(revision(&platform, "removed"), None);
    assert_eq!(platform.get("/removed").status(), 404);
    assert!(revision(&platform, "kept").is_some());
    assert_eq!(platform.get("/kept").status(), 200);
}

#[test]
fn a_saved_workflow_that_no_longer_loads_is_kept_out_of_service_not_a_crash() {
    let data = faas_testing::temp_dir();
    let manifests = faas_testing::temp_dir();
    let mut platform = Platform::start_in(data.path(), &["--no-demo"]);
    let broken = write_manifest(
        manifests.path(),
        "broken",
        "demo",
        "kv-counter",
        "/broken/...",
        "",
    );
    platform.deploy(&broken);
    let kept = write_manifest(manifests.path(), "kept", "demo", "hello", "/kept", "");
    platform.deploy(&kept);
    let kept_revision = revision(&platform, "kept").expect("deployed");
    assert!(!platform.kill().success());

    // What a component the engine no longer accepts looks like: a valid header and
    // nothing after it.
    let database = faas_store::Database::open(data.path()).expect("opening faas.db");
    let changed = database
        .lock()
        .execute(
            "UPDATE components SET bytes = X'0061736d0d000100' WHERE sha256 IN
                 (SELECT sha256 FROM deployment_components WHERE deployment = 'broken')",
            [],
        )
        .expect("corrupting a saved component");
    assert_eq!(changed, 1);
    drop(database);

    let platform = Platform::start_in(data.path(), &["--no-demo"]);
    assert_eq!(revision(&platform, "broken"), None);
    assert_eq!(platform.get("/broken/counter/x").status(), 404);
    assert_eq!(revision(&platform, "kept"), Some(kept_revision));
    assert_eq!(platform.get("/kept").status(), 200);
    // It stays saved until deployed again, which works and is numbered above it.
    let saved = faas_store::DeploymentStore::new(
        faas_store::Database::open(data.path()).expect("opening faas.db"),
    )
    .load_all()
    .expect("reading the saved deployments");
    assert!(saved.iter().any(|deployment| deployment.name == "broken"));
    platform.deploy(&broken);
    let redeployed = revision(&platform, "broken").expect("deployed again");
    assert!(
        redeployed > kept_revision,
        "{redeployed} <= {kept_revision}"
    );
    assert_eq!(count(&platform, "/broken/counter/x"), "1");
}

/// A route longer than today's limit, saved by a version that had none, is served
/// again after the upgrade: the limit holds for new deploys only. It used to stay out
/// of service, since restoring parsed the saved manifest as a new declaration.
#[test]
fn a_saved_route_longer_than_the_limit_added_since_is_still_served_after_a_restart() {
    let data = faas_testing::temp_dir();
    let manifests = faas_testing::temp_dir();
    let mut platform = Platform::start_in(data.path(), &["--no-demo"]);
    let manifest = write_manifest(manifests.path(), "older", "demo", "hello", "/short", "");
    platform.deploy(&manifest);
    let saved_revision = revision(&platform, "older").expect("deployed");
    assert!(!platform.kill().success());

    // What a version without the limit saved: the same deployment with a longer route.
    let long_route = format!("/{}", "a".repeat(faas_workflow::MAX_ROUTE_LEN + 100));
    let database = faas_store::Database::open(data.path()).expect("opening faas.db");
    let changed = database
        .lock()
        .execute(
            "UPDATE deployments SET manifest = replace(manifest, '\"/short\"', ?1)
                 WHERE name = 'older'",
            [format!("\"{long_route}\"")],
        )
        .expect("lengthening the saved route");
    assert_eq!(changed, 1);
    drop(database);

    let platform = Platform::start_in(data.path(), &["--no-demo"]);
    assert_eq!(revision(&platform, "older"), Some(saved_revision));
    assert_eq!(platform.get(&long_route).status(), 200);
    assert_eq!(platform.get("/short").status(), 404);
    // A new deploy of the same route is still refused, naming the field.
    let again = write_manifest(manifests.path(), "newer", "demo", "hello", &long_route, "");
    let output = platform.faas(&["deploy", again.to_str().expect("UTF-8 path")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("triggers.http[0].route"), "{stderr}");
    assert_eq!(revision(&platform, "newer"), None);
}
