//! Region ownership through the worker's public API: a region one run produced is
//! refused as the input of any other run, whoever's.

use faas_worker::{Region, RunError, Worker, WorkerConfig};
use faas_workflow::Workflow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A one-step workflow of `tenant` whose step passes its (large) blob on unchanged.
fn manifest(tenant: &str) -> String {
    one_step(tenant, "produce", "text", "blob.km:Blob")
}

/// A one-step workflow of `tenant`: the regions example in role `role`.
fn one_step(tenant: &str, role: &str, input: &str, output: &str) -> String {
    step_of("region-transfer", tenant, role, input, output)
}

/// A one-step workflow of `tenant`: component `package` with config `role = <role>`
/// and `probe = <role>` (the regions example reads one, the probe the other).
fn step_of(package: &str, tenant: &str, role: &str, input: &str, output: &str) -> String {
    let component = faas_testing::component_path(package);
    format!(
        r#"name = "{role}"
tenant = "{tenant}"

[functions.{role}]
component = "{}"
kind = "step"
config = {{ role = "{role}", probe = "{role}" }}

[steps.{role}]
function = "{role}"
input = "{input}"
output = "{output}"

[[triggers.http]]
route = "/{role}-{tenant}"
step = "{role}"
"#,
        component.display()
    )
}

async fn load(worker: &Worker, tenant: &str) -> Arc<faas_worker::LoadedWorkflow> {
    load_manifest(worker, &manifest(tenant)).await
}

async fn load_manifest(worker: &Worker, manifest: &str) -> Arc<faas_worker::LoadedWorkflow> {
    load_package(worker, manifest, "region-transfer").await
}

async fn load_package(
    worker: &Worker,
    manifest: &str,
    package: &str,
) -> Arc<faas_worker::LoadedWorkflow> {
    let workflow = Workflow::parse("workflow.toml", manifest).unwrap();
    let function = workflow.functions.keys().next().unwrap().clone();
    let components = BTreeMap::from([(
        function,
        faas_invoke::Component::new(faas_testing::component(package)),
    )]);
    Arc::new(worker.load_workflow(&workflow, components).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_of_one_run_is_refused_by_every_other_run() {
    let dir = faas_testing::temp_dir();
    let worker = Arc::new(Worker::new(WorkerConfig::new(dir.path())).unwrap());
    let ours = load(&worker, "alice").await;
    let theirs = load(&worker, "mallory").await;

    let outcome = worker
        .run_workflow(&ours, Region::new("text", b"1048576".to_vec()))
        .await;
    let produced = outcome.result.unwrap().remove(0);
    assert!(
        produced.is_mappable(),
        "a 1 MiB blob lives in a memory file"
    );
    let owner = produced
        .owner()
        .expect("a step's region has an owner")
        .clone();
    assert_eq!(&*owner.tenant, "alice");

    for (workflow, who) in [(&theirs, "another tenant"), (&ours, "another run")] {
        let outcome = worker.run_workflow(workflow, produced.clone()).await;
        match outcome.result {
            Err(RunError::StepFailed { cause, .. }) => {
                let message = cause.to_string();
                assert!(
                    message.contains("region belongs to tenant `alice`"),
                    "{who}: {message}"
                );
                assert!(message.contains(&*owner.run_id), "{who}: {message}");
            }
            other => panic!("{who}: the region was accepted: {other:?}"),
        }
    }
}

/// A step whose values were copied out of it and whose memory is small is torn down
/// before its run returns; one whose pages back its value is kept until the value is
/// dropped (its consumers have placed it), then torn down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_instance_outlives_its_run_only_while_its_pages_back_a_value() {
    let dir = faas_testing::temp_dir();
    let worker = Arc::new(Worker::new(WorkerConfig::new(dir.path())).unwrap());
    let gather = load_manifest(&worker, &one_step("alice", "gather", "json", "json")).await;
    let produce = load(&worker, "alice").await;

    let outcome = worker
        .run_workflow(&gather, Region::new("json", b"{}".to_vec()))
        .await;
    assert_eq!(
        outcome.result.unwrap()[0].bytes().unwrap().as_ref(),
        b"[{}]"
    );
    assert_eq!(worker.active_instances(), 0, "the gather step's instance");

    let outcome = worker
        .run_workflow(&produce, Region::new("text", b"1048576".to_vec()))
        .await;
    let produced = outcome.result.unwrap();
    assert!(produced[0].is_mappable());
    assert_eq!(
        worker.active_instances(),
        1,
        "the producer, backing its value"
    );
    drop(produced);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while worker.active_instances() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the producer outlived its value"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A failed step holds nothing once its run has answered: its instance slot and its
/// region memory files are free for the next event at once. (Its teardown used to be
/// put off like a producer's, though no consumer waits for a failed step, so under
/// load the next run could be refused at the worker's file budget for a run that was
/// over.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_holds_nothing_once_its_run_has_answered() {
    let dir = faas_testing::temp_dir();
    let mut config = WorkerConfig::new(dir.path());
    config.max_regions_per_instance = 64;
    let worker = Arc::new(Worker::new(config).unwrap());
    // The probe's `flood` makes one-page regions, each its own memory file, until the
    // host refuses one.
    let manifest = step_of("region-probe", "alice", "flood", "bytes", "bytes");
    let flood = load_package(&worker, &manifest, "region-probe").await;
    for attempt in 0..3 {
        let outcome = worker
            .run_workflow(&flood, Region::new("bytes", Vec::new()))
            .await;
        match outcome.result {
            Err(RunError::StepFailed { cause, .. }) => {
                let message = cause.to_string();
                assert!(message.contains("at most 64 regions"), "{message}");
            }
            other => panic!("the flood was not stopped: {other:?}"),
        }
        assert_eq!(worker.active_instances(), 0, "attempt {attempt}");
    }
}
