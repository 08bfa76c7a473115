//! Redis triggers and Redis state with a real redis-server: pub/sub starts runs,
//! streams deliver at least once with acknowledgement, reclaim and dead-lettering,
//! and the platform rides out a Redis restart.

use crate::logs::wait_for_line;
use crate::services::subscribers;
use crate::support::{Platform, TOKEN, client, faas_at, sample_value, write_manifest};
use crate::tenants::scene::assert_success;
use faas_testing::RedisServer;
use redis::Commands;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn platform_with(redis: &RedisServer) -> Platform {
    Platform::start_with(&["--no-demo", "--redis", &redis.url()])
}

/// The tenant of the relay workflows.
pub(crate) const TENANT: &str = "t";

/// The Redis key of channel or stream `name` of the relay workflows' tenant: what a
/// producer outside the platform writes to.
pub(crate) fn ns(name: &str) -> String {
    format!("t:{TENANT}:{name}")
}

/// A workflow of one `relay` step that appends `source|id|deliveries|payload` to
/// its tenant's stream `<name>:out` ([`ns`]), started by `triggers` (TOML).
pub(crate) fn relay_manifest(dir: &std::path::Path, name: &str, triggers: &str) -> PathBuf {
    relay_manifest_for(dir, TENANT, name, "", triggers)
}

/// [`relay_manifest`] for `tenant`, with `function` (TOML) added to the relay
/// function's table.
pub(crate) fn relay_manifest_for(
    dir: &std::path::Path,
    tenant: &str,
    name: &str,
    function: &str,
    triggers: &str,
) -> PathBuf {
    let text = format!(
        "name = \"{name}\"\ntenant = \"{tenant}\"\n\n[functions.relay]\ncomponent = \"{}\"\nkind = \"step\"\nconfig = {{ out = \"{name}:out\" }}\n{function}\n\n\
         [steps.relay]\nfunction = \"relay\"\ninput = \"bytes\"\noutput = \"text\"\n\n{triggers}\n",
        faas_testing::component_path("relay").display()
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// The distinct messages relayed in `out` (its lines are `source|id|deliveries|message`),
/// sorted.
pub(crate) fn distinct_messages(out: &[String]) -> Vec<String> {
    let mut seen: Vec<String> = out
        .iter()
        .map(|line| line.rsplit('|').next().unwrap().to_owned())
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

pub(crate) fn connect(redis: &RedisServer) -> redis::Connection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// The `payload` fields of `stream`'s entries, once there are at least `count` of
/// them (within `patience`).
pub(crate) fn payloads(
    redis: &RedisServer,
    stream: &str,
    count: usize,
    patience: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + patience;
    loop {
        let found = connect(redis)
            .xrange_all::<_, redis::streams::StreamRangeReply>(stream)
            .map(|reply| {
                reply
                    .ids
                    .iter()
                    .map(|entry| entry.get::<String>("payload").unwrap_or_default())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        if found.len() >= count {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{stream} has {} of {count} entries after {patience:?}: {found:?}",
            found.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn xadd(redis: &RedisServer, stream: &str, payload: &str) -> String {
    connect(redis)
        .xadd(stream, "*", &[("payload", payload)])
        .unwrap()
}

pub(crate) fn pending(redis: &RedisServer, stream: &str, group: &str) -> usize {
    let reply: redis::streams::StreamPendingReply = connect(redis).xpending(stream, group).unwrap();
    reply.count()
}

#[test]
fn a_pubsub_message_starts_a_run_with_its_payload() {
    let redis = RedisServer::start();
    let platform = platform_with(&redis);
    let dir = faas_testing::temp_dir();
    let triggers = "[[triggers.redis]]\nchannel = \"news\"\nstep = \"relay\"\n";
    platform.deploy(&relay_manifest(dir.path(), "pubsub", triggers));
    // Pub/sub is at-most-once: publish until the trigger's subscription receives it.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let receivers: i64 = connect(&redis).publish(ns("news"), "hello").unwrap();
        if receivers > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "nobody subscribed to `news`");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = payloads(&redis, &ns("pubsub:out"), 1, Duration::from_secs(20));
    assert_eq!(out, vec!["news||1|hello"]);
    let runs = platform.faas(&["runs", "pubsub", "--output", "json"]);
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(runs["runs"][0]["status"], "succeeded");
}

/// Messages waiting for one of their channel's runs when the gateway's lease on the
/// channel ends are not run (another gateway may follow the channel by then, and a
/// message runs at most once), but the tenant's logs say how many: every message
/// published is run or counted, none goes unsaid.
#[test]
fn messages_still_waiting_when_the_channel_lease_ends_are_counted_in_the_logs() {
    const PUBLISHED: usize = 400;
    let redis = RedisServer::start();
    // One instance slot, which a slow request holds: the channel's runs wait for it,
    // and the messages past the runs a channel may have in flight wait for those.
    let url = redis.url();
    let platform = Platform::start_with(&["--no-demo", "--redis", &url, "--max-instances", "1"]);
    let dir = faas_testing::temp_dir();
    let triggers = "[[triggers.redis]]\nchannel = \"news\"\nstep = \"relay\"\n";
    let relay = relay_manifest_for(dir.path(), TENANT, "pubsub", "timeout_ms = 60000", triggers);
    platform.deploy(&relay);
    let extra = "timeout_ms = 10000";
    platform.deploy(&write_manifest(
        dir.path(),
        "hog",
        "hog",
        "misbehave",
        "/misbehave/...",
        extra,
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    while subscribers(&redis, &ns("news")) == 0 {
        assert!(Instant::now() < deadline, "nobody subscribed to `news`");
        std::thread::sleep(Duration::from_millis(20));
    }
    let slow = {
        let url = platform.at("/misbehave/slow?ms=4000");
        std::thread::spawn(move || client().get(url).send().unwrap().status().as_u16())
    };
    std::thread::sleep(Duration::from_millis(500));
    let mut connection = connect(&redis);
    for index in 0..PUBLISHED {
        let receivers: i64 = connection
            .publish(ns("news"), format!("m-{index}"))
            .unwrap();
        assert_eq!(receivers, 1);
    }
    // Another gateway takes the lease over: this one's next renewal, within a second,
    // finds it taken. The runs it started go on.
    std::thread::sleep(Duration::from_millis(200));
    let lease = format!("faas:lease:channel:pubsub:{}", ns("news"));
    let () = connection.set(&lease, "another-gateway").unwrap();

    let lines = wait_for_line(&platform.url, TOKEN, &["pubsub"], "were dropped");
    let line = lines
        .iter()
        .filter_map(|line| line["text"].as_str())
        .find(|text| text.contains("were dropped"))
        .unwrap();
    assert!(
        line.contains("messages on channel `news` were dropped") && line.contains("lease"),
        "{line}"
    );
    let dropped: usize = line
        .split(" messages on channel")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line}"));
    assert_eq!(slow.join().unwrap(), 200);
    let out = payloads(
        &redis,
        &ns("pubsub:out"),
        PUBLISHED - dropped,
        Duration::from_secs(60),
    );
    assert_eq!(
        distinct_messages(&out).len() + dropped,
        PUBLISHED,
        "{dropped} said dropped, {} run",
        out.len()
    );
}

#[test]
fn every_stream_entry_is_processed_and_acknowledged_including_those_before_the_deploy() {
    let redis = RedisServer::start();
    let platform = platform_with(&redis);
    for i in 0..100 {
        xadd(&redis, &ns("orders"), &format!("early-{i}"));
    }
    let dir = faas_testing::temp_dir();
    let triggers = "[[triggers.stream]]\nstream = \"orders\"\nstep = \"relay\"\n";
    platform.deploy(&relay_manifest(dir.path(), "orders", triggers));
    for i in 0..100 {
        xadd(&redis, &ns("orders"), &format!("late-{i}"));
    }
    let out = payloads(&redis, &ns("orders:out"), 200, Duration::from_secs(60));
    let seen = distinct_messages(&out);
    let mut expected: Vec<String> = (0..100)
        .flat_map(|i| [format!("early-{i}"), format!("late-{i}")])
        .collect();
    expected.sort();
    assert_eq!(seen, expected, "every entry processed");
    let deadline = Instant::now() + Duration::from_secs(10);
    while pending(&redis, &ns("orders"), "orders") > 0 {
        assert!(Instant::now() < deadline, "entries left unacknowledged");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// An entry read as new is on its first delivery: the consumer runs it as such without
// a round trip to ask Redis (XPENDING), which only a reclaimed entry needs.
#[test]
fn a_new_entry_runs_as_its_first_delivery_without_asking_redis_for_its_count() {
    let redis = RedisServer::start();
    let platform = platform_with(&redis);
    let dir = faas_testing::temp_dir();
    let triggers = "[[triggers.stream]]\nstream = \"fresh\"\nstep = \"relay\"\n";
    platform.deploy(&relay_manifest(dir.path(), "fresh", triggers));
    let ids: Vec<String> = (0..20)
        .map(|i| xadd(&redis, &ns("fresh"), &format!("entry-{i}")))
        .collect();
    let mut out = payloads(&redis, &ns("fresh:out"), ids.len(), Duration::from_secs(30));
    out.sort();
    let mut expected: Vec<String> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| format!("fresh|{id}|1|entry-{i}"))
        .collect();
    expected.sort();
    assert_eq!(out, expected);
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut connect(&redis))
        .unwrap();
    assert!(
        !stats.contains("cmdstat_xpending:"),
        "the consumer asked for delivery counts: {stats}"
    );
}

#[test]
fn a_failed_delivery_is_redelivered_with_its_id_and_delivery_count() {
    let redis = RedisServer::start();
    let platform = platform_with(&redis);
    let dir = faas_testing::temp_dir();
    let triggers =
        "[[triggers.stream]]\nstream = \"jobs\"\nstep = \"relay\"\nreclaim_idle_ms = 200\n";
    platform.deploy(&relay_manifest(dir.path(), "jobs", triggers));
    let id = xadd(&redis, &ns("jobs"), "fail-once-7");
    let out = payloads(&redis, &ns("jobs:out"), 1, Duration::from_secs(30));
    assert_eq!(out, vec![format!("jobs|{id}|2|fail-once-7")]);
}

#[test]
fn a_message_that_keeps_failing_ends_in_the_dead_letter_stream() {
    let redis = RedisServer::start();
    let platform = platform_with(&redis);
    let dir = faas_testing::temp_dir();
    let triggers = "[[triggers.stream]]\nstream = \"tasks\"\nstep = \"relay\"\nmax_deliveries = 2\nreclaim_idle_ms = 100\n";
    platform.deploy(&relay_manifest(dir.path(), "tasks", triggers));
    let id = xadd(&redis, &ns("tasks"), "poison-pill");
    xadd(&redis, &ns("tasks"), "fine");
    let dead: redis::streams::StreamRangeReply = {
        payloads(&redis, &ns("tasks:dead"), 1, Duration::from_secs(30));
        connect(&redis).xrange_all(ns("tasks:dead")).unwrap()
    };
    let entry = &dead.ids[0];
    assert_eq!(entry.get::<String>("payload").unwrap(), "poison-pill");
    assert_eq!(entry.get::<String>("source_id").unwrap(), id);
    assert_eq!(entry.get::<String>("deliveries").unwrap(), "2");
    assert!(
        entry
            .get::<String>("error")
            .unwrap()
            .contains("poisoned message")
    );
    assert_eq!(
        payloads(&redis, &ns("tasks:out"), 1, Duration::from_secs(10)).len(),
        1
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while pending(&redis, &ns("tasks"), "tasks") > 0 {
        assert!(
            Instant::now() < deadline,
            "the poison message was not acknowledged"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let dead_letters = r#"faas_dead_letters_total{tenant="t",workflow="tasks",stream="tasks"}"#;
    assert_eq!(platform.metric(dead_letters), 1.0);
}

/// A message that failed its last delivery when the dead-letter stream had no room for
/// it (larger than its tenant's whole stream quota, from a producer outside the
/// platform) stays pending, not lost, and is not run again at every reclaim: it ran at
/// every one for as long as the quota stayed full. Once there is room it is moved
/// there without running again, while the tenant's other entries are served.
#[test]
fn a_message_the_dead_letter_stream_has_no_room_for_waits_without_running_again() {
    let redis = RedisServer::start();
    let url = redis.url();
    let platform =
        Platform::start_with(&["--no-demo", "--redis", &url, "--stream-max-bytes", "20000"]);
    let dir = faas_testing::temp_dir();
    let triggers = "[[triggers.stream]]\nstream = \"big\"\nstep = \"relay\"\nmax_deliveries = 1\nreclaim_idle_ms = 100\n";
    platform.deploy(&relay_manifest(dir.path(), "big", triggers));
    let poison = format!("poison-{}", "x".repeat(30_000));
    let id = xadd(&redis, &ns("big"), &poison);
    let failed = r#"faas_runs_total{tenant="t",workflow="big",status="failed"}"#;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sample_value(&platform.metrics(), failed) < 1.0 {
        assert!(Instant::now() < deadline, "the message never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Twenty reclaim intervals: it stays pending, and ran once.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(pending(&redis, &ns("big"), "big"), 1);
    assert_eq!(sample_value(&platform.metrics(), failed), 1.0);
    xadd(&redis, &ns("big"), "fine");
    assert_eq!(
        payloads(&redis, &ns("big:out"), 1, Duration::from_secs(10)).len(),
        1
    );

    // Room made (the tenant's quota raised): it is dead-lettered, not run again.
    assert_success(
        &faas_at(
            &platform.url,
            &["tenant", "set", TENANT, "--stream-max-bytes", "1000000"],
        ),
        "raising the stream quota",
    );
    payloads(&redis, &ns("big:dead"), 1, Duration::from_secs(30));
    let dead: redis::streams::StreamRangeReply =
        connect(&redis).xrange_all(ns("big:dead")).unwrap();
    let entry = &dead.ids[0];
    assert_eq!(entry.get::<String>("source_id").unwrap(), id);
    assert_eq!(entry.get::<String>("payload").unwrap(), poison);
    assert_eq!(entry.get::<String>("deliveries").unwrap(), "1");
    assert_eq!(sample_value(&platform.metrics(), failed), 1.0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pending(&redis, &ns("big"), "big") > 0 {
        assert!(Instant::now() < deadline, "it was never acknowledged");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_platform_carries_on_after_redis_restarts() {
    let mut redis = RedisServer::start();
    let platform = platform_with(&redis);
    let dir = faas_testing::temp_dir();
    let triggers = "[[triggers.stream]]\nstream = \"events\"\nstep = \"relay\"\n";
    platform.deploy(&relay_manifest(dir.path(), "events", triggers));
    xadd(&redis, &ns("events"), "before");
    payloads(&redis, &ns("events:out"), 1, Duration::from_secs(20));
    // No persistence: the restarted server is empty, the group included.
    redis.restart();
    xadd(&redis, &ns("events"), "after");
    let out = payloads(&redis, &ns("events:out"), 1, Duration::from_secs(30));
    assert!(out[0].ends_with("|after"), "{out:?}");
}

#[test]
fn key_value_state_lives_in_redis_when_configured() {
    let redis = RedisServer::start();
    let platform = platform_with(&redis);
    platform.deploy(&crate::support::repo("functions/kv-counter/workflow.toml"));
    assert_eq!(platform.post("/counter/visits", "5").text().unwrap(), "5\n");
    let stored: String = connect(&redis)
        .get("faas:kv:4:demo:counter:visits")
        .unwrap();
    assert_eq!(stored, "5");
}

#[test]
fn redis_triggers_are_refused_without_redis() {
    let platform = Platform::start();
    let dir = faas_testing::temp_dir();
    let triggers = "[[triggers.stream]]\nstream = \"s\"\nstep = \"relay\"\n";
    let manifest = relay_manifest(dir.path(), "needs-redis", triggers);
    let output = platform.faas(&["deploy", manifest.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("runs without Redis (start it with --redis <url>)"),
        "{stderr}"
    );
}
