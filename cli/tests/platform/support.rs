//! Starting and stopping a platform process, and talking to it.

use reqwest::blocking::{Client, Response};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The admin token every test platform uses.
pub const TOKEN: &str = "test-token";

/// A `faas up` process on a free port; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Platform {
    child: Option<Child>,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Everything the process printed on stdout after its URL line.
    pub stdout: Arc<Mutex<Vec<String>>>,
    _data: tempfile::TempDir,
}

impl Platform {
    /// A platform with nothing deployed.
    pub fn start() -> Self {
        Self::start_with(&["--no-demo"])
    }

    /// A platform started with extra `faas up` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        faas_testing::build_functions();
        let data = faas_testing::temp_dir();
        let cache = faas_testing::repo_root().join("target/test-compile-cache");
        let mut child = Command::new(env!("CARGO_BIN_EXE_faas"))
            .args(["up", "--listen", "127.0.0.1:0", "--token", TOKEN])
            .arg("--data-dir")
            .arg(data.path())
            .arg("--cache-dir")
            .arg(&cache)
            .args(extra)
            .current_dir(faas_testing::repo_root())
            .env("FAAS_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting faas up");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("faas up exited before printing its URL")
                .expect("reading faas up output");
            if let Some(url) = line.strip_prefix("faas is up at ") {
                break url.trim().to_owned();
            }
        };
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let sink = stdout.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let platform = Self {
            child: Some(child),
            url,
            stdout,
            _data: data,
        };
        platform.wait_ready(Duration::from_secs(120));
        platform
    }

    /// Polls `/readyz` until it answers 200.
    fn wait_ready(&self, patience: Duration) {
        let deadline = Instant::now() + patience;
        while Instant::now() < deadline {
            if let Ok(response) = client().get(self.at("/readyz")).send()
                && response.status() == 200
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{} did not become ready within {patience:?}", self.url);
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

    /// Runs the `faas` CLI against this platform.
    pub fn faas(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_faas"))
            .args(args)
            .env("FAAS_URL", &self.url)
            .env("FAAS_TOKEN", TOKEN)
            .env("FAAS_LOG", "warn")
            .current_dir(faas_testing::repo_root())
            .output()
            .expect("running faas")
    }

    /// `faas deploy <manifest>`, asserting success; returns stdout.
    pub fn deploy(&self, manifest: &Path) -> String {
        let output = self.faas(&["deploy", manifest.to_str().expect("UTF-8 path")]);
        assert!(
            output.status.success(),
            "faas deploy {} failed: {}",
            manifest.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("the platform is running");
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().expect("waiting for faas up") {
                return status;
            }
            assert!(Instant::now() < deadline, "faas up ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Platform {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.terminate();
        }
    }
}

/// An HTTP client with a generous timeout (a test's own assertion says what is slow).
pub fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("building the HTTP client")
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
