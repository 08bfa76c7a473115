//! The whole platform on Kubernetes, installed by its Helm chart: `faas deploy` and
//! `kubectl apply` of a Workflow, an invocation through the gateway, the worker pods
//! scaled to zero when idle, and the first request afterwards held by the gateway's
//! activator until the operator has scaled a worker back up and it has loaded the
//! workflow.
//!
//! Real: the control plane (kube-apiserver, controller-manager, scheduler), the chart
//! (`helm install --wait`), its RBAC (the gateway and the operator run with tokens of
//! the chart's ServiceAccounts), a redis-server, and every platform process: what runs
//! in each pod is the `faas` binary with the pod's own arguments and environment.
//! Stood in for: the kubelet. kwok marks pods Ready without running containers, and
//! [`Kubelet`] starts the pod's process when kwok does (and stops it when the pod goes),
//! with two translations a container runtime would make: a listen address `0.0.0.0:`
//! becomes the pod's own IP (each kwok pod has a loopback address of its own), and
//! each volume mount becomes a directory of the pod's own.

use crate::support::{TOKEN, client, copy_manifest, faas_at, wait_ready, worker_redis_url};
use faas_shared_state::{SharedState, WorkerInfo};
use faas_testing::RedisServer;
use faas_testing::kube::{ControlPlane, PodEvent, ReadyPod};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The release's name; its objects are `faas-<component>`.
const RELEASE: &str = "faas";
/// How long the workers may sit idle before the operator scales them to zero (short,
/// so the test sees it happen).
const IDLE: &str = "6s";

/// A process standing in for one pod, with the directories its volumes map to.
struct PodProcess {
    child: Child,
    component: String,
    ip: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for PodProcess {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// SIGTERM, as a kubelet sends, then SIGKILL after a grace period.
fn stop(child: &mut Child) {
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Starts and stops a `faas` process per Ready pod of the release.
struct Kubelet {
    pods: Arc<Mutex<BTreeMap<String, PodProcess>>>,
    /// Pods started so far, by component: how many workers came and went.
    started: Arc<Mutex<Vec<String>>>,
}

impl Kubelet {
    fn start(
        plane: &'static ControlPlane,
        runtime: &tokio::runtime::Runtime,
        namespace: &str,
    ) -> Self {
        let pods: Arc<Mutex<BTreeMap<String, PodProcess>>> = Arc::default();
        let started: Arc<Mutex<Vec<String>>> = Arc::default();
        let selector = format!("app.kubernetes.io/instance={RELEASE}");
        let mut watch = runtime.block_on(plane.watch_ready_pods(namespace, &selector));
        let (running, log) = (pods.clone(), started.clone());
        runtime.spawn(async move {
            while let Some(event) = watch.next().await {
                match event {
                    Ok(PodEvent::Ready(pod)) => {
                        let process = tokio::task::block_in_place(|| run_pod(plane, &pod));
                        log.lock().unwrap().push(process.component.clone());
                        running.lock().unwrap().insert(pod.name.clone(), process);
                    }
                    Ok(PodEvent::Gone { name, .. }) => {
                        // Stopped (SIGTERM, a drain, exit) before it leaves the map, so
                        // `running` counts a terminating pod as a kubelet would.
                        tokio::task::block_in_place(|| {
                            let mut pods = running.lock().unwrap();
                            if let Some(p) = pods.get_mut(&name) {
                                stop(&mut p.child);
                            }
                            pods.remove(&name);
                        });
                    }
                    Err(err) => panic!("standing in for a pod: {err}"),
                }
            }
        });
        Self { pods, started }
    }

    /// The IP of the running pod of `component`, waiting for one.
    fn ip_of(&self, component: &str) -> String {
        wait_for(
            &format!("a running {component} pod"),
            Duration::from_secs(60),
            || {
                let pods = self.pods.lock().unwrap();
                pods.values()
                    .find(|p| p.component == component)
                    .map(|p| p.ip.clone())
            },
        )
    }

    fn running(&self, component: &str) -> usize {
        let pods = self.pods.lock().unwrap();
        pods.values().filter(|p| p.component == component).count()
    }

    fn started(&self, component: &str) -> usize {
        self.started
            .lock()
            .unwrap()
            .iter()
            .filter(|c| *c == component)
            .count()
    }

    /// The end of every pod process's log, for a failure message.
    fn logs(&self) -> String {
        let pods = self.pods.lock().unwrap();
        pods.iter()
            .map(|(name, p)| {
                let text = std::fs::read_to_string(&p.log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {name}\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.pods.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Runs what pod `pod` would run: `faas` with its arguments and environment.
fn run_pod(plane: &ControlPlane, pod: &ReadyPod) -> PodProcess {
    let container = pod.containers.first().expect("a pod has a container");
    let dir = tempfile::Builder::new()
        // Short: the worker's Unix socket lives under its data dir, and a socket path
        // must fit in 108 bytes.
        .prefix("pod")
        .tempdir()
        .expect("a pod directory");
    let local = |value: &str| -> String {
        let mut value = value.replace("0.0.0.0:", &format!("{}:", pod.ip));
        for (index, mount) in container.mounts.iter().enumerate() {
            if value == *mount || value.starts_with(&format!("{mount}/")) {
                let own = dir.path().join(index.to_string());
                std::fs::create_dir_all(&own).expect("a volume directory");
                value = format!("{}{}", own.display(), &value[mount.len()..]);
            }
        }
        value
    };
    let log = dir.path().join("log");
    let out = std::fs::File::create(&log).expect("a log file");
    let mut command = Command::new(env!("CARGO_BIN_EXE_faas"));
    command
        .args(container.args.iter().map(|a| local(a)))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(container.env.iter().map(|(k, v)| (k, local(v))))
        .current_dir(dir.path())
        .stdout(out.try_clone().expect("a log file"))
        .stderr(out)
        .stdin(Stdio::null());
    if let Some(account) = &pod.service_account {
        command.env(
            "KUBECONFIG",
            plane.service_account_kubeconfig(&pod.namespace, account),
        );
    }
    let child = command.spawn().expect("starting faas for a pod");
    PodProcess {
        child,
        component: pod
            .labels
            .get("app.kubernetes.io/component")
            .cloned()
            .unwrap_or_default(),
        ip: pod.ip.clone(),
        log,
        _dir: dir,
    }
}

/// Polls `check` until it gives a value, or panics after `patience` naming `what`.
fn wait_for<T>(what: &str, patience: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "waited {patience:?} for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn kubectl_json(plane: &ControlPlane, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&plane.kubectl_ok(&all)).expect("kubectl printed JSON")
}

fn worker_replicas(plane: &ControlPlane, namespace: &str) -> i64 {
    let worker = format!("{RELEASE}-worker");
    kubectl_json(plane, &["-n", namespace, "get", "deployment", &worker])["spec"]["replicas"]
        .as_i64()
        .expect("the worker Deployment's spec.replicas")
}

/// Whether Workflow `name` in `namespace` has condition `kind` True.
fn condition(plane: &ControlPlane, namespace: &str, name: &str, kind: &str) -> bool {
    let workflow = kubectl_json(plane, &["-n", namespace, "get", "workflow", name]);
    workflow["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

fn chart() -> PathBuf {
    faas_testing::repo_root().join("charts/faas")
}

fn install(plane: &ControlPlane, namespace: &str, redis: &RedisServer) {
    let chart = chart();
    let sets = [
        "redis.enabled=false".to_owned(),
        format!("redis.url={}", redis.url()),
        // The workers run as the Redis user the chart's rules make for them.
        format!("redis.workerUrl={}", worker_redis_url(redis)),
        format!("auth.adminToken={TOKEN}"),
        "gateway.replicas=1".to_owned(),
        "worker.replicas=1".to_owned(),
        "operator.workerReplicas=1".to_owned(),
        format!("operator.scaleToZeroAfter={IDLE}"),
        // Where the test serves the component it fetches by URL.
        "operator.componentPrivateNetworks={127.0.0.1}".to_owned(),
    ];
    let mut command = plane.command("helm");
    command.args(["install", RELEASE]).arg(&chart).args([
        "-n",
        namespace,
        "--wait",
        "--timeout",
        "180s",
    ]);
    for set in &sets {
        command.args(["--set", set]);
    }
    let output = command.output().expect("running helm");
    assert!(
        output.status.success(),
        "helm install failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_chart_runs_workflows_and_scales_workers_to_zero_and_back() {
    let _serial = crate::operator_lock();
    // The components the manifests name (built once per test run, whichever test asks
    // first).
    faas_testing::build_functions();
    let plane = ControlPlane::shared();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let namespace = runtime.block_on(plane.namespace("e2e"));
    let redis = RedisServer::start();
    let kubelet = Kubelet::start(plane, &runtime, &namespace);
    install(plane, &namespace, &redis);
    let gateway = format!("http://{}:3000", kubelet.ip_of("gateway"));
    wait_ready(&gateway, Duration::from_secs(60));

    // `faas deploy` through the gateway in the cluster: a Workflow in the tenant's
    // namespace, placed on the worker pod and Ready.
    let tenant = format!("{namespace}-t");
    let manifests = faas_testing::temp_dir();
    let manifest = copy_manifest(
        manifests.path(),
        "functions/hello/workflow.toml",
        &[("tenant = \"demo\"", &format!("tenant = \"{tenant}\""))],
    );
    let output = faas_at(&gateway, &["deploy", manifest.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "faas deploy failed: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        kubelet.logs()
    );
    wait_for("hello to be Ready", Duration::from_secs(90), || {
        condition(plane, &tenant, "hello", "Ready").then_some(())
    });
    let workflow = kubectl_json(plane, &["-n", &tenant, "get", "workflow", "hello"]);
    let worker_pods = kubectl_json(
        plane,
        &[
            "-n",
            &namespace,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/component=worker",
        ],
    );
    let worker_pod = worker_pods["items"][0]["metadata"]["name"].clone();
    assert_eq!(workflow["status"]["placement"][0], worker_pod, "{workflow}");
    let hello = client().get(format!("{gateway}/hello")).send().unwrap();
    assert_eq!(hello.status(), 200);
    assert!(hello.text().unwrap().contains("Hello"));

    // `kubectl get workflows` shows the columns an operator reads.
    let table = plane.kubectl_ok(["-n", &tenant, "get", "workflows"]);
    for column in ["READY", "REPLICAS", "REVISION", "WORKERS", "ROUTES"] {
        assert!(table.contains(column), "{table}");
    }
    assert!(
        table.contains("True") && table.contains("/hello"),
        "{table}"
    );

    // Code that escaped a worker holds its Redis credential, which writes the worker
    // registry. In a loop it registers the real worker's id at its own address, marks
    // the real worker draining, deletes its heartbeat, and registers a worker of its
    // own with room for a thousand workflows. None of it counts: the workers are the
    // worker pods the operator records. The gateway sends the forger nothing, hello is
    // served throughout, and every reader sees the real worker only.
    let forger = Forger::start(&runtime, &worker_redis_url(&redis));
    let genuine = forger.genuine(worker_pod.as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline {
        forger.register(&WorkerInfo {
            addr: forger.addr(),
            ..genuine.clone()
        });
        forger.register(&WorkerInfo {
            draining: true,
            ..genuine.clone()
        });
        forger.stop_heartbeat(&genuine.id);
        forger.register(&WorkerInfo {
            id: format!("{}-forged", genuine.id),
            addr: forger.addr(),
            capacity: 1000,
            ..genuine.clone()
        });
        let hello = client().get(format!("{gateway}/hello")).send().unwrap();
        assert_eq!(
            hello.status(),
            200,
            "hello went unserved during the forgery"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        forger.connections(),
        0,
        "the forged address was sent events"
    );
    let platform = runtime
        .block_on(SharedState::connect(&redis.url()))
        .unwrap();
    let seen: Vec<(String, String, bool)> = runtime
        .block_on(platform.workers())
        .unwrap()
        .live
        .into_iter()
        .map(|info| (info.id, info.addr, info.draining))
        .collect();
    assert_eq!(seen, [(genuine.id.clone(), genuine.addr.clone(), false)]);
    assert!(condition(plane, &tenant, "hello", "Ready"));

    // `kubectl apply -f` of a Workflow whose component the operator fetches by URL
    // and checks against its SHA-256.
    let component = faas_testing::component("wasi-hello");
    let sha = hex::encode(Sha256::digest(&component));
    let url = crate::serve_file(component);
    let applied = manifests.path().join("wasi-hello.yaml");
    std::fs::write(
        &applied,
        format!(
            "apiVersion: faas.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: wasi-hello\n  namespace: {tenant}\nspec:\n  functions:\n    hello:\n      component:\n        sha256: {sha}\n        url: {url}\n  triggers:\n    http:\n      - route: /wasi-hello\n        function: hello\n"
        ),
    )
    .unwrap();
    plane.kubectl_ok(["apply".as_ref(), "-f".as_ref(), applied.as_os_str()]);
    wait_for("wasi-hello to be Ready", Duration::from_secs(90), || {
        condition(plane, &tenant, "wasi-hello", "Ready").then_some(())
    });
    let answer = client()
        .get(format!("{gateway}/wasi-hello"))
        .send()
        .unwrap();
    assert_eq!(answer.status(), 200, "{}", kubelet.logs());
    // Placed on the real worker pod, not the forged worker (still registered, with
    // room for a thousand workflows).
    let applied = kubectl_json(plane, &["-n", &tenant, "get", "workflow", "wasi-hello"]);
    assert_eq!(
        applied["status"]["placement"],
        json!([worker_pod]),
        "{applied}"
    );
    assert_eq!(
        forger.connections(),
        0,
        "the forged address was sent events"
    );
    drop(forger);

    // Idle: the operator scales the workers to zero, and their processes stop.
    wait_for(
        "the workers to be scaled to zero",
        Duration::from_secs(120),
        || {
            (worker_replicas(plane, &namespace) == 0 && kubelet.running("worker") == 0)
                .then_some(())
        },
    );
    wait_for(
        "hello to be no longer Ready",
        Duration::from_secs(60),
        || (!condition(plane, &tenant, "hello", "Ready")).then_some(()),
    );

    // An event: held by the gateway, the workers scaled back up, answered.
    let started = Instant::now();
    let cold = client().get(format!("{gateway}/hello")).send().unwrap();
    let cold_start = started.elapsed();
    assert_eq!(cold.status(), 200, "{}", kubelet.logs());
    assert!(cold.text().unwrap().contains("Hello"));
    println!(
        "cold start from zero worker pods (held request to answer): {} ms",
        cold_start.as_millis()
    );
    assert_eq!(worker_replicas(plane, &namespace), 1);
    assert_eq!(kubelet.started("worker"), 2, "a second worker pod came up");
    // The operator pod's metrics port (the chart's default) tells the same story.
    let metrics = client()
        .get(format!("http://{}:9090/metrics", kubelet.ip_of("operator")))
        .send()
        .unwrap()
        .text()
        .unwrap();
    for sample in [
        "faas_operator_leader 1",
        r#"faas_operator_worker_scalings_total{direction="down"} 1"#,
        r#"faas_operator_worker_scalings_total{direction="up"} 1"#,
    ] {
        assert!(metrics.lines().any(|line| line == sample), "{metrics}");
    }

    // Deleting a Workflow removes it from the platform (the operator's finalizer).
    plane.kubectl_ok([
        "-n",
        &tenant,
        "delete",
        "workflow",
        "wasi-hello",
        "--wait=true",
    ]);
    wait_for("/wasi-hello to be gone", Duration::from_secs(30), || {
        let status = client()
            .get(format!("{gateway}/wasi-hello"))
            .send()
            .unwrap()
            .status();
        (status == 404).then_some(())
    });
    drop(kubelet);
}

/// Stands in for code that escaped a worker's sandbox and holds the workers' Redis
/// credential: it writes worker registrations, and listens at the address it
/// registers, counting who connects.
struct Forger {
    shared: SharedState,
    redis: redis::aio::MultiplexedConnection,
    runtime: tokio::runtime::Handle,
    listener: std::net::SocketAddr,
    connections: Arc<std::sync::atomic::AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Forger {
    fn start(runtime: &tokio::runtime::Runtime, worker_url: &str) -> Self {
        use std::sync::atomic::Ordering;
        let shared = runtime
            .block_on(SharedState::connect(worker_url))
            .expect("connecting as the workers' Redis user");
        let redis = runtime
            .block_on(async {
                redis::Client::open(worker_url)?
                    .get_multiplexed_async_connection()
                    .await
            })
            .expect("connecting as the workers' Redis user");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (counted, stopped) = (connections.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    // Closed at once: a forger that answered would only be slower to
                    // be noticed.
                    Ok(_) => {
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Self {
            shared,
            redis,
            runtime: runtime.handle().clone(),
            listener: addr,
            connections,
            stop,
        }
    }

    /// The registration of worker `id` as the worker itself wrote it.
    fn genuine(&self, id: &str) -> WorkerInfo {
        let live = self.runtime.block_on(self.shared.workers()).unwrap().live;
        live.into_iter()
            .find(|info| info.id == id)
            .unwrap_or_else(|| panic!("worker {id} is not registered"))
    }

    /// Where it listens.
    fn addr(&self) -> String {
        self.listener.to_string()
    }

    /// Writes `info` into the registry, alive for two minutes.
    fn register(&self, info: &WorkerInfo) {
        self.runtime
            .block_on(self.shared.heartbeat(info, Duration::from_secs(120)))
            .expect("the workers' Redis user writes the registry");
    }

    /// Deletes worker `id`'s heartbeat, as if it had stopped.
    fn stop_heartbeat(&self, id: &str) {
        let mut connection = self.redis.clone();
        self.runtime
            .block_on(
                redis::cmd("DEL")
                    .arg(format!("faas:alive:{id}"))
                    .query_async::<()>(&mut connection),
            )
            .expect("the workers' Redis user deletes heartbeats");
    }

    /// How many connections it was sent.
    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Forger {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
