//! Region ownership through the worker's public API: a region one run produced is
//! refused as the input of any other run, whoever's.

use faas_worker::{Region, RunError, Worker, WorkerConfig};
use faas_workflow::Workflow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A one-step workflow of `tenant` whose step passes its (large) blob on unchanged.
fn manifest(tenant: &str) -> String {
    let component = faas_testing::component_path("region-transfer");
    format!(
        r#"name = "produce"
tenant = "{tenant}"

[functions.produce]
component = "{}"
kind = "step"
config = {{ role = "produce" }}

[steps.produce]
function = "produce"
input = "text"
output = "blob.km:Blob"

[[triggers.http]]
route = "/produce-{tenant}"
step = "produce"
"#,
        component.display()
    )
}

async fn load(worker: &Worker, tenant: &str) -> Arc<faas_worker::LoadedWorkflow> {
    let workflow = Workflow::parse("workflow.toml", &manifest(tenant)).unwrap();
    let components = BTreeMap::from([(
        "produce".to_owned(),
        faas_testing::component("region-transfer"),
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
