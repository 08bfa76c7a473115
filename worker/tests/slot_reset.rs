//! By default a worker chooses how to reset memory slots per function: a function
//! whose events keep faulting pages in under written-page resets (here `misbehave`'s
//! `/misbehave/scatter`, which writes hundreds of runs of pages, as an interpreter's
//! heap has) moves to whole resets after its first events, with or without fuel; one
//! that writes a few pages (the hello) stays. Once moved it still answers, never sees
//! an earlier instance's data, and stops faulting. One tenant's events never move
//! another tenant's function, though both run the same bytes.

use bytes::Bytes;
use faas_worker::{LoadedWorkflow, SlotReset, Worker, WorkerConfig};
use faas_workflow::Workflow;
use http_body_util::{BodyExt, Empty};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A worker of 8 instance slots that caches code under `dir` and resets slots as
/// `reset` says.
fn worker(dir: &std::path::Path, reset: SlotReset) -> Worker {
    let mut config = WorkerConfig::new(dir);
    config.max_instances = 8;
    config.slot_reset = reset;
    Worker::new(config).unwrap()
}

/// A workflow `name` of tenant `t` with `misbehave` (on `/misbehave/...`, with
/// `limits`) and `hello` (on `/hello`).
async fn load(worker: &Worker, name: &str, limits: &str) -> Arc<LoadedWorkflow> {
    load_for(worker, "t", name, limits).await
}

/// [`load`] for `tenant`.
async fn load_for(worker: &Worker, tenant: &str, name: &str, limits: &str) -> Arc<LoadedWorkflow> {
    let text = format!(
        r#"name = "{name}"
tenant = "{tenant}"

[functions.misbehave]
component = "{}"
{limits}

[functions.hello]
component = "{}"

[[triggers.http]]
route = "/misbehave/..."
function = "misbehave"

[[triggers.http]]
route = "/hello"
function = "hello"
"#,
        faas_testing::component_path("misbehave").display(),
        faas_testing::component_path("wasi-hello").display(),
    );
    let workflow = Workflow::parse("workflow.toml", &text).unwrap();
    let components = BTreeMap::from([
        (
            "misbehave".to_owned(),
            faas_invoke::Component::new(faas_testing::component("misbehave")),
        ),
        (
            "hello".to_owned(),
            faas_invoke::Component::new(faas_testing::component("wasi-hello")),
        ),
    ]);
    Arc::new(worker.load_workflow(&workflow, components).await.unwrap())
}

/// The status and body of a GET of `path` from `function`.
async fn get(worker: &Worker, workflow: &LoadedWorkflow, function: &str, path: &str) -> String {
    let request = hyper::Request::get(format!("http://localhost{path}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = worker
        .handle_http(workflow, function, request)
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{function} {path}");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

/// One scattered write of `workflow`'s `misbehave`, which must find only zeros.
async fn scatter(worker: &Worker, workflow: &LoadedWorkflow) {
    let stale = get(worker, workflow, "misbehave", "/misbehave/scatter").await;
    assert_eq!(
        stale, "0\n",
        "an instance found another's bytes in its memory"
    );
}

/// Held by each test for its whole run: page faults are counted for the whole process,
/// so the tests of this file must not run side by side.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Minor page faults taken by this process so far.
fn process_faults() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: a valid place for the kernel to write a `rusage` into.
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) },
        0
    );
    // SAFETY: written by the kernel above.
    unsafe { usage.assume_init() }.ru_minflt as u64
}

/// Minor page faults per event over `events` scattered writes.
async fn faults_per_scatter(worker: &Worker, workflow: &LoadedWorkflow, events: u64) -> u64 {
    let before = process_faults();
    for _ in 0..events {
        scatter(worker, workflow).await;
    }
    (process_faults() - before) / events
}

/// Scatters until `workflow`'s `misbehave` moved to whole resets (the move runs in the
/// background after the event that finds it decided), for 30 s at most.
async fn until_moved(worker: &Worker, workflow: &LoadedWorkflow) {
    let give_up = Instant::now() + Duration::from_secs(30);
    while !workflow
        .function("misbehave")
        .unwrap()
        .moved_to_whole_resets()
    {
        assert!(Instant::now() < give_up, "never moved to whole resets");
        scatter(worker, workflow).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How many instances of `function` (of `workflow` of `tenant`) the worker's metrics
/// count with `slot_reset`, as a scrape reads them.
fn starts(worker: &Worker, tenant: &str, workflow: &str, function: &str, slot_reset: &str) -> u64 {
    let mut registry = prometheus_client::registry::Registry::with_prefix("faas");
    registry.register_collector(worker.metrics().collector());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let series = format!(
        r#"faas_instance_starts_total{{tenant="{tenant}",workflow="{workflow}",function="{function}",slot_reset="{slot_reset}"}} "#
    );
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |count| count.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_that_keeps_faulting_pages_in_moves_to_whole_resets() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = faas_testing::temp_dir();
    assert_eq!(
        WorkerConfig::new(dir.path()).slot_reset,
        SlotReset::default(),
    );
    assert!(
        matches!(SlotReset::default(), SlotReset::ByFunction { .. }),
        "chosen per function by default"
    );
    let worker = worker(dir.path(), SlotReset::default());
    let plain = load(&worker, "plain", "").await;
    let fueled = load(&worker, "fueled", "fuel = 10_000_000_000").await;

    // Its first events find cold slots; those after them are measured.
    for _ in 0..16 {
        scatter(&worker, &plain).await;
        get(&worker, &plain, "hello", "/hello").await;
    }
    let scanned = faults_per_scatter(&worker, &plain, 16).await;
    for _ in 0..16 {
        get(&worker, &plain, "hello", "/hello").await;
    }
    until_moved(&worker, &plain).await;
    until_moved(&worker, &fueled).await;

    assert!(
        !plain.function("hello").unwrap().moved_to_whole_resets(),
        "the hello writes a few pages: it keeps written-page resets"
    );
    let misbehave = fueled.function("misbehave").unwrap();
    assert!(misbehave.fuel_metered(), "moved with its fuel metering");
    // Every later event: no stale bytes (each asserts it), and no faults to speak of.
    let whole = faults_per_scatter(&worker, &plain, 32).await;
    eprintln!("faults per event: {scanned} with written-page resets, {whole} once moved");
    assert!(
        scanned > 256 && whole < scanned / 4,
        "faults per event: {scanned} with written-page resets, {whole} once moved"
    );
    faults_per_scatter(&worker, &fueled, 32).await;
    let hello = get(&worker, &plain, "hello", "/hello").await;
    assert!(hello.starts_with("Hello from"), "{hello}");
    // The metrics tell the operator which functions moved.
    for workflow in ["plain", "fueled"] {
        assert!(starts(&worker, "t", workflow, "misbehave", "written-pages") >= 32);
        assert!(starts(&worker, "t", workflow, "misbehave", "whole") >= 32);
    }
    assert!(starts(&worker, "t", "plain", "hello", "written-pages") > 32);
    assert_eq!(starts(&worker, "t", "plain", "hello", "whole"), 0);
    // The engines that reset whole load the artifacts compiled for the others: one
    // cache directory for the unmetered engines, one for the metered ones.
    let engine_dirs = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(engine_dirs, 2, "compiled once per fuel setting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_events_never_move_another_tenants_function_of_the_same_bytes() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = faas_testing::temp_dir();
    let worker = worker(dir.path(), SlotReset::default());
    let attacker = load_for(&worker, "mallory", "noisy", "").await;
    let victim = load_for(&worker, "alice", "quiet", "").await;
    assert_eq!(
        worker.linked_components(),
        2,
        "misbehave and the hello, linked once each"
    );

    // Mallory's events fault all they can; Alice's, of the same component, do not.
    for _ in 0..40 {
        scatter(&worker, &attacker).await;
        let fine = get(&worker, &victim, "misbehave", "/misbehave/ok").await;
        assert_eq!(fine, "still fine\n");
    }
    until_moved(&worker, &attacker).await;
    for _ in 0..8 {
        get(&worker, &victim, "misbehave", "/misbehave/ok").await;
    }
    assert!(
        !victim
            .function("misbehave")
            .unwrap()
            .moved_to_whole_resets(),
        "another tenant's events moved alice's function"
    );
    assert_eq!(starts(&worker, "alice", "quiet", "misbehave", "whole"), 0);
    assert!(starts(&worker, "mallory", "noisy", "misbehave", "whole") > 0);
    assert_eq!(
        worker.linked_components(),
        3,
        "the moved code is linked once more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_written_page_resets_chosen_nothing_moves() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = faas_testing::temp_dir();
    let worker = worker(dir.path(), SlotReset::WrittenPages);
    let plain = load(&worker, "plain", "").await;
    for _ in 0..64 {
        scatter(&worker, &plain).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    scatter(&worker, &plain).await;
    assert!(!plain.function("misbehave").unwrap().moved_to_whole_resets());
    assert_eq!(starts(&worker, "t", "plain", "misbehave", "whole"), 0);
    assert_eq!(
        starts(&worker, "t", "plain", "misbehave", "written-pages"),
        65
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_whole_resets_chosen_every_instance_is_counted_whole() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = faas_testing::temp_dir();
    let worker = worker(dir.path(), SlotReset::Whole { bytes: 4 << 20 });
    let plain = load(&worker, "plain", "").await;
    for _ in 0..3 {
        scatter(&worker, &plain).await;
        get(&worker, &plain, "hello", "/hello").await;
    }
    assert_eq!(starts(&worker, "t", "plain", "misbehave", "whole"), 3);
    assert_eq!(starts(&worker, "t", "plain", "hello", "whole"), 3);
    assert_eq!(starts(&worker, "t", "plain", "hello", "written-pages"), 0);
}
