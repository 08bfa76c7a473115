//! The Helm chart `charts/faas` against a real control plane (kwok stands in for the
//! kubelet, so pods go Ready without running their images): `helm install --wait`
//! succeeds, upgrades keep the worker count the operator set and the generated tokens,
//! the API server's RBAC grants each ServiceAccount what it needs and nothing more, and
//! every manifest the chart renders passes `kubectl apply --dry-run=server`.
//! `charts/check` covers what needs no cluster (lint, kubeconform, policy).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use faas_testing::kube::{ControlPlane, kubernetes_version};

/// The release name every test installs or renders (its objects are `faas-<component>`).
const RELEASE: &str = "faas";

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/faas")
}

/// Runs `command` and returns its stdout.
///
/// # Panics
/// If it fails, with its stderr.
fn run_ok(mut command: Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("starting {command:?}: {err}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn helm(plane: &ControlPlane, args: &[&str]) -> String {
    let mut command = plane.command("helm");
    command.args(args);
    run_ok(command)
}

fn kubectl_json(plane: &ControlPlane, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&plane.kubectl_ok(&all)).expect("kubectl printed JSON")
}

/// Ready pods of the release by component (`app.kubernetes.io/component`).
fn ready_pods(plane: &ControlPlane, namespace: &str) -> BTreeMap<String, usize> {
    let pods = kubectl_json(plane, &["-n", namespace, "get", "pods"]);
    let mut ready = BTreeMap::new();
    for pod in pods["items"].as_array().expect("a pod list") {
        let is_ready = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let component = pod["metadata"]["labels"]["app.kubernetes.io/component"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if is_ready && pod["metadata"]["deletionTimestamp"].is_null() {
            *ready.entry(component).or_default() += 1;
        }
    }
    ready
}

fn replicas(plane: &ControlPlane, namespace: &str, deployment: &str) -> i64 {
    kubectl_json(plane, &["-n", namespace, "get", "deployment", deployment])["spec"]["replicas"]
        .as_i64()
        .expect("a Deployment's spec.replicas")
}

fn secret_value(plane: &ControlPlane, namespace: &str, key: &str) -> String {
    secret_value_of(plane, namespace, RELEASE, key)
}

/// Value `key` of Secret `secret` in `namespace` (base64, as the API has it).
fn secret_value_of(plane: &ControlPlane, namespace: &str, secret: &str, key: &str) -> String {
    let found = kubectl_json(plane, &["-n", namespace, "get", "secret", secret]);
    found["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("Secret {secret} has no {key}"))
        .to_owned()
}

/// Whether the release's ServiceAccount `account` may do `what` (kubectl auth can-i
/// arguments), as the API server's RBAC decides.
fn can(plane: &ControlPlane, namespace: &str, account: &str, what: &[&str]) -> bool {
    let subject = format!("system:serviceaccount:{namespace}:{RELEASE}-{account}");
    can_as(plane, &subject, what)
}

/// Whether user or account `subject` may do `what`, as the API server's RBAC decides.
fn can_as(plane: &ControlPlane, subject: &str, what: &[&str]) -> bool {
    let mut args = vec!["auth", "can-i", "--as", subject];
    args.extend(what);
    let output = plane.kubectl(&args);
    match output.status.code() {
        Some(0) => true,
        Some(1) => false,
        _ => panic!(
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_waits_for_ready_pods_and_upgrades_keep_the_operators_worker_count() {
    let plane = ControlPlane::shared();
    let namespace = plane.namespace("chart").await;
    let chart = chart();
    let chart = chart.to_str().expect("a UTF-8 path");
    helm(
        plane,
        &[
            "install",
            RELEASE,
            chart,
            "-n",
            &namespace,
            "--wait",
            "--timeout",
            "180s",
        ],
    );
    let expected: BTreeMap<String, usize> =
        [("gateway", 2), ("operator", 1), ("redis", 1), ("worker", 1)]
            .into_iter()
            .map(|(component, count)| (component.to_owned(), count))
            .collect();
    assert_eq!(ready_pods(plane, &namespace), expected);
    let admin_token = secret_value(plane, &namespace, "admin-token");
    let internal_token = secret_value(plane, &namespace, "internal-token");
    assert_ne!(admin_token, internal_token, "the two secrets are distinct");
    let redis_secret = format!("{RELEASE}-redis-url");
    let redis_password = secret_value_of(plane, &namespace, &redis_secret, "redis-password");
    assert!(
        redis_password.len() >= 48,
        "the bundled Redis has a password"
    );

    // The operator scales the workers to zero; an upgrade must not bring them back,
    // nor change the generated tokens (every gateway and worker would need new ones).
    plane.kubectl_ok([
        "-n",
        &namespace,
        "scale",
        "deployment",
        "faas-worker",
        "--replicas=0",
    ]);
    helm(
        plane,
        &[
            "upgrade",
            RELEASE,
            chart,
            "-n",
            &namespace,
            "--reuse-values",
            "--set",
            "gateway.replicas=1",
            "--wait",
            "--timeout",
            "180s",
        ],
    );
    assert_eq!(replicas(plane, &namespace, "faas-worker"), 0);
    assert_eq!(replicas(plane, &namespace, "faas-gateway"), 1);
    assert_eq!(secret_value(plane, &namespace, "admin-token"), admin_token);
    assert_eq!(
        secret_value(plane, &namespace, "internal-token"),
        internal_token
    );
    assert_eq!(
        secret_value_of(plane, &namespace, &redis_secret, "redis-password"),
        redis_password,
        "the bundled Redis's password changed on upgrade"
    );

    // Least privilege, as the API server's RBAC decides. The operator: Workflows and
    // their status and finalizers in any tenant's namespace, the worker Deployment's
    // scale in its own namespace and no other Deployment, its Lease.
    let elsewhere = plane.namespace("tenant").await;
    let ns = ["-n", namespace.as_str()];
    let tenant = ["-n", elsewhere.as_str()];
    let operator =
        |what: &[&str], at: &[&str]| can(plane, &namespace, "operator", &[what, at].concat());
    assert!(operator(&["patch", "workflows.faas.dev"], &tenant));
    assert!(operator(
        &["update", "workflows.faas.dev", "--subresource=status"],
        &tenant
    ));
    assert!(operator(
        &["update", "workflows.faas.dev", "--subresource=finalizers"],
        &tenant
    ));
    assert!(!operator(&["delete", "workflows.faas.dev"], &tenant));
    assert!(operator(
        &["patch", "deployments/faas-worker", "--subresource=scale"],
        &ns
    ));
    assert!(!operator(
        &["patch", "deployments/faas-gateway", "--subresource=scale"],
        &ns
    ));
    assert!(operator(
        &["get", "deployments/faas-worker", "--subresource=scale"],
        &ns
    ));
    // The Deployment itself (its pod template) is not the operator's to change.
    for verb in ["patch", "update", "delete"] {
        assert!(!operator(&[verb, "deployments/faas-worker"], &ns), "{verb}");
    }
    assert!(!operator(
        &["patch", "deployments/faas-worker", "--subresource=scale"],
        &tenant
    ));
    assert!(operator(&["watch", "pods"], &ns));
    assert!(!operator(&["delete", "pods"], &ns));
    assert!(operator(&["create", "leases.coordination.k8s.io"], &ns));
    assert!(operator(
        &["update", "leases.coordination.k8s.io/faas-operator"],
        &ns
    ));
    assert!(!operator(
        &["update", "leases.coordination.k8s.io/another"],
        &ns
    ));
    assert!(!operator(&["get", "secrets"], &ns));
    // The gateway: Workflows in any tenant's namespace (`faas deploy`, `faas rm`), not
    // their status; creating a tenant's namespace (`faas tenant create`); nothing else.
    let gateway =
        |what: &[&str], at: &[&str]| can(plane, &namespace, "gateway", &[what, at].concat());
    assert!(gateway(&["create", "workflows.faas.dev"], &tenant));
    assert!(gateway(&["delete", "workflows.faas.dev"], &tenant));
    assert!(!gateway(
        &["update", "workflows.faas.dev", "--subresource=status"],
        &tenant
    ));
    assert!(gateway(&["create", "namespaces"], &[]));
    assert!(!gateway(&["delete", "namespaces"], &[]));
    assert!(!gateway(&["get", "secrets"], &ns));
    assert!(!gateway(&["patch", "deployments"], &ns));
    // A tenant bound to the chart's tenant role in its namespace: its Workflows, not
    // their status nor its namespace's quota, and nothing in another namespace.
    plane.kubectl_ok([
        "-n",
        &elsewhere,
        "create",
        "rolebinding",
        "alice",
        &format!("--clusterrole={namespace}-faas-tenant"),
        "--user=alice",
    ]);
    let alice = |what: &[&str], at: &[&str]| can_as(plane, "alice", &[what, at].concat());
    assert!(alice(&["create", "workflows.faas.dev"], &tenant));
    assert!(alice(&["delete", "workflows.faas.dev"], &tenant));
    assert!(alice(&["get", "resourcequotas"], &tenant));
    assert!(!alice(
        &["update", "workflows.faas.dev", "--subresource=status"],
        &tenant
    ));
    assert!(!alice(
        &["patch", "workflows.faas.dev", "--subresource=status"],
        &tenant
    ));
    assert!(!alice(&["delete", "resourcequotas"], &tenant));
    assert!(!alice(&["update", "resourcequotas"], &tenant));
    assert!(!alice(&["create", "workflows.faas.dev"], &ns));
    // The workers: nothing at all.
    let worker =
        |what: &[&str], at: &[&str]| can(plane, &namespace, "worker", &[what, at].concat());
    assert!(!worker(&["get", "pods"], &ns));
    assert!(!worker(&["get", "workflows.faas.dev"], &tenant));
    assert!(!worker(&["get", "secrets"], &ns));

    helm(plane, &["uninstall", RELEASE, "-n", &namespace, "--wait"]);
    let left = kubectl_json(
        plane,
        &["-n", &namespace, "get", "deployments,services,secrets"],
    );
    assert_eq!(left["items"], serde_json::json!([]), "left after uninstall");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rendered_manifest_passes_a_server_side_dry_run() {
    let plane = ControlPlane::shared();
    let namespace = plane.namespace("dry-run").await;
    // The dashboard ConfigMap may live in Grafana's namespace rather than the release's.
    let grafana = plane.namespace("grafana").await;
    let chart = chart();
    let mut value_sets: Vec<PathBuf> = std::fs::read_dir(chart.join("ci"))
        .expect("reading charts/faas/ci")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    value_sets.sort();
    assert!(value_sets.len() >= 3, "value sets: {value_sets:?}");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut applied_to_grafana = 0;
    for values in &value_sets {
        let name = values.file_name().expect("a file name").to_string_lossy();
        let mut template = plane.command("helm");
        template
            .args(["template", RELEASE])
            .arg(&chart)
            // Without --validate, helm renders for its built-in version unless told.
            .args(["--kube-version", kubernetes_version()])
            .args(["-n", &namespace, "--include-crds", "-f"])
            .arg(values)
            .args(["--set", &format!("grafana.dashboard.namespace={grafana}")]);
        let rendered = run_ok(template);
        // kubectl refuses an object naming another namespace than `-n`, so each
        // namespace's objects are applied on their own.
        let (elsewhere, here): (Vec<&str>, Vec<&str>) = rendered
            .split("\n---")
            .partition(|document| document.contains(&format!("namespace: {grafana}\n")));
        applied_to_grafana += elsewhere.len();
        for (target, documents) in [(&namespace, here), (&grafana, elsewhere)] {
            if documents.is_empty() {
                continue;
            }
            let path = dir.path().join(format!("{target}-{name}"));
            std::fs::write(&path, documents.join("\n---")).expect("writing the rendered chart");
            let output = plane.kubectl([
                "apply",
                "--dry-run=server",
                "-n",
                target,
                "-f",
                path.to_str().expect("a UTF-8 path"),
            ]);
            assert!(
                output.status.success(),
                "the manifests rendered with {name} fail a server-side dry run in {target}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    assert!(
        applied_to_grafana > 0,
        "no value set put the dashboard in Grafana's namespace"
    );
    // The example Workflow, in a tenant's namespace, against the real CRD.
    plane.kubectl_ok([
        "apply",
        "--server-side",
        "-f",
        chart
            .join("crds/workflows.faas.dev.yaml")
            .to_str()
            .expect("a UTF-8 path"),
    ]);
    plane.kubectl_ok([
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        "crd/workflows.faas.dev",
    ]);
    let example = std::fs::read_to_string(chart.join("../examples/hello-workflow.yaml"))
        .expect("reading charts/examples/hello-workflow.yaml")
        .replace("namespace: acme", &format!("namespace: {namespace}"));
    let path = dir.path().join("hello-workflow.yaml");
    std::fs::write(&path, example).expect("writing the example");
    plane.kubectl_ok([
        "apply",
        "--dry-run=server",
        "-f",
        path.to_str().expect("a UTF-8 path"),
    ]);
}
