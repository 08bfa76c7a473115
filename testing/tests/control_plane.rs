//! The Kubernetes control-plane fixture against itself: Deployments get Ready pods on
//! the kwok node, kubectl reaches the apiserver, pods can be stood in for, and the
//! components die with the test process.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use faas_testing::kube::{ControlPlane, NODE_NAME, PodEvent, PodWatch, ReadyPod};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};

/// How long pods may take to go Ready (or away) on the kwok node.
const POD_TIMEOUT: Duration = Duration::from_secs(60);
/// Set in the child process of `components_die_with_the_test_process`.
const ORPHAN_PROBE: &str = "FAAS_K8S_ORPHAN_PROBE";

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "containers": [{
                        "name": "main",
                        // kwok pulls nothing: the image only has to be a valid name.
                        "image": "example.invalid/smoke:1",
                        "args": ["serve", "--id=$(POD_NAME)"],
                        "env": [
                            { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                            { "name": "POD_NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
                            { "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } },
                            { "name": "ADVERTISE", "value": "$(POD_IP):7000" },
                            { "name": "GREETING", "valueFrom": { "configMapKeyRef": { "name": "smoke", "key": "greeting" } } },
                        ],
                    }],
                },
            },
        },
    }))
    .expect("a valid Deployment")
}

/// The next event within `POD_TIMEOUT`.
async fn next_event(watch: &mut PodWatch) -> PodEvent {
    tokio::time::timeout(POD_TIMEOUT, watch.next())
        .await
        .unwrap_or_else(|_| panic!("no pod event within {POD_TIMEOUT:?}"))
        .expect("the pod watch ended")
        .expect("resolving a ready pod")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_gets_ready_pods_on_the_kwok_node_and_they_can_be_stood_in_for() {
    let plane = ControlPlane::shared();
    let namespace = plane.namespace("smoke").await;
    let client = plane.kube_client().await;
    let config_map: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "smoke" },
        "data": { "greeting": "hello" },
    }))
    .expect("a valid ConfigMap");
    Api::<ConfigMap>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &config_map)
        .await
        .expect("creating the ConfigMap");
    let mut watch = plane.watch_ready_pods(&namespace, "app=smoke").await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &namespace);
    let apply = PatchParams::apply("faas-testing").force();
    deployments
        .patch("smoke", &apply, &Patch::Apply(deployment("smoke", 2)))
        .await
        .expect("applying the Deployment");

    let mut ready: BTreeMap<String, ReadyPod> = BTreeMap::new();
    while ready.len() < 2 {
        match next_event(&mut watch).await {
            PodEvent::Ready(pod) => {
                ready.insert(pod.name.clone(), pod);
            }
            PodEvent::Gone { name, .. } => panic!("pod {name} went away before two were ready"),
        }
    }
    let pods = Api::<Pod>::namespaced(client.clone(), &namespace);
    for pod in ready.values() {
        let env = pod.env();
        assert_eq!(env["POD_NAME"], pod.name);
        assert_eq!(env["POD_NAMESPACE"], namespace);
        assert_eq!(env["POD_IP"], pod.ip);
        assert_eq!(env["ADVERTISE"], format!("{}:7000", pod.ip));
        assert_eq!(env["GREETING"], "hello");
        assert_eq!(
            pod.containers[0].args,
            ["serve".to_owned(), format!("--id={}", pod.name)]
        );
        // Pod IPs are loopback addresses a stand-in process can listen on.
        let ip: std::net::Ipv4Addr = pod.ip.parse().expect("an IPv4 pod IP");
        assert!(ip.is_loopback(), "pod IP {ip} is not a loopback address");
        std::net::TcpListener::bind((ip, 0))
            .unwrap_or_else(|err| panic!("listening on pod IP {ip}: {err}"));
        let live = pods.get(&pod.name).await.expect("reading the pod");
        let spec = live.spec.expect("a pod has a spec");
        assert_eq!(spec.node_name.as_deref(), Some(NODE_NAME));
    }
    let ips: std::collections::BTreeSet<_> = ready.values().map(|p| p.ip.clone()).collect();
    assert_eq!(ips.len(), 2, "each pod has its own IP: {ips:?}");

    let status = deployments
        .get("smoke")
        .await
        .expect("reading the Deployment")
        .status
        .expect("the Deployment has a status");
    assert_eq!(status.ready_replicas, Some(2), "{status:?}");

    // Scaling down makes one pod go away, and the watch says which.
    deployments
        .patch("smoke", &apply, &Patch::Apply(deployment("smoke", 1)))
        .await
        .expect("scaling the Deployment down");
    let PodEvent::Gone {
        name,
        namespace: gone_namespace,
    } = next_event(&mut watch).await
    else {
        panic!("expected a pod to go away after scaling down");
    };
    assert!(ready.contains_key(&name), "{name} was not a ready pod");
    assert_eq!(gone_namespace, namespace);

    // Deleting a pod is reported too, and its replacement becomes Ready.
    let survivor = ready
        .keys()
        .find(|n| **n != name)
        .expect("two pods")
        .clone();
    pods.delete(&survivor, &Default::default())
        .await
        .expect("deleting a pod");
    let mut gone = false;
    let mut replacement = None;
    let deadline = Instant::now() + POD_TIMEOUT;
    while !(gone && replacement.is_some()) && Instant::now() < deadline {
        match next_event(&mut watch).await {
            PodEvent::Gone { name, .. } if name == survivor => gone = true,
            PodEvent::Ready(pod) => replacement = Some(pod.name),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(gone, "the deleted pod {survivor} was not reported gone");
    let replacement = replacement.expect("a replacement pod became Ready");
    assert!(!ready.contains_key(&replacement));
}

#[test]
fn kubectl_reaches_the_control_plane() {
    let plane = ControlPlane::shared();
    let nodes = plane.kubectl_ok(["get", "nodes", "-o", "name"]);
    assert_eq!(nodes.trim(), format!("node/{NODE_NAME}"));
    let version: serde_json::Value =
        serde_json::from_str(&plane.kubectl_ok(["version", "-o", "json"])).expect("JSON");
    assert_eq!(version["serverVersion"]["gitVersion"], "v1.36.3");
    assert_eq!(version["clientVersion"]["gitVersion"], "v1.36.3");
    // The controller-manager fills the aggregated built-in ClusterRoles, a while after
    // it starts when the machine is busy.
    let deadline = Instant::now() + Duration::from_secs(60);
    let view = loop {
        let view = plane.kubectl_ok(["get", "clusterrole", "view", "-o", "jsonpath={.rules}"]);
        if view.contains("pods") || Instant::now() > deadline {
            break view;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        view.contains("pods"),
        "the view ClusterRole has no rules: {view}"
    );
    // RBAC is on: a service account may not read secrets it was not granted.
    let denied = plane.kubectl([
        "auth",
        "can-i",
        "get",
        "secrets",
        "--as=system:serviceaccount:default:default",
    ]);
    assert!(!denied.status.success());
    assert_eq!(String::from_utf8_lossy(&denied.stdout).trim(), "no");
}

/// Whether `pid` still runs (a zombie waiting for its new parent counts as dead).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn components_die_with_the_test_process() {
    if std::env::var_os(ORPHAN_PROBE).is_some() {
        // The child: start a control plane, say its pids, and wait to be killed.
        let plane = ControlPlane::shared();
        let pids: Vec<String> = plane
            .component_pids()
            .iter()
            .map(|(_, pid)| pid.to_string())
            .collect();
        println!("pids {}", pids.join(" "));
        std::thread::sleep(Duration::from_secs(300));
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new(&exe)
        .args([
            "components_die_with_the_test_process",
            "--exact",
            "--nocapture",
        ])
        .env(ORPHAN_PROBE, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the test binary again");
    let stdout = child.stdout.take().expect("piped stdout");
    let pids: Vec<u32> = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            line.strip_prefix("pids ")
                .map(|rest| rest.split(' ').map(|p| p.parse().expect("a pid")).collect())
        })
        .expect("the child test process printed its components' pids");
    assert_eq!(
        pids.len(),
        5,
        "etcd, apiserver, controller-manager, scheduler, kwok"
    );
    assert!(pids.iter().all(|pid| running(*pid)));
    child.kill().expect("SIGKILL to the child test process");
    child.wait().expect("reaping the child test process");
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|pid| running(*pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let survivors: Vec<_> = pids.iter().filter(|pid| running(**pid)).collect();
    assert!(
        survivors.is_empty(),
        "components outlived the killed test process: {survivors:?}"
    );
}
