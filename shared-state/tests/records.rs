//! Deployment records are read again only when they changed: every gateway, worker,
//! scheduler and operator reads them at every sync (200 ms), and a tenant's workflows
//! may hold up to a MiB of manifest each, so reading them whole each time multiplied
//! what a tenant wrote once by five a second and by every process.

use faas_shared_state::{DeploymentRecord, Removal, SharedState};
use faas_testing::RedisServer;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn record(name: &str, description: &str) -> DeploymentRecord {
    let manifest = format!(
        "name = \"{name}\"\ntenant = \"t\"\ndescription = \"{description}\"\n\n\
         [functions.f]\ncomponent = \"f.wasm\"\n\n[[triggers.http]]\nroute = \"/{name}\"\n\
         function = \"f\"\n"
    );
    DeploymentRecord {
        workflow: faas_workflow::Workflow::parse("workflow.toml", &manifest).unwrap(),
        digest: format!("digest-{name}-{description}"),
        revision: 1,
        deployed_at: 0,
        components: BTreeMap::from([("f".to_owned(), "sha".to_owned())]),
    }
}

/// How many `HGETALL`s the server has answered.
fn hgetalls(redis: &RedisServer) -> u64 {
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut connection)
        .unwrap();
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_hgetall:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

#[tokio::test]
async fn records_are_read_again_only_once_they_changed_and_every_change_is_seen_at_once() {
    let redis = RedisServer::start();
    let writer = SharedState::connect(&redis.url()).await.unwrap();
    let reader = SharedState::connect(&redis.url()).await.unwrap();
    writer.put_deployment(&record("shop", "one")).await.unwrap();
    assert_eq!(
        reader.deployments().await.unwrap()["shop"],
        record("shop", "one")
    );

    // Unchanged: read from what the reader kept, not from Redis.
    let before = hgetalls(&redis);
    for _ in 0..20 {
        assert_eq!(reader.deployments().await.unwrap().len(), 1);
    }
    assert!(
        hgetalls(&redis) - before <= 1,
        "read whole again while unchanged"
    );

    // Every change through the API is seen at the next read.
    writer.put_deployment(&record("shop", "two")).await.unwrap();
    assert_eq!(
        reader.deployments().await.unwrap()["shop"],
        record("shop", "two")
    );
    assert!(
        writer
            .lock_workflow("shop", "a", Duration::from_secs(30))
            .await
            .unwrap()
    );
    let staged = record("shop", "three");
    assert!(writer.stage_deployment(&staged, "a").await.unwrap());
    assert_eq!(reader.staged_deployments().await.unwrap()["shop"], staged);
    assert_eq!(
        writer.remove_deployment("shop", "t", "a").await.unwrap(),
        Removal::Removed
    );
    assert!(reader.deployments().await.unwrap().is_empty());
    assert!(reader.staged_deployments().await.unwrap().is_empty());

    // A write that sets no new token (a process of an older version) is seen too,
    // within the records' longest keeping (5 s).
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let raw = serde_json::to_string(&record("old", "x")).unwrap();
    let _: () = redis::cmd("HSET")
        .arg("faas:deployments")
        .arg("old")
        .arg(raw)
        .query(&mut connection)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reader.deployments().await.unwrap().contains_key("old") {
        assert!(
            Instant::now() < deadline,
            "a write without a token was never seen"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
