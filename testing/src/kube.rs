//! A real Kubernetes control plane for tests: etcd, kube-apiserver (TLS, RBAC, its own
//! test CA), kube-controller-manager, kube-scheduler and kwok (a fake kubelet) with one
//! fake Node, on free loopback ports in a temporary directory.
//!
//! The binaries come from `testing/k8s/install-tools` (`./test` runs it). One control
//! plane is started per test binary ([`ControlPlane::shared`]); tests isolate themselves
//! by namespace ([`ControlPlane::namespace`]). Its processes die with the test process,
//! even when it panics or is killed with SIGKILL.
//!
//! kwok runs no containers: pods are scheduled onto the fake node and go Running/Ready
//! with a pod IP from the loopback range (127.1.0.0/16), so a test can stand in for the
//! kubelet by starting a real process per ready pod on that IP
//! ([`ControlPlane::watch_ready_pods`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::fs;
use std::io::{ErrorKind, Write as _};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::stream::BoxStream;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvFromSource, EnvVar, Namespace, Pod, Secret, ServiceAccount,
};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};

/// The pinned versions, read by the install script too.
const VERSIONS_ENV: &str = include_str!("../k8s/versions.env");

/// The kwok node every pod is scheduled onto.
pub const NODE_NAME: &str = "faas-kwok-node";
/// The range kwok takes pod IPs from: loopback, so a process a test starts for a pod
/// can listen on the pod's IP.
pub const POD_CIDR: &str = "127.1.0.1/16";

/// How long kube-apiserver may take to report /readyz (cold disk caches included).
const APISERVER_TIMEOUT: Duration = Duration::from_secs(90);
/// How long the other components may take to create the default ServiceAccount and
/// make the node Ready once the apiserver is up.
const COMPONENTS_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a new namespace may take to get its default ServiceAccount.
const NAMESPACE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a starting component is probed.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Lines of a component's log shown when it fails.
const LOG_TAIL_LINES: usize = 40;
/// Prefix of the temporary directories (followed by the owning process id).
const DIR_PREFIX: &str = "faas-k8s-";
/// Starts tried, with new ports each, while a component finds its port taken.
const START_ATTEMPTS: usize = 3;

/// The Kubernetes version the tools are built at (`K8S_VERSION` in versions.env).
pub fn kubernetes_version() -> &'static str {
    crate::env_file_value(VERSIONS_ENV, "K8S_VERSION")
        .expect("testing/k8s/versions.env names K8S_VERSION")
}

/// Where `testing/k8s/install-tools` puts the tools: `$FAAS_K8S_TOOLS` if set, else
/// `${FAAS_TOOLS_DIR:-$HOME/.cache/faas-tools}/k8s-v<version>`. Holds `bin/`, the kwok
/// stages (`kwok-stages/`) and kubeconform's schemas (`schemas/`).
pub fn tools_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FAAS_K8S_TOOLS") {
        return PathBuf::from(dir);
    }
    crate::tools_base_dir().join(format!("k8s-v{}", kubernetes_version()))
}

/// The path of an installed tool (`kubectl`, `helm`, `kubeconform`, `kwok`, ...).
///
/// # Panics
/// If it is not installed, with a message saying how to install it.
pub fn tool(name: &str) -> PathBuf {
    let path = tools_dir().join("bin").join(name);
    assert!(
        path.is_file(),
        "{} is missing: run testing/k8s/install-tools (or ./test) to install the Kubernetes \
         test tools",
        path.display()
    );
    path
}

/// kubeconform's `-schema-location` for the offline schemas install-tools wrote.
pub fn kubeconform_schema_location() -> String {
    format!(
        "{}/{{{{ .NormalizedKubernetesVersion }}}}-standalone{{{{ .StrictSuffix }}}}/\
         {{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
        tools_dir().join("schemas").display()
    )
}

/// The Kubernetes version of those schemas (`K8S_SCHEMA_VERSION` in versions.env), for
/// kubeconform's `-kubernetes-version`.
pub fn schema_version() -> &'static str {
    crate::env_file_value(VERSIONS_ENV, "K8S_SCHEMA_VERSION")
        .expect("testing/k8s/versions.env names K8S_SCHEMA_VERSION")
}

/// A running control plane. See the module documentation.
#[derive(Debug)]
pub struct ControlPlane {
    dir: PathBuf,
    server: String,
    kubeconfig: PathBuf,
    components: Mutex<Vec<Component>>,
    startup: Duration,
}

/// One process of the control plane and where its output goes.
#[derive(Debug)]
struct Component {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

/// Only an attempt that failed to start is dropped (the shared plane lives as long as
/// the test binary): its components are stopped, so the next attempt runs alone.
impl Drop for ControlPlane {
    fn drop(&mut self) {
        let components = self.components.get_mut().unwrap_or_else(|e| e.into_inner());
        for component in components.iter_mut().rev() {
            crate::stop(&mut component.child);
        }
    }
}

impl ControlPlane {
    /// The control plane of this test binary, started by the first call (about 15 s).
    ///
    /// # Panics
    /// If it cannot start (tools missing, a component failing); the message names the
    /// component and shows the end of its log. Later calls panic with the same message
    /// rather than trying again.
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
        match SHARED.get_or_init(start_supervised) {
            Ok(plane) => plane,
            Err(failure) => panic!("the Kubernetes control plane did not start: {failure}"),
        }
    }

    /// The admin kubeconfig (a client certificate in group `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The apiserver's URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The temporary directory holding the certificates, kubeconfigs, etcd's data and
    /// the components' logs (`logs/<component>.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long the start took (from the first call to everything being ready).
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// A client logged in as the admin. Each call makes a new one, bound to the calling
    /// test's Tokio runtime.
    ///
    /// # Panics
    /// If the kubeconfig cannot be read or the client cannot be built.
    pub async fn kube_client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .expect("reading the control plane's kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("loading the control plane's kubeconfig");
        kube::Client::try_from(config).expect("building a Kubernetes client")
    }

    /// Creates a namespace named `<prefix>-<random suffix>` and waits until its default
    /// ServiceAccount exists (pods are refused before). Returns its name.
    ///
    /// # Panics
    /// If the apiserver refuses, or the ServiceAccount does not appear within 30 s.
    pub async fn namespace(&self, prefix: &str) -> String {
        let client = self.kube_client().await;
        let namespace = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{prefix}-")),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let created = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|err| panic!("creating a namespace {prefix}-*: {err}"));
        let name = created
            .metadata
            .name
            .expect("a created namespace has a name");
        let accounts = Api::<ServiceAccount>::namespaced(client, &name);
        let deadline = Instant::now() + NAMESPACE_TIMEOUT;
        loop {
            match accounts.get_opt("default").await {
                Ok(Some(_)) => return name,
                Ok(None) => {}
                Err(err) => panic!("reading the default ServiceAccount of {name}: {err}"),
            }
            if Instant::now() > deadline {
                panic!(
                    "namespace {name} got no default ServiceAccount within {NAMESPACE_TIMEOUT:?} \
                     (is kube-controller-manager running? {})",
                    self.component_report("kube-controller-manager")
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// A `Command` for an installed tool (`kubectl`, `helm`, ...) with `KUBECONFIG`
    /// pointing at the admin kubeconfig.
    pub fn command(&self, tool_name: &str) -> Command {
        let mut command = Command::new(tool(tool_name));
        command.env("KUBECONFIG", &self.kubeconfig);
        command
    }

    /// Runs the installed kubectl with `args` against this control plane.
    ///
    /// # Panics
    /// If kubectl cannot be started.
    pub fn kubectl<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        kubectl_output(&self.kubeconfig, args, None)
    }

    /// Runs kubectl with `args` and returns its stdout.
    ///
    /// # Panics
    /// If it fails, with its stderr.
    pub fn kubectl_ok<I, S>(&self, args: I) -> String
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let output = self.kubectl(&args);
        assert!(
            output.status.success(),
            "kubectl {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// A kubeconfig that authenticates as ServiceAccount `account` of `namespace` (a
    /// token from the TokenRequest API, valid two hours), as a pod running under that
    /// account would: so the API server's RBAC decides what a process started with it
    /// may do. Written into the control plane's directory.
    ///
    /// # Panics
    /// If the account does not exist or kubectl fails.
    pub fn service_account_kubeconfig(&self, namespace: &str, account: &str) -> PathBuf {
        let token = self.kubectl_ok([
            "create",
            "token",
            account,
            "--namespace",
            namespace,
            "--duration",
            "2h",
        ]);
        let path = self
            .dir
            .join(format!("sa-{namespace}-{account}.kubeconfig"));
        std::fs::copy(&self.kubeconfig, &path).expect("copying the kubeconfig");
        let config = path.to_str().expect("a UTF-8 path");
        let user = format!("{namespace}-{account}");
        // A user of its own: a client certificate would win over the token.
        self.kubectl_ok([
            "--kubeconfig",
            config,
            "config",
            "set-credentials",
            &user,
            &format!("--token={}", token.trim()),
        ]);
        self.kubectl_ok([
            "--kubeconfig",
            config,
            "config",
            "set-context",
            "--current",
            &format!("--user={user}"),
        ]);
        path
    }

    /// Whether `component` (`etcd`, `kube-apiserver`, `kube-controller-manager`,
    /// `kube-scheduler`, `kwok`) is still running, and the end of its log: for a test's
    /// failure message.
    pub fn component_report(&self, component: &str) -> String {
        let mut components = self.components.lock().unwrap_or_else(|e| e.into_inner());
        match components.iter_mut().find(|c| c.name == component) {
            Some(c) => describe(c),
            None => format!("no component named {component}"),
        }
    }

    /// The process ids of the components, by name.
    pub fn component_pids(&self) -> Vec<(&'static str, u32)> {
        let components = self.components.lock().unwrap_or_else(|e| e.into_inner());
        components.iter().map(|c| (c.name, c.child.id())).collect()
    }

    /// Watches the pods of `namespace` matching `label_selector` (e.g. `app=worker`, or
    /// empty for all) and reports each as it becomes Ready (with its containers' env
    /// resolved as a kubelet would) and as it goes away. See [`PodWatch`].
    pub async fn watch_ready_pods(&self, namespace: &str, label_selector: &str) -> PodWatch {
        let client = self.kube_client().await;
        let pods = Api::<Pod>::namespaced(client.clone(), namespace);
        let config = watcher::Config::default().labels(label_selector);
        PodWatch {
            client,
            namespace: namespace.to_owned(),
            events: watcher(pods, config).default_backoff().boxed(),
            ready: BTreeMap::new(),
            listed: None,
            pending: VecDeque::new(),
        }
    }
}

/// Starts the control plane on a thread that never ends: PR_SET_PDEATHSIG fires when the
/// *thread* that spawned a child exits, so the components must not be spawned from a
/// test's thread, which ends with its test.
fn start_supervised() -> Result<ControlPlane, String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new()
        .name("k8s-control-plane".into())
        .spawn(move || {
            let _ = sender.send(start_with_free_ports());
            loop {
                std::thread::park();
            }
        })
        .map_err(|err| format!("spawning the control plane's thread: {err}"))?;
    receiver
        .recv()
        .map_err(|_| "the control plane's thread ended without an answer".to_owned())?
}

/// [`start`], again with new ports while a component could not bind its own: the ports
/// are picked free and released before the components bind them, and meanwhile the
/// kernel may give one out as the source port of a connection (the components open
/// many to each other). The failed attempt's components are stopped when it is dropped.
fn start_with_free_ports() -> Result<ControlPlane, String> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(failure)
                if failure.contains("address already in use") && attempt < START_ATTEMPTS =>
            {
                eprintln!(
                    "the control plane lost a port to another socket, starting again: {failure}"
                );
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

fn start() -> Result<ControlPlane, String> {
    let began = Instant::now();
    let bin = tools_dir().join("bin");
    for name in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
        "kubectl",
    ] {
        if !bin.join(name).is_file() {
            return Err(format!(
                "{} is missing: run testing/k8s/install-tools (or ./test) to install the \
                 Kubernetes test tools",
                bin.join(name).display()
            ));
        }
    }
    remove_stale_dirs();
    let dir = tempfile::Builder::new()
        .prefix(&format!("{DIR_PREFIX}{}-", std::process::id()))
        .tempdir()
        .map_err(|err| format!("creating a temporary directory: {err}"))?
        .keep();
    let pki = Pki::write(&dir).map_err(|err| format!("writing the test PKI: {err}"))?;
    let ports = Ports::pick();
    let server = format!("https://127.0.0.1:{}", ports.apiserver);
    let kubeconfig = dir.join("admin.kubeconfig");
    let write_kubeconfig = |path: &Path, identity: &Identity| {
        fs::write(path, kubeconfig_json(&server, &pki.ca_pem, identity))
            .map_err(|err| format!("writing {}: {err}", path.display()))
    };
    write_kubeconfig(&kubeconfig, &pki.admin)?;
    let controller_manager_kubeconfig = dir.join("controller-manager.kubeconfig");
    write_kubeconfig(&controller_manager_kubeconfig, &pki.controller_manager)?;
    let scheduler_kubeconfig = dir.join("scheduler.kubeconfig");
    write_kubeconfig(&scheduler_kubeconfig, &pki.scheduler)?;

    let mut plane = ControlPlane {
        dir: dir.clone(),
        server,
        kubeconfig,
        components: Mutex::new(Vec::new()),
        startup: Duration::ZERO,
    };
    let path = |name: &str| dir.join(name).display().to_string();
    let etcd_client = format!("http://127.0.0.1:{}", ports.etcd_client);
    let etcd_peer = format!("http://127.0.0.1:{}", ports.etcd_peer);
    plane.spawn(
        "etcd",
        Command::new("etcd").args([
            "--name=faas-test",
            &format!("--data-dir={}", path("etcd")),
            &format!("--listen-client-urls={etcd_client}"),
            &format!("--advertise-client-urls={etcd_client}"),
            &format!("--listen-peer-urls={etcd_peer}"),
            &format!("--initial-advertise-peer-urls={etcd_peer}"),
            &format!("--initial-cluster=faas-test={etcd_peer}"),
            "--logger=zap",
        ]),
    )?;
    plane.spawn(
        "kube-apiserver",
        Command::new(bin.join("kube-apiserver")).args([
            &format!("--etcd-servers={etcd_client}"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            &format!("--secure-port={}", ports.apiserver),
            &format!("--cert-dir={}", path("apiserver-certs")),
            &format!("--tls-cert-file={}", path("pki/apiserver.crt")),
            &format!("--tls-private-key-file={}", path("pki/apiserver.key")),
            &format!("--client-ca-file={}", path("pki/ca.crt")),
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            &format!("--service-account-key-file={}", path("pki/sa.pub")),
            &format!("--service-account-signing-key-file={}", path("pki/sa.key")),
            "--service-cluster-ip-range=10.0.0.0/24",
            "--profiling=false",
            // Watch streams (WatchList) need etcd's RequestWatchProgress, which Debian's
            // etcd 3.4 lacks: kwok's watches then ended at once and it saw pods only at
            // its relists, 0 to 15 s late. Off, clients fall back to list and watch.
            "--feature-gates=WatchList=false",
        ]),
    )?;
    plane.wait_for("kube-apiserver", APISERVER_TIMEOUT, &["etcd"], || {
        plane.kubectl(["get", "--raw=/readyz"]).status.success()
    })?;
    let apiserver_ready = began.elapsed();
    // The chart's CRDs before the controllers, as a cluster has them before its first
    // tenant: the quota controller discovers resource types every 30 s, so a Workflow
    // type it has not seen yet would leave each tenant's Workflow quota uncounted (and
    // every Workflow create refused) for up to that long.
    install_chart_crds(&plane)?;

    let common = |kubeconfig: &Path, port: u16| -> Vec<String> {
        vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            // One instance: a leader election only delays the start.
            "--leader-elect=false".into(),
        ]
    };
    plane.spawn(
        "kube-controller-manager",
        Command::new(bin.join("kube-controller-manager"))
            .args(common(
                &controller_manager_kubeconfig,
                ports.controller_manager,
            ))
            .args([
                &format!("--cert-dir={}", path("controller-manager-certs")),
                &format!("--service-account-private-key-file={}", path("pki/sa.key")),
                &format!("--root-ca-file={}", path("pki/ca.crt")),
                // Each controller acts as its own ServiceAccount, with the built-in
                // ClusterRoles, as in a real cluster.
                "--use-service-account-credentials=true",
                "--cluster-name=faas-test",
            ]),
    )?;
    plane.spawn(
        "kube-scheduler",
        Command::new(bin.join("kube-scheduler"))
            .args(common(&scheduler_kubeconfig, ports.scheduler)),
    )?;
    let stages = kwok_stages(&dir)?;
    plane.spawn(
        "kwok",
        Command::new(bin.join("kwok")).args([
            &format!("--kubeconfig={}", plane.kubeconfig.display()),
            &format!("--config={}", stages.display()),
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            &format!("--cidr={POD_CIDR}"),
            "--node-ip=127.1.0.1",
            // Renews the node's Lease (the heartbeat stage), as a kubelet does.
            "--node-lease-duration-seconds=40",
            &format!("--server-address=127.0.0.1:{}", ports.kwok),
        ]),
    )?;
    let node = kubectl_output(
        &plane.kubeconfig,
        ["apply", "-f", "-"],
        Some(node_json().as_bytes()),
    );
    if !node.status.success() {
        return Err(format!(
            "creating the kwok node failed: {}",
            String::from_utf8_lossy(&node.stderr)
        ));
    }
    plane.wait_for(
        "kube-controller-manager",
        COMPONENTS_TIMEOUT,
        &["kube-apiserver"],
        || {
            plane
                .kubectl(["-n", "default", "get", "serviceaccount", "default"])
                .status
                .success()
        },
    )?;
    plane.wait_for("kwok", COMPONENTS_TIMEOUT, &["kube-apiserver"], || {
        let output = plane.kubectl([
            "get",
            "node",
            NODE_NAME,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        output.status.success() && output.stdout == b"True"
    })?;
    plane.check_running("kube-scheduler")?;
    warm_up_pod_ips(&plane)?;
    plane.startup = began.elapsed();
    let startup = plane.startup;
    eprintln!(
        "faas_testing::kube: control plane up in {:.1} s (apiserver ready after {:.1} s) at {}, \
         files in {}",
        startup.as_secs_f64(),
        apiserver_ready.as_secs_f64(),
        plane.server,
        dir.display()
    );
    Ok(plane)
}

impl ControlPlane {
    /// Starts a component with its output in `logs/<name>.log`, killed when the thread
    /// that spawns it (the supervisor) ends, i.e. with the test process.
    fn spawn(&self, name: &'static str, command: &mut Command) -> Result<(), String> {
        let logs = self.dir.join("logs");
        fs::create_dir_all(&logs).map_err(|err| format!("creating {}: {err}", logs.display()))?;
        let log = logs.join(format!("{name}.log"));
        let file =
            fs::File::create(&log).map_err(|err| format!("creating {}: {err}", log.display()))?;
        let stderr = file
            .try_clone()
            .map_err(|err| format!("duplicating {}: {err}", log.display()))?;
        let parent = rustix::process::getpid();
        // SAFETY: between fork and exec the closure only makes two system calls, which
        // is async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))?;
                // The parent may have died before the line above took effect.
                if rustix::process::getppid() != Some(parent) {
                    return Err(std::io::Error::other("the test process already exited"));
                }
                Ok(())
            });
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(stderr)
            .spawn()
            .map_err(|err| match err.kind() {
                ErrorKind::NotFound if name == "etcd" => "etcd is not installed: run \
                     testing/k8s/install-tools (or apt-get install etcd-server)"
                    .to_owned(),
                _ => format!("starting {name}: {err}"),
            })?;
        self.components
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Component { name, child, log });
        Ok(())
    }

    /// Polls `ready` until it holds, failing early when `component` or one of
    /// `dependencies` exits, and with their logs when `timeout` passes.
    fn wait_for(
        &self,
        component: &str,
        timeout: Duration,
        dependencies: &[&str],
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if ready() {
                return Ok(());
            }
            for name in std::iter::once(component).chain(dependencies.iter().copied()) {
                self.check_running(name)?;
            }
            if Instant::now() > deadline {
                let mut failure = format!("{component} was not ready within {timeout:?}");
                for name in std::iter::once(component).chain(dependencies.iter().copied()) {
                    let _ = write!(failure, "\n{}", self.component_report(name));
                }
                return Err(failure);
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// `Err` with the component's log when it has exited.
    fn check_running(&self, component: &str) -> Result<(), String> {
        let mut components = self.components.lock().unwrap_or_else(|e| e.into_inner());
        let Some(c) = components.iter_mut().find(|c| c.name == component) else {
            return Ok(());
        };
        match c.child.try_wait() {
            Ok(None) => Ok(()),
            _ => Err(describe(c)),
        }
    }
}

/// Applies every CRD in the chart (`charts/faas/crds/`) and waits until each is served.
fn install_chart_crds(plane: &ControlPlane) -> Result<(), String> {
    let dir = crate::repo_root().join("charts/faas/crds");
    let output = plane.kubectl([
        "apply".as_ref(),
        "--server-side".as_ref(),
        "--force-conflicts".as_ref(),
        "-f".as_ref(),
        dir.as_os_str(),
    ]);
    let output = if output.status.success() {
        plane.kubectl([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])
    } else {
        output
    };
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "installing the chart's CRDs: {}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// "<name> is running|exited with <status>; last lines of <log>: ...".
fn describe(component: &mut Component) -> String {
    let state = match component.child.try_wait() {
        Ok(None) => "is running".to_owned(),
        Ok(Some(status)) => format!("exited ({status})"),
        Err(err) => format!("is in an unknown state ({err})"),
    };
    let log = fs::read_to_string(&component.log).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    format!(
        "{} {state}; last lines of {}:\n{tail}",
        component.name,
        component.log.display()
    )
}

/// Runs kubectl against `kubeconfig`, with `stdin` as its input if given.
fn kubectl_output<I, S>(kubeconfig: &Path, args: I, stdin: Option<&[u8]>) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new(tool("kubectl"));
    command
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("starting kubectl");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("kubectl's stdin is piped");
        pipe.write_all(input).expect("writing to kubectl's stdin");
    }
    child.wait_with_output().expect("waiting for kubectl")
}

/// Removes the directories of earlier test processes that no longer run (statics are
/// never dropped, so a test binary cannot remove its own).
fn remove_stale_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// The loopback ports of the components, free when picked.
struct Ports {
    etcd_client: u16,
    etcd_peer: u16,
    apiserver: u16,
    controller_manager: u16,
    scheduler: u16,
    kwok: u16,
}

impl Ports {
    fn pick() -> Self {
        // Holding every listener until all are picked makes them distinct.
        let listeners: Vec<TcpListener> = (0..6)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding a free port"))
            .collect();
        let port = |i: usize| {
            listeners[i]
                .local_addr()
                .expect("a bound listener has an address")
                .port()
        };
        Ports {
            etcd_client: port(0),
            etcd_peer: port(1),
            apiserver: port(2),
            controller_manager: port(3),
            scheduler: port(4),
            kwok: port(5),
        }
    }
}

/// A client certificate and its key, PEM.
struct Identity {
    user: &'static str,
    cert_pem: String,
    key_pem: String,
}

/// The test CA, the apiserver's serving certificate, the clients' certificates and the
/// service-account signing key, written under `pki/`.
struct Pki {
    ca_pem: String,
    admin: Identity,
    controller_manager: Identity,
    scheduler: Identity,
}

impl Pki {
    fn write(dir: &Path) -> Result<Self, String> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let pki = dir.join("pki");
        fs::create_dir_all(&pki).map_err(|err| format!("creating {}: {err}", pki.display()))?;
        let write = |name: &str, text: &str| {
            let path = pki.join(name);
            fs::write(&path, text).map_err(|err| format!("writing {}: {err}", path.display()))
        };
        let generation = |err: rcgen::Error| format!("generating a certificate: {err}");

        let mut ca_params = CertificateParams::new(Vec::new()).map_err(generation)?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "faas-test-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::CrlSign,
        ];
        let ca_key = KeyPair::generate().map_err(generation)?;
        let ca_pem = ca_params.self_signed(&ca_key).map_err(generation)?.pem();
        write("ca.crt", &ca_pem)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |names: Vec<String>,
                    common_name: &str,
                    organization: Option<&str>,
                    usage: ExtendedKeyUsagePurpose|
         -> Result<(String, String), String> {
            let mut params = CertificateParams::new(names).map_err(generation)?;
            params
                .distinguished_name
                .push(DnType::CommonName, common_name);
            if let Some(organization) = organization {
                params
                    .distinguished_name
                    .push(DnType::OrganizationName, organization);
            }
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            params.extended_key_usages = vec![usage];
            params.use_authority_key_identifier_extension = true;
            let key = KeyPair::generate().map_err(generation)?;
            Ok((
                params.signed_by(&key, &issuer).map_err(generation)?.pem(),
                key.serialize_pem(),
            ))
        };
        let serving_names = [
            "127.0.0.1",
            "10.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ];
        let (cert, key) = leaf(
            serving_names.iter().map(|n| n.to_string()).collect(),
            "kube-apiserver",
            None,
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        write("apiserver.crt", &cert)?;
        write("apiserver.key", &key)?;

        let client = |user: &'static str, organization: Option<&str>| {
            let (cert_pem, key_pem) = leaf(
                Vec::new(),
                user,
                organization,
                ExtendedKeyUsagePurpose::ClientAuth,
            )?;
            Ok::<_, String>(Identity {
                user,
                cert_pem,
                key_pem,
            })
        };
        let admin = client("faas-test-admin", Some("system:masters"))?;
        let controller_manager = client("system:kube-controller-manager", None)?;
        let scheduler = client("system:kube-scheduler", None)?;

        // ECDSA P-256: the apiserver and the controller-manager accept it as the
        // service-account key, and ring generates it (not RSA).
        let service_accounts = KeyPair::generate().map_err(generation)?;
        write("sa.key", &service_accounts.serialize_pem())?;
        write("sa.pub", &service_accounts.public_key_pem())?;
        Ok(Pki {
            ca_pem,
            admin,
            controller_manager,
            scheduler,
        })
    }
}

/// A kubeconfig (JSON, which kubectl, helm and kube-rs read as YAML) with the
/// certificates inline, so it stands alone.
fn kubeconfig_json(server: &str, ca_pem: &str, identity: &Identity) -> String {
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "faas-test",
            "cluster": { "server": server, "certificate-authority-data": b64(ca_pem) },
        }],
        "users": [{
            "name": identity.user,
            "user": {
                "client-certificate-data": b64(&identity.cert_pem),
                "client-key-data": b64(&identity.key_pem),
            },
        }],
        "contexts": [{
            "name": "faas-test",
            "context": { "cluster": "faas-test", "user": identity.user, "namespace": "default" },
        }],
        "current-context": "faas-test",
    })
    .to_string()
}

/// Has kwok give one pod an IP, alone, before any test makes pods. kwok 0.8 makes a
/// range's pool of pod IPs on first use without a lock (`PodController::ipPool` loads,
/// then stores, a new pool), so the first pods it readies at once could each get a
/// pool of their own, and the same IP (seen once in CI: two replicas at 127.1.0.2).
fn warm_up_pod_ips(plane: &ControlPlane) -> Result<(), String> {
    const POD: &str = "faas-pod-ip-warm-up";
    let created = plane.kubectl([
        "-n",
        "default",
        "run",
        POD,
        "--image=example.invalid/warm-up:1",
        "--restart=Never",
    ]);
    if !created.status.success() {
        return Err(format!(
            "creating the pod that warms up kwok's pod IPs failed: {}",
            String::from_utf8_lossy(&created.stderr)
        ));
    }
    plane.wait_for("kwok", COMPONENTS_TIMEOUT, &["kube-scheduler"], || {
        let output = plane.kubectl([
            "-n",
            "default",
            "get",
            "pod",
            POD,
            "-o",
            "jsonpath={.status.podIP}",
        ]);
        output.status.success() && !output.stdout.is_empty()
    })?;
    let deleted = plane.kubectl(["-n", "default", "delete", "pod", POD, "--timeout=60s"]);
    if !deleted.status.success() {
        return Err(format!(
            "deleting the pod that warmed up kwok's pod IPs failed: {}",
            String::from_utf8_lossy(&deleted.stderr)
        ));
    }
    Ok(())
}

/// The fake node kwok manages: untainted, so any pod may be scheduled onto it.
fn node_json() -> String {
    let resources = serde_json::json!({ "cpu": "32", "memory": "256Gi", "pods": "110" });
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "annotations": { "kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0" },
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "status": { "allocatable": resources, "capacity": resources },
    })
    .to_string()
}

/// Writes kwok's default "fast" node and pod stages (copied from its module by
/// install-tools) into one config file and returns its path.
fn kwok_stages(dir: &Path) -> Result<PathBuf, String> {
    let source = tools_dir().join("kwok-stages");
    let mut files: Vec<PathBuf> = fs::read_dir(&source)
        .map_err(|err| {
            format!(
                "reading kwok's stages in {}: {err} (run testing/k8s/install-tools)",
                source.display()
            )
        })?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no kwok stages in {}", source.display()));
    }
    let mut config = String::new();
    for file in files {
        let text = fs::read_to_string(&file)
            .map_err(|err| format!("reading {}: {err}", file.display()))?;
        config.push_str("---\n");
        config.push_str(&text);
        config.push('\n');
    }
    let path = dir.join("kwok.yaml");
    fs::write(&path, config).map_err(|err| format!("writing {}: {err}", path.display()))?;
    Ok(path)
}

/// What happened to a watched pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodEvent {
    /// The pod became Ready (kwok marked it so): start what stands in for it.
    Ready(ReadyPod),
    /// A pod reported Ready before is gone: deleted, being deleted, or no longer
    /// Ready. Stop what stands in for it.
    Gone {
        /// The pod's name.
        name: String,
        /// Its namespace.
        namespace: String,
    },
}

/// A Ready pod, as a kubelet would run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyPod {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `status.podIP` (a loopback address, see [`POD_CIDR`]).
    pub ip: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.serviceAccountName` when a kubelet would mount its token into the pod
    /// (`automountServiceAccountToken` not false on the pod): the identity what stands
    /// in for the pod should talk to the API server with.
    pub service_account: Option<String>,
    /// The containers, in the spec's order.
    pub containers: Vec<ReadyContainer>,
}

impl ReadyPod {
    /// The first container's environment (most pods have one container).
    pub fn env(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.containers.first().map_or(&EMPTY, |c| &c.env)
    }

    /// The container named `name`.
    pub fn container(&self, name: &str) -> Option<&ReadyContainer> {
        self.containers.iter().find(|c| c.name == name)
    }
}

/// A container of a Ready pod, with what a kubelet would resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyContainer {
    /// Its name.
    pub name: String,
    /// Its image.
    pub image: String,
    /// `command`, with `$(VAR)` references expanded.
    pub command: Vec<String>,
    /// `args`, with `$(VAR)` references expanded.
    pub args: Vec<String>,
    /// Its environment: `envFrom` then `env`, with `valueFrom` (downward-API fields,
    /// ConfigMap and Secret keys) resolved and `$(VAR)` references expanded.
    pub env: BTreeMap<String, String>,
    /// The paths its volumes are mounted at, so what stands in for it can give each a
    /// directory of its own.
    pub mounts: Vec<String>,
}

/// A pod's environment could not be resolved as a kubelet would.
#[derive(Debug, thiserror::Error)]
#[error("pod {namespace}/{pod}: {message}")]
pub struct PodWatchError {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// What could not be resolved.
    pub message: String,
}

/// The stream of [`PodEvent`]s of [`ControlPlane::watch_ready_pods`]. Watch errors are
/// retried with backoff (a restarted watch reconciles: pods gone meanwhile are reported
/// [`PodEvent::Gone`]).
pub struct PodWatch {
    client: kube::Client,
    namespace: String,
    events: BoxStream<'static, Result<watcher::Event<Pod>, watcher::Error>>,
    /// Pods reported Ready: name -> uid.
    ready: BTreeMap<String, String>,
    /// During a (re)list, the Ready pods seen so far.
    listed: Option<BTreeSet<String>>,
    pending: VecDeque<PodEvent>,
}

impl std::fmt::Debug for PodWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodWatch")
            .field("namespace", &self.namespace)
            .field("ready", &self.ready)
            .finish_non_exhaustive()
    }
}

impl PodWatch {
    /// The next event; `None` only if the watch ends (it does not, normally).
    ///
    /// # Errors
    /// When a pod that became Ready has an environment that cannot be resolved (an
    /// unsupported field, a missing ConfigMap or Secret key that is not optional).
    pub async fn next(&mut self) -> Option<Result<PodEvent, PodWatchError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            let event = match self.events.try_next().await {
                Ok(Some(event)) => event,
                Ok(None) => return None,
                Err(err) => {
                    // default_backoff() retries; the next item comes after a pause.
                    eprintln!(
                        "faas_testing::kube: watching pods in {}: {err}",
                        self.namespace
                    );
                    continue;
                }
            };
            match event {
                watcher::Event::Init => self.listed = Some(BTreeSet::new()),
                watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => {
                    if let Err(err) = self.observe(pod).await {
                        return Some(Err(err));
                    }
                }
                watcher::Event::Delete(pod) => {
                    let name = pod.metadata.name.unwrap_or_default();
                    self.forget(&name);
                }
                watcher::Event::InitDone => {
                    let listed = self.listed.take().unwrap_or_default();
                    let vanished: Vec<String> = self
                        .ready
                        .keys()
                        .filter(|name| !listed.contains(*name))
                        .cloned()
                        .collect();
                    for name in vanished {
                        self.forget(&name);
                    }
                }
            }
        }
    }

    async fn observe(&mut self, pod: Pod) -> Result<(), PodWatchError> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !is_ready(&pod) {
            self.forget(&name);
            return Ok(());
        }
        if let Some(listed) = &mut self.listed {
            listed.insert(name.clone());
        }
        match self.ready.get(&name) {
            Some(known) if *known == uid => return Ok(()),
            // Same name, new pod (e.g. a StatefulSet's replacement).
            Some(_) => self.forget(&name),
            None => {}
        }
        let ready = resolve(&self.client, &pod)
            .await
            .map_err(|message| PodWatchError {
                namespace: self.namespace.clone(),
                pod: name.clone(),
                message,
            })?;
        self.ready.insert(name, uid);
        self.pending.push_back(PodEvent::Ready(ready));
        Ok(())
    }

    fn forget(&mut self, name: &str) {
        if self.ready.remove(name).is_some() {
            self.pending.push_back(PodEvent::Gone {
                name: name.to_owned(),
                namespace: self.namespace.clone(),
            });
        }
    }
}

/// Ready, with an IP, and not being deleted.
fn is_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    pod.metadata.deletion_timestamp.is_none()
        && status.and_then(|s| s.pod_ip.as_ref()).is_some()
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
}

/// The pod with its containers' environment, command and args resolved.
async fn resolve(client: &kube::Client, pod: &Pod) -> Result<ReadyPod, String> {
    let metadata = &pod.metadata;
    let namespace = metadata.namespace.clone().unwrap_or_default();
    let mut sources = Sources {
        client: client.clone(),
        namespace: namespace.clone(),
        config_maps: BTreeMap::new(),
        secrets: BTreeMap::new(),
    };
    let mut containers = Vec::new();
    for container in pod.spec.iter().flat_map(|s| &s.containers) {
        containers.push(resolve_container(pod, container, &mut sources).await?);
    }
    Ok(ReadyPod {
        name: metadata.name.clone().unwrap_or_default(),
        namespace,
        uid: metadata.uid.clone().unwrap_or_default(),
        ip: pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default(),
        labels: metadata.labels.clone().unwrap_or_default(),
        service_account: pod.spec.as_ref().and_then(|spec| {
            // A kubelet mounts the account's token unless the pod opts out (a pod's
            // field overrides its account's; the account's default is to mount).
            (spec.automount_service_account_token != Some(false))
                .then(|| spec.service_account_name.clone())
                .flatten()
        }),
        containers,
    })
}

async fn resolve_container(
    pod: &Pod,
    container: &Container,
    sources: &mut Sources,
) -> Result<ReadyContainer, String> {
    let mut env = BTreeMap::new();
    for from in container.env_from.iter().flatten() {
        resolve_env_from(from, sources, &mut env).await?;
    }
    for var in container.env.iter().flatten() {
        let value = resolve_var(pod, var, sources, &env).await?;
        if let Some(value) = value {
            env.insert(var.name.clone(), value);
        }
    }
    let expand_all = |items: &Option<Vec<String>>| -> Vec<String> {
        items.iter().flatten().map(|s| expand(s, &env)).collect()
    };
    Ok(ReadyContainer {
        name: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        command: expand_all(&container.command),
        args: expand_all(&container.args),
        env: env.clone(),
        mounts: container
            .volume_mounts
            .iter()
            .flatten()
            .map(|mount| mount.mount_path.clone())
            .collect(),
    })
}

async fn resolve_env_from(
    from: &EnvFromSource,
    sources: &mut Sources,
    env: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    let prefix = from.prefix.clone().unwrap_or_default();
    let data = if let Some(reference) = &from.config_map_ref {
        sources
            .config_map(&reference.name, reference.optional.unwrap_or(false))
            .await?
    } else if let Some(reference) = &from.secret_ref {
        sources
            .secret(&reference.name, reference.optional.unwrap_or(false))
            .await?
    } else {
        return Err("an envFrom with neither configMapRef nor secretRef".into());
    };
    for (key, value) in data {
        env.insert(format!("{prefix}{key}"), value);
    }
    Ok(())
}

/// The value of one `env` entry (`None` when an optional source is missing).
async fn resolve_var(
    pod: &Pod,
    var: &EnvVar,
    sources: &mut Sources,
    env: &BTreeMap<String, String>,
) -> Result<Option<String>, String> {
    let Some(from) = &var.value_from else {
        return Ok(Some(expand(var.value.as_deref().unwrap_or(""), env)));
    };
    let missing = |what: String| format!("env {}: {what}", var.name);
    if let Some(field) = &from.field_ref {
        return field_value(pod, &field.field_path)
            .map(Some)
            .ok_or_else(|| missing(format!("unsupported fieldRef {}", field.field_path)));
    }
    let (data, key, optional) = if let Some(selector) = &from.config_map_key_ref {
        let optional = selector.optional.unwrap_or(false);
        let data = sources.config_map(&selector.name, optional).await?;
        (data, &selector.key, optional)
    } else if let Some(selector) = &from.secret_key_ref {
        let optional = selector.optional.unwrap_or(false);
        let data = sources.secret(&selector.name, optional).await?;
        (data, &selector.key, optional)
    } else {
        return Err(missing(
            "unsupported valueFrom (only fieldRef, configMapKeyRef, secretKeyRef)".into(),
        ));
    };
    match data.get(key) {
        Some(value) => Ok(Some(value.clone())),
        None if optional => Ok(None),
        None => Err(missing(format!("key {key} not found"))),
    }
}

/// A downward-API field of the pod, as `fieldRef.fieldPath` names it.
fn field_value(pod: &Pod, path: &str) -> Option<String> {
    let metadata = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let keyed = |prefix: &str, map: Option<&BTreeMap<String, String>>| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    match path {
        "metadata.name" => metadata.name.clone(),
        "metadata.namespace" => metadata.namespace.clone(),
        "metadata.uid" => metadata.uid.clone(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "status.podIP" => status.and_then(|s| s.pod_ip.clone()),
        "status.hostIP" => status.and_then(|s| s.host_ip.clone()),
        _ => keyed("metadata.labels['", metadata.labels.as_ref())
            .or_else(|| keyed("metadata.annotations['", metadata.annotations.as_ref())),
    }
}

/// Expands `$(NAME)` with `env` as a kubelet does: `$$` is a literal `$`, and a
/// reference to an undefined variable stays as written.
fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(reference) = after.strip_prefix('(').and_then(|inner| {
            inner
                .find(')')
                .map(|end| (&inner[..end], &inner[end + 1..]))
        }) {
            let (name, tail) = reference;
            match env.get(name) {
                Some(value) => out.push_str(value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The ConfigMaps and Secrets of a namespace, read once per resolution.
struct Sources {
    client: kube::Client,
    namespace: String,
    config_maps: BTreeMap<String, BTreeMap<String, String>>,
    secrets: BTreeMap<String, BTreeMap<String, String>>,
}

impl Sources {
    async fn config_map(
        &mut self,
        name: &str,
        optional: bool,
    ) -> Result<BTreeMap<String, String>, String> {
        if let Some(data) = self.config_maps.get(name) {
            return Ok(data.clone());
        }
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), &self.namespace);
        let data = match api.get_opt(name).await {
            Ok(Some(map)) => map.data.unwrap_or_default(),
            Ok(None) if optional => BTreeMap::new(),
            Ok(None) => return Err(format!("ConfigMap {name} not found")),
            Err(err) => return Err(format!("reading ConfigMap {name}: {err}")),
        };
        self.config_maps.insert(name.to_owned(), data.clone());
        Ok(data)
    }

    async fn secret(
        &mut self,
        name: &str,
        optional: bool,
    ) -> Result<BTreeMap<String, String>, String> {
        if let Some(data) = self.secrets.get(name) {
            return Ok(data.clone());
        }
        let api = Api::<Secret>::namespaced(self.client.clone(), &self.namespace);
        let data = match api.get_opt(name).await {
            Ok(Some(secret)) => {
                let mut data: BTreeMap<String, String> = secret.string_data.unwrap_or_default();
                for (key, bytes) in secret.data.unwrap_or_default() {
                    let text = String::from_utf8(bytes.0)
                        .map_err(|_| format!("Secret {name} key {key} is not UTF-8"))?;
                    data.insert(key, text);
                }
                data
            }
            Ok(None) if optional => BTreeMap::new(),
            Ok(None) => return Err(format!("Secret {name} not found")),
            Err(err) => return Err(format!("reading Secret {name}: {err}")),
        };
        self.secrets.insert(name.to_owned(), data.clone());
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_follows_the_kubelet() {
        let env = BTreeMap::from([("A".to_owned(), "x".to_owned())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &env), "x-$(B)-$(A)-$");
        assert_eq!(expand("plain", &env), "plain");
        assert_eq!(expand("$(A", &env), "$(A");
    }

    #[test]
    fn versions_are_read_from_versions_env() {
        assert_eq!(kubernetes_version(), "1.36.3");
        assert!(
            tools_dir().ends_with("k8s-v1.36.3") || std::env::var_os("FAAS_K8S_TOOLS").is_some()
        );
        assert!(
            kubeconform_schema_location().contains("{{ .ResourceKind }}{{ .KindSuffix }}.json")
        );
    }
}
