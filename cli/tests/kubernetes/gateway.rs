//! `faas gateway --kubernetes`: `faas deploy workflow.toml` creates or updates the
//! Workflow resource in the tenant's namespace, `faas rm` deletes it, `faas tenant
//! create` creates the namespace; what the gateway refuses never reaches the cluster.
//!
//! Real: the control plane, a redis-server, the `faas` CLI and a `faas gateway
//! --kubernetes` process, which runs as a ServiceAccount bound to exactly the
//! ClusterRole below (the one the chart must grant it), so a verb it lacks fails here.
//! Stood in for: the operator, by [`StandInOperator`] (`faas operator` did not exist
//! when these tests were written): it marks each generation observed (revision =
//! generation, `Degraded` when the description is [`DEGRADE`]), holds the finalizer
//! `faas.dev/cleanup` and lets go of it a round after a deletion. It writes no
//! deployment record into Redis, so nothing here is served by a worker.

use crate::support::{Process, TOKEN, Upload, copy_manifest, error_of, faas_as, wait_ready};
use faas_shared_state::SharedState;
use faas_testing::RedisServer;
use faas_testing::kube::ControlPlane;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the gateway may do in the cluster: the least privilege the chart grants it.
const GATEWAY_RBAC: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: faas-gateway-test
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: faas-gateway
  namespace: faas-gateway-test
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: faas-gateway-test
rules:
  - apiGroups: ["faas.dev"]
    resources: ["workflows"]
    verbs: ["get", "list", "watch", "create", "patch", "delete"]
  - apiGroups: [""]
    resources: ["namespaces"]
    verbs: ["create"]
  - apiGroups: [""]
    resources: ["resourcequotas"]
    resourceNames: ["faas-workflows"]
    verbs: ["get", "create", "patch", "delete"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: faas-gateway-test
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: faas-gateway-test
subjects:
  - kind: ServiceAccount
    name: faas-gateway
    namespace: faas-gateway-test
"#;

/// The description that makes the stand-in operator mark a spec `Degraded`.
const DEGRADE: &str = "degrade me";
/// The reason it gives.
const DEGRADED_REASON: &str = "InvalidSpec";

/// Installs the Workflow CRD (as checked in for the chart) once per test binary and
/// waits until it is served.
pub(crate) fn install_crd(plane: &ControlPlane) {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let crd = faas_testing::repo_root().join("charts/faas/crds/workflows.faas.dev.yaml");
        plane.kubectl_ok([
            "apply".as_ref(),
            "--server-side".as_ref(),
            "--force-conflicts".as_ref(),
            "-f".as_ref(),
            crd.as_os_str(),
        ]);
        plane.kubectl_ok([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/workflows.faas.dev",
        ]);
    });
}

/// A kubeconfig for the gateway's ServiceAccount ([`GATEWAY_RBAC`]), made once per
/// test binary: the admin's cluster and CA, a token of that account.
fn gateway_kubeconfig(plane: &ControlPlane) -> &'static Path {
    static KUBECONFIG: OnceLock<PathBuf> = OnceLock::new();
    KUBECONFIG.get_or_init(|| {
        let rbac = plane.dir().join("faas-gateway-rbac.yaml");
        std::fs::write(&rbac, GATEWAY_RBAC).expect("writing the RBAC manifest");
        plane.kubectl_ok(["apply".as_ref(), "-f".as_ref(), rbac.as_os_str()]);
        let token = plane.kubectl_ok([
            "create",
            "token",
            "faas-gateway",
            "--namespace",
            "faas-gateway-test",
            "--duration",
            "2h",
        ]);
        let path = plane.dir().join("faas-gateway.kubeconfig");
        std::fs::copy(plane.kubeconfig(), &path).expect("copying the kubeconfig");
        let config = path.to_str().expect("a UTF-8 path");
        // A user of its own: a client certificate would win over the token.
        plane.kubectl_ok([
            "--kubeconfig",
            config,
            "config",
            "set-credentials",
            "faas-gateway",
            &format!("--token={}", token.trim()),
        ]);
        plane.kubectl_ok([
            "--kubeconfig",
            config,
            "config",
            "set-context",
            "--current",
            "--user=faas-gateway",
        ]);
        path
    })
}

/// A name no other test of this binary uses (namespaces, workflows and routes are
/// shared by every test on the one control plane).
fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The operator's part, as far as the gateway depends on it (see the module docs).
struct StandInOperator {
    namespaces: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StandInOperator {
    fn start(plane: &'static ControlPlane) -> Self {
        let namespaces = Arc::new(Mutex::new(Vec::<String>::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (namespaces, stop) = (namespaces.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // Held for the whole round: `unwatch` returns only once no round
                    // that still lists the namespace is under way (one that had taken
                    // a copy of the list let a Workflow go after it, on a slow
                    // machine: CI-86).
                    let watched = namespaces.lock().unwrap();
                    for namespace in watched.iter() {
                        reconcile(plane, namespace);
                    }
                    drop(watched);
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Self {
            namespaces,
            stop,
            thread: Some(thread),
        }
    }

    /// Reconciles the Workflows of `namespace` from now on.
    fn watch(&self, namespace: &str) {
        self.namespaces.lock().unwrap().push(namespace.to_owned());
    }

    /// Leaves the Workflows of `namespace` alone from now on, as an operator that
    /// cannot remove them (another finalizer holds them) would: once this returns, no
    /// round touches them.
    fn unwatch(&self, namespace: &str) {
        self.namespaces
            .lock()
            .unwrap()
            .retain(|watched| watched != namespace);
    }
}

impl Drop for StandInOperator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One round of the stand-in operator over `namespace`. Failures (a conflict, a
/// namespace being deleted) are left to the next round.
fn reconcile(plane: &ControlPlane, namespace: &str) {
    let listed = plane.kubectl(["get", "workflows", "-n", namespace, "-o", "json"]);
    let Ok(list) = serde_json::from_slice::<Value>(&listed.stdout) else {
        return;
    };
    for item in list["items"].as_array().into_iter().flatten() {
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let patch = |extra: &[&str], body: Value| {
            let body = body.to_string();
            let mut args = vec!["patch", "workflow", name, "-n", namespace, "--type=merge"];
            args.extend(extra);
            args.extend(["-p", &body]);
            plane.kubectl(&args);
        };
        if !item["metadata"]["deletionTimestamp"].is_null() {
            patch(&[], json!({"metadata": {"finalizers": null}}));
            continue;
        }
        let generation = item["metadata"]["generation"].as_i64().unwrap_or_default();
        if item["status"]["observedGeneration"].as_i64() == Some(generation) {
            continue;
        }
        if item["metadata"]["finalizers"].is_null() {
            patch(
                &[],
                json!({"metadata": {"finalizers": ["faas.dev/cleanup"]}}),
            );
        }
        let degraded = item["spec"]["description"] == DEGRADE;
        let condition = json!({
            "type": "Degraded",
            "status": if degraded { "True" } else { "False" },
            "reason": if degraded { DEGRADED_REASON } else { "Valid" },
            "message": if degraded { "spec.description: the stand-in refuses it" } else { "" },
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        });
        patch(
            &["--subresource=status"],
            json!({"status": {
                "observedGeneration": generation,
                "revision": generation,
                "conditions": [condition],
            }}),
        );
    }
}

/// A `faas gateway --kubernetes` with its Redis, and the stand-in operator. Fields
/// drop in order: the gateway goes before the Redis it uses, and the operator lock
/// last.
struct KubeGateway {
    url: String,
    plane: &'static ControlPlane,
    _gateway: Process,
    operator: StandInOperator,
    redis: RedisServer,
    dir: tempfile::TempDir,
    /// No real operator (of another test) reconciles these Workflows meanwhile.
    _operator_lock: std::sync::MutexGuard<'static, ()>,
}

impl KubeGateway {
    fn start() -> Self {
        Self::start_with_timeout("20")
    }

    /// A gateway whose deploys wait `deploy_timeout_s` for the operator.
    fn start_with_timeout(deploy_timeout_s: &str) -> Self {
        let operator_lock = crate::operator_lock();
        let plane = ControlPlane::shared();
        install_crd(plane);
        let kubeconfig = gateway_kubeconfig(plane);
        faas_testing::build_functions();
        let redis = RedisServer::start();
        let dir = faas_testing::temp_dir();
        let redis_url = redis.url();
        let data_dir = dir.path().join("gateway");
        let gateway = Process::spawn_with_env(
            &[
                "gateway".as_ref(),
                "--kubernetes".as_ref(),
                "--redis".as_ref(),
                redis_url.as_ref(),
                "--sync-interval-ms".as_ref(),
                "50".as_ref(),
                "--listen".as_ref(),
                "127.0.0.1:0".as_ref(),
                "--token".as_ref(),
                TOKEN.as_ref(),
                "--internal-token".as_ref(),
                "test-internal-token".as_ref(),
                "--deploy-timeout-s".as_ref(),
                deploy_timeout_s.as_ref(),
                "--data-dir".as_ref(),
                data_dir.as_os_str(),
            ] as &[&std::ffi::OsStr],
            &[("KUBECONFIG", kubeconfig.as_os_str())],
            "faas gateway is up at ",
        );
        let url = gateway.announced.clone();
        wait_ready(&url, Duration::from_secs(30));
        Self {
            url,
            plane,
            _gateway: gateway,
            operator: StandInOperator::start(plane),
            redis,
            dir,
            _operator_lock: operator_lock,
        }
    }

    /// Runs the `faas` CLI against this gateway with `token`.
    fn faas_as(&self, token: &str, args: &[&str]) -> Output {
        faas_as(&self.url, token, args)
    }

    /// Runs the `faas` CLI with the admin token, asserting success; returns stdout.
    fn faas_ok(&self, args: &[&str]) -> String {
        let output = self.faas_as(TOKEN, args);
        assert!(
            output.status.success(),
            "faas {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Whether the shared state says `tenant` stored the component `sha` (and so may
    /// name it by digest alone).
    fn has_component_of(&self, tenant: &str, sha: &str) -> bool {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let shared = SharedState::connect(&self.redis.url()).await.unwrap();
            shared.has_component_of(tenant, sha).await.unwrap()
        })
    }

    /// `faas tenant create <unique name>`; the stand-in operator watches its namespace.
    fn create_tenant(&self, prefix: &str) -> String {
        let tenant = unique(prefix);
        self.faas_ok(&["tenant", "create", &tenant]);
        self.operator.watch(&tenant);
        tenant
    }

    /// functions/hello/workflow.toml as workflow `name` of `tenant` on route
    /// `/<name>`, with `replacements` applied too.
    fn hello_manifest(&self, name: &str, tenant: &str, replacements: &[(&str, &str)]) -> PathBuf {
        let mut all = vec![
            ("name = \"hello\"".to_owned(), format!("name = \"{name}\"")),
            (
                "tenant = \"demo\"".to_owned(),
                format!("tenant = \"{tenant}\""),
            ),
            (
                "route = \"/hello\"".to_owned(),
                format!("route = \"/{name}\""),
            ),
        ];
        all.extend(
            replacements
                .iter()
                .map(|(from, to)| ((*from).to_owned(), (*to).to_owned())),
        );
        let pairs: Vec<(&str, &str)> = all.iter().map(|(f, t)| (f.as_str(), t.as_str())).collect();
        copy_manifest(self.dir.path(), "functions/hello/workflow.toml", &pairs)
    }

    /// The Workflow `name` in `namespace`, if it exists.
    fn workflow(&self, namespace: &str, name: &str) -> Option<Value> {
        let output = self.plane.kubectl_ok([
            "get",
            "workflow",
            name,
            "-n",
            namespace,
            "-o",
            "json",
            "--ignore-not-found",
            "--show-managed-fields",
        ]);
        (!output.trim().is_empty())
            .then(|| serde_json::from_str(&output).expect("kubectl prints JSON"))
    }

    /// The names of the Workflows in `namespace`.
    fn workflows(&self, namespace: &str) -> Vec<String> {
        let output = self
            .plane
            .kubectl_ok(["get", "workflows", "-n", namespace, "-o", "json"]);
        let list: Value = serde_json::from_str(&output).expect("kubectl prints JSON");
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| item["metadata"]["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// `kubectl <verb> -f` of a Workflow `name` in `namespace` with `description`, one
    /// function (a component no one stored) and `route`: one a tenant wrote itself.
    fn kubectl_workflow(
        &self,
        verb: &str,
        namespace: &str,
        name: &str,
        description: &str,
        route: &str,
    ) {
        let sha = "1".repeat(64);
        let yaml = self.dir.path().join(format!("{namespace}-{name}.yaml"));
        std::fs::write(
            &yaml,
            format!(
                "apiVersion: faas.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: {name}\n  \
                 namespace: {namespace}\nspec:\n  description: {description}\n  functions:\n    \
                 hello:\n      component:\n        sha256: \"{sha}\"\n  triggers:\n    http:\n      \
                 - route: {route}\n        function: hello\n"
            ),
        )
        .unwrap();
        self.plane
            .kubectl_ok([verb.as_ref(), "-f".as_ref(), yaml.as_os_str()]);
    }

    /// POSTs a deploy body straight to the admin API with `token`.
    fn post_deploy(&self, token: &str, upload: &Upload) -> reqwest::blocking::Response {
        upload.send(&self.url, token)
    }
}

fn stdout_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn generation(workflow: &Value) -> i64 {
    workflow["metadata"]["generation"]
        .as_i64()
        .expect("a resource has a generation")
}

/// The deploy upload `faas deploy` would send for `manifest` text with the hello
/// component.
fn hello_body(manifest: &str) -> Upload {
    Upload::of(manifest, &[("hello", &faas_testing::component("hello"))])
}

#[test]
fn faas_deploy_creates_and_updates_the_workflow_resource_and_faas_rm_deletes_it() {
    let gateway = KubeGateway::start();
    let tenant = gateway.create_tenant("acme");
    let namespace: Value = serde_json::from_str(&gateway.plane.kubectl_ok([
        "get",
        "namespace",
        &tenant,
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(namespace["metadata"]["labels"]["faas.dev/tenant"], tenant);

    let name = unique("hello");
    let manifest = gateway.hello_manifest(&name, &tenant, &[]);
    let deployed = gateway.faas_ok(&["deploy", manifest.to_str().unwrap()]);
    assert!(
        deployed.starts_with(&format!("deployed {name} (tenant {tenant}, revision 1)")),
        "{deployed}"
    );
    let resource = gateway
        .workflow(&tenant, &name)
        .expect("the deploy created it");
    let spec = &resource["spec"];
    let sha = hex::encode(Sha256::digest(faas_testing::component("hello")));
    assert_eq!(spec["functions"]["hello"]["component"]["sha256"], sha);
    assert_eq!(spec["functions"]["hello"]["config"]["greeting"], "Hello");
    assert_eq!(spec["triggers"]["http"][0]["route"], format!("/{name}"));
    assert_eq!(spec["triggers"]["http"][0]["function"], "hello");
    assert_eq!(spec["description"], "Says hello.");
    assert!(spec.get("name").is_none() && spec.get("tenant").is_none());
    let managers: Vec<&str> = resource["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|field| field["manager"].as_str())
        .collect();
    assert!(managers.contains(&"faas-gateway"), "{managers:?}");
    assert_eq!(generation(&resource), 1);

    // A changed manifest updates the resource: a new generation, the new spec.
    let changed = gateway.hello_manifest(
        &name,
        &tenant,
        &[
            ("Says hello.", "Says hello again."),
            ("\"Hello\"", "\"Hi\""),
        ],
    );
    let redeployed = gateway.faas_ok(&["deploy", changed.to_str().unwrap()]);
    assert!(
        redeployed.starts_with(&format!("deployed {name} (tenant {tenant}, revision 2)")),
        "{redeployed}"
    );
    let resource = gateway.workflow(&tenant, &name).unwrap();
    assert_eq!(generation(&resource), 2);
    assert_eq!(resource["spec"]["description"], "Says hello again.");
    assert_eq!(
        resource["spec"]["functions"]["hello"]["config"]["greeting"],
        "Hi"
    );

    // The same manifest again changes nothing.
    let again = gateway.faas_ok(&["deploy", changed.to_str().unwrap()]);
    assert!(again.starts_with(&format!("unchanged {name}")), "{again}");
    assert_eq!(generation(&gateway.workflow(&tenant, &name).unwrap()), 2);

    // `faas rm` returns once the operator let the resource go.
    gateway.faas_ok(&["rm", &name]);
    assert!(gateway.workflow(&tenant, &name).is_none());
    let output = gateway.faas_as(TOKEN, &["rm", &name]);
    assert!(!output.status.success());
    assert!(
        stderr_of(&output).contains("HTTP 404"),
        "{}",
        stderr_of(&output)
    );

    // The deploy's upload made the component the tenant's to name by digest.
    assert!(gateway.has_component_of(&tenant, &sha));

    // Removing the tenant leaves its namespace, and says so.
    let removed = gateway.faas_ok(&["tenant", "rm", &tenant]);
    assert!(
        removed.contains(&format!("namespace `{tenant}` is left in place")),
        "{removed}"
    );
    gateway
        .plane
        .kubectl_ok(["get", "namespace", &tenant, "-o", "name"]);
    // A tenant created again under its name (perhaps for someone else) does not
    // inherit the removed one's components: a Workflow of it naming that digest
    // alone would run the removed tenant's code.
    gateway.faas_ok(&["tenant", "create", &tenant]);
    assert!(!gateway.has_component_of(&tenant, &sha));
}

#[test]
fn a_tenant_token_cannot_deploy_into_another_tenants_namespace() {
    let gateway = KubeGateway::start();
    let own = gateway.create_tenant("own");
    let other = gateway.create_tenant("other");
    let issued: Value =
        serde_json::from_str(&gateway.faas_ok(&["token", "create", &own, "-o", "json"])).unwrap();
    let token = issued["secret"].as_str().expect("a token secret");

    // The other tenant's workflow, deployed by the operator.
    let theirs = unique("theirs");
    gateway.faas_ok(&[
        "deploy",
        gateway
            .hello_manifest(&theirs, &other, &[])
            .to_str()
            .unwrap(),
    ]);

    // A manifest naming the other tenant, with this tenant's token: refused.
    let name = unique("intruder");
    let manifest = gateway.hello_manifest(&name, &other, &[]);
    let output = gateway.faas_as(token, &["deploy", manifest.to_str().unwrap()]);
    assert!(!output.status.success(), "{}", stdout_of(&output));
    assert!(
        stderr_of(&output).contains("HTTP 403"),
        "{}",
        stderr_of(&output)
    );
    // Taking over the other tenant's workflow name from its own namespace: refused.
    let takeover = gateway.hello_manifest(&theirs, &own, &[("route = \"/", "route = \"/x")]);
    let output = gateway.faas_as(token, &["deploy", takeover.to_str().unwrap()]);
    assert!(!output.status.success(), "{}", stdout_of(&output));
    assert!(
        stderr_of(&output).contains("belongs to another tenant"),
        "{}",
        stderr_of(&output)
    );
    // And the other tenant's route: refused too.
    let route_thief = unique("thief");
    let manifest = gateway.hello_manifest(
        &route_thief,
        &own,
        &[(
            &format!("route = \"/{route_thief}\""),
            &format!("route = \"/{theirs}\""),
        )],
    );
    let output = gateway.faas_as(token, &["deploy", manifest.to_str().unwrap()]);
    assert!(!output.status.success(), "{}", stdout_of(&output));
    assert!(
        stderr_of(&output).contains("already served by another tenant"),
        "{}",
        stderr_of(&output)
    );

    assert_eq!(gateway.workflows(&other), vec![theirs.clone()]);
    let resource = gateway.workflow(&other, &theirs).unwrap();
    assert_eq!(
        generation(&resource),
        1,
        "the other tenant's spec is untouched"
    );
    assert!(gateway.workflows(&own).is_empty());
    // A tenant token cannot remove the other tenant's workflow either: it is absent
    // to it.
    let output = gateway.faas_as(token, &["rm", &theirs]);
    assert!(
        stderr_of(&output).contains("HTTP 404"),
        "{}",
        stderr_of(&output)
    );
    assert!(gateway.workflow(&other, &theirs).is_some());

    // The tenant's own deploy (the manifest may leave the tenant out) goes into its
    // own namespace.
    let mine = unique("mine");
    let manifest = gateway.hello_manifest(&mine, &own, &[(&format!("tenant = \"{own}\""), "")]);
    let output = gateway.faas_as(token, &["deploy", manifest.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(gateway.workflows(&own), vec![mine]);
}

#[test]
fn what_the_gateway_refuses_never_reaches_the_cluster() {
    let gateway = KubeGateway::start();
    let tenant = gateway.create_tenant("strict");
    let name = unique("bad");

    // A bad manifest through the CLI: the file, line and field, as today.
    let manifest = gateway.hello_manifest(
        &name,
        &tenant,
        &[("function = \"hello\"", "function = \"nope\"")],
    );
    let output = gateway.faas_as(TOKEN, &["deploy", manifest.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = stderr_of(&output);
    assert!(
        stderr.contains(manifest.to_str().unwrap()) && stderr.contains("nope"),
        "{stderr}"
    );

    // The same manifest straight to the admin API: the gateway's own check.
    let text = std::fs::read_to_string(&manifest).unwrap();
    let response = gateway.post_deploy(TOKEN, &hello_body(&text));
    assert_eq!(response.status(), 400);
    let error = error_of(response);
    assert_eq!(error["kind"], "manifest");
    assert_eq!(error["field"], "triggers.http[0].function");
    assert!(error["line"].as_u64().unwrap() > 0, "{error}");

    // A component that is not a WebAssembly component.
    let good = gateway.hello_manifest(&name, &tenant, &[]);
    let text = std::fs::read_to_string(&good).unwrap();
    let response = gateway.post_deploy(TOKEN, &Upload::of(&text, &[("hello", b"not wasm")]));
    assert_eq!(response.status(), 400);
    let error = error_of(response);
    assert_eq!(error["kind"], "component", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("hello"),
        "{error}"
    );
    // A function without its component.
    let response = gateway.post_deploy(TOKEN, &Upload::of(&text, &[]));
    assert_eq!(response.status(), 400);
    let error = error_of(response);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("no component was uploaded"),
        "{error}"
    );

    assert!(gateway.workflows(&tenant).is_empty());

    // A spec the operator marks Degraded: the deploy fails with its reason.
    let degraded = gateway.hello_manifest(&name, &tenant, &[("Says hello.", DEGRADE)]);
    let text = std::fs::read_to_string(&degraded).unwrap();
    let response = gateway.post_deploy(TOKEN, &hello_body(&text));
    assert_eq!(response.status(), 422);
    let error = error_of(response);
    assert_eq!(error["kind"], "degraded");
    assert_eq!(error["reason"], DEGRADED_REASON);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("spec.description"),
        "{error}"
    );
    // A resource the operator refused is still removed by `faas rm`.
    gateway.faas_ok(&["rm", &name]);
    assert!(gateway.workflows(&tenant).is_empty());

    // The good manifest deploys.
    gateway.faas_ok(&["deploy", good.to_str().unwrap()]);
    assert_eq!(gateway.workflows(&tenant), vec![name.clone()]);

    // The tenant's workflow quota counts its resources.
    gateway.faas_ok(&["tenant", "set", &tenant, "--max-workflows", "1"]);
    let second = unique("second");
    let manifest = gateway.hello_manifest(&second, &tenant, &[]);
    let output = gateway.faas_as(TOKEN, &["deploy", manifest.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        stderr_of(&output).contains("max_workflows = 1"),
        "{}",
        stderr_of(&output)
    );
    assert_eq!(gateway.workflows(&tenant), vec![name]);
}

#[test]
fn a_tenant_without_a_namespace_cannot_deploy() {
    let gateway = KubeGateway::start();
    let tenant = gateway.create_tenant("gone");
    gateway.plane.kubectl_ok([
        "delete",
        "namespace",
        &tenant,
        "--wait=true",
        "--timeout=60s",
    ]);
    let name = unique("homeless");
    let manifest = gateway.hello_manifest(&name, &tenant, &[]);
    let started = Instant::now();
    let output = gateway.faas_as(TOKEN, &["deploy", manifest.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = stderr_of(&output);
    assert!(
        stderr.contains(&format!("tenant `{tenant}` has no namespace `{tenant}`")),
        "{stderr}"
    );
    assert!(stderr.contains("HTTP 409"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "it failed at once"
    );
}

#[test]
fn a_deploy_no_operator_observes_fails_after_the_deploy_timeout() {
    let gateway = KubeGateway::start_with_timeout("2");
    // A tenant the stand-in operator does not watch.
    let tenant = unique("unwatched");
    gateway.faas_ok(&["tenant", "create", &tenant]);
    let name = unique("waiting");
    let manifest = gateway.hello_manifest(&name, &tenant, &[]);
    let started = Instant::now();
    let output = gateway.faas_as(TOKEN, &["deploy", manifest.to_str().unwrap()]);
    let took = started.elapsed();
    assert!(!output.status.success());
    let stderr = stderr_of(&output);
    assert!(
        stderr.contains(&format!(
            "the operator did not observe workflow `{tenant}/{name}` within 2s"
        )) && stderr.contains("HTTP 504"),
        "{stderr}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
    // The resource was applied: the operator takes it up when it runs.
    assert_eq!(gateway.workflows(&tenant), vec![name]);
}

#[test]
fn a_workflow_refused_in_another_namespace_claims_no_name_or_route() {
    // The gateway checked a deploy's name and routes against every Workflow in the
    // cluster, refused ones too: one a tenant applied with kubectl in its own
    // namespace, naming another tenant's workflow or route, blocked that tenant's
    // own next deploy, though the operator refused it.
    let gateway = KubeGateway::start();
    let victim = gateway.create_tenant("victim");
    let squatter = gateway.create_tenant("squatter");
    let shop = unique("shop");
    let manifest = gateway.hello_manifest(&shop, &victim, &[]);
    gateway.faas_ok(&["deploy", manifest.to_str().unwrap()]);
    for (name, route) in [
        (shop.clone(), "/elsewhere".to_owned()),
        (unique("zzz"), format!("/{shop}")),
    ] {
        gateway.kubectl_workflow("apply", &squatter, &name, DEGRADE, &route);
        // Refused by the (stand-in) operator.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !gateway
            .workflow(&squatter, &name)
            .and_then(|resource| resource["status"]["conditions"].as_array().cloned())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c["type"] == "Degraded" && c["status"] == "True")
            })
        {
            assert!(Instant::now() < deadline, "{name} never marked Degraded");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // The victim's next version of its own workflow deploys.
    let changed = gateway.hello_manifest(&shop, &victim, &[("Says hello.", "Says hello again.")]);
    let output = gateway.faas_as(TOKEN, &["deploy", changed.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(generation(&gateway.workflow(&victim, &shop).unwrap()), 2);
}

#[test]
fn a_tenants_many_large_workflows_are_not_read_again_for_every_deploy() {
    // The gateway listed and validated every Workflow of the cluster for each deploy
    // (to check its name and routes against them): a tenant holding many large
    // Workflows made every tenant's deploys cost as much, and loaded the API server
    // with each. It now follows them with a watch.
    let gateway = KubeGateway::start();
    let hoarder = gateway.create_tenant("hoarder");
    let victim = gateway.create_tenant("victim");
    let description = "x".repeat(512 << 10);
    let hoard: Vec<String> = (0..6).map(|_| unique("hoard")).collect();
    for name in &hoard {
        // `create`: `apply` would keep a second copy in an annotation.
        gateway.kubectl_workflow("create", &hoarder, name, &description, &format!("/{name}"));
    }
    let listed_before = cluster_wide_workflow_lists(gateway.plane);
    let shop = unique("shop");
    for version in 0..4 {
        let manifest = gateway.hello_manifest(
            &shop,
            &victim,
            &[("Says hello.", &format!("Says hello, version {version}."))],
        );
        gateway.faas_ok(&["deploy", manifest.to_str().unwrap()]);
    }
    let listed = cluster_wide_workflow_lists(gateway.plane) - listed_before;
    // A watch the API server ended may be listed again; a list per deploy was 4.
    assert!(
        listed <= 1,
        "{listed} lists of every Workflow for 4 deploys"
    );
    // What the hoarder's Workflows claim still counts.
    let thief = unique("thief");
    let manifest = gateway.hello_manifest(
        &thief,
        &victim,
        &[(
            &format!("route = \"/{thief}\""),
            &format!("route = \"/{}\"", hoard[0]),
        )],
    );
    let output = gateway.faas_as(TOKEN, &["deploy", manifest.to_str().unwrap()]);
    assert!(!output.status.success(), "{}", stdout_of(&output));
    assert!(
        stderr_of(&output).contains("already served by another tenant"),
        "{}",
        stderr_of(&output)
    );
    assert_eq!(gateway.workflows(&victim), vec![shop]);
}

/// How many times the API server has listed Workflows across all namespaces, by its
/// own count (`apiserver_request_total`).
fn cluster_wide_workflow_lists(plane: &ControlPlane) -> u64 {
    let metrics = plane.kubectl_ok(["get", "--raw", "/metrics"]);
    metrics
        .lines()
        .filter(|line| {
            line.starts_with("apiserver_request_total{")
                && line.contains("resource=\"workflows\"")
                && line.contains("scope=\"cluster\"")
                && line.contains("verb=\"LIST\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The ResourceQuota the gateway keeps in `namespace`: its hard count of Workflows, if
/// it exists, and whether the quota controller has taken that count in (until then
/// the API server refuses every Workflow create in the namespace).
fn workflow_quota(plane: &ControlPlane, namespace: &str) -> Option<(String, bool)> {
    let output = plane.kubectl_ok([
        "get",
        "resourcequota",
        "faas-workflows",
        "-n",
        namespace,
        "-o",
        "json",
        "--ignore-not-found",
    ]);
    if output.trim().is_empty() {
        return None;
    }
    let quota: Value = serde_json::from_str(&output).expect("kubectl prints JSON");
    let count = "count/workflows.faas.dev";
    let hard = quota["spec"]["hard"][count].as_str()?.to_owned();
    let counted = quota["status"]["hard"][count].as_str() == Some(hard.as_str())
        && quota["status"]["used"][count].is_string();
    Some((hard, counted))
}

#[test]
fn a_tenants_namespace_holds_no_more_workflow_resources_than_its_quota() {
    // The operator refuses a Workflow past the tenant's quota, but it caches and
    // reconciles every resource: a tenant allowed to `kubectl apply` in its namespace
    // could create them by the thousand and take the operator's memory and time from
    // every other tenant. The API server must refuse them before they are stored.
    let gateway = KubeGateway::start();
    let hoarder = gateway.create_tenant("hoarder");
    let neighbour = gateway.create_tenant("neighbour");
    let default = workflow_quota(gateway.plane, &neighbour).expect("a new tenant's quota");
    assert!(default.0.parse::<u64>().unwrap() > 0, "{default:?}");
    // Right after `tenant create`, the namespace takes Workflows (the gateway waited
    // for the quota controller to count them).
    let first = unique("first");
    let manifest = gateway.hello_manifest(&first, &neighbour, &[]);
    gateway.faas_ok(&["deploy", manifest.to_str().unwrap()]);
    gateway.faas_ok(&["tenant", "set", &hoarder, "--max-workflows", "2"]);
    let wait_counted = |max: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while workflow_quota(gateway.plane, &hoarder) != Some((max.to_owned(), true)) {
            assert!(
                Instant::now() < deadline,
                "quota never {max}: {:?}",
                workflow_quota(gateway.plane, &hoarder)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_counted("2");

    let sha = "1".repeat(64);
    let apply = |name: &str| {
        let yaml = gateway.dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &yaml,
            format!(
                "apiVersion: faas.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: {name}\n  \
                 namespace: {hoarder}\nspec:\n  functions:\n    hello:\n      component:\n        \
                 sha256: \"{sha}\"\n"
            ),
        )
        .unwrap();
        gateway
            .plane
            .kubectl(["apply".as_ref(), "-f".as_ref(), yaml.as_os_str()])
    };
    for i in 0..2 {
        let output = apply(&format!("hoard-{i}"));
        assert!(output.status.success(), "{}", stderr_of(&output));
    }
    let refused = apply("hoard-2");
    assert!(!refused.status.success());
    assert!(
        stderr_of(&refused).contains("exceeded quota: faas-workflows"),
        "{}",
        stderr_of(&refused)
    );
    // Through the gateway, the same limit (the gateway counts the resources itself).
    let manifest = gateway.hello_manifest(&unique("more"), &hoarder, &[]);
    let output = gateway.faas_as(TOKEN, &["deploy", manifest.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        stderr_of(&output).contains("max_workflows = 2"),
        "{}",
        stderr_of(&output)
    );
    assert_eq!(gateway.workflows(&hoarder).len(), 2);

    // The neighbour deploys meanwhile.
    let shop = unique("shop");
    let manifest = gateway.hello_manifest(&shop, &neighbour, &[]);
    gateway.faas_ok(&["deploy", manifest.to_str().unwrap()]);
    let mut expected = vec![first, shop];
    expected.sort();
    assert_eq!(gateway.workflows(&neighbour), expected);

    // A raised quota raises the bound; no quota, no bound.
    gateway.faas_ok(&["tenant", "set", &hoarder, "--max-workflows", "3"]);
    wait_counted("3");
    let output = apply("hoard-2");
    assert!(output.status.success(), "{}", stderr_of(&output));
    gateway.faas_ok(&["tenant", "set", &hoarder, "--max-workflows", "0"]);
    assert_eq!(workflow_quota(gateway.plane, &hoarder), None);
    let output = apply("hoard-3");
    assert!(output.status.success(), "{}", stderr_of(&output));
}

#[test]
fn the_api_server_refuses_a_workflow_with_more_items_or_a_longer_route_than_a_workflow_may_declare()
{
    // The operator's validator refuses such a spec too, but only after the resource is
    // stored and cached: the CRD's own bounds keep it out of etcd.
    let plane = ControlPlane::shared();
    install_crd(plane);
    let namespace = unique("crowded");
    plane.kubectl_ok(["create", "namespace", &namespace]);
    let sha = "1".repeat(64);
    let dir = faas_testing::temp_dir();
    let apply_with = |name: &str, functions: usize, route: &str| {
        let functions: String = (0..functions)
            .map(|i| format!("    f{i}:\n      component:\n        sha256: \"{sha}\"\n"))
            .collect();
        let yaml = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &yaml,
            format!(
                "apiVersion: faas.dev/v1alpha1\nkind: Workflow\nmetadata:\n  name: {name}\n  \
                 namespace: {namespace}\nspec:\n  functions:\n{functions}  triggers:\n    \
                 http:\n      - route: \"{route}\"\n        function: f0\n"
            ),
        )
        .unwrap();
        plane.kubectl(["apply".as_ref(), "-f".as_ref(), yaml.as_os_str()])
    };
    let apply = |name: &str, functions: usize| apply_with(name, functions, "/crowded");
    // A route past the length a manifest may declare (one of a megabyte made every
    // later deploy's route check take seconds) is refused as well.
    let long = format!("/{}", "r".repeat(faas_workflow::MAX_ROUTE_LEN));
    let output = apply_with("long", 1, &long);
    assert!(!output.status.success());
    let stderr = stderr_of(&output);
    assert!(
        stderr.contains("spec.triggers.http[0].route")
            && stderr.contains(&faas_workflow::MAX_ROUTE_LEN.to_string()),
        "{stderr}"
    );
    let most = faas_workflow::MAX_FUNCTIONS;
    let output = apply("most", most);
    assert!(output.status.success(), "{}", stderr_of(&output));
    let output = apply("more", most + 1);
    assert!(!output.status.success());
    let stderr = stderr_of(&output);
    assert!(
        stderr.contains("spec.functions") && stderr.contains(&format!("at most {most}")),
        "{stderr}"
    );
    let stored = plane.kubectl_ok([
        "get",
        "workflows",
        "-n",
        &namespace,
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    assert_eq!(stored.trim(), "most");
    plane.kubectl_ok(["delete", "namespace", &namespace, "--wait=false"]);
}

/// `faas rm` in Kubernetes mode waits until the operator has removed the Workflow, up
/// to the deploy timeout, and it held the gateway's deploy lock all that time: a
/// Workflow the operator could not let go (a tenant may edit its own Workflows, and add
/// a finalizer) held up every other tenant's deploy, and every token revocation,
/// through that gateway. Mallory's removal now waits on its own.
#[test]
fn a_removal_waiting_for_the_operator_holds_up_no_other_tenants_deploy() {
    // Mallory's removal waits up to the deploy timeout: long enough here that the
    // victim's deploy ends first even on a loaded machine (with 20 s, CI-79's did not).
    let gateway = KubeGateway::start_with_timeout("120");
    let mallory = gateway.create_tenant("mallory");
    let kept = unique("kept");
    let manifest = gateway.hello_manifest(&kept, &mallory, &[]);
    gateway.faas_ok(&["deploy", manifest.to_str().unwrap()]);
    let victim = gateway.create_tenant("victim");
    gateway.operator.unwatch(&mallory);
    let (url, name) = (gateway.url.clone(), kept.clone());
    let removal = std::thread::spawn(move || faas_as(&url, TOKEN, &["rm", &name]));
    let deleting = |g: &KubeGateway| {
        g.workflow(&mallory, &kept)
            .is_some_and(|w| !w["metadata"]["deletionTimestamp"].is_null())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !deleting(&gateway) {
        assert!(
            std::time::Instant::now() < deadline,
            "the removal never began"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let name = unique("served");
    let manifest = gateway.hello_manifest(&name, &victim, &[]);
    let deployed = gateway.faas_ok(&["deploy", manifest.to_str().unwrap()]);
    assert!(
        deployed.starts_with(&format!("deployed {name}")),
        "{deployed}"
    );
    if removal.is_finished() {
        let ended = removal.join().unwrap();
        panic!(
            "mallory's removal ended before the victim's deploy did (did the deploy wait \
             for it to give up?): {}",
            stderr_of(&ended)
        );
    }
    // Let go, mallory's Workflow goes and its removal ends.
    gateway.operator.watch(&mallory);
    let removed = removal.join().unwrap();
    assert!(removed.status.success(), "{}", stderr_of(&removed));
    assert!(gateway.workflow(&mallory, &kept).is_none());
}
