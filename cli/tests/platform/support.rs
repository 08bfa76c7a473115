//! Starting and stopping a platform process, and talking to it.

use reqwest::blocking::{Client, Response};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The admin token every test platform uses (a platform refuses one under 16 bytes).
pub const TOKEN: &str = "test-admin-token";

/// How long a test's platform lets one compile take (`--compile-timeout-secs`, 120 by
/// default). The test build's Cranelift is optimised less (opt-level 1), and the suite
/// compiles the Python and JavaScript components while other tests run: the
/// JavaScript hello took about 30 s here so, where a release build takes a few.
const COMPILE_TIMEOUT_SECS: &str = "600";

/// The `faas` executable, to start as a platform process (flags given to it override
/// the environment set here).
fn faas_server() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_faas"));
    command.env("FAAS_COMPILE_TIMEOUT_SECS", COMPILE_TIMEOUT_SECS);
    command
}

/// A `faas` process started by a test; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Process {
    child: Option<Child>,
    /// What followed the ready prefix on the line that announced it.
    pub announced: String,
    /// Everything the process printed on stdout after that line.
    pub stdout: Arc<Mutex<Vec<String>>>,
    /// Its own log (stderr), when started by [`Process::spawn_logging`]; empty otherwise.
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Process {
    /// Starts `faas <args>` in the repository root and waits for the stdout line that
    /// starts with `ready_prefix`.
    pub fn spawn<S: AsRef<std::ffi::OsStr>>(args: &[S], ready_prefix: &str) -> Self {
        Self::spawn_with_env(args, &[], ready_prefix)
    }

    /// [`Process::spawn`] with extra environment variables (e.g. `KUBECONFIG`).
    pub fn spawn_with_env<S: AsRef<std::ffi::OsStr>>(
        args: &[S],
        env: &[(&str, &std::ffi::OsStr)],
        ready_prefix: &str,
    ) -> Self {
        let mut command = faas_server();
        command.envs(env.iter().copied()).env("FAAS_LOG", "warn");
        Self::spawn_command(command, args, ready_prefix)
    }

    /// [`Process::spawn`] with its log as an operator gets it by default (`FAAS_LOG`
    /// unset), kept in [`Process::log`].
    pub fn spawn_logging<S: AsRef<std::ffi::OsStr>>(args: &[S], ready_prefix: &str) -> Self {
        let mut command = faas_server();
        command.env_remove("FAAS_LOG").stderr(Stdio::piped());
        Self::spawn_command(command, args, ready_prefix)
    }

    /// Starts `command` with `args`, waiting for `ready_prefix` on stdout.
    fn spawn_command<S: AsRef<std::ffi::OsStr>>(
        mut command: Command,
        args: &[S],
        ready_prefix: &str,
    ) -> Self {
        let mut child = command
            .args(args)
            .current_dir(faas_testing::repo_root())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting faas");
        let log = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let sink = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    sink.lock().unwrap().push(line);
                }
            });
        }
        let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
        let announced = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("faas exited before printing `{ready_prefix}`"))
                .expect("reading faas output");
            if let Some(rest) = line.strip_prefix(ready_prefix) {
                break rest.trim().to_owned();
            }
        };
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let sink = stdout.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            child: Some(child),
            announced,
            stdout,
            log,
        }
    }

    /// The value of `series` (name and labels, as written) on the `/metrics` the
    /// process announced (`..., metrics at URL`), if it serves it now.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let url = self
            .announced
            .split("metrics at ")
            .nth(1)
            .unwrap_or_else(|| panic!("no metrics address in `{}`", self.announced));
        let text = client().get(url).send().ok()?.text().ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|value| value.parse().ok())
    }

    /// A figure of the process's memory from `/proc/<pid>/status`, in bytes: `VmRSS`
    /// (resident now) or `VmHWM` (the most it was resident at once).
    pub fn memory(&self, field: &str) -> u64 {
        let child = self.child.as_ref().expect("the process is running");
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|value| value.trim().strip_suffix(" kB")?.parse().ok())
            .unwrap_or_else(|| panic!("no `{field}` in {status}"));
        kib << 10
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the process is running").id()
    }

    /// Sends `signal` without waiting (e.g. SIGSTOP and SIGCONT to pause it).
    pub fn signal(&self, signal: libc::c_int) {
        let child = self.child.as_ref().expect("the process is running");
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    }

    /// Sends `signal` and waits for the process to exit.
    pub fn stop(&mut self, signal: libc::c_int) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("the process is running");
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().expect("waiting for faas") {
                return status;
            }
            assert!(Instant::now() < deadline, "faas ignored signal {signal}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop(libc::SIGTERM);
        }
    }
}

/// A `faas up` process on a free port.
pub struct Platform {
    process: Process,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Its data dir, when the platform owns it (see [`Platform::start_in`]).
    _data: Option<tempfile::TempDir>,
}

impl Platform {
    /// A platform with nothing deployed.
    pub fn start() -> Self {
        Self::start_with(&["--no-demo"])
    }

    /// A platform started with extra `faas up` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_with_env(extra, &[])
    }

    /// A platform started with extra `faas up` arguments and environment variables
    /// (e.g. `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn start_with_env(extra: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Self {
        let data = faas_testing::temp_dir();
        let mut platform = Self::start_in_with_env(data.path(), extra, env);
        platform._data = Some(data);
        platform
    }

    /// A platform keeping its state in `data_dir`, which the caller keeps (so that a
    /// later platform can start on it), started with extra `faas up` arguments.
    pub fn start_in(data_dir: &Path, extra: &[&str]) -> Self {
        Self::start_in_with_env(data_dir, extra, &[])
    }

    /// [`Platform::start_in`] with extra environment variables.
    pub fn start_in_with_env(
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Self {
        Self::start_process(data_dir, extra, |args| {
            Process::spawn_with_env(args, env, "faas is up at ")
        })
    }

    /// A platform with nothing deployed whose own log is what an operator gets by
    /// default (`FAAS_LOG` unset), kept for [`Platform::log`].
    pub fn start_logging() -> Self {
        let data = faas_testing::temp_dir();
        let mut platform = Self::start_process(data.path(), &["--no-demo"], |args| {
            Process::spawn_logging(args, "faas is up at ")
        });
        platform._data = Some(data);
        platform
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Its process's memory figure `field` (`VmRSS`, `VmHWM`), in bytes.
    pub fn memory(&self, field: &str) -> u64 {
        self.process.memory(field)
    }

    /// The lines of its own log so far (see [`Platform::start_logging`]).
    pub fn log(&self) -> Vec<String> {
        self.process.log.lock().unwrap().clone()
    }

    /// Starts `faas up` in `data_dir` with `extra` arguments through `spawn`.
    fn start_process(
        data_dir: &Path,
        extra: &[&str],
        spawn: impl FnOnce(&[std::ffi::OsString]) -> Process,
    ) -> Self {
        faas_testing::build_functions();
        let mut args: Vec<std::ffi::OsString> = ["up", "--listen", "127.0.0.1:0", "--token", TOKEN]
            .iter()
            .map(Into::into)
            .collect();
        args.extend(["--data-dir".into(), data_dir.into()]);
        // Tests share compiled code, unless one asks for a cache of its own.
        if !extra.contains(&"--cache-dir") {
            args.extend(["--cache-dir".into(), compile_cache().into()]);
        }
        args.extend(extra.iter().map(Into::into));
        let process = spawn(&args);
        let platform = Self {
            url: process.announced.clone(),
            process,
            _data: None,
        };
        wait_ready(&platform.url, Duration::from_secs(120));
        platform
    }

    /// The full URL of `path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// GET `path`.
    pub fn get(&self, path: &str) -> Response {
        client().get(self.at(path)).send().expect("GET failed")
    }

    /// POST `body` to `path`.
    pub fn post(&self, path: &str, body: impl Into<reqwest::blocking::Body>) -> Response {
        client()
            .post(self.at(path))
            .body(body)
            .send()
            .expect("POST failed")
    }

    /// The gateway's `/metrics`, read with the admin token (every tenant's series).
    pub fn metrics(&self) -> String {
        metrics_at(&self.url)
    }

    /// The value of the `/metrics` sample whose name and labels are `sample`
    /// (`faas_runs_total{tenant="demo",workflow="w",status="failed"}`), 0 if absent.
    pub fn metric(&self, sample: &str) -> f64 {
        sample_value(&self.metrics(), sample)
    }

    /// Runs the `faas` CLI against this platform.
    pub fn faas(&self, args: &[&str]) -> Output {
        faas_at(&self.url, args)
    }

    /// `faas deploy <manifest>`, asserting success; returns stdout.
    pub fn deploy(&self, manifest: &Path) -> String {
        deploy_at(&self.url, manifest)
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.process.stop(libc::SIGTERM)
    }

    /// Sends SIGKILL (no chance to clean up) and waits for the process to exit.
    pub fn kill(&mut self) -> std::process::ExitStatus {
        self.process.stop(libc::SIGKILL)
    }

    /// Everything the process printed on stdout after its URL line.
    pub fn stdout(&self) -> Vec<String> {
        self.process.stdout.lock().unwrap().clone()
    }
}

/// Where every test process keeps compiled components: shared, so each component is
/// compiled once per checkout.
pub fn compile_cache() -> PathBuf {
    faas_testing::repo_root().join("target/test-compile-cache")
}

/// Polls `<url>/readyz` until it answers 200.
pub fn wait_ready(url: &str, patience: Duration) {
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if let Ok(response) = client().get(format!("{url}/readyz")).send()
            && response.status() == 200
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{url} did not become ready within {patience:?}");
}

/// Runs the `faas` CLI against the platform at `url` with the admin token. A deploy
/// first creates the tenant its manifest names, as an operator would (tenants are
/// created explicitly; unknown ones are refused), and so does setting a tenant's
/// quotas (`faas up --no-demo` creates no `demo` tenant to set them on).
pub fn faas_at(url: &str, args: &[&str]) -> Output {
    if let ["deploy", .., manifest] = args
        && let Ok(text) = std::fs::read_to_string(manifest)
        && let Some(tenant) = faas_testing::manifest_tenant(&text)
    {
        ensure_tenant_at(url, &tenant);
    }
    if let ["tenant", "set", tenant, ..] = args {
        ensure_tenant_at(url, tenant);
    }
    faas_as(url, TOKEN, args)
}

/// Runs the `faas` CLI against the platform at `url` with `token`, nothing else done.
pub fn faas_as(url: &str, token: &str, args: &[&str]) -> Output {
    faas_command(url, token, args)
        .output()
        .expect("running faas")
}

/// The command that runs the `faas` CLI against the platform at `url` with `token`:
/// for a test that starts it and stops it while it waits.
pub fn faas_command(url: &str, token: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_faas"));
    command
        .args(args)
        .env("FAAS_URL", url)
        .env("FAAS_TOKEN", token)
        .env("FAAS_LOG", "warn")
        .current_dir(faas_testing::repo_root());
    command
}

/// The `/metrics` of the gateway at `url`, read with the admin token (every tenant's
/// series).
pub fn metrics_at(url: &str) -> String {
    client()
        .get(format!("{url}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .and_then(Response::text)
        .expect("the gateway's metrics")
}

/// Creates tenant `tenant` on the platform at `url` with the admin token, unless it
/// exists.
pub fn ensure_tenant_at(url: &str, tenant: &str) {
    let response = client()
        .post(format!("{url}/admin/v1/tenants"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({ "name": tenant }))
        .send()
        .expect("creating a tenant");
    let status = response.status();
    assert!(
        status == 201 || status == 409,
        "creating tenant {tenant}: HTTP {status}: {}",
        response.text().unwrap_or_default()
    );
}

/// `faas deploy <manifest>` against `url`, asserting success; returns stdout.
pub fn deploy_at(url: &str, manifest: &Path) -> String {
    let output = faas_at(url, &["deploy", manifest.to_str().expect("UTF-8 path")]);
    assert!(
        output.status.success(),
        "faas deploy {} failed: {}",
        manifest.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// An HTTP client with a generous timeout (a test's own assertion says what is slow).
pub fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("building the HTTP client")
}

/// A deploy upload sent straight to the admin API, so that a test can check the
/// gateway's own answer (status, error fields) and send what `faas deploy` never would.
pub struct Upload {
    /// Its head part; `components` lists each component's size.
    pub head: faas_gateway::admin::DeployHead,
    /// The component parts, in order: (function, bytes).
    pub components: Vec<(String, Vec<u8>)>,
}

impl Upload {
    /// `manifest` (as `workflow.toml`) with `components` (function, bytes), each listed
    /// in the head at its size.
    pub fn of(manifest: &str, components: &[(&str, &[u8])]) -> Self {
        let head = faas_gateway::admin::DeployHead {
            file_name: "workflow.toml".to_owned(),
            manifest: manifest.to_owned(),
            components: components
                .iter()
                .map(|(function, bytes)| ((*function).to_owned(), bytes.len() as u64))
                .collect(),
            schemas: Default::default(),
        };
        let components = components
            .iter()
            .map(|(function, bytes)| ((*function).to_owned(), bytes.to_vec()))
            .collect();
        Self { head, components }
    }

    /// POSTs it to the gateway at `url` with `token`.
    pub fn send(&self, url: &str, token: &str) -> Response {
        use faas_gateway::admin::{COMPONENT_PART, HEAD_PART};
        use reqwest::blocking::multipart::{Form, Part};
        let head = serde_json::to_vec(&self.head).expect("encoding the head");
        let form = self.components.iter().fold(
            Form::new().part(HEAD_PART, Part::bytes(head)),
            |form, (function, bytes)| {
                form.part(
                    COMPONENT_PART,
                    Part::bytes(bytes.clone()).file_name(function.clone()),
                )
            },
        );
        client()
            .post(format!("{url}/admin/v1/workflows"))
            .bearer_auth(token)
            .multipart(form)
            .send()
            .expect("deploy upload")
    }
}

/// A repository path.
pub fn repo(path: &str) -> PathBuf {
    faas_testing::repo_root().join(path)
}

/// Writes a one-function workflow.toml into `dir` that uses the prebuilt component of
/// `package`, and returns its path. `extra` is appended to the function's table.
pub fn write_manifest(
    dir: &Path,
    name: &str,
    tenant: &str,
    package: &str,
    route: &str,
    extra: &str,
) -> PathBuf {
    let component = faas_testing::component_path(package);
    write_manifest_of(dir, name, tenant, &component, route, extra)
}

/// [`write_manifest`] for a component file at `component` (one a test made).
pub fn write_manifest_of(
    dir: &Path,
    name: &str,
    tenant: &str,
    component: &Path,
    route: &str,
    extra: &str,
) -> PathBuf {
    let text = format!(
        "name = \"{name}\"\ntenant = \"{tenant}\"\n\n[functions.main]\ncomponent = \"{}\"\n{extra}\n\n[[triggers.http]]\nroute = \"{route}\"\nfunction = \"main\"\n",
        component.display()
    );
    let path = dir.join(format!("{name}-{}.toml", unique()));
    std::fs::write(&path, text).expect("writing a manifest");
    path
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The `error` object of a JSON error response.
pub fn error_of(response: Response) -> serde_json::Value {
    let body: serde_json::Value = response.json().expect("a JSON error body");
    body["error"].clone()
}

/// Copies the repository manifest `manifest` into `dir` with its components made
/// absolute and its build commands removed (they are prebuilt), applying each
/// `(from, to)` text replacement; returns the copy's path.
pub fn copy_manifest(dir: &Path, manifest: &str, replacements: &[(&str, &str)]) -> PathBuf {
    let text = std::fs::read_to_string(repo(manifest)).expect("reading a repo manifest");
    let mut text: String = text
        .lines()
        .filter(|line| !line.starts_with("build = "))
        .map(|line| format!("{line}\n"))
        .collect();
    text = text.replace("../../target", &repo("target").display().to_string());
    for (from, to) in replacements {
        assert!(text.contains(from), "{manifest} has no `{from}`");
        text = text.replace(from, to);
    }
    let path = dir.join(format!("manifest-{}.toml", unique()));
    std::fs::write(&path, text).expect("writing a manifest");
    // The Karmem schemas the manifest names live beside it.
    let source_dir = repo(manifest)
        .parent()
        .expect("a manifest has a folder")
        .to_owned();
    for entry in std::fs::read_dir(source_dir).expect("reading the manifest's folder") {
        let schema = entry.expect("a folder entry").path();
        if schema.extension().is_some_and(|ext| ext == "km") {
            std::fs::copy(&schema, dir.join(schema.file_name().expect("a file name")))
                .expect("copying a schema");
        }
    }
    path
}

/// A TCP connection to `addr` from the local address `source` (any of 127.0.0.0/8
/// is this machine), so a test can be a client other than the gateway.
pub fn connect_from(source: [u8; 4], addr: &str) -> std::net::TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .expect("a TCP socket");
    socket
        .bind(&std::net::SocketAddr::from((source, 0)).into())
        .expect("binding the source address");
    let addr: std::net::SocketAddr = addr.parse().expect("an IP address and port");
    socket.connect(&addr.into()).expect("connecting");
    socket.into()
}

/// Reads until the peer closes the connection (or resets it), for up to `limit`;
/// returns how long that took, or `None` if it stayed open. Give the stream a short
/// read timeout first, so that the limit is kept.
pub fn closed_within(stream: &mut impl std::io::Read, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buffer = [0u8; 4096];
    while start.elapsed() < limit {
        match stream.read(&mut buffer) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}

/// The value of the sample whose name and labels are `sample` in the metrics `text`,
/// 0 if it has none.
pub fn sample_value(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().expect("a sample value"))
}

/// The sum of every sample of metric `name` (all its label sets) in the metrics `text`.
pub fn sample_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?.1,
                None => rest.strip_prefix(' ')?,
            };
            Some(value.trim().parse::<f64>().expect("a sample value"))
        })
        .sum()
}

/// The Redis user workers connect as in the tests of services mode and of the chart,
/// with the rules the chart gives workers (`charts/faas/files/worker-redis-acl.txt`):
/// so that the tests run their workers within them.
pub(crate) const WORKER_REDIS_USER: &str = "faas-worker";
const WORKER_REDIS_PASSWORD: &str = "test-worker-redis-password";

/// Makes [`WORKER_REDIS_USER`] on `redis` with the workers' rules; returns the URL a
/// worker connects with.
pub(crate) fn worker_redis_url(redis: &faas_testing::RedisServer) -> String {
    let rules = std::fs::read_to_string(repo("charts/faas/files/worker-redis-acl.txt"))
        .expect("reading the workers' Redis rules");
    let mut connection = redis::Client::open(redis.url())
        .and_then(|client| client.get_connection())
        .expect("connecting to Redis");
    let mut command = redis::cmd("ACL");
    command
        .arg("SETUSER")
        .arg(WORKER_REDIS_USER)
        .arg(format!(">{WORKER_REDIS_PASSWORD}"));
    for rule in rules.split_whitespace() {
        command.arg(rule);
    }
    command
        .query::<()>(&mut connection)
        .expect("the workers' Redis rules are refused");
    format!(
        "redis://{WORKER_REDIS_USER}:{WORKER_REDIS_PASSWORD}@127.0.0.1:{}",
        redis.port()
    )
}
