//! `faas operator` against the real control plane: a real redis-server, the real
//! operator process, and a real `faas worker` process for each Ready pod of a worker
//! Deployment (kwok marks pods Ready; [`Workers`] starts the worker a kubelet would,
//! with the pod's name as its id, and kills it, without deregistering, when the pod
//! goes).

use crate::support::{Process, compile_cache};
use faas_shared_state::SharedState;
use faas_store::{QuotaChanges, TenantStore};
use faas_testing::RedisServer;
use faas_testing::kube::{ControlPlane, PodEvent, ReadyPod};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The label the operator knows worker pods by (its default `--worker-selector`).
const WORKER_LABEL: &str = "app.kubernetes.io/component=worker";
/// Long enough that only the operator, not an expired heartbeat, can explain a
/// worker being forgotten within the test's patience.
const HEARTBEAT_TTL_MS: &str = "120000";
/// How long a status may take to follow.
const PATIENCE: Duration = Duration::from_secs(60);
/// The finalizer of another controller, which keeps a deleted Workflow in place.
const HOLD: &str = "test.faas.dev/hold";

/// One test's platform: its Redis, tenant namespace, the operator's namespace with the
/// worker Deployment, the operator and the workers. Fields drop in order: the operator
/// and workers go before the Redis they use, and the operator lock last.
struct Cluster {
    plane: &'static ControlPlane,
    runtime: tokio::runtime::Runtime,
    operator: Option<Process>,
    workers: Arc<Mutex<BTreeMap<String, Process>>>,
    redis: RedisServer,
    /// The namespace of the operator, its Lease and the worker Deployment.
    system: String,
    /// A tenant's namespace, registered as a tenant in Redis.
    tenant: String,
    _data: tempfile::TempDir,
    _operator_lock: std::sync::MutexGuard<'static, ()>,
}

impl Cluster {
    /// Starts everything with `workers` worker pods and the operator's `extra` flags.
    fn start(workers: u32, extra: &[&str]) -> Self {
        let operator_lock = crate::operator_lock();
        faas_testing::build_functions();
        let plane = ControlPlane::shared();
        crate::gateway::install_crd(plane);
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let system = runtime.block_on(plane.namespace("op-system"));
        let redis = RedisServer::start();
        let tenant = new_tenant(&runtime, plane, &redis, "op-tenant");
        let data = faas_testing::temp_dir();
        let cluster = Self {
            plane,
            runtime,
            operator: None,
            workers: Arc::default(),
            redis,
            system,
            tenant,
            _data: data,
            _operator_lock: operator_lock,
        };
        cluster.follow_worker_pods();
        cluster.apply(&worker_deployment(&cluster.system, workers));
        // The workers first, so an operator that scales idle workers to zero soon
        // finds them registered.
        cluster.wait_for(&format!("{workers} workers registered"), |c| {
            c.registered_workers().len() == workers as usize
        });
        let mut cluster = cluster;
        cluster.operator = Some(cluster.start_operator("operator-0", extra));
        cluster
    }

    /// Starts `faas operator` as `identity` (its name in the Lease).
    fn start_operator(&self, identity: &str, extra: &[&str]) -> Process {
        let url = self.redis.url();
        let mut args = vec![
            "operator",
            "--redis",
            &url,
            "--sync-interval-ms",
            "200",
            "--namespace",
            &self.system,
            "--identity",
            identity,
        ];
        args.extend(extra);
        let kubeconfig = self.plane.kubeconfig().as_os_str();
        Process::spawn_with_env(&args, &[("KUBECONFIG", kubeconfig)], "faas operator is up")
    }

    /// Who holds the operator's Lease.
    fn leader(&self) -> String {
        self.plane
            .kubectl([
                "get",
                "lease",
                "faas-operator",
                "--namespace",
                &self.system,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ])
            .stdout
            .iter()
            .map(|&b| b as char)
            .collect()
    }

    /// Starts a `faas worker` per Ready worker pod (id: the pod's name) and kills it
    /// with SIGKILL when the pod goes, so only the operator can forget it quickly.
    fn follow_worker_pods(&self) {
        let mut watch = self
            .runtime
            .block_on(self.plane.watch_ready_pods(&self.system, WORKER_LABEL));
        let (workers, url) = (self.workers.clone(), self.redis.url());
        let dir = self._data.path().to_owned();
        self.runtime.spawn(async move {
            while let Some(event) = watch.next().await {
                // One event at a time, in the watch's order, as a kubelet would: a
                // pod's IP goes to a later pod once it is gone, so the later pod's
                // worker must not start before the gone one's is dead, and a pod gone
                // while its worker was still starting must find it to stop it. (Each
                // event in a task of its own once left a worker running after its pod
                // went, and its successor failed binding the same address.)
                // Starting a worker blocks until it announces itself.
                tokio::task::block_in_place(|| match event {
                    Ok(PodEvent::Ready(pod)) => {
                        let worker = start_worker(&url, &pod, &dir);
                        workers.lock().unwrap().insert(pod.name, worker);
                    }
                    Ok(PodEvent::Gone { name, .. }) => {
                        let gone = workers.lock().unwrap().remove(&name);
                        if let Some(mut worker) = gone {
                            worker.stop(libc::SIGKILL);
                        }
                    }
                    Err(err) => eprintln!("watching worker pods: {err}"),
                });
            }
        });
    }

    fn shared(&self) -> SharedState {
        self.runtime
            .block_on(SharedState::connect(&self.redis.url()))
            .unwrap()
    }

    /// Another tenant's namespace (named from `prefix`), registered as a tenant.
    fn other_tenant(&self, prefix: &str) -> String {
        new_tenant(&self.runtime, self.plane, &self.redis, prefix)
    }

    /// Changes the test tenant's quotas, as `faas tenant set` would.
    fn set_quotas(&self, changes: QuotaChanges) {
        self.runtime.block_on(async {
            let tenants = TenantStore::redis(&self.redis.url()).await.unwrap();
            tenants.update_quotas(&self.tenant, &changes).await.unwrap();
        });
    }

    /// Puts the hello component in the shared state, as `faas deploy` would have
    /// uploaded it; returns its SHA-256, which Workflows name it by.
    fn put_hello(&self) -> String {
        let (bytes, sha) = hello();
        self.runtime
            .block_on(self.shared().put_component(&sha, &bytes, &self.tenant))
            .unwrap();
        sha
    }

    /// Applies the hello Workflow `name` (component `sha`) on route `/<name>`, with
    /// `extra` lines at the end of its spec.
    fn apply_hello(&self, sha: &str, name: &str, extra: &str) {
        let route = format!("/{name}");
        self.apply(&hello_workflow(
            &self.tenant,
            name,
            &route,
            sha,
            None,
            extra,
        ));
    }

    /// Deletes Workflow `name` with a finalizer of another controller ([`HOLD`]) on it,
    /// which keeps the resource until [`Cluster::release`].
    fn hold_and_delete(&self, name: &str) {
        let hold = format!(r#"[{{"op":"add","path":"/metadata/finalizers/-","value":"{HOLD}"}}]"#);
        self.patch(name, "json", &hold);
        self.delete(name);
    }

    /// Deletes Workflow `name` without waiting for it to go.
    fn delete(&self, name: &str) {
        self.plane.kubectl_ok([
            "delete",
            "workflows.faas.dev",
            name,
            "--namespace",
            &self.tenant,
            "--wait=false",
        ]);
    }

    /// Removes every finalizer of Workflow `name`, so a deleted one goes.
    fn release(&self, name: &str) {
        self.patch(name, "merge", r#"{"metadata":{"finalizers":null}}"#);
    }

    /// `kubectl patch` of Workflow `name` with `patch` of `kind` (json, merge).
    fn patch(&self, name: &str, kind: &str, patch: &str) {
        self.plane.kubectl_ok([
            "patch",
            "workflows.faas.dev",
            name,
            "--namespace",
            &self.tenant,
            &format!("--type={kind}"),
            "-p",
            patch,
        ]);
    }

    /// Signals demand for workflow `name`, as a gateway's activator holding an event
    /// for it does; returns the stamp written, or `None` if `name` is not deployed.
    fn signal_demand(&self, name: &str) -> Option<u64> {
        self.runtime
            .block_on(self.shared().signal_demand(name))
            .unwrap()
    }

    fn registered_workers(&self) -> Vec<String> {
        let shared = self.shared();
        let workers = self.runtime.block_on(shared.workers()).unwrap();
        workers.live.into_iter().map(|info| info.id).collect()
    }

    /// `kubectl apply --server-side` of `yaml`.
    fn apply(&self, yaml: &str) {
        let path = self._data.path().join(format!("{}.yaml", rand_suffix()));
        std::fs::write(&path, yaml).unwrap();
        self.plane.kubectl_ok([
            "apply".as_ref(),
            "--server-side".as_ref(),
            "-f".as_ref(),
            path.as_os_str(),
        ]);
    }

    /// The Workflow `name` of the tenant, as JSON, if it exists.
    fn workflow(&self, name: &str) -> Option<Value> {
        self.workflow_in(&self.tenant, name)
    }

    /// The Workflow `name` in `namespace`, as JSON, if it exists.
    fn workflow_in(&self, namespace: &str, name: &str) -> Option<Value> {
        let output = self.plane.kubectl([
            "get",
            "workflows.faas.dev",
            name,
            "--namespace",
            namespace,
            "--ignore-not-found",
            "-o",
            "json",
        ]);
        let text = String::from_utf8_lossy(&output.stdout);
        (!text.trim().is_empty()).then(|| serde_json::from_str(&text).unwrap())
    }

    /// Polls until `done` holds, panicking after [`PATIENCE`] with `what`.
    fn wait_for(&self, what: &str, done: impl FnMut(&Self) -> bool) {
        self.wait_for_within(what, PATIENCE, done);
    }

    /// [`Cluster::wait_for`] with a patience of its own.
    fn wait_for_within(&self, what: &str, patience: Duration, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + patience;
        while !done(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for Workflow `name` to be `Degraded` for `reason`; returns it and the
    /// condition's message.
    fn wait_degraded(&self, name: &str, reason: &str) -> (Value, String) {
        let workflow = self.wait_condition(name, "Degraded", "True", reason);
        let message = condition(&workflow, "Degraded").unwrap()["message"]
            .as_str()
            .unwrap()
            .to_owned();
        (workflow, message)
    }

    /// Waits until condition `kind` of Workflow `name` has status `is` and reason
    /// `reason`, and returns the Workflow.
    fn wait_condition(&self, name: &str, kind: &str, is: &str, reason: &str) -> Value {
        self.wait_condition_in(&self.tenant, name, kind, is, reason)
    }

    /// [`Cluster::wait_condition`] for Workflow `name` in `namespace`.
    fn wait_condition_in(
        &self,
        namespace: &str,
        name: &str,
        kind: &str,
        is: &str,
        reason: &str,
    ) -> Value {
        let mut last = Value::Null;
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(workflow) = self.workflow_in(namespace, name) {
                if condition(&workflow, kind)
                    .is_some_and(|c| c["status"] == is && c["reason"] == reason)
                {
                    return workflow;
                }
                last = workflow;
            }
            assert!(
                Instant::now() < deadline,
                "Workflow {name}: {kind} never became {is}/{reason}; last: {:#}",
                last["status"]
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until an Event of `type_` (`Normal`, `Warning`) and `reason` regarding the
    /// `kind` object `name` is in `namespace`, and returns its note.
    fn wait_event(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
        type_: &str,
        reason: &str,
    ) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let output = self.plane.kubectl_ok([
                "get",
                "events.v1.events.k8s.io",
                "--namespace",
                namespace,
                "-o",
                "json",
            ]);
            let events: Value = serde_json::from_str(&output).unwrap();
            let found = events["items"].as_array().and_then(|items| {
                items.iter().find(|event| {
                    event["regarding"]["kind"] == kind
                        && event["regarding"]["name"] == name
                        && event["type"] == type_
                        && event["reason"] == reason
                })
            });
            if let Some(event) = found {
                assert_eq!(event["reportingController"], "faas.dev/operator");
                return event["note"].as_str().unwrap_or_default().to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "no {type_} Event {reason} on {kind} {name}; the Events in {namespace}: {events:#}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The replicas the worker Deployment asks for.
    fn worker_replicas(&self) -> String {
        self.plane
            .kubectl_ok([
                "get",
                "deployment",
                "faas-worker",
                "--namespace",
                &self.system,
                "-o",
                "jsonpath={.spec.replicas}",
            ])
            .trim()
            .to_owned()
    }
}

/// The operator's flag that serves its metrics on a free port.
const METRICS: [&str; 2] = ["--metrics-listen", "127.0.0.1:0"];

/// Opens loopback, where the tests serve components, to the operator's fetches.
const LOOPBACK_OPENED: [&str; 2] = ["--component-private-networks", "127.0.0.1"];

fn condition<'a>(workflow: &'a Value, kind: &str) -> Option<&'a Value> {
    workflow["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn rand_suffix() -> String {
    format!("{:x}", rand::random::<u64>())
}

/// Starts the `faas worker` that pod `pod` would run.
fn start_worker(redis: &str, pod: &ReadyPod, dir: &std::path::Path) -> Process {
    let data = dir.join(&pod.name);
    let cache = compile_cache();
    // As the chart's pod would: listening on the pod's IP and `internal` port, its host
    // id the pod's UID, and its peers the worker pods the operator records.
    let listen = format!("{}:{WORKER_PORT}", pod.ip);
    Process::spawn(
        &[
            "worker",
            "--redis",
            redis,
            "--sync-interval-ms",
            "200",
            "--heartbeat-ttl-ms",
            HEARTBEAT_TTL_MS,
            "--internal-token",
            "operator-test-internal",
            "--id",
            &pod.name,
            "--listen",
            &listen,
            "--host-id",
            &pod.uid,
            "--worker-pods",
            "--data-dir",
            data.to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
        "faas worker ",
    )
}

/// The port of a worker pod's `internal` container port: each pod has an IP of its own.
const WORKER_PORT: u16 = 8081;

/// The worker Deployment a chart would install: pods labelled as workers.
fn worker_deployment(namespace: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: faas-worker
  namespace: {namespace}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app.kubernetes.io/component: worker
  template:
    metadata:
      labels:
        app.kubernetes.io/component: worker
    spec:
      automountServiceAccountToken: false
      containers:
        - name: worker
          image: faas:test
          args: ["worker"]
          ports:
            - name: internal
              containerPort: {WORKER_PORT}
"#
    )
}

/// A Workflow serving functions/hello on `route`, with its component named by
/// `sha256` (and fetched from `url` when given); `extra` is appended to the spec.
/// A namespace named from `prefix`, registered as a tenant in `redis`.
fn new_tenant(
    runtime: &tokio::runtime::Runtime,
    plane: &ControlPlane,
    redis: &RedisServer,
    prefix: &str,
) -> String {
    let namespace = runtime.block_on(plane.namespace(prefix));
    runtime.block_on(async {
        let tenants = TenantStore::redis(&redis.url()).await.unwrap();
        tenants.create_tenant(&namespace).await.unwrap();
    });
    namespace
}

fn hello_workflow(
    namespace: &str,
    name: &str,
    route: &str,
    sha256: &str,
    url: Option<&str>,
    extra: &str,
) -> String {
    let url = url
        .map(|url| format!(", url: \"{url}\""))
        .unwrap_or_default();
    format!(
        r#"apiVersion: faas.dev/v1alpha1
kind: Workflow
metadata:
  name: {name}
  namespace: {namespace}
spec:
  functions:
    hello:
      component: {{ sha256: "{sha256}"{url} }}
      config: {{ greeting: "Hi" }}
  triggers:
    http:
      - route: "{route}"
        function: hello
{extra}"#
    )
}

fn hello() -> (Vec<u8>, String) {
    let bytes = faas_testing::component("hello");
    let sha = hex::encode(Sha256::digest(&bytes));
    (bytes, sha)
}

#[test]
fn a_workflow_is_deployed_placed_and_ready_moves_when_its_pod_goes_and_is_removed_on_delete() {
    let cluster = Cluster::start(2, &[]);
    let sha = cluster.put_hello();
    let shared = cluster.shared();
    let workflow = hello_workflow(&cluster.tenant, "greeter", "/greet", &sha, None, "");
    cluster.apply(&workflow);

    let ready = cluster.wait_condition("greeter", "Ready", "True", "Ready");
    let status = &ready["status"];
    assert_eq!(
        cluster.wait_condition("greeter", "Placed", "True", "Placed")["status"]["placement"],
        status["placement"]
    );
    let placement: Vec<String> = serde_json::from_value(status["placement"].clone()).unwrap();
    assert_eq!(placement.len(), 1, "{status:#}");
    let first = placement[0].clone();
    let revision = status["revision"].as_u64().unwrap();
    assert_eq!(status["loaded"][&first], revision, "{status:#}");
    assert_eq!(status["replicas"], 1);
    assert_eq!(status["routes"], serde_json::json!(["/greet"]));
    assert_eq!(
        status["observedGeneration"],
        ready["metadata"]["generation"]
    );
    assert_eq!(
        ready["metadata"]["finalizers"],
        serde_json::json!(["faas.dev/cleanup"])
    );
    let record = cluster.runtime.block_on(shared.deployments()).unwrap()["greeter"].clone();
    assert_eq!(record.workflow.tenant, cluster.tenant);
    assert_eq!(record.revision, revision);
    assert_eq!(record.components["hello"], sha);

    // The same spec again writes nothing: same digest, same revision.
    cluster.apply(&workflow);
    std::thread::sleep(Duration::from_secs(2));
    let record_again = cluster.runtime.block_on(shared.deployments()).unwrap()["greeter"].clone();
    assert_eq!(record_again.revision, revision);

    // The worker's pod is deleted: its worker (killed, still registered for minutes by
    // its heartbeat) is forgotten at once and the workflow moves to the other one.
    cluster.plane.kubectl_ok([
        "delete",
        "pod",
        &first,
        "--namespace",
        &cluster.system,
        "--wait=false",
    ]);
    cluster.wait_for("the workflow to move to another worker", |c| {
        c.workflow("greeter").is_some_and(|w| {
            let placement = &w["status"]["placement"];
            placement
                .as_array()
                .is_some_and(|p| p.len() == 1 && p[0] != first.as_str())
                && w["status"]["replicas"] == 1
                && condition(&w, "Ready").is_some_and(|c| c["status"] == "True")
        })
    });
    assert!(
        !cluster.registered_workers().contains(&first),
        "the deleted pod's worker is forgotten"
    );

    // Deleting the Workflow removes the deployment and its placement, then the finalizer.
    cluster.delete("greeter");
    cluster.wait_for("the Workflow to go", |c| c.workflow("greeter").is_none());
    let deployments = cluster.runtime.block_on(shared.deployments()).unwrap();
    assert!(!deployments.contains_key("greeter"), "{deployments:?}");
    let placements = cluster.runtime.block_on(shared.placements()).unwrap();
    assert!(!placements.contains_key("greeter"), "{placements:?}");
}

#[test]
fn a_component_url_to_a_non_public_address_is_refused_before_any_connection() {
    // A tenant writes the URL and what its name resolves to: fetched as they were, the
    // cloud metadata address and the cluster's services answered the operator, and
    // the Workflow's status told the tenant how (an HTTP status, a digest).
    let cluster = Cluster::start(1, &[]);
    let (bytes, sha) = hello();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    for (name, host, says) in [
        ("by-address", "127.0.0.1".to_owned(), "not a public address"),
        (
            "by-name",
            "localhost".to_owned(),
            "resolves to no public address",
        ),
        (
            "metadata",
            "169.254.169.254".to_owned(),
            "not a public address",
        ),
    ] {
        let port = if name == "metadata" { 80 } else { port };
        let url = format!("http://{host}:{port}/component.wasm");
        cluster.apply(&hello_workflow(
            &cluster.tenant,
            name,
            &format!("/{name}"),
            &sha,
            Some(&url),
            "",
        ));
        let (_, message) = cluster.wait_degraded(name, "ComponentFetchFailed");
        assert!(message.contains(says), "{name}: {message}");
    }
    assert!(
        listener.accept().is_err(),
        "the operator connected to loopback"
    );
    // A Workflow whose component is stored already is served meanwhile.
    let shared = cluster.shared();
    cluster
        .runtime
        .block_on(shared.put_component(&sha, &bytes, &cluster.tenant))
        .unwrap();
    let stored = hello_workflow(&cluster.tenant, "stored", "/stored", &sha, None, "");
    cluster.apply(&stored);
    let ready = cluster.wait_condition("stored", "Ready", "True", "Ready");
    assert_eq!(ready["status"]["replicas"], 1);
}

#[test]
fn components_being_fetched_at_once_hold_at_most_the_largest_ones_bytes() {
    // Each fetch is buffered whole: Workflows naming large URLs at once took the
    // operator's memory (the chart gives it 640 MiB), and with it every tenant's
    // reconciles. Here 4 MiB in all: a 3 MiB fetch that never ends holds its bytes,
    // so a 1.5 MiB one waits (refused, retried) until it times out.
    let cluster = Cluster::start(
        1,
        &[
            LOOPBACK_OPENED[0],
            LOOPBACK_OPENED[1],
            "--max-component-bytes",
            "4194304",
            "--fetch-timeout-s",
            "5",
        ],
    );
    let (bytes, _) = hello();
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "stalled",
        "/stalled",
        &"1".repeat(64),
        Some(&crate::stalling_body_url(3 << 20)),
        "",
    ));
    std::thread::sleep(Duration::from_secs(1));
    let big = faas_testing::with_custom_section(&bytes, "ballast", &[7; 3 << 19]);
    let big_sha = hex::encode(Sha256::digest(&big));
    let url = crate::serve_file(big);
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "waits",
        "/waits",
        &big_sha,
        Some(&url),
        "",
    ));
    let (_, message) = cluster.wait_degraded("waits", "ComponentFetchFailed");
    assert!(
        message.contains("the operator is fetching 4194304 bytes of components already"),
        "{message}"
    );
    // Once the stalled fetch has timed out, the retry gets through.
    let ready = cluster.wait_condition("waits", "Ready", "True", "Ready");
    assert_eq!(ready["status"]["replicas"], 1);
}

#[test]
fn components_are_fetched_from_their_url_and_bad_specs_are_reported_degraded() {
    let cluster = Cluster::start(1, &LOOPBACK_OPENED);
    let (bytes, sha) = hello();
    // Another tenant's component URL never answers: its fetch lasts the operator's
    // whole fetch timeout (120 s), far beyond this test's patience, and must hold up
    // no other Workflow meanwhile.
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "stalled",
        "/stalled",
        &"1".repeat(64),
        Some(&crate::stalling_url()),
        "",
    ));
    let url = crate::serve_file(bytes);
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "fetched",
        "/fetched",
        &sha,
        Some(&url),
        "",
    ));
    let ready = cluster.wait_condition("fetched", "Ready", "True", "Ready");
    assert_eq!(ready["status"]["replicas"], 1);
    // What happened is told as Events too (`kubectl describe workflow fetched`).
    let revision = ready["status"]["revision"].as_u64().unwrap();
    let (tenant, workflow) = (cluster.tenant.as_str(), "Workflow");
    let deployed = cluster.wait_event(tenant, workflow, "fetched", "Normal", "Deployed");
    assert_eq!(deployed, format!("revision {revision} deployed"));
    let serving = cluster.wait_event(tenant, workflow, "fetched", "Normal", "Ready");
    assert!(serving.starts_with("1 of 1 replica(s)"), "{serving}");
    let shared = cluster.shared();
    let stored = cluster.runtime.block_on(shared.component(&sha)).unwrap();
    assert_eq!(
        hex::encode(Sha256::digest(&stored)),
        sha,
        "stored content-addressed"
    );

    // The bytes at the URL are not the ones the spec names.
    let wrong = "0".repeat(64);
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "mismatch",
        "/mismatch",
        &wrong,
        Some(&url),
        "",
    ));
    let (degraded, message) = cluster.wait_degraded("mismatch", "DigestMismatch");
    assert!(
        message.contains(&sha) && message.contains("spec.functions.hello.component"),
        "{message}"
    );
    let warned = cluster.wait_event(tenant, workflow, "mismatch", "Warning", "DigestMismatch");
    assert_eq!(warned, message);
    assert_eq!(condition(&degraded, "Ready").unwrap()["status"], "False");
    assert!(
        cluster.runtime.block_on(shared.component(&wrong)).is_err(),
        "nothing stored"
    );

    // A spec the workflow.toml validator refuses, named at its field.
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "invalid",
        "/invalid",
        &sha,
        None,
        "  workflow:\n    replicas: 0\n",
    ));
    let (_, message) = cluster.wait_degraded("invalid", "InvalidSpec");
    assert!(message.starts_with("spec.workflow.replicas"), "{message}");

    // A route another workflow serves.
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "copycat",
        "/fetched",
        &sha,
        None,
        "",
    ));
    let (_, message) = cluster.wait_degraded("copycat", "RouteConflict");
    assert!(
        message.contains("/fetched") && message.contains("fetched"),
        "{message}"
    );

    // None of it reached Redis, and the good workflow kept being served.
    let deployments = cluster.runtime.block_on(shared.deployments()).unwrap();
    assert_eq!(deployments.keys().collect::<Vec<_>>(), ["fetched"]);
    let fetched = cluster.workflow("fetched").unwrap();
    assert_eq!(condition(&fetched, "Ready").unwrap()["status"], "True");
    // All of that happened while the stalled fetch was still going on.
    let stalled = cluster.workflow("stalled").unwrap();
    assert!(
        condition(&stalled, "Degraded").is_none_or(|c| c["status"] != "True"),
        "the stalled fetch is still under way: {:#}",
        stalled["status"]
    );
}

/// A URL that answers other bytes every time gave every refusal another message (the
/// digest it got): each status write woke the Workflow's reconcile at once, which
/// fetched the URL again and wrote the status again, without pause, through the one
/// API client every tenant's Workflows share. Writes that change messages only are
/// spaced out now, and a refused URL is fetched again only after a wait of 10 s.
#[test]
fn a_url_answering_other_bytes_every_time_is_not_fetched_over_and_over() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cluster = Cluster::start(1, &LOOPBACK_OPENED);
    let served = Arc::new(AtomicUsize::new(0));
    let url = crate::serve_random(served.clone());
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "shifty",
        "/shifty",
        &"2".repeat(64),
        Some(&url),
        "",
    ));
    cluster.wait_degraded("shifty", "DigestMismatch");
    let fetched = served.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(8));
    let refetched = served.load(Ordering::SeqCst) - fetched;
    // At most once: the first wait may end within these 8 s.
    assert!(refetched <= 1, "fetched {refetched} more times in 8 s");
    // Another Workflow is served meanwhile.
    let (_, hello_sha) = hello();
    let good = crate::serve_file(hello().0);
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "steady",
        "/steady",
        &hello_sha,
        Some(&good),
        "",
    ));
    cluster.wait_condition("steady", "Ready", "True", "Ready");
}

/// A component URL that was refused is fetched again only after a wait, however often
/// its Workflow is woken. Each reconcile fetched it again, and every Workflow is
/// reconciled whenever the placements change (any tenant's deploy): a tenant keeping
/// Workflows that name large URLs which are always refused had the operator download
/// them again on every other tenant's deploy, holding the fetch budget meanwhile. Here
/// another tenant deploys three Workflows, fetched from their URL, while a refused
/// one waits.
#[test]
fn a_refused_component_url_is_not_fetched_again_when_other_deploys_wake_its_workflow() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cluster = Cluster::start(1, &LOOPBACK_OPENED);
    let served = Arc::new(AtomicUsize::new(0));
    let url = crate::serve_random(served.clone());
    let started = Instant::now();
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "refused",
        "/refused",
        &"2".repeat(64),
        Some(&url),
        "",
    ));
    let (_, message) = cluster.wait_degraded("refused", "DigestMismatch");
    assert!(message.contains("; fetched again in "), "{message}");
    let fetched = served.load(Ordering::SeqCst);
    let other = cluster.other_tenant("bystander");
    let (bytes, sha) = hello();
    let good = crate::serve_file(bytes);
    for n in 0..3 {
        let name = format!("served-{n}");
        let route = format!("/{name}");
        cluster.apply(&hello_workflow(
            &other,
            &name,
            &route,
            &sha,
            Some(&good),
            "",
        ));
        cluster.wait_condition_in(&other, &name, "Ready", "True", "Ready");
    }
    // The waits end 10 s, 30 s, 70 s, 150 s ... after the first refusal, which came
    // after `started`.
    let secs = started.elapsed().as_secs();
    let allowed = (1..)
        .take_while(|k: &u32| 10 * ((1u64 << k) - 1) <= secs)
        .count();
    let refetched = served.load(Ordering::SeqCst) - fetched;
    assert!(
        refetched <= allowed,
        "fetched {refetched} more times in {secs} s, three deploys of another tenant"
    );
}

/// What a Workflow's reconcile fetched and stored is deleted at once when the Workflow
/// is refused after all (another of its components failed), and so is what the
/// version it replaces named, and what a deleted Workflow named: left for the
/// collection (ten minutes), a tenant refused, redeployed or deleted over and over
/// filled the Redis every tenant shares with components no quota counts.
#[test]
fn components_a_refused_replaced_or_deleted_version_fetched_are_deleted_at_once() {
    let cluster = Cluster::start(1, &LOOPBACK_OPENED);
    let shared = cluster.shared();
    let (bytes, _) = hello();
    let version = |n: u8| {
        let padded = faas_testing::with_custom_section(&bytes, "version", &[n; 4096]);
        let sha = hex::encode(Sha256::digest(&padded));
        (sha, crate::serve_file(padded))
    };
    let stored = |sha: &str| cluster.runtime.block_on(shared.has_component(sha)).unwrap();
    // A reconcile deletes what it fetched before it ends, and no status says when the
    // one that deletes a version's components has ended (nor, before refused URLs
    // waited, whether the next one had fetched them again). So each check waits for
    // the state, as long as a condition is waited for.
    let eventually = |done: &dyn Fn() -> bool, kept: &str| {
        let deadline = Instant::now() + PATIENCE;
        while !done() {
            assert!(Instant::now() < deadline, "{kept}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let missing = crate::serve_file(Vec::new());
    // Function `a` fetches, then `b`'s URL answers nothing a component could be.
    let two = |a: &(String, String)| {
        format!(
            "apiVersion: faas.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: pair\n  \
             namespace: {}\nspec:\n  functions:\n    a:\n      component: {{ sha256: \"{}\", \
             url: \"{}\" }}\n    b:\n      component: {{ sha256: \"{}\", url: \"{missing}\" }}\n  \
             triggers:\n    http:\n      - route: /pair\n        function: a\n      - route: \
             /pair-b\n        function: b\n",
            cluster.tenant,
            a.0,
            a.1,
            "3".repeat(64),
        )
    };
    let first = version(1);
    cluster.apply(&two(&first));
    cluster.wait_degraded("pair", "DigestMismatch");
    eventually(
        &|| !stored(&first.0),
        "the refused Workflow's fetched component is kept",
    );

    // A version that deploys, then another that replaces it.
    let second = version(2);
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "pair",
        "/pair",
        &second.0,
        Some(&second.1),
        "",
    ));
    cluster.wait_condition("pair", "Ready", "True", "Ready");
    assert!(stored(&second.0));
    let third = version(3);
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "pair",
        "/pair",
        &third.0,
        Some(&third.1),
        "",
    ));
    eventually(
        &|| !stored(&second.0) && stored(&third.0),
        "the replaced version's component is kept",
    );
    cluster.delete("pair");
    eventually(
        &|| !stored(&third.0),
        "the deleted Workflow's component is kept",
    );
}

/// Components are stored once, by digest, whatever tenants name them: a Workflow
/// naming another tenant's component by its digest alone ran that tenant's code in its
/// own name (and its status told whether that code was deployed anywhere). Here
/// another tenant, `acme`, stored the hello component; this tenant's Workflow naming
/// it without a URL is refused as if nothing were stored. With a URL to the same
/// bytes, fetched and checked against the digest, it is served.
#[test]
fn a_workflow_naming_another_tenants_component_by_digest_alone_is_refused() {
    let cluster = Cluster::start(1, &LOOPBACK_OPENED);
    let (bytes, sha) = hello();
    let shared = cluster.shared();
    cluster
        .runtime
        .block_on(shared.put_component(&sha, &bytes, "acme"))
        .unwrap();
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "borrowed",
        "/borrowed",
        &sha,
        None,
        "",
    ));
    let (_, message) = cluster.wait_degraded("borrowed", "ComponentMissing");
    assert!(
        message.contains("is not uploaded by this tenant and no url is given"),
        "{message}"
    );
    let deployments = cluster.runtime.block_on(shared.deployments()).unwrap();
    assert!(!deployments.contains_key("borrowed"), "{deployments:?}");

    let url = crate::serve_file(bytes);
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "borrowed",
        "/borrowed",
        &sha,
        Some(&url),
        "",
    ));
    let ready = cluster.wait_condition("borrowed", "Ready", "True", "Ready");
    assert_eq!(ready["status"]["replicas"], 1);
    assert!(
        cluster
            .runtime
            .block_on(shared.has_component_of(&cluster.tenant, &sha))
            .unwrap()
    );
}

#[test]
fn a_namespace_that_is_no_tenant_and_a_tenant_over_its_quotas_are_refused() {
    let cluster = Cluster::start(
        1,
        &[
            "--max-redis-consumers-per-tenant",
            "1",
            LOOPBACK_OPENED[0],
            LOOPBACK_OPENED[1],
        ],
    );
    let (bytes, sha) = hello();
    let shared = cluster.shared();
    cluster
        .runtime
        .block_on(shared.put_component(&sha, &bytes, &cluster.tenant))
        .unwrap();
    cluster.set_quotas(QuotaChanges {
        max_workflows: Some(Some(1)),
        ..QuotaChanges::default()
    });
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "one",
        "/one",
        &sha,
        None,
        "",
    ));
    cluster.wait_condition("one", "Ready", "True", "Ready");
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "two",
        "/two",
        &sha,
        None,
        "",
    ));
    let (_, message) = cluster.wait_degraded("two", "Quota");
    assert!(message.contains("max_workflows = 1"), "{message}");

    // A namespace the platform has no tenant for.
    let stranger = cluster
        .runtime
        .block_on(cluster.plane.namespace("op-stranger"));
    cluster.apply(&hello_workflow(
        &stranger,
        "intruder",
        "/intruder",
        &sha,
        None,
        "",
    ));
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        let output = cluster.plane.kubectl_ok([
            "get",
            "workflows.faas.dev",
            "intruder",
            "--namespace",
            &stranger,
            "-o",
            "json",
        ]);
        let workflow: Value = serde_json::from_str(&output).unwrap();
        if condition(&workflow, "Degraded").is_some_and(|c| c["reason"] == "UnknownTenant") {
            break workflow["status"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "never refused: {:#}",
            workflow["status"]
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status["placement"].as_array().unwrap().is_empty(),
        "{status:#}"
    );

    // Only the workflow within the quota is deployed, and it is still served.
    let deployments = cluster.runtime.block_on(shared.deployments()).unwrap();
    assert_eq!(deployments.keys().collect::<Vec<_>>(), ["one"]);
    let one = cluster.workflow("one").unwrap();
    assert_eq!(condition(&one, "Ready").unwrap()["status"], "True");
    let serving = one["status"]["revision"].as_u64().unwrap();

    // A new version of `one` with two stream triggers: past the tenant's Redis
    // consumers in all (one here), while the version before keeps serving.
    let streams =
        "    stream:\n      - { stream: a, step: relay }\n      - { stream: b, step: relay }\n";
    let one = hello_workflow(&cluster.tenant, "one", "/one", &sha, None, streams).replace(
        "  triggers:\n",
        &format!(
            "    relay:\n      component: {{ sha256: \"{sha}\" }}\n      kind: step\n  \
             steps:\n    relay: {{ function: relay, input: bytes, output: text }}\n  triggers:\n"
        ),
    );
    cluster.apply(&one);
    let (over, message) = cluster.wait_degraded("one", "Quota");
    assert!(
        message.contains("spec.triggers: ") && message.contains("--max-redis-consumers-per-tenant"),
        "{message}"
    );
    assert_eq!(over["status"]["revision"], serving, "{:#}", over["status"]);
    let deployments = cluster.runtime.block_on(shared.deployments()).unwrap();
    assert!(
        deployments["one"].workflow.stream_triggers.is_empty(),
        "the refused version was not deployed"
    );

    // `two`, refused above, goes first: the operator would deploy it again once its
    // quota allows, and take the room meant for `big`.
    cluster.delete("two");
    cluster.wait_for("`two` deleted", |cluster| cluster.workflow("two").is_none());
    // Room for a second workflow, but 1 MiB of components in all. Sixteen functions
    // of `hello` (some 72 KiB) count it once, as Redis stores it; with a 1 MiB
    // component of its own the workflow is past it.
    cluster.set_quotas(QuotaChanges {
        max_workflows: Some(Some(2)),
        code_max_mb: Some(Some(1)),
        ..QuotaChanges::default()
    });
    // The 1 MiB component is fetched from its URL, within what the quota leaves.
    let big_bytes = faas_testing::with_custom_section(&bytes, "ballast", &[7; 1 << 20]);
    let big_sha = hex::encode(Sha256::digest(&big_bytes));
    let big_url = crate::serve_file(big_bytes);
    let hello_source = format!("{{ sha256: \"{sha}\" }}");
    let big_source = format!("{{ sha256: \"{big_sha}\", url: \"{big_url}\" }}");
    // Fifteen more functions, each with a route: `f0` of the component `f0_source`.
    let big = |f0_source: &str| {
        let (functions, routes): (String, String) = (0..15)
            .map(|i| {
                let source = if i == 0 { f0_source } else { &hello_source };
                (
                    format!("    f{i}:\n      component: {source}\n"),
                    format!("      - route: \"/big/f{i}\"\n        function: f{i}\n"),
                )
            })
            .unzip();
        hello_workflow(&cluster.tenant, "big", "/big", &sha, None, &routes)
            .replace("  triggers:\n", &format!("{functions}  triggers:\n"))
    };
    cluster.apply(&big(&hello_source));
    cluster.wait_condition("big", "Ready", "True", "Ready");
    let big = big(&big_source);
    cluster.apply(&big);
    let (_, message) = cluster.wait_degraded("big", "Quota");
    assert!(message.contains("code_max_mb = 1"), "{message}");
    assert!(message.contains("not fetched"), "{message}");
    assert!(
        !cluster
            .runtime
            .block_on(shared.has_component(&big_sha))
            .unwrap(),
        "a component past the quota is not stored"
    );
    let deployments = cluster.runtime.block_on(shared.deployments()).unwrap();
    assert_eq!(deployments.keys().collect::<Vec<_>>(), ["big", "one"]);
    assert!(
        deployments["big"]
            .components
            .values()
            .all(|deployed| *deployed == sha),
        "the refused version was not deployed"
    );
}

#[test]
fn idle_workers_are_scaled_to_zero_and_demand_scales_them_back_up() {
    let cluster = Cluster::start(1, &["--scale-to-zero-after", "3", METRICS[0], METRICS[1]]);
    let operator = cluster.operator.as_ref().unwrap();
    let scalings = |direction: &str| {
        operator.metric(&format!(
            "faas_operator_worker_scalings_total{{direction=\"{direction}\"}}"
        ))
    };
    let sha = cluster.put_hello();
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "sleeper",
        "/sleeper",
        &sha,
        None,
        "",
    ));
    // No event for 3 s: the worker Deployment goes to zero, its worker is forgotten.
    cluster.wait_for("the workers to be scaled to zero", |c| {
        c.worker_replicas() == "0"
    });
    cluster.wait_for("the workers to be forgotten", |c| {
        c.registered_workers().is_empty()
    });
    let idle = cluster.wait_condition("sleeper", "Placed", "False", "ScaledToZero");
    assert_eq!(condition(&idle, "Ready").unwrap()["status"], "False");
    let system = cluster.system.clone();
    let scaled = cluster.wait_event(
        &system,
        "Deployment",
        "faas-worker",
        "Normal",
        "ScaledToZero",
    );
    assert_eq!(scaled, "scaled to zero: no event for 3s");
    assert_eq!(scalings("down"), Some(1.0));
    assert_eq!(scalings("up"), Some(0.0));
    assert_eq!(operator.metric("faas_operator_worker_replicas"), Some(0.0));

    // An event waits for a worker (as a gateway's activator signals it).
    assert!(cluster.signal_demand("sleeper").is_some());
    cluster.wait_for("the workers to be scaled back up", |c| {
        c.worker_replicas() == "1"
    });
    let ready = cluster.wait_condition("sleeper", "Ready", "True", "Ready");
    assert_eq!(ready["status"]["replicas"], 1);
    let woken = cluster.wait_event(&system, "Deployment", "faas-worker", "Normal", "ScaledUp");
    assert_eq!(
        woken,
        "scaled up to 1 replica(s): events wait for workflow(s) sleeper"
    );
    assert_eq!(scalings("up"), Some(1.0));
    assert_eq!(operator.metric("faas_operator_worker_replicas"), Some(1.0));
    // Served: the demand is cleared, so the workers may go idle again later.
    cluster.wait_for("the demand to be cleared", |c| {
        c.runtime.block_on(c.shared().demand()).unwrap().is_empty()
    });
}

#[test]
fn a_demand_nothing_serves_expires_so_one_tenant_cannot_keep_the_workers_up() {
    let cluster = Cluster::start(1, &["--scale-to-zero-after", "3"]);
    let sha = cluster.put_hello();
    let shared = cluster.shared();
    // A Workflow with more replicas than there are workers is never placed, so the
    // demand its deploy signalled is never served. (A gateway a sync behind cannot
    // signal demand for a workflow that is gone: nothing is written for it.)
    let greedy = "  workflow:\n    replicas: 2\n";
    cluster.apply_hello(&sha, "greedy", greedy);
    cluster.apply_hello(&sha, "sleeper", "");
    assert_eq!(cluster.signal_demand("gone"), None);
    cluster.wait_for("the workers to be scaled to zero", |c| {
        c.worker_replicas() == "0"
    });
    let demand = cluster.runtime.block_on(shared.demand()).unwrap();
    assert!(demand.is_empty(), "stale demand kept: {demand:?}");
    // A demand signalled now still brings the workers back for a Workflow that can run.
    assert!(cluster.signal_demand("sleeper").is_some());
    cluster.wait_for("the workers to be scaled back up", |c| {
        c.worker_replicas() == "1"
    });
    cluster.wait_condition("sleeper", "Ready", "True", "Ready");
}

#[test]
fn after_redis_and_the_operator_restart_empty_redeploys_get_revisions_past_the_ones_before() {
    let mut cluster = Cluster::start(1, &[]);
    let sha = cluster.put_hello();
    // `leaving` is deployed last, so it holds the highest revision; then it is deleted,
    // but another controller's finalizer keeps the resource (and its status) while the
    // operator's own cleanup has run: the new operator never reconciles it.
    let names = ["first", "second", "third"];
    let revision = |c: &Cluster, name: &str| {
        c.workflow(name)
            .and_then(|w| w["status"]["revision"].as_u64())
    };
    let mut before = 0;
    for name in names.into_iter().chain(["leaving"]) {
        cluster.apply_hello(&sha, name, "");
        cluster.wait_for(&format!("{name} to be deployed"), |c| {
            revision(c, name).is_some()
        });
        before = before.max(revision(&cluster, name).unwrap());
    }
    assert_eq!(revision(&cluster, "leaving"), Some(before));
    cluster.hold_and_delete("leaving");
    cluster.wait_for("the operator's cleanup of `leaving`", |c| {
        c.workflow("leaving")
            .is_some_and(|w| w["metadata"]["finalizers"] == serde_json::json!([HOLD]))
    });
    // Redis loses everything, and the operator is replaced at the same time (the node
    // both ran on failed): the new operator deploys every Workflow again once the
    // tenant and the component are back (as a gateway's write-back would put them).
    drop(cluster.operator.take());
    cluster.redis.restart();
    cluster.runtime.block_on(async {
        let tenants = TenantStore::redis(&cluster.redis.url()).await.unwrap();
        tenants.create_tenant(&cluster.tenant).await.unwrap();
    });
    cluster.put_hello();
    cluster.operator = Some(cluster.start_operator("operator-1", &[]));
    // Counted from 1 again, or from the highest revision of the Workflows reconciled
    // so far, a revision would name other code than gateways and workers hold under
    // that number (and a gateway keeps a deployment whose revision is above the
    // record's). Each is written once: one given a number at or below `before` stays
    // there.
    let revisions = |c: &Cluster| names.map(|name| revision(c, name));
    let deadline = Instant::now() + PATIENCE;
    while !revisions(&cluster)
        .iter()
        .all(|after| after.is_some_and(|after| after > before))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = revisions(&cluster);
    cluster.release("leaving");
    assert!(
        after.iter().all(|r| r.is_some_and(|r| r > before)),
        "{names:?} were redeployed as revisions {after:?}, not all past revision {before}"
    );
}

#[test]
fn a_workflow_deleted_without_its_finalizer_loses_its_record_and_others_keep_theirs() {
    let cluster = Cluster::start(1, &METRICS);
    let sha = cluster.put_hello();
    for name in ["stripped", "kept"] {
        cluster.apply_hello(&sha, name, "");
        cluster.wait_condition(name, "Ready", "True", "Ready");
    }
    // The tenant deletes the resource and strips its finalizer before the operator's
    // cleanup runs (the operator is paused, as a busy one would be slow): the API
    // server lets it go at once, and that cleanup never runs for it.
    let operator = cluster.operator.as_ref().unwrap();
    operator.signal(libc::SIGSTOP);
    cluster.delete("stripped");
    cluster.release("stripped");
    assert!(
        cluster.workflow("stripped").is_none(),
        "the resource is gone"
    );
    operator.signal(libc::SIGCONT);
    let records = |c: &Cluster| c.runtime.block_on(c.shared().deployments()).unwrap();
    cluster.wait_for("the orphaned record to be removed", |c| {
        !records(c).contains_key("stripped")
    });
    assert!(records(&cluster).contains_key("kept"));
    let kept = cluster.wait_condition("kept", "Ready", "True", "Ready");
    assert_eq!(kept["status"]["replicas"], 1);
    // Nor does the operator count it among its Workflows any more (it did for good).
    let ready = r#"faas_operator_workflows{state="ready"}"#;
    cluster.wait_for("the gauge to count the one Workflow left", |c| {
        c.operator.as_ref().unwrap().metric(ready) == Some(1.0)
    });
}

#[test]
fn only_the_lease_holder_operates_and_a_successor_takes_over() {
    let mut cluster = Cluster::start(1, &METRICS);
    let sha = cluster.put_hello();
    cluster.wait_for("operator-0 to lead", |c| c.leader() == "operator-0");
    let standby = cluster.start_operator("operator-1", &METRICS);
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "first",
        "/first",
        &sha,
        None,
        "",
    ));
    cluster.wait_condition("first", "Ready", "True", "Ready");
    assert_eq!(
        cluster.leader(),
        "operator-0",
        "the standby did not take the Lease"
    );
    // Each replica says whether it leads, and only the leader reconciles.
    let ok = r#"faas_operator_reconciles_total{result="ok"}"#;
    let ready = r#"faas_operator_workflows{state="ready"}"#;
    let leader = cluster.operator.as_ref().unwrap();
    assert_eq!(leader.metric("faas_operator_leader"), Some(1.0));
    assert!(leader.metric(ok).unwrap() >= 1.0);
    assert_eq!(leader.metric(ready), Some(1.0));
    assert_eq!(standby.metric("faas_operator_leader"), Some(0.0));
    assert_eq!(standby.metric(ok), Some(0.0));
    // The leader's placement rounds (the same as `faas scheduler`'s) count too.
    assert_eq!(leader.metric("faas_operator_workflows_placed"), Some(1.0));
    assert_eq!(leader.metric("faas_operator_workers_live"), Some(1.0));

    // The leader stops (and gives the Lease up): the standby takes over and operates.
    drop(cluster.operator.take());
    cluster.wait_for("operator-1 to lead", |c| c.leader() == "operator-1");
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "second",
        "/second",
        &sha,
        None,
        "",
    ));
    let second = cluster.wait_condition("second", "Ready", "True", "Ready");
    assert!(second["status"]["revision"].as_u64().unwrap() > 1);
    assert_eq!(standby.metric("faas_operator_leader"), Some(1.0));
    cluster.wait_for("the new leader to count both Workflows ready", |_| {
        standby.metric(ready) == Some(2.0)
    });
    drop(standby);
}

/// The operator and the gateways list Workflows whole (kube decodes a list at once), so
/// one Workflow with a number its field cannot hold (`memory_mb` past `u32`, which the
/// CRD's `format: uint32` does not stop) would fail every list, and with them every
/// tenant's deploys. The CRD's bounds have the API server refuse it instead, and
/// another Workflow is served.
#[test]
fn a_workflow_with_a_number_past_its_fields_range_is_refused_and_others_are_served() {
    let cluster = Cluster::start(1, &[]);
    let sha = cluster.put_hello();
    let huge = hello_workflow(&cluster.tenant, "huge", "/huge", &sha, None, "");
    for (field, workflow) in [
        (
            "memory_mb",
            huge.replace(
                "      config:",
                "      memory_mb: 4294967296\n      config:",
            ),
        ),
        (
            "replicas",
            huge.clone() + "  workflow:\n    replicas: 4294967296\n",
        ),
    ] {
        let path = cluster._data.path().join(format!("huge-{field}.yaml"));
        std::fs::write(&path, &workflow).unwrap();
        let output = cluster.plane.kubectl([
            "apply".as_ref(),
            "--server-side".as_ref(),
            "-f".as_ref(),
            path.as_os_str(),
        ]);
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{field}: {workflow}");
        assert!(
            said.contains(field) && said.contains("4294967295"),
            "{field}: {said}"
        );
    }
    cluster.apply(&hello_workflow(
        &cluster.tenant,
        "greeter",
        "/greet",
        &sha,
        None,
        "",
    ));
    cluster.wait_condition("greeter", "Ready", "True", "Ready");
}
