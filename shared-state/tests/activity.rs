//! The scale-to-zero keys against a real redis-server: activity stamps only move
//! forward, a demand is cleared only up to the stamp its reader acted on, and removing
//! a workflow removes its fields (and no one else's), and neither is written for a
//! workflow that is not deployed.

use faas_shared_state::{DeploymentRecord, Removal, SharedState};
use faas_testing::RedisServer;
use std::collections::BTreeMap;
use std::time::Duration;

fn stamps(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs
        .iter()
        .map(|(name, at)| ((*name).to_owned(), *at))
        .collect()
}

/// Deploys a workflow called `name` with one HTTP route.
async fn deploy(shared: &SharedState, name: &str) {
    let manifest = format!(
        "name = \"{name}\"\ntenant = \"t\"\n\n[functions.f]\ncomponent = \"f.wasm\"\n\n\
         [[triggers.http]]\nroute = \"/{name}\"\nfunction = \"f\"\n"
    );
    let record = DeploymentRecord {
        workflow: faas_workflow::Workflow::parse("workflow.toml", &manifest).unwrap(),
        digest: "digest".to_owned(),
        revision: 1,
        deployed_at: 0,
        components: BTreeMap::from([("f".to_owned(), "sha".to_owned())]),
    };
    shared.put_deployment(&record).await.unwrap();
}

/// A state with `shop` and `blog` deployed.
async fn with_shop_and_blog(redis: &RedisServer) -> SharedState {
    let shared = SharedState::connect(&redis.url()).await.unwrap();
    deploy(&shared, "shop").await;
    deploy(&shared, "blog").await;
    shared
}

#[tokio::test]
async fn activity_is_recorded_in_one_batch_and_never_moves_back() {
    let redis = RedisServer::start();
    let shared = with_shop_and_blog(&redis).await;
    assert!(shared.activity().await.unwrap().is_empty());
    shared.record_activity(&BTreeMap::new()).await.unwrap();

    shared
        .record_activity(&stamps(&[("shop", 2_000), ("blog", 5_000)]))
        .await
        .unwrap();
    assert_eq!(
        shared.activity().await.unwrap(),
        stamps(&[("shop", 2_000), ("blog", 5_000)])
    );
    // Another gateway flushing an older stamp for `blog` leaves the newer one.
    shared
        .record_activity(&stamps(&[("shop", 3_000), ("blog", 4_000)]))
        .await
        .unwrap();
    assert_eq!(
        shared.activity().await.unwrap(),
        stamps(&[("shop", 3_000), ("blog", 5_000)])
    );
}

#[tokio::test]
async fn a_demand_is_cleared_only_up_to_the_stamp_acted_on() {
    let redis = RedisServer::start();
    let shared = with_shop_and_blog(&redis).await;
    assert!(shared.demand().await.unwrap().is_empty());
    assert!(!shared.clear_demand("shop", u64::MAX).await.unwrap());

    let first = shared.signal_demand("shop").await.unwrap().unwrap();
    shared.signal_demand("blog").await.unwrap();
    let demand = shared.demand().await.unwrap();
    assert_eq!(demand["shop"], first);
    assert!(demand.contains_key("blog"));

    // Signalled again after the reader looked: clearing what it read keeps it.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let again = shared.signal_demand("shop").await.unwrap().unwrap();
    assert!(again > first);
    assert!(!shared.clear_demand("shop", first).await.unwrap());
    assert_eq!(shared.demand().await.unwrap()["shop"], again);
    assert!(shared.clear_demand("shop", again).await.unwrap());
    let demand = shared.demand().await.unwrap();
    assert!(!demand.contains_key("shop"));
    assert!(demand.contains_key("blog"), "other workflows' demand stays");
}

#[tokio::test]
async fn removing_a_workflow_removes_its_activity_and_demand_and_a_late_gateway_writes_neither_back()
 {
    let redis = RedisServer::start();
    let shared = with_shop_and_blog(&redis).await;
    shared
        .record_activity(&stamps(&[("shop", 1_000), ("blog", 1_000)]))
        .await
        .unwrap();
    shared.signal_demand("shop").await.unwrap();
    shared.signal_demand("blog").await.unwrap();

    let lease = Duration::from_secs(30);
    assert!(shared.lock_workflow("shop", "a", lease).await.unwrap());
    assert_eq!(
        shared.remove_deployment("shop", "t", "a").await.unwrap(),
        Removal::Removed
    );
    assert_eq!(shared.activity().await.unwrap(), stamps(&[("blog", 1_000)]));
    let demand = shared.demand().await.unwrap();
    assert_eq!(demand.keys().collect::<Vec<_>>(), ["blog"]);

    // A gateway flushes the events it served in the second before the removal, and
    // one a sync behind still holds an event for it: the removed name gets neither
    // field back, while `blog`, still deployed, is recorded as before. A tenant
    // looping over deploy, invoke and remove with new names leaves nothing behind.
    shared
        .record_activity(&stamps(&[
            ("shop", 2_000),
            ("blog", 2_000),
            ("never", 2_000),
        ]))
        .await
        .unwrap();
    assert_eq!(shared.signal_demand("shop").await.unwrap(), None);
    assert_eq!(shared.signal_demand("never").await.unwrap(), None);
    assert_eq!(shared.activity().await.unwrap(), stamps(&[("blog", 2_000)]));
    let demand = shared.demand().await.unwrap();
    assert_eq!(demand.keys().collect::<Vec<_>>(), ["blog"]);
    assert!(shared.signal_demand("blog").await.unwrap().is_some());
}
