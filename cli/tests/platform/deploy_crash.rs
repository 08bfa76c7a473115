//! Services mode: a deploy is staged and becomes live only once its workers loaded it,
//! under a short lease on the workflow. A gateway killed with SIGKILL in the middle of
//! a deploy changes nothing: the previous revision keeps serving, its components stay
//! in Redis through the scheduler's collection, and the dead gateway's lease ends
//! within seconds, so the deploy can be made again.

use crate::redis::connect;
use crate::services::Services;
use crate::support::{copy_manifest, deploy_at, faas_at, repo};
use redis::Commands;
use std::time::{Duration, Instant};

/// The live record of workflow `name`, as JSON.
fn live_record(redis: &mut redis::Connection, name: &str) -> serde_json::Value {
    let record: String = redis.hget("faas:deployments", name).unwrap();
    serde_json::from_str(&record).unwrap()
}

fn component_key(record: &serde_json::Value, function: &str) -> String {
    format!(
        "faas:component:{}",
        record["components"][function].as_str().unwrap()
    )
}

#[test]
fn a_gateway_killed_mid_deploy_leaves_the_previous_revision_serving_and_unlocks_soon() {
    let mut services = Services::start_with(&["w1"], &["--component-ttl-s", "1"]);
    deploy_at(&services.url, &repo("functions/hello/workflow.toml"));
    assert_eq!(
        services.get("/hello?name=one").text().unwrap().trim(),
        "Hello, one!"
    );
    let mut redis = connect(&services.redis);
    let first = live_record(&mut redis, "hello");
    let first_component = component_key(&first, "hello");

    // Revision 2 answers differently, with another component.
    let dir = faas_testing::temp_dir();
    let second = copy_manifest(
        dir.path(),
        "functions/hello/workflow.toml",
        &[("release/hello.wasm", "release/wasi-hello.wasm")],
    );
    // The worker is paused so the deploy is certainly waiting for it when the gateway
    // dies: staged, not live.
    services.worker("w1").signal(libc::SIGSTOP);
    let deploy = {
        let (url, manifest) = (services.url.clone(), second.clone());
        std::thread::spawn(move || faas_at(&url, &["deploy", manifest.to_str().unwrap()]))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let staged = loop {
        let staged: Option<String> = redis.hget("faas:deployments:staged", "hello").unwrap();
        if let Some(staged) = staged {
            break serde_json::from_str::<serde_json::Value>(&staged).unwrap();
        }
        assert!(Instant::now() < deadline, "revision 2 was never staged");
        std::thread::sleep(Duration::from_millis(5));
    };
    services.kill_gateway();
    let killed = Instant::now();
    services.worker("w1").signal(libc::SIGCONT);
    assert!(
        !deploy.join().unwrap().status.success(),
        "the deploy cannot have succeeded through a dead gateway"
    );
    assert_eq!(
        live_record(&mut redis, "hello")["revision"],
        first["revision"],
        "the live record is still revision 1"
    );

    services.start_gateway();
    services.wait_for("hello served through the new gateway", |services| {
        services.get("/hello?name=x").status() == 200
    });
    for i in 0..10 {
        assert_eq!(
            services
                .get(&format!("/hello?name={i}"))
                .text()
                .unwrap()
                .trim(),
            format!("Hello, {i}!"),
            "revision 1 still serves"
        );
    }

    // Once the dead gateway's lease expired, the scheduler removes its staged record;
    // the collection then deletes the component only that record named, and keeps the
    // live revision's.
    let staged_component = component_key(&staged, "hello");
    services.wait_for("the abandoned staged record removed", |_| {
        !redis
            .hexists::<_, _, bool>("faas:deployments:staged", "hello")
            .unwrap()
    });
    services.wait_for("the staged-only component collected", |_| {
        !redis.exists::<_, bool>(&staged_component).unwrap()
    });
    let deleted = services
        .scheduler
        .metric("faas_scheduler_components_deleted_total");
    assert!(
        deleted.is_some_and(|deleted| deleted >= 1.0),
        "the scheduler's collection did not count it: {deleted:?}"
    );
    assert!(
        redis.exists::<_, bool>(&first_component).unwrap(),
        "revision 1's component is kept"
    );
    assert_eq!(
        services.get("/hello?name=kept").text().unwrap().trim(),
        "Hello, kept!"
    );

    // The lease did not outlive its gateway by more than a few seconds.
    let output = faas_at(&services.url, &["deploy", second.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "redeployed {:?} after the kill",
        killed.elapsed()
    );
    let answer = services.get("/hello?name=two").text().unwrap();
    assert!(
        answer.starts_with("Hello from a plain wasi:http component"),
        "{answer}"
    );
}

#[test]
fn a_deploy_waits_for_a_lease_held_elsewhere_only_until_it_expires() {
    let services = Services::start(&["w1"]);
    deploy_at(&services.url, &repo("functions/hello/workflow.toml"));
    // A gateway that took the lease and died: its lease is short.
    let mut redis = connect(&services.redis);
    let _: () = redis::cmd("SET")
        .arg("faas:lock:hello")
        .arg("a-dead-gateway")
        .arg("PX")
        .arg(3_000)
        .query(&mut redis)
        .unwrap();
    let dir = faas_testing::temp_dir();
    let changed = copy_manifest(
        dir.path(),
        "functions/hello/workflow.toml",
        &[("greeting = \"Hello\"", "greeting = \"Hi\"")],
    );
    let refused = faas_at(&services.url, &["deploy", changed.to_str().unwrap()]);
    assert!(!refused.status.success());
    let start = Instant::now();
    services.wait_for("the deploy accepted once the lease expired", |services| {
        faas_at(&services.url, &["deploy", changed.to_str().unwrap()])
            .status
            .success()
    });
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        services.get("/hello?name=x").text().unwrap().trim(),
        "Hi, x!"
    );
    // The lease of a successful deploy is released, not left to expire.
    assert!(!redis.exists::<_, bool>("faas:lock:hello").unwrap());
}
