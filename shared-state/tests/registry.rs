//! The worker registry is written by the workers, so every reader takes it as hostile:
//! an entry that does not parse is left out rather than fail every reader, and once
//! the operator records the worker pods (Kubernetes mode) only an entry that matches
//! its pod's name, IP and UID is believed.

use faas_shared_state::{LoadStatus, SharedState, WorkerInfo, WorkerPod};
use faas_testing::RedisServer;
use std::collections::BTreeMap;
use std::time::Duration;

const ALIVE: Duration = Duration::from_secs(60);

fn worker(id: &str, addr: &str, host: &str) -> WorkerInfo {
    WorkerInfo {
        id: id.to_owned(),
        addr: addr.to_owned(),
        capacity: 8,
        host: host.to_owned(),
        socket: None,
        draining: false,
    }
}

fn pod(ip: &str, uid: &str) -> WorkerPod {
    WorkerPod {
        ip: ip.parse().unwrap(),
        uid: uid.to_owned(),
    }
}

async fn live(shared: &SharedState) -> Vec<(String, String)> {
    shared
        .workers()
        .await
        .unwrap()
        .live
        .into_iter()
        .map(|info| (info.id, info.addr))
        .collect()
}

fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(id, addr)| ((*id).to_owned(), (*addr).to_owned()))
        .collect()
}

#[tokio::test]
async fn malformed_registrations_and_reports_are_left_out_and_the_rest_is_read() {
    let redis = RedisServer::start();
    let shared = SharedState::connect(&redis.url()).await.unwrap();
    shared
        .heartbeat(&worker("w-1", "10.0.0.1:7000", "u1"), ALIVE)
        .await
        .unwrap();
    let ready = LoadStatus {
        revision: 3,
        error: None,
        error_kind: None,
        functions: Vec::new(),
    };
    shared
        .report_load("w-1", "shop", Some(&ready))
        .await
        .unwrap();
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for (key, field) in [
        ("faas:workers", "w-2"),
        ("faas:loaded:w-1", "blog"),
        // An entry under one id that names another.
        ("faas:workers", "w-3"),
    ] {
        let value = if field == "w-3" {
            serde_json::to_string(&worker("w-1", "10.0.0.9:7000", "u1")).unwrap()
        } else {
            "{not json".to_owned()
        };
        redis::cmd("HSET")
            .arg(key)
            .arg(field)
            .arg(value)
            .query_async::<()>(&mut connection)
            .await
            .unwrap();
    }
    redis::cmd("SET")
        .arg("faas:alive:w-3")
        .arg(1)
        .query_async::<()>(&mut connection)
        .await
        .unwrap();
    assert_eq!(live(&shared).await, entries(&[("w-1", "10.0.0.1:7000")]));
    assert_eq!(
        shared.load_statuses("w-1").await.unwrap(),
        BTreeMap::from([("shop".to_owned(), ready)])
    );
}

#[tokio::test]
async fn once_the_worker_pods_are_recorded_only_an_entry_matching_its_pod_is_believed() {
    let redis = RedisServer::start();
    let shared = SharedState::connect(&redis.url()).await.unwrap();
    for (id, addr, host) in [
        ("w-1", "10.0.0.1:7000", "u1"),
        ("w-2", "10.0.0.2:7000", "u2"),
        ("forged", "10.0.0.9:7000", "u9"),
    ] {
        shared
            .heartbeat(&worker(id, addr, host), ALIVE)
            .await
            .unwrap();
    }
    // Before the operator recorded any pod (not Kubernetes mode), all are believed.
    assert_eq!(live(&shared).await.len(), 3);

    let pods = BTreeMap::from([
        ("w-1".to_owned(), pod("10.0.0.1", "u1")),
        ("w-2".to_owned(), pod("10.0.0.2", "u2")),
    ]);
    shared.replace_worker_pods(&pods).await.unwrap();
    assert_eq!(
        live(&shared).await,
        entries(&[("w-1", "10.0.0.1:7000"), ("w-2", "10.0.0.2:7000")])
    );

    // A real worker's id at the forger's address, or with another pod's host.
    shared
        .heartbeat(&worker("w-1", "10.0.0.9:7000", "u1"), ALIVE)
        .await
        .unwrap();
    shared
        .heartbeat(&worker("w-2", "10.0.0.2:7000", "u1"), ALIVE)
        .await
        .unwrap();
    assert!(live(&shared).await.is_empty());
    // Or a name for the address, which could resolve anywhere.
    shared
        .heartbeat(&worker("w-1", "w-1.example:7000", "u1"), ALIVE)
        .await
        .unwrap();
    assert!(live(&shared).await.is_empty());
    // Its heartbeat writes the real one back.
    shared
        .heartbeat(&worker("w-1", "10.0.0.1:7000", "u1"), ALIVE)
        .await
        .unwrap();
    assert_eq!(live(&shared).await, entries(&[("w-1", "10.0.0.1:7000")]));

    // A new pod (of an IPv6 cluster), then its deletion.
    shared
        .heartbeat(&worker("w-4", "[fd00::4]:7000", "u4"), ALIVE)
        .await
        .unwrap();
    assert_eq!(live(&shared).await.len(), 1);
    shared
        .put_worker_pod("w-4", &pod("fd00::4", "u4"))
        .await
        .unwrap();
    assert_eq!(live(&shared).await.len(), 2);
    shared.remove_worker_pod("w-4").await.unwrap();
    assert_eq!(live(&shared).await, entries(&[("w-1", "10.0.0.1:7000")]));

    // A new full list replaces the old one, and still enforces when it is empty.
    shared.replace_worker_pods(&BTreeMap::new()).await.unwrap();
    assert!(live(&shared).await.is_empty());
}
