//! Fuel is paid for only where it is asked for: a function without a fuel limit is
//! compiled for the engine without fuel metering, one with a limit for the metered
//! engine (built on first need), and that one still runs out of fuel. On each engine,
//! functions that run the same bytes share one linked component, and nothing else; only
//! a load that was not shared calls the embedder's `after_load` hook.

use bytes::Bytes;
use faas_worker::{InvokeError, LoadedWorkflow, Worker, WorkerConfig};
use faas_workflow::Workflow;
use http_body_util::{BodyExt, Empty};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A workflow `name` serving `misbehave` (which acts on paths `/misbehave/...`), with
/// `limits` in its function. The worker is used directly, so routes may repeat.
fn manifest(name: &str, limits: &str) -> Workflow {
    tenant_manifest("t", name, limits)
}

/// [`manifest`] for `tenant`.
fn tenant_manifest(tenant: &str, name: &str, limits: &str) -> Workflow {
    let component = faas_testing::component_path("misbehave");
    let text = format!(
        r#"name = "{name}"
tenant = "{tenant}"

[functions.misbehave]
component = "{}"
timeout_ms = 500
{limits}

[[triggers.http]]
route = "/misbehave/..."
function = "misbehave"
"#,
        component.display()
    );
    Workflow::parse("workflow.toml", &text).unwrap()
}

async fn load(worker: &Worker, workflow: &Workflow) -> Arc<LoadedWorkflow> {
    let components = BTreeMap::from([(
        "misbehave".to_owned(),
        faas_invoke::Component::new(faas_testing::component("misbehave")),
    )]);
    Arc::new(worker.load_workflow(workflow, components).await.unwrap())
}

async fn get(worker: &Worker, workflow: &LoadedWorkflow, path: &str) -> Result<u16, InvokeError> {
    let request = hyper::Request::get(format!("http://localhost{path}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = worker.handle_http(workflow, "misbehave", request).await?;
    Ok(response.status().as_u16())
}

/// The status and body of a GET of `path`.
async fn get_text(worker: &Worker, workflow: &LoadedWorkflow, path: &str) -> (u16, String) {
    let request = hyper::Request::get(format!("http://localhost{path}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = worker
        .handle_http(workflow, "misbehave", request)
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The compiled artifacts under the cache root `cache`, in every engine's directory.
fn artifacts(cache: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(cache)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|engine| {
            std::fs::read_dir(engine.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
        .collect()
}

/// The engine directories of the compile cache (one per engine compatibility hash).
fn engine_dirs(cache: &Path) -> usize {
    std::fs::read_dir(cache)
        .map(|dir| {
            dir.filter(|entry| {
                entry
                    .as_ref()
                    .is_ok_and(|entry| entry.file_name().to_string_lossy().starts_with("engine-"))
            })
            .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_function_with_a_fuel_limit_is_metered_and_it_still_runs_out_of_fuel() {
    let dir = faas_testing::temp_dir();
    let mut config = WorkerConfig::new(dir.path());
    config.max_instances = 8;
    assert_eq!(config.default_limits.fuel, None, "fuel is off by default");
    let worker = Worker::new(config).unwrap();

    let free = load(&worker, &manifest("free", "")).await;
    let function = free.function("misbehave").unwrap();
    assert_eq!(function.limits().fuel, None);
    assert!(
        !function.fuel_metered(),
        "no fuel limit: compiled without fuel metering"
    );
    assert_eq!(
        engine_dirs(dir.path()),
        1,
        "the metered engine is not built until a function needs it"
    );
    assert_eq!(get(&worker, &free, "/misbehave/ok").await.unwrap(), 200);
    // Unmetered, an endless loop is still stopped by its deadline.
    let looped = get(&worker, &free, "/misbehave/loop").await.unwrap_err();
    assert!(matches!(looped, InvokeError::Timeout { .. }), "{looped}");

    let limited = load(&worker, &manifest("limited", "fuel = 1000000")).await;
    let function = limited.function("misbehave").unwrap();
    assert_eq!(function.limits().fuel, Some(1_000_000));
    assert!(
        function.fuel_metered(),
        "a fuel limit: compiled with metering"
    );
    assert_eq!(
        engine_dirs(dir.path()),
        2,
        "the compile cache keeps each engine's artifacts apart"
    );
    let burned = get(&worker, &limited, "/misbehave/loop").await.unwrap_err();
    assert!(
        matches!(
            burned,
            InvokeError::OutOfFuel {
                fuel: 1_000_000,
                ..
            }
        ),
        "{burned}"
    );
    assert_eq!(get(&worker, &limited, "/misbehave/ok").await.unwrap(), 200);

    // Both engines keep serving side by side, and the unmetered one is unchanged.
    assert_eq!(get(&worker, &free, "/misbehave/ok").await.unwrap(), 200);
    assert!(!free.function("misbehave").unwrap().fuel_metered());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_fuel_default_meters_every_function_and_the_deadline_still_ticks() {
    let dir = faas_testing::temp_dir();
    let mut config = WorkerConfig::new(dir.path());
    config.max_instances = 8;
    // Far more fuel than 500 ms of looping burns: the deadline must stop it, which
    // needs the epoch clock to tick the metered engine too.
    config.default_limits.fuel = Some(u64::MAX / 2);
    let worker = Worker::new(config).unwrap();
    let workflow = load(&worker, &manifest("defaulted", "")).await;
    assert!(workflow.function("misbehave").unwrap().fuel_metered());
    let looped = get(&worker, &workflow, "/misbehave/loop")
        .await
        .unwrap_err();
    assert!(matches!(looped, InvokeError::Timeout { .. }), "{looped}");
}

/// Loads seen by [`count_load`], the `after_load` hook of the sharing test's worker
/// (no other test sets one).
static LOADS: AtomicUsize = AtomicUsize::new(0);

fn count_load() {
    LOADS.fetch_add(1, Ordering::SeqCst);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_running_the_same_bytes_share_the_linked_code_but_no_instance_config_or_limit() {
    let dir = faas_testing::temp_dir();
    let mut config = WorkerConfig::new(dir.path());
    config.max_instances = 8;
    config.after_load = count_load;
    let worker = Worker::new(config).unwrap();
    let alpha = load(
        &worker,
        &tenant_manifest("alice", "alpha", "config = { label = \"alpha\" }"),
    )
    .await;
    // As if alice's load were long ago: bob's deploy, which loads nothing, must still
    // count as a use of the artifact, or pruning would take it first.
    let artifact = artifacts(dir.path()).pop().expect("alice's artifact");
    let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::open(&artifact)
        .and_then(|file| file.set_modified(long_ago))
        .unwrap();
    let beta = load(
        &worker,
        &tenant_manifest(
            "bob",
            "beta",
            "config = { label = \"beta\" }\nmemory_mb = 16",
        ),
    )
    .await;
    assert_eq!(worker.linked_components(), 1, "one component, linked once");
    assert_eq!(
        LOADS.load(Ordering::SeqCst),
        1,
        "the embedder's hook ran once"
    );
    let used = std::fs::metadata(&artifact).unwrap().modified().unwrap();
    assert!(
        used > long_ago,
        "the shared load marked the artifact as used"
    );

    // Each event still gets a fresh instance of its own, with its own function's config.
    for workflow in [&alpha, &beta, &alpha] {
        assert_eq!(
            get_text(&worker, workflow, "/misbehave/count").await,
            (200, "1\n".to_owned())
        );
    }
    let (_, said) = get_text(&worker, &alpha, "/misbehave/slow?ms=1").await;
    assert!(said.ends_with("as alpha\n"), "{said}");
    let (_, said) = get_text(&worker, &beta, "/misbehave/slow?ms=1").await;
    assert!(said.ends_with("as beta\n"), "{said}");
    // And its own limits: bob's 16 MiB stops his hog, and alice keeps being served.
    assert_eq!(beta.function("misbehave").unwrap().limits().memory_mb, 16);
    assert_ne!(alpha.function("misbehave").unwrap().limits().memory_mb, 16);
    assert!(get(&worker, &beta, "/misbehave/hog").await.is_err());
    assert!(get(&worker, &alpha, "/misbehave/trap").await.is_err());
    assert_eq!(get(&worker, &beta, "/misbehave/ok").await.unwrap(), 200);
    assert_eq!(get(&worker, &alpha, "/misbehave/ok").await.unwrap(), 200);

    // Another engine links its own.
    let metered = load(
        &worker,
        &tenant_manifest("carol", "gamma", "fuel = 1000000"),
    )
    .await;
    assert_eq!(worker.linked_components(), 2);
    assert_eq!(LOADS.load(Ordering::SeqCst), 2);
    assert_eq!(get(&worker, &metered, "/misbehave/ok").await.unwrap(), 200);

    // Held only while a loaded function holds it: removing the workflows frees the code.
    drop((alpha, metered));
    assert_eq!(worker.linked_components(), 1, "bob still runs it");
    drop(beta);
    assert_eq!(worker.linked_components(), 0);
    let again = load(&worker, &manifest("again", "")).await;
    assert_eq!(worker.linked_components(), 1);
    assert_eq!(LOADS.load(Ordering::SeqCst), 3);
    assert_eq!(
        get_text(&worker, &again, "/misbehave/count").await,
        (200, "1\n".to_owned())
    );
}
