//! The worker registry is written by the workers, so every reader takes it as hostile:
//! an entry that does not parse is left out rather than fail every reader, and once
//! the operator records the worker pods (Kubernetes mode) the workers are those pods,
//! whatever the registry says.

use faas_shared_state::{LoadStatus, SharedState, SharedStateError, WorkerInfo, WorkerPod};
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

/// A Ready worker pod at `ip`, port 7000, of capacity 4.
fn pod(ip: &str, uid: &str) -> WorkerPod {
    WorkerPod {
        ip: ip.parse().unwrap(),
        port: 7000,
        uid: uid.to_owned(),
        capacity: 4,
        ready: true,
        terminating: false,
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
    let mut raw = connection(&redis).await;
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
            .query_async::<()>(&mut raw)
            .await
            .unwrap();
    }
    redis::cmd("SET")
        .arg("faas:alive:w-3")
        .arg(1)
        .query_async::<()>(&mut raw)
        .await
        .unwrap();
    assert_eq!(live(&shared).await, entries(&[("w-1", "10.0.0.1:7000")]));
    assert_eq!(
        shared.load_statuses("w-1").await.unwrap(),
        BTreeMap::from([("shop".to_owned(), ready)])
    );
}

#[tokio::test]
async fn once_the_worker_pods_are_recorded_they_are_the_workers_whatever_the_registry_says() {
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
    // Before the operator recorded any pod (not Kubernetes mode), the registry is.
    assert_eq!(live(&shared).await.len(), 3);
    // A process told it is in Kubernetes mode believes no registration meanwhile, nor
    // takes there to be no worker: that is not known yet.
    let kubernetes = SharedState::connect(&redis.url())
        .await
        .unwrap()
        .requiring_worker_pods();
    assert_unknown(&kubernetes).await;

    let w2_starting = WorkerPod {
        ready: false,
        ..pod("10.0.0.2", "u2")
    };
    let pods = BTreeMap::from([
        ("w-1".to_owned(), pod("10.0.0.1", "u1")),
        ("w-2".to_owned(), w2_starting),
    ]);
    shared.replace_worker_pods(&pods).await.unwrap();
    let sets = shared.workers().await.unwrap();
    assert_eq!(
        sets.live,
        [WorkerInfo {
            capacity: 4,
            ..worker("w-1", "10.0.0.1:7000", "u1")
        }]
    );
    // A registered id that is no pod is dead, for the scheduler to forget.
    assert_eq!(sets.dead, ["forged"]);
    assert_eq!(live(&kubernetes).await, live(&shared).await);

    // What a worker writes of another (its address, draining, its heartbeat gone) or
    // of itself changes nothing.
    shared
        .heartbeat(&worker("w-1", "10.0.0.9:7000", "u1"), ALIVE)
        .await
        .unwrap();
    let mut draining = worker("w-1", "10.0.0.1:7000", "u1");
    draining.draining = true;
    draining.capacity = 100_000;
    shared.heartbeat(&draining, ALIVE).await.unwrap();
    shared.deregister("w-1").await.unwrap();
    assert_eq!(live(&shared).await, entries(&[("w-1", "10.0.0.1:7000")]));
    assert!(!shared.workers().await.unwrap().live[0].draining);

    // The operator's changes do: Ready, then being deleted (draining), then gone; a
    // pod of an IPv6 cluster.
    shared
        .put_worker_pod("w-2", &pod("10.0.0.2", "u2"))
        .await
        .unwrap();
    assert_eq!(live(&shared).await.len(), 2);
    let deleting = WorkerPod {
        terminating: true,
        ..pod("10.0.0.2", "u2")
    };
    shared.put_worker_pod("w-2", &deleting).await.unwrap();
    let w2 = shared.workers().await.unwrap().live.remove(1);
    assert!(w2.draining, "{w2:?}");
    shared.remove_worker_pod("w-2").await.unwrap();
    shared
        .put_worker_pod("w-6", &pod("fd00::6", "u6"))
        .await
        .unwrap();
    assert_eq!(
        live(&shared).await,
        entries(&[("w-1", "10.0.0.1:7000"), ("w-6", "[fd00::6]:7000")])
    );

    // Lost (Redis restarted empty): a process in Kubernetes mode believes no
    // registration until the operator records the pods again.
    assert!(shared.worker_pods_recorded().await.unwrap());
    redis::cmd("FLUSHALL")
        .query_async::<()>(&mut connection(&redis).await)
        .await
        .unwrap();
    shared
        .heartbeat(&worker("forged", "10.0.0.9:7000", "u9"), ALIVE)
        .await
        .unwrap();
    assert!(!shared.worker_pods_recorded().await.unwrap());
    assert_unknown(&kubernetes).await;
    shared.replace_worker_pods(&BTreeMap::new()).await.unwrap();
    assert!(live(&shared).await.is_empty());

    // Recorded by a version whose records this one does not read: not known either,
    // rather than no worker at all (which would drop every placement).
    redis::cmd("HSET")
        .arg("faas:worker-pods")
        .arg("w-1")
        .arg(r#"{"ip":"10.0.0.1","uid":"u1"}"#)
        .query_async::<()>(&mut connection(&redis).await)
        .await
        .unwrap();
    assert_unknown(&shared).await;
    shared
        .replace_worker_pods(&pods_of(&[("w-1", "10.0.0.1")]))
        .await
        .unwrap();
    assert_eq!(live(&shared).await.len(), 1);

    // A registry, or a worker's reports, made another type of key: read as none, not
    // an error of every reader.
    for key in ["faas:workers", "faas:loaded:w-1"] {
        let mut connection = connection(&redis).await;
        redis::cmd("DEL")
            .arg(key)
            .query_async::<()>(&mut connection)
            .await
            .unwrap();
        redis::cmd("SET")
            .arg(key)
            .arg("x")
            .query_async::<()>(&mut connection)
            .await
            .unwrap();
    }
    assert_eq!(live(&shared).await, entries(&[("w-1", "10.0.0.1:7000")]));
    assert!(shared.load_statuses("w-1").await.unwrap().is_empty());
}

async fn assert_unknown(shared: &SharedState) {
    assert!(
        matches!(
            shared.workers().await,
            Err(SharedStateError::WorkersUnknown)
        ),
        "the workers are taken as known"
    );
}

async fn connection(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Ready worker pods of `(name, ip)`.
fn pods_of(pods: &[(&str, &str)]) -> BTreeMap<String, WorkerPod> {
    pods.iter()
        .map(|(name, ip)| ((*name).to_owned(), pod(ip, &format!("u-{name}"))))
        .collect()
}
