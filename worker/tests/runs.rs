//! A workflow run through the worker's public API: its walk runs on the guest threads
//! (`run/chain.rs`), and its steps' instances go with it when it ends early, past its
//! deadline or because its caller stopped waiting, not at their own deadlines.

use faas_worker::{Region, RunError, Worker, WorkerConfig};
use faas_workflow::Workflow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A one-step workflow whose step computes forever; the step's own deadline is far
/// beyond the test's, so only the run ending can stop it in time.
fn spinning(run_timeout_ms: u64) -> String {
    format!(
        r#"name = "spin"
tenant = "alice"

[functions.spin]
component = "{}"
kind = "step"
config = {{ probe = "spin" }}
timeout_ms = 600000

[steps.spin]
function = "spin"
input = "bytes"
output = "json"

[workflow]
timeout_ms = {run_timeout_ms}
"#,
        faas_testing::component_path("region-probe").display()
    )
}

async fn load_spinning(worker: &Worker, run_timeout_ms: u64) -> Arc<faas_worker::LoadedWorkflow> {
    let workflow = Workflow::parse("workflow.toml", &spinning(run_timeout_ms)).unwrap();
    let components = BTreeMap::from([(
        "spin".to_owned(),
        faas_invoke::Component::new(faas_testing::component("region-probe")),
    )]);
    Arc::new(worker.load_workflow(&workflow, components).await.unwrap())
}

/// Waits until `worker` holds no instance, failing after ten seconds.
async fn assert_instances_go(worker: &Worker, why: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while worker.active_instances() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "{why}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_caller_stops_waiting_stops_its_steps() {
    let dir = faas_testing::temp_dir();
    let worker = Arc::new(Worker::new(WorkerConfig::new(dir.path())).unwrap());
    let spin = load_spinning(&worker, 600_000).await;

    // Boxed, so that dropping it drops the run (a pinned local would live on).
    let mut run = Box::pin(worker.run_workflow(&spin, Region::new("bytes", b"go".to_vec())));
    let started = async {
        while worker.active_instances() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        outcome = &mut run => panic!("a step that computes forever ended: {:?}", outcome.result),
        () = started => {}
    }
    // The caller stops waiting: its client went away, say.
    drop(run);
    assert_instances_go(
        &worker,
        "the step kept computing after its run's caller went away",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_deadline_stops_its_steps() {
    let dir = faas_testing::temp_dir();
    let worker = Arc::new(Worker::new(WorkerConfig::new(dir.path())).unwrap());
    let spin = load_spinning(&worker, 300).await;

    let outcome = worker
        .run_workflow(&spin, Region::new("bytes", b"go".to_vec()))
        .await;
    assert!(
        matches!(outcome.result, Err(RunError::Timeout(_))),
        "{:?}",
        outcome.result
    );
    assert_instances_go(&worker, "the step kept computing after its run's deadline").await;
}
