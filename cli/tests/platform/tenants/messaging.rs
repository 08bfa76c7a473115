//! Redis names per tenant: tenant `mallory`'s guests and triggers name channels and
//! streams inside mallory's namespace only (`t:mallory:<name>`), so they can neither
//! write the platform's own keys, nor read the stream entries of tenant `victim`, nor
//! start victim's runs; and mallory's load cannot push victim's stream entries into the
//! dead-letter stream. Each test checks that the attack failed and that victim kept
//! being served.

use crate::logs::wait_for_line;
use crate::redis::{connect, distinct_messages, payloads, pending, relay_manifest_for, xadd};
use crate::services::{Services, subscribers};
use crate::support::{Platform, TOKEN, deploy_at, faas_at, write_manifest};
use faas_testing::RedisServer;
use redis::Commands;
use std::path::Path;
use std::time::{Duration, Instant};

/// The Redis key of `name` of `tenant`: where an outside producer writes.
fn key(tenant: &str, name: &str) -> String {
    format!("t:{tenant}:{name}")
}

/// An embedded platform with Redis, started with `extra` flags.
fn platform(redis: &RedisServer, extra: &[&str]) -> Platform {
    let url = redis.url();
    let mut args = vec!["--no-demo", "--redis", &url];
    args.extend(extra);
    Platform::start_with(&args)
}

/// Deploys mallory's `messenger` (publishes or appends to whatever it is told) at
/// `/mallory/messenger`.
fn deploy_messenger(url: &str, dir: &Path) {
    let manifest = write_manifest(
        dir,
        "messenger",
        "mallory",
        "messenger",
        "/mallory/messenger",
        "",
    );
    deploy_at(url, &manifest);
}

/// Has mallory's messenger send `body` with `op` to `name` `count` times; returns the
/// status and the answer.
fn send(url: &str, op: &str, name: &str, count: u32, body: &str) -> (u16, String) {
    let response = crate::support::client()
        .post(format!(
            "{url}/mallory/messenger?op={op}&name={name}&count={count}"
        ))
        .body(body.to_owned())
        .send()
        .unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

/// The `faas runs <workflow>` records.
fn runs(url: &str, workflow: &str) -> Vec<serde_json::Value> {
    let output = faas_at(url, &["runs", workflow, "--output", "json"]);
    assert!(output.status.success(), "{output:?}");
    let runs: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    runs["runs"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_guest_cannot_write_the_platforms_own_keys() {
    let services = Services::start(&["w1"]);
    let dir = faas_testing::temp_dir();
    let shop = write_manifest(dir.path(), "shop", "victim", "hello", "/shop", "");
    deploy_at(&services.url, &shop);
    deploy_messenger(&services.url, dir.path());
    let platform_keys = ["faas:lock:shop", "faas:loaded:w1", "faas:deployments"];
    for name in platform_keys {
        let (status, answer) = send(&services.url, "append", name, 3, "jam");
        // The append lands, but in mallory's own namespace.
        assert_eq!(status, 200, "{name}: {answer}");
        let mut redis = connect(&services.redis);
        let kind: String = redis::cmd("TYPE").arg(name).query(&mut redis).unwrap();
        assert_ne!(
            kind, "stream",
            "mallory's guest wrote the platform's `{name}`"
        );
        let landed: usize = redis.xlen(key("mallory", name)).unwrap();
        assert_eq!(landed, 3, "{name}");
    }
    let (status, answer) = send(&services.url, "publish", "faas:lock:shop", 1, "jam");
    assert_eq!(status, 200, "{answer}");
    // Victim keeps deploying, being served, and removing.
    let changed = write_manifest(
        dir.path(),
        "shop",
        "victim",
        "hello",
        "/shop",
        "config = { greeting = \"Hi\" }",
    );
    deploy_at(&services.url, &changed);
    let hello = crate::support::client()
        .get(format!("{}/shop?name=victim", services.url))
        .send()
        .unwrap();
    assert_eq!(hello.text().unwrap().trim(), "Hi, victim!");
    let removed = faas_at(&services.url, &["rm", "shop"]);
    assert!(
        removed.status.success(),
        "{}",
        String::from_utf8_lossy(&removed.stderr)
    );
}

/// Runs `attack` against an embedded platform with Redis (`Embedded`) or a
/// services-mode platform with one worker (`Services`), given the gateway's URL and the
/// Redis both use.
fn in_mode(services: bool, attack: impl FnOnce(&str, &RedisServer)) {
    if services {
        let services = Services::start(&["w1"]);
        attack(&services.url, &services.redis);
    } else {
        let redis = RedisServer::start();
        let platform = platform(&redis, &[]);
        attack(&platform.url, &redis);
    }
}

#[test]
fn a_workflow_on_a_stream_of_the_same_name_gets_none_of_another_tenants_entries() {
    in_mode(false, stream_theft);
}

#[test]
fn services_mode_a_workflow_on_a_stream_of_the_same_name_gets_none_of_another_tenants_entries() {
    in_mode(true, stream_theft);
}

/// Mallory deploys a workflow on victim's stream name, with the default group and with
/// a guess of victim's group; victim's 100 entries all run victim's workflow.
fn stream_theft(url: &str, redis: &RedisServer) {
    let dir = faas_testing::temp_dir();
    let victim = relay_manifest_for(
        dir.path(),
        "victim",
        "victim-orders",
        "",
        "[[triggers.stream]]\nstream = \"orders\"\nstep = \"relay\"\n",
    );
    deploy_at(url, &victim);
    // Mallory reads `orders` through the default group and through a guess of
    // victim's group.
    let mallory = relay_manifest_for(
        dir.path(),
        "mallory",
        "mallory-orders",
        "",
        "[[triggers.stream]]\nstream = \"orders\"\nstep = \"relay\"\n\n\
         [[triggers.stream]]\nstream = \"orders\"\nstep = \"relay\"\ngroup = \"victim-orders\"\n",
    );
    deploy_at(url, &mallory);
    for i in 0..100 {
        xadd(redis, &key("victim", "orders"), &format!("order-{i}"));
    }
    let out = payloads(
        redis,
        &key("victim", "victim-orders:out"),
        100,
        Duration::from_secs(60),
    );
    let seen = distinct_messages(&out);
    assert_eq!(seen.len(), 100, "victim got every entry once: {out:?}");
    let succeeded = runs(url, "victim-orders")
        .iter()
        .filter(|run| run["status"] == "succeeded")
        .count();
    assert_eq!(succeeded, 100, "victim's run count");
    // Anything mallory took would have been run by now, alongside victim's runs.
    std::thread::sleep(Duration::from_secs(1));
    let taken: usize = connect(redis)
        .xlen(key("mallory", "mallory-orders:out"))
        .unwrap();
    assert_eq!(taken, 0, "mallory's workflow ran on victim's entries");
    assert!(runs(url, "mallory-orders").is_empty());
}

#[test]
fn a_guest_publishing_on_a_channel_of_the_same_name_does_not_start_another_tenants_runs() {
    in_mode(false, channel_forgery);
}

#[test]
fn services_mode_a_guest_publishing_on_a_channel_of_the_same_name_does_not_start_another_tenants_runs()
 {
    in_mode(true, channel_forgery);
}

/// Mallory's guest publishes on victim's channel name (and on its full key), one message
/// at a time and in batches; none of it
/// starts victim's runs, while victim's own producer is still heard.
fn channel_forgery(url: &str, redis: &RedisServer) {
    let dir = faas_testing::temp_dir();
    let victim = relay_manifest_for(
        dir.path(),
        "victim",
        "victim-news",
        "",
        "[[triggers.redis]]\nchannel = \"orders\"\nstep = \"relay\"\n",
    );
    deploy_at(url, &victim);
    deploy_messenger(url, dir.path());
    let channel = key("victim", "orders");
    let deadline = Instant::now() + Duration::from_secs(30);
    while subscribers(redis, &channel) == 0 {
        assert!(
            Instant::now() < deadline,
            "victim's trigger never subscribed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The channel's name as victim writes it, and its full key.
    for name in ["orders", channel.as_str()] {
        for op in ["publish", "publish-all"] {
            let (status, answer) = send(url, op, name, 5, "forged");
            assert_eq!(status, 200, "{op} {name}: {answer}");
        }
    }
    std::thread::sleep(Duration::from_secs(1));
    let out = key("victim", "victim-news:out");
    let forged: usize = connect(redis).xlen(&out).unwrap();
    assert_eq!(forged, 0, "mallory's messages started victim's runs");
    assert!(runs(url, "victim-news").is_empty());
    // Victim's own producer is still heard.
    let receivers: i64 = connect(redis).publish(&channel, "genuine").unwrap();
    assert_eq!(receivers, 1);
    let out = payloads(redis, &out, 1, Duration::from_secs(20));
    assert_eq!(out, vec!["orders||1|genuine"]);
}

#[test]
fn another_tenants_load_does_not_dead_letter_stream_entries_that_never_ran() {
    let redis = RedisServer::start();
    // One instance slot: while mallory's slow requests hold it, victim's step is
    // refused an instance after waiting its 300 ms deadline.
    let platform = platform(&redis, &["--max-instances", "1"]);
    let dir = faas_testing::temp_dir();
    let victim = relay_manifest_for(
        dir.path(),
        "victim",
        "victim-jobs",
        "timeout_ms = 300",
        "[[triggers.stream]]\nstream = \"jobs\"\nstep = \"relay\"\nmax_deliveries = 1\nreclaim_idle_ms = 100\n",
    );
    platform.deploy(&victim);
    let hogs = Hogs::start(&platform, dir.path(), 3, 1500);
    let id = xadd(&redis, &key("victim", "jobs"), "job-1");
    // Keep the slot busy until victim's run was refused at least once.
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        let refused = runs(&platform.url, "victim-jobs")
            .iter()
            .filter(|run| run["status"] == "failed")
            .count();
        if refused > 0 {
            break refused;
        }
        assert!(Instant::now() < deadline, "victim's run was never refused");
        std::thread::sleep(Duration::from_millis(100));
    };
    hogs.stop();
    let out = payloads(
        &redis,
        &key("victim", "victim-jobs:out"),
        1,
        Duration::from_secs(30),
    );
    assert_eq!(
        out,
        vec![format!("jobs|{id}|1|job-1")],
        "runs once capacity is back, as its first delivery ({refused} refusal(s) before)"
    );
    let dead: usize = connect(&redis).xlen(key("victim", "jobs:dead")).unwrap();
    assert_eq!(dead, 0, "a run that never started was dead-lettered");
    let failed = runs(&platform.url, "victim-jobs");
    let refusal = failed
        .iter()
        .find(|run| run["status"] == "failed")
        .expect("the refused run is recorded");
    assert!(
        refusal["error"]
            .as_str()
            .is_some_and(|error| error.contains("instance slots")),
        "{refusal}"
    );
}

/// Mallory's slow requests (`hog`, deployed here), `threads` at a time back to back,
/// each holding an instance slot for `ms`, until stopped (or for 90 s).
struct Hogs {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hogs {
    fn start(platform: &Platform, dir: &Path, threads: usize, ms: u64) -> Self {
        let hog = write_manifest(
            dir,
            "hog",
            "mallory",
            "misbehave",
            "/misbehave/...",
            "timeout_ms = 5000",
        );
        platform.deploy(&hog);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..threads)
            .map(|_| {
                let (url, stop) = (
                    platform.at(&format!("/misbehave/slow?ms={ms}")),
                    stop.clone(),
                );
                std::thread::spawn(move || {
                    let client = crate::support::client();
                    let deadline = Instant::now() + Duration::from_secs(90);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed)
                        && Instant::now() < deadline
                    {
                        let _ = client.get(&url).send();
                    }
                })
            })
            .collect();
        // Their first requests hold the slot before the test goes on.
        std::thread::sleep(Duration::from_millis(300));
        Self { stop, threads }
    }

    fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads {
            thread.join().unwrap();
        }
    }
}

/// A later step refused an instance while another tenant holds the worker's slots says
/// nothing of the entry either: the run's delivery is not counted (its first step runs
/// again), where it was, and with `max_deliveries = 1` the entry went to the
/// dead-letter stream because of mallory's load.
#[test]
fn another_tenants_load_does_not_dead_letter_entries_whose_later_step_found_no_slot() {
    let redis = RedisServer::start();
    let platform = platform(&redis, &["--max-instances", "1"]);
    let dir = faas_testing::temp_dir();
    let relay = faas_testing::component_path("relay");
    let manifest = dir.path().join("victim-chain.toml");
    std::fs::write(
        &manifest,
        format!(
            "name = \"victim-chain\"\ntenant = \"victim\"\n\n\
             [functions.relay]\ncomponent = \"{relay}\"\nkind = \"step\"\n\
             config = {{ out = \"chain:out\" }}\ntimeout_ms = 300\n\n\
             [functions.again]\ncomponent = \"{relay}\"\nkind = \"step\"\n\
             config = {{ out = \"chain:out2\" }}\ntimeout_ms = 300\n\n\
             [steps.relay]\nfunction = \"relay\"\ninput = \"bytes\"\noutput = \"text\"\n\n\
             [steps.again]\nfunction = \"again\"\ninput = \"text\"\noutput = \"text\"\n\n\
             [[edges]]\nfrom = \"relay\"\nto = \"again\"\ntype = \"text\"\n\n\
             [[triggers.stream]]\nstream = \"jobs\"\nstep = \"relay\"\nmax_deliveries = 1\n\
             reclaim_idle_ms = 100\n",
            relay = relay.display()
        ),
    )
    .unwrap();
    platform.deploy(&manifest);
    // One request at a time, back to back: the slot comes free now and then, long
    // enough for victim's first step, and is often taken again before its second.
    // Often, not always (the second may come first), so an entry is added every half
    // second until a run was refused its second step.
    let hogs = Hogs::start(&platform, dir.path(), 1, 600);
    let mut ids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let refused_later = runs(&platform.url, "victim-chain").iter().any(|run| {
            run["error"].as_str().is_some_and(|error| {
                error.contains("step `again`") && error.contains("instance slots")
            })
        });
        if refused_later {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "victim's second step was never refused: {:?}",
            runs(&platform.url, "victim-chain")
        );
        let job = format!("job-{}", ids.len());
        ids.push((xadd(&redis, &key("victim", "jobs"), &job), job));
        std::thread::sleep(Duration::from_millis(500));
    }
    hogs.stop();
    // Both steps of every entry ran once capacity was back, on what is still its first
    // delivery.
    let mut out = payloads(
        &redis,
        &key("victim", "chain:out2"),
        ids.len(),
        Duration::from_secs(30),
    );
    out.sort();
    let mut expected: Vec<String> = ids
        .iter()
        .map(|(id, job)| format!("jobs|{id}|1|jobs|{id}|1|{job}"))
        .collect();
    expected.sort();
    assert_eq!(out, expected);
    let dead: usize = connect(&redis).xlen(key("victim", "jobs:dead")).unwrap();
    assert_eq!(dead, 0, "mallory's load dead-lettered victim's entry");
}

/// A batch published in one call lands on the guest's own tenant's channel, in order;
/// one over the per-call limit is refused, naming it, and none of it is published; an
/// empty one publishes nothing; victim is still served.
#[test]
fn a_guests_batch_lands_in_order_in_its_namespace_and_an_oversized_one_is_refused() {
    let redis = RedisServer::start();
    let platform = platform(&redis, &[]);
    let dir = faas_testing::temp_dir();
    deploy_messenger(&platform.url, dir.path());
    let victim = write_manifest(dir.path(), "shop", "victim", "hello", "/shop", "");
    platform.deploy(&victim);
    let mut listener = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut news = listener.as_pubsub();
    news.subscribe(key("mallory", "news")).unwrap();
    news.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();

    let (status, answer) = send(&platform.url, "publish-all", "news", 1025, "flood");
    assert_eq!(status, 502, "{answer}");
    assert!(
        answer.contains("1025 messages") && answer.contains("1024 messages"),
        "{answer}"
    );
    let (status, answer) = send(&platform.url, "publish-all", "news", 0, "nothing");
    assert_eq!(status, 200, "an empty batch: {answer}");
    let (status, answer) = send(&platform.url, "publish-all", "news", 20, "batch");
    assert_eq!(status, 200, "{answer}");
    let received: Vec<String> = (0..20)
        .map(|_| news.get_message().unwrap().get_payload().unwrap())
        .collect();
    let expected: Vec<String> = (0..20).map(|i| format!("batch#{i}")).collect();
    // The first message is the 20-message batch's: the refused and the empty ones sent none.
    assert_eq!(received, expected);
    let hello = platform.get("/shop?name=victim");
    assert_eq!(hello.text().unwrap().trim(), "Hello, victim!");
}

#[test]
fn a_guest_cannot_grow_a_stream_without_bound() {
    let redis = RedisServer::start();
    let platform = platform(&redis, &["--stream-max-len", "200"]);
    let dir = faas_testing::temp_dir();
    deploy_messenger(&platform.url, dir.path());
    let victim = write_manifest(dir.path(), "shop", "victim", "hello", "/shop", "");
    platform.deploy(&victim);
    let (status, answer) = send(&platform.url, "append", "flood", 5_000, "x");
    assert_eq!(status, 200, "{answer}");
    let len: usize = connect(&redis).xlen(key("mallory", "flood")).unwrap();
    // Trimmed 1/64 below the limit at a time, so it holds 197 to 200.
    assert!((197..=200).contains(&len), "the stream kept {len} entries");
    let hello = platform.get("/shop?name=victim");
    assert_eq!(hello.text().unwrap().trim(), "Hello, victim!");
}

#[test]
fn messages_that_keep_failing_cannot_grow_the_dead_letter_stream_without_bound() {
    let redis = RedisServer::start();
    let platform = platform(&redis, &["--stream-max-len", "200"]);
    let dir = faas_testing::temp_dir();
    let poisoned = relay_manifest_for(
        dir.path(),
        "mallory",
        "poisoned",
        "",
        "[[triggers.stream]]\nstream = \"jobs\"\nstep = \"relay\"\nmax_deliveries = 1\n",
    );
    platform.deploy(&poisoned);
    let victim = write_manifest(dir.path(), "shop", "victim", "hello", "/shop", "");
    platform.deploy(&victim);
    let jobs = key("mallory", "jobs");
    let mut last = String::new();
    for i in 0..600 {
        last = xadd(&redis, &jobs, &format!("poison-{i}"));
    }
    // Every entry is read, fails once and is dead-lettered (in no particular order):
    // the group has read up to the last one and holds none pending.
    let dead = key("mallory", "jobs:dead");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let groups: redis::streams::StreamInfoGroupsReply =
            connect(&redis).xinfo_groups(&jobs).unwrap();
        let read_all = groups
            .groups
            .iter()
            .any(|group| group.name == "poisoned" && group.last_delivered_id == last);
        if read_all && pending(&redis, &jobs, "poisoned") == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the entries were not all dead-lettered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let len: usize = connect(&redis).xlen(&dead).unwrap();
    assert!(
        (197..=200).contains(&len),
        "the dead-letter stream kept {len} entries"
    );
    let hello = platform.get("/shop?name=victim");
    assert_eq!(hello.text().unwrap().trim(), "Hello, victim!");
}

/// Appends 20 entries to victim's stream `jobs` and asserts that victim's relay (the
/// workflow `jobs` on it) relays every one within a minute.
fn assert_victims_jobs_relayed(redis: &RedisServer) {
    for index in 0..20 {
        xadd(redis, &key("victim", "jobs"), &format!("job-{index}"));
    }
    let out = payloads(
        redis,
        &key("victim", "jobs:out"),
        20,
        Duration::from_secs(60),
    );
    assert_eq!(distinct_messages(&out).len(), 20, "{out:?}");
}

/// Mallory's workflows take a Redis connection per channel and stream trigger (in
/// every gateway), so a tenant could take every connection Redis allows: past its
/// tenant's limit in all, mallory's next workflow is refused (403 `quota`, naming the
/// flag) and starts no consumer, while victim, a tenant of its own, deploys as many
/// and its entries are relayed.
#[test]
fn a_tenants_redis_triggers_are_bounded_in_all_and_anothers_are_served() {
    let redis = RedisServer::start();
    let platform = platform(&redis, &["--max-redis-consumers-per-tenant", "3"]);
    let dir = faas_testing::temp_dir();
    let streams = |names: &[&str]| -> String {
        names
            .iter()
            .map(|name| format!("[[triggers.stream]]\nstream = \"{name}\"\nstep = \"relay\"\n\n"))
            .collect()
    };
    let first = relay_manifest_for(dir.path(), "mallory", "m1", "", &streams(&["a", "b"]));
    deploy_at(&platform.url, &first);
    let past = relay_manifest_for(
        dir.path(),
        "mallory",
        "m2",
        "",
        &format!(
            "[[triggers.redis]]\nchannel = \"c\"\nstep = \"relay\"\n\n{}",
            streams(&["d"])
        ),
    );
    let refused = faas_at(
        &platform.url,
        &["deploy", "--no-build", past.to_str().unwrap()],
    );
    assert!(!refused.status.success(), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("HTTP 403"), "{stderr}");
    assert!(
        stderr.contains("4 channel and stream triggers in all, past the limit of 3 (--max-redis-consumers-per-tenant)"),
        "{stderr}"
    );

    // Victim's three are its own tenant's, and served.
    let victim = relay_manifest_for(dir.path(), "victim", "v1", "", &streams(&["a", "b", "e"]));
    deploy_at(&platform.url, &victim);
    for index in 0..5 {
        xadd(&redis, &key("victim", "e"), &format!("entry-{index}"));
    }
    let out = payloads(&redis, &key("victim", "v1:out"), 5, Duration::from_secs(30));
    assert_eq!(distinct_messages(&out).len(), 5, "{out:?}");

    // The refused workflow started no consumer: its stream never got a group (a
    // consumer makes the stream as it makes its group).
    let mut connection = connect(&redis);
    let made: bool = connection.exists(key("mallory", "d")).unwrap();
    assert!(!made, "the refused workflow's stream consumer ran");
    let runs = faas_at(&platform.url, &["runs", "m2"]);
    assert!(!runs.status.success(), "m2 is not deployed");
}

/// The consumer groups of tenant `tenant`'s stream `stream`, sorted (none if the stream
/// is gone).
fn groups_of(redis: &RedisServer, tenant: &str, stream: &str) -> Vec<String> {
    let reply: redis::RedisResult<redis::streams::StreamInfoGroupsReply> =
        connect(redis).xinfo_groups(key(tenant, stream));
    let mut names: Vec<String> = reply
        .map(|reply| reply.groups.into_iter().map(|group| group.name).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Waits until `tenant`'s stream `stream` has consumer group `group`.
fn wait_for_group(redis: &RedisServer, tenant: &str, stream: &str, group: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !groups_of(redis, tenant, stream)
        .iter()
        .any(|name| name == group)
    {
        assert!(
            Instant::now() < deadline,
            "no group `{group}` on `{stream}`"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Each redeploy of mallory's workflow with a new consumer group, and each workflow it
/// deploys and removes, left a group (and a stream) in Redis for good: memory no quota
/// counted, growing with every deploy. Once no trigger names them and the idle time
/// passed, they go, while mallory's current trigger and victim's keep consuming.
#[test]
fn consumer_groups_no_trigger_names_are_destroyed_and_the_named_ones_keep_consuming() {
    let redis = RedisServer::start();
    let platform = platform(&redis, &["--stream-group-idle-secs", "2"]);
    let url = platform.url.as_str();
    let dir = faas_testing::temp_dir();
    let stream = |name: &str, group: &str| {
        format!("[[triggers.stream]]\nstream = \"{name}\"\ngroup = \"{group}\"\nstep = \"relay\"\n")
    };
    let victim = relay_manifest_for(dir.path(), "victim", "jobs", "", &stream("jobs", "jobs"));
    deploy_at(url, &victim);
    for round in 0..4 {
        let group = format!("g{round}");
        let churn = relay_manifest_for(
            dir.path(),
            "mallory",
            "churn",
            "",
            &stream("orders", &group),
        );
        deploy_at(url, &churn);
        wait_for_group(&redis, "mallory", "orders", &group);
    }
    let gone = relay_manifest_for(
        dir.path(),
        "mallory",
        "gone",
        "",
        &stream("scratch", "gone"),
    );
    deploy_at(url, &gone);
    wait_for_group(&redis, "mallory", "scratch", "gone");
    assert!(faas_at(url, &["rm", "gone"]).status.success());
    assert_eq!(
        groups_of(&redis, "mallory", "orders"),
        ["g0", "g1", "g2", "g3"]
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    while groups_of(&redis, "mallory", "orders") != ["g3"]
        || connect(&redis)
            .exists::<_, bool>(key("mallory", "scratch"))
            .unwrap()
    {
        assert!(
            Instant::now() < deadline,
            "groups kept: {:?} on orders, {:?} on scratch",
            groups_of(&redis, "mallory", "orders"),
            groups_of(&redis, "mallory", "scratch"),
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let registered: usize = connect(&redis).hlen("faas:stream-groups").unwrap();
    assert_eq!(registered, 2, "the registry keeps only the named groups");

    // Well past the idle time, the groups still named keep consuming.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(groups_of(&redis, "victim", "jobs"), ["jobs"]);
    xadd(&redis, &key("mallory", "orders"), "still-read");
    xadd(&redis, &key("victim", "jobs"), "served");
    let out = payloads(
        &redis,
        &key("mallory", "churn:out"),
        1,
        Duration::from_secs(30),
    );
    assert!(out[0].ends_with("|still-read"), "{out:?}");
    let out = payloads(
        &redis,
        &key("victim", "jobs:out"),
        1,
        Duration::from_secs(30),
    );
    assert!(out[0].ends_with("|served"), "{out:?}");
}

/// Mallory's guest publishes to mallory's own channel far faster than its runs take the
/// messages: what the gateway holds of them is bounded by mallory's share of the message
/// budget, past which they are dropped and mallory's logs say so, while victim's
/// messages on its own channel all run.
#[test]
fn a_tenant_publishing_faster_than_its_runs_holds_its_share_and_anothers_messages_run() {
    let redis = RedisServer::start();
    let platform = platform(
        &redis,
        &[
            "--tenant-message-budget-mb",
            "2",
            "--message-budget-mb",
            "16",
        ],
    );
    let url = platform.url.as_str();
    let dir = faas_testing::temp_dir();
    let channel =
        |name: &str| format!("[[triggers.redis]]\nchannel = \"{name}\"\nstep = \"relay\"\n");
    let flood = relay_manifest_for(dir.path(), "mallory", "flood", "", &channel("flood"));
    deploy_at(url, &flood);
    let news = relay_manifest_for(dir.path(), "victim", "news", "", &channel("news"));
    deploy_at(url, &news);
    deploy_messenger(url, dir.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    while subscribers(&redis, &key("mallory", "flood")) == 0
        || subscribers(&redis, &key("victim", "news")) == 0
    {
        assert!(Instant::now() < deadline, "the triggers never subscribed");
        std::thread::sleep(Duration::from_millis(20));
    }

    // 20 batches of 1,000 messages of 4 KiB: 80 MB, far past mallory's 2 MiB.
    let body = "x".repeat(4 << 10);
    for _ in 0..20 {
        let (status, answer) = send(url, "publish-all", "flood", 1000, &body);
        assert_eq!(status, 200, "{answer}");
    }
    let lines = wait_for_line(url, TOKEN, &["flood"], "were dropped");
    let line = lines
        .iter()
        .map(|line| line["text"].as_str().unwrap())
        .find(|text| text.contains("were dropped"))
        .unwrap();
    assert!(
        line.contains("messages on channel `flood` were dropped")
            && line.contains("--tenant-message-budget-mb"),
        "{line}"
    );

    // Victim's messages, published while mallory's still drain, all run.
    let mut connection = connect(&redis);
    for index in 0..20 {
        let receivers: i64 = connection
            .publish(key("victim", "news"), format!("news-{index}"))
            .unwrap();
        assert_eq!(receivers, 1);
    }
    let out = payloads(
        &redis,
        &key("victim", "news:out"),
        20,
        Duration::from_secs(30),
    );
    assert_eq!(distinct_messages(&out).len(), 20, "{out:?}");
}

/// Mallory's guest appends 300 entries of about 1 MiB to mallory's own stream, then
/// mallory deploys a trigger on it that reads 256 at a time: its consumer reads only
/// as many as mallory's share of the message budget has room for (3 MiB here), so the
/// gateway holds a few at once, not the batch (a quarter of a gigabyte); none is lost
/// or dead-lettered, and victim's entries run meanwhile.
#[test]
fn a_tenants_stream_entries_are_read_within_its_share_and_none_is_lost() {
    const ENTRIES: usize = 300;
    let redis = RedisServer::start();
    let platform = platform(
        &redis,
        // Its streams hold 600 MiB: this is about the gateway's memory, not Redis's.
        &[
            "--tenant-message-budget-mb",
            "3",
            "--message-budget-mb",
            "32",
            "--stream-max-bytes",
            "0",
        ],
    );
    let url = platform.url.as_str();
    let dir = faas_testing::temp_dir();
    let stream = |name: &str, batch: u32| {
        format!("[[triggers.stream]]\nstream = \"{name}\"\nstep = \"relay\"\nbatch = {batch}\n")
    };
    let jobs = relay_manifest_for(dir.path(), "victim", "jobs", "", &stream("jobs", 16));
    deploy_at(url, &jobs);
    deploy_messenger(url, dir.path());
    let entry = "x".repeat((1 << 20) - 64);
    for _ in 0..ENTRIES / 100 {
        let (status, answer) = send(url, "append", "bulk", 100, &entry);
        assert_eq!(status, 200, "{answer}");
    }

    // The group reads from the start: the whole backlog is there for its first read.
    let before = platform.memory("VmHWM");
    let bulk = relay_manifest_for(dir.path(), "mallory", "bulk", "", &stream("bulk", 256));
    deploy_at(url, &bulk);
    assert_victims_jobs_relayed(&redis);
    let relayed = payloads(
        &redis,
        &key("mallory", "bulk:out"),
        ENTRIES,
        Duration::from_secs(120),
    );
    let grew = (platform.memory("VmHWM") - before) >> 20;
    // Reading the batch whole would hold 256 MiB at once.
    assert!(grew < 128, "the gateway's peak memory grew by {grew} MiB");
    // Its lines are `source|id|deliveries|message`.
    let ids: std::collections::BTreeSet<&str> = relayed
        .iter()
        .filter_map(|line| line.split('|').nth(1))
        .collect();
    assert_eq!(ids.len(), ENTRIES, "every entry ran");
    let dead: usize = connect(&redis).xlen(key("mallory", "bulk:dead")).unwrap();
    assert_eq!(dead, 0, "no entry was dead-lettered");
}

/// Redis's `used_memory`, in bytes.
fn redis_memory(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(&mut connect(redis))
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|value| value.trim().parse().ok())
        .expect("INFO memory has used_memory")
}

/// Mallory's guest appends entries of a mebibyte to stream name after stream name, each
/// under the length limit, to fill the Redis every tenant shares: its streams hold at
/// most `--stream-max-bytes` in all (each append trims the oldest entries of the
/// tenant's largest streams), and victim's stream entries keep being relayed into victim's own
/// stream.
#[test]
fn a_tenants_streams_hold_its_stream_bytes_in_all_and_anothers_appends_go_on() {
    const QUOTA: u64 = 16 << 20;
    const NAMES: usize = 48;
    let redis = RedisServer::start();
    let platform = platform(&redis, &["--stream-max-bytes", &QUOTA.to_string()]);
    let url = platform.url.as_str();
    let dir = faas_testing::temp_dir();
    let jobs = relay_manifest_for(
        dir.path(),
        "victim",
        "jobs",
        "",
        "[[triggers.stream]]\nstream = \"jobs\"\nstep = \"relay\"\n",
    );
    deploy_at(url, &jobs);
    deploy_messenger(url, dir.path());
    let before = redis_memory(&redis);

    let entry = "x".repeat((1 << 20) - 64);
    for index in 0..NAMES {
        let (status, answer) = send(url, "append", &format!("fill-{index}"), 1, &entry);
        assert_eq!(status, 200, "{answer}");
    }
    let grew = redis_memory(&redis).saturating_sub(before) >> 20;
    // Without the quota Redis grows by 48 MiB.
    assert!(grew < 24, "Redis grew by {grew} MiB");
    let mut connection = connect(&redis);
    let len = |connection: &mut redis::Connection, index: usize| -> usize {
        connection
            .xlen(key("mallory", &format!("fill-{index}")))
            .unwrap()
    };
    let kept: usize = (0..NAMES).map(|index| len(&mut connection, index)).sum();
    assert!((1..16).contains(&kept), "{kept} entries of 1 MiB kept");
    assert_eq!(len(&mut connection, NAMES - 1), 1, "the newest is kept");

    assert_victims_jobs_relayed(&redis);
}
