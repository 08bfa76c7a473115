//! The gateway as activator (services mode): a workflow published while no worker can
//! take it (as the Kubernetes operator publishes one whose workers are scaled to zero)
//! is routed all the same; its events are held, demand is signalled in
//! `faas:demand`, and they are answered by the function once a worker has loaded it.
//! A full queue and a timeout get 503 with `Retry-After`, while other tenants'
//! workflows are served (or held) as before; a client that hangs up stops waiting.
//! Entries of a stream trigger wait in the stream instead, and signal demand too.
//! An event the activator gave up on leaves a line saying why in its workflow's logs.

use crate::logs::wait_for_line;
use crate::redis::{connect, ns, payloads, pending, relay_manifest, xadd};
use crate::services::Services;
use crate::support::{TOKEN, client, deploy_at, metrics_at, repo};
use faas_shared_state::{DeploymentRecord, SharedState};
use faas_workflow::{TenantScope, Workflow};
use reqwest::blocking::Response;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a condition that depends on other processes may take, on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn shared(services: &Services) -> (tokio::runtime::Runtime, SharedState) {
    let runtime = runtime();
    let shared = runtime
        .block_on(SharedState::connect(&services.redis.url()))
        .unwrap();
    (runtime, shared)
}

/// Publishes the repository manifest `manifest` (with each `(from, to)` replacement
/// made in its text) straight into the shared state, as the Kubernetes operator does:
/// components by SHA-256, then the live record, with no gateway deploy waiting for a
/// worker. Returns the workflow's name.
fn publish(services: &Services, manifest: &str, replacements: &[(&str, &str)]) -> String {
    publish_file(services, &repo(manifest), replacements)
}

/// [`publish`] of the manifest at `path` (schemas: the `.km` files beside it).
fn publish_file(services: &Services, path: &Path, replacements: &[(&str, &str)]) -> String {
    let dir = path.parent().unwrap();
    let mut text = std::fs::read_to_string(path).unwrap();
    for (from, to) in replacements {
        assert!(text.contains(from), "`{from}` is not in {}", path.display());
        text = text.replace(from, to);
    }
    let schemas: BTreeMap<String, String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|file| file.extension().is_some_and(|ext| ext == "km"))
        .map(|file| {
            let name = file.file_name().unwrap().to_str().unwrap().to_owned();
            (name, std::fs::read_to_string(&file).unwrap())
        })
        .collect();
    let workflow =
        Workflow::parse_scoped("workflow.toml", &text, Some(&schemas), TenantScope::Named).unwrap();
    let (runtime, shared) = shared(services);
    runtime.block_on(async {
        let mut components = BTreeMap::new();
        for (name, function) in &workflow.functions {
            let bytes = std::fs::read(dir.join(&function.component)).unwrap();
            let sha = hex::encode(Sha256::digest(&bytes));
            shared
                .put_component(&sha, &bytes, &workflow.tenant)
                .await
                .unwrap();
            components.insert(name.clone(), sha);
        }
        let record = DeploymentRecord {
            digest: hex::encode(Sha256::digest(text.as_bytes())),
            revision: shared.next_revision().await.unwrap(),
            deployed_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            components,
            workflow,
        };
        shared.put_deployment(&record).await.unwrap();
        record.workflow.name
    })
}

fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Polls `done` until it holds, for up to [`PATIENCE`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the gateway routes workflow `name` (it follows the shared state).
fn wait_routed(services: &Services, name: &str) {
    wait_until(&format!("the gateway knows workflow `{name}`"), || {
        client()
            .get(format!("{}/admin/v1/workflows/{name}", services.url))
            .bearer_auth(TOKEN)
            .send()
            .unwrap()
            .status()
            == 200
    });
}

fn metrics_text(services: &Services) -> String {
    metrics_at(&services.url)
}

/// The value of the metric sample whose name and labels are `sample` (0 if absent).
fn metric(services: &Services, sample: &str) -> f64 {
    crate::support::sample_value(&metrics_text(services), sample)
}

/// Events held now, over every workflow.
fn held_events(services: &Services) -> f64 {
    crate::support::sample_sum(&metrics_text(services), "faas_activator_held")
}

fn outcomes(services: &Services, outcome: &str) -> f64 {
    metric(
        services,
        &format!("faas_activator_requests_total{{outcome=\"{outcome}\"}}"),
    )
}

/// Waits until the gateway holds `count` events.
fn wait_held(services: &Services, count: f64) {
    wait_until(&format!("{count} events held"), || {
        held_events(services) == count
    });
}

/// Sends `GET <path>` from another thread; returns the status and body.
fn get_later(services: &Services, path: &str) -> JoinHandle<(u16, String)> {
    let url = format!("{}{path}", services.url);
    std::thread::spawn(move || {
        let response = client().get(url).send().unwrap();
        (response.status().as_u16(), response.text().unwrap())
    })
}

/// Asserts a 503 with `Retry-After`; returns its error message.
fn assert_retry_later(response: Response) -> String {
    assert_eq!(response.status(), 503);
    let retry_after = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(retry_after.parse::<u64>().unwrap() >= 1, "{retry_after}");
    let body: serde_json::Value = response.json().unwrap();
    assert_eq!(body["error"]["kind"], "unavailable", "{body}");
    body["error"]["message"].as_str().unwrap().to_owned()
}

#[test]
fn events_for_a_workflow_with_no_worker_are_held_until_one_loads_it() {
    let mut services = Services::start_full(&[], &[], &["--activator-timeout-ms", "120000"]);
    let (runtime, shared) = shared(&services);
    let hello = publish(&services, "functions/hello/workflow.toml", &[]);
    let wordcount = publish(&services, "functions/wordcount/workflow.toml", &[]);
    wait_routed(&services, &hello);
    wait_routed(&services, &wordcount);

    let sent_at = unix_millis();
    // An HTTP function and a workflow run: both known routes, neither has a replica.
    let greeting = get_later(&services, "/hello?name=zero");
    let text = "the fox and the dog and the cat";
    let run = {
        let url = format!("{}/wordcount", services.url);
        std::thread::spawn(move || client().post(url).body(text).send().unwrap())
    };
    wait_until("demand for both workflows", || {
        let demand = runtime.block_on(shared.demand()).unwrap();
        demand.contains_key("hello") && demand.contains_key("wordcount")
    });
    wait_held(&services, 2.0);
    // Held events are counted per workflow.
    let held_for = |workflow: &str| {
        metric(
            &services,
            &format!(r#"faas_activator_held{{tenant="demo",workflow="{workflow}"}}"#),
        )
    };
    assert_eq!((held_for("hello"), held_for("wordcount")), (1.0, 1.0));
    std::thread::sleep(Duration::from_secs(1));
    assert!(!greeting.is_finished(), "the request is held, not failed");
    assert!(!run.is_finished(), "the run is held, not failed");

    services.start_worker_with("w1", &[]);
    let (status, body) = greeting.join().unwrap();
    assert_eq!((status, body.trim()), (200, "Hello, zero!"));
    let run = run.join().unwrap();
    assert_eq!(run.status(), 200);
    let counted: serde_json::Value = run.json().unwrap();
    assert_eq!(counted["total"], text.split_whitespace().count());
    assert_eq!(counted["counts"]["and"], 2);

    assert_eq!(outcomes(&services, "forwarded"), 2.0);
    assert_eq!(held_events(&services), 0.0);
    // Served now, without waiting.
    let again = services.get("/hello?name=warm");
    assert_eq!(again.text().unwrap().trim(), "Hello, warm!");
    assert_eq!(outcomes(&services, "forwarded"), 2.0);

    // Every event is recorded as the workflow's activity (flushed within a second).
    wait_until("activity recorded for both workflows", || {
        let activity = runtime.block_on(shared.activity()).unwrap();
        activity.get("hello").is_some_and(|at| *at >= sent_at)
            && activity.get("wordcount").is_some_and(|at| *at >= sent_at)
    });
}

#[test]
fn a_full_queue_gets_503_at_once_while_other_tenants_are_served_or_held() {
    let mut services = Services::start_full(
        &[],
        &[],
        &["--activator-queue", "2", "--activator-timeout-ms", "120000"],
    );
    // The victim's workflow fills its only worker, so `sleepy` (another tenant's)
    // cannot be placed anywhere: it is routed with no replica.
    services.start_worker_with("w1", &["--worker-capacity", "1"]);
    deploy_at(&services.url, &repo("functions/hello/workflow.toml"));
    let renamed = [
        ("name = \"hello\"", "name = \"sleepy\""),
        ("tenant = \"demo\"", "tenant = \"other\""),
        ("route = \"/hello\"", "route = \"/sleepy\""),
    ];
    publish(&services, "functions/hello/workflow.toml", &renamed);
    let third = [
        ("name = \"hello\"", "name = \"drowsy\""),
        ("tenant = \"demo\"", "tenant = \"third\""),
        ("route = \"/hello\"", "route = \"/drowsy\""),
    ];
    publish(&services, "functions/hello/workflow.toml", &third);
    wait_routed(&services, "sleepy");
    wait_routed(&services, "drowsy");

    let held = [
        get_later(&services, "/sleepy?name=first"),
        get_later(&services, "/sleepy?name=second"),
    ];
    wait_held(&services, 2.0);
    let started = Instant::now();
    let message = assert_retry_later(services.get("/sleepy?name=third"));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "refused at once, not after the timeout: {:?}",
        started.elapsed()
    );
    assert!(
        message.contains("sleepy") && message.contains("2 events"),
        "{message}"
    );
    assert_eq!(outcomes(&services, "full"), 1.0);

    // Another tenant's workflow on a running worker is served at once meanwhile, and
    // a third tenant's workflow with no replica has a queue of its own.
    let victim = services.get("/hello?name=victim");
    assert_eq!(victim.status(), 200);
    assert_eq!(victim.text().unwrap().trim(), "Hello, victim!");
    let drowsy = get_later(&services, "/drowsy?name=own-queue");
    wait_held(&services, 3.0);
    assert!(held.iter().all(|request| !request.is_finished()));

    // A worker with room: every held event gets the function's answer.
    services.start_worker_with("w2", &[]);
    for (request, name) in held.into_iter().zip(["first", "second"]) {
        let (status, body) = request.join().unwrap();
        assert_eq!(
            (status, body.trim()),
            (200, format!("Hello, {name}!").as_str())
        );
    }
    let (status, body) = drowsy.join().unwrap();
    assert_eq!((status, body.trim()), (200, "Hello, own-queue!"));
    assert_eq!(outcomes(&services, "forwarded"), 3.0);
    assert_eq!(held_events(&services), 0.0);
}

#[test]
fn a_held_event_times_out_with_503_and_a_client_that_hangs_up_stops_waiting() {
    let services = Services::start_full(&[], &[], &["--activator-timeout-ms", "3000"]);
    let hello = publish(&services, "functions/hello/workflow.toml", &[]);
    wait_routed(&services, &hello);

    // A client that gives up after half a second leaves the queue.
    let impatient = reqwest::blocking::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    assert!(
        impatient
            .get(format!("{}/hello?name=gone", services.url))
            .send()
            .is_err()
    );
    wait_until("the hung-up event counted as cancelled", || {
        outcomes(&services, "cancelled") == 1.0
    });
    assert_eq!(held_events(&services), 0.0);

    let started = Instant::now();
    let message = assert_retry_later(services.get("/hello?name=late"));
    assert!(
        started.elapsed() >= Duration::from_millis(3000),
        "answered after the timeout, not before: {:?}",
        started.elapsed()
    );
    assert!(message.contains("within 3000 ms"), "{message}");
    assert_eq!(outcomes(&services, "timeout"), 1.0);
    assert_eq!(held_events(&services), 0.0);
    assert_eq!(outcomes(&services, "forwarded"), 0.0);
    // No worker ran it, so the gateway tells the tenant why (once: the event whose
    // client hung up failed no one).
    let lines = wait_for_line(&services.url, TOKEN, &[&hello], "within 3000 ms");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["text"], message.as_str());
    assert_eq!(
        (
            &lines[0]["source"],
            &lines[0]["level"],
            &lines[0]["function"]
        ),
        (&"platform".into(), &"error".into(), &"hello".into()),
    );

    // A pub/sub message no worker took is gone (at most once): its tenant is told.
    let dir = faas_testing::temp_dir();
    let triggers = "[[triggers.redis]]\nchannel = \"ticks\"\nstep = \"relay\"\n";
    let relay = publish_file(
        &services,
        &relay_manifest(dir.path(), "ticks", triggers),
        &[],
    );
    wait_routed(&services, &relay);
    wait_until("a gateway subscribed to the channel", || {
        crate::services::subscribers(&services.redis, &ns("ticks")) > 0
    });
    let _: i64 = redis::cmd("PUBLISH")
        .arg(ns("ticks"))
        .arg("lost")
        .query(&mut connect(&services.redis))
        .unwrap();
    let dropped = "a message on channel `ticks` was dropped: ";
    let lines = wait_for_line(&services.url, TOKEN, &[&relay], dropped);
    assert_eq!(
        (
            &lines[0]["step"],
            &lines[0]["function"],
            &lines[0]["source"]
        ),
        (&"relay".into(), &"relay".into(), &"platform".into()),
        "{lines:?}"
    );
    assert!(
        lines[0]["text"]
            .as_str()
            .unwrap()
            .ends_with("within 3000 ms (its worker is starting); retry later"),
        "{lines:?}"
    );
}

#[test]
fn a_stream_entry_for_a_workflow_with_no_worker_signals_demand_and_runs_once_one_loads_it() {
    let mut services = Services::start_full(&[], &[], &[]);
    let (runtime, shared) = shared(&services);
    let dir = faas_testing::temp_dir();
    let triggers = "[[triggers.stream]]\nstream = \"orders\"\nstep = \"relay\"\n";
    let relay = publish_file(
        &services,
        &relay_manifest(dir.path(), "orders", triggers),
        &[],
    );
    wait_routed(&services, &relay);

    // The entry waits in the stream (not taken, so not failed), and asks for a worker.
    let id = xadd(&services.redis, &ns("orders"), "first");
    wait_until("demand for the stream's workflow", || {
        runtime
            .block_on(shared.demand())
            .unwrap()
            .contains_key(&relay)
    });
    assert_eq!(pending(&services.redis, &ns("orders"), &relay), 0);
    // The waiting entry shows as the trigger's lag (sampled about once a second).
    let lag =
        format!(r#"faas_stream_lag_entries{{tenant="t",workflow="{relay}",stream="orders"}}"#);
    wait_until("the entry counted as lag", || {
        metric(&services, &lag) == 1.0
    });

    services.start_worker_with("w1", &[]);
    // Run once, on its first delivery.
    let out = payloads(&services.redis, &ns("orders:out"), 1, PATIENCE);
    assert_eq!(out, [format!("orders|{id}|1|first")]);
    wait_until("the entry acknowledged", || {
        pending(&services.redis, &ns("orders"), &relay) == 0
    });
    wait_until("no lag left", || {
        metrics_text(&services).contains(&format!("{lag} 0\n"))
    });
}

#[test]
fn a_held_event_goes_to_no_other_tenants_workflow_that_took_its_route() {
    // The activator looked the held event's route up again and forwarded it to
    // whatever workflow served it by then: one whose name and route another tenant
    // took, in a change the gateway saw at once (here one record replacing another, as
    // a removal and a deploy read in one sync would), got the event, and its
    // credentials.
    let mut services = Services::start_full(&[], &[], &["--activator-timeout-ms", "120000"]);
    let hello = "functions/hello/workflow.toml";
    let name = publish(
        &services,
        hello,
        &[("tenant = \"demo\"", "tenant = \"victim\"")],
    );
    wait_routed(&services, &name);
    let held = {
        let url = format!("{}/hello?name=secret", services.url);
        std::thread::spawn(move || {
            let response = client()
                .get(url)
                .bearer_auth("victims-credential")
                .send()
                .unwrap();
            (response.status().as_u16(), response.text().unwrap())
        })
    };
    wait_held(&services, 1.0);
    publish(
        &services,
        hello,
        &[("tenant = \"demo\"", "tenant = \"mallory\"")],
    );
    services.start_worker_with("w1", &[]);
    let (status, body) = held.join().unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("was removed while the event waited"),
        "{body}"
    );
    // The route's new owner is served, by a worker that loaded its workflow.
    let (status, body) = get_later(&services, "/hello?name=mallory").join().unwrap();
    assert_eq!((status, body.trim()), (200, "Hello, mallory!"));
    assert_eq!(outcomes(&services, "removed"), 1.0);
}
