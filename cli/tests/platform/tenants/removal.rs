//! A removed tenant's data goes with it. Without that, a tenant created again under a
//! removed tenant's name (for someone else, perhaps) would read the removed one's
//! key-value entries and streams. Here tenant `victim`'s counters are removed with it,
//! a `victim` created again counts from nothing, and tenant `hog`'s entries, written
//! throughout, are all still there.

use super::quotas::{count, deploy_kv, operator, send};
use crate::services::Services;
use crate::support::{Platform, TOKEN, deploy_at, faas_as, write_manifest};

/// Runs the removal on the platform at `url`.
fn check_removal(url: &str) {
    operator(url, &["create", "hog"]);
    operator(url, &["create", "victim"]);
    let dir = faas_testing::temp_dir();
    deploy_kv(url, dir.path());
    count(url, "visits", 3);
    count(url, "orders", 1);
    assert_eq!(send(url, "PUT", "/kv-filler/key/kept", "v").0, 204);

    assert!(faas_as(url, TOKEN, &["rm", "counter"]).status.success());
    let removed = faas_as(url, TOKEN, &["tenant", "rm", "victim", "--output", "json"]);
    assert!(removed.status.success(), "{removed:?}");
    let removed: serde_json::Value = serde_json::from_slice(&removed.stdout).unwrap();
    assert_eq!(removed["removed_kv_entries"], 2, "{removed}");

    operator(url, &["create", "victim"]);
    let again = write_manifest(
        dir.path(),
        "counter",
        "victim",
        "kv-counter",
        "/counter/...",
        "",
    );
    deploy_at(url, &again);
    // From nothing: the first increment of each counter gives 1.
    count(url, "visits", 1);
    count(url, "orders", 1);
    assert_eq!(
        send(url, "GET", "/kv-filler/key/kept", ""),
        (200, "v".into())
    );
}

#[test]
fn a_removed_tenants_key_value_entries_go_with_it_and_anothers_stay() {
    let platform = Platform::start();
    check_removal(&platform.url);
}

/// In services mode the entries are in Redis, which every gateway and worker shares.
#[test]
fn services_mode_a_removed_tenants_key_value_entries_go_with_it_and_anothers_stay() {
    let services = Services::start(&["w1"]);
    check_removal(&services.url);
}
