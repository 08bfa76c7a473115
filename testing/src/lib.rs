//! Test support shared by the workspace's integration tests and benchmarks: the real
//! components of `functions/`, built for wasm32-wasip2 once per process.
//! Also a throwaway `redis-server` ([`RedisServer`]) for the Redis-backed stores.
//! And a real Kubernetes control plane ([`kube::ControlPlane`]) for the Kubernetes tests.
//! And a real OpenTelemetry Collector ([`otel::Collector`]) for the trace tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testing/ sits in the repository root")
        .to_owned()
}

/// Builds every function in `functions/` (release, wasm32-wasip2) the first time it
/// is called in this process; later calls return at once.
///
/// # Panics
/// If cargo fails: a test cannot run without its components.
pub fn build_functions() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--release", "--quiet"])
            .current_dir(repo_root().join("functions"))
            .status()
            .expect("running cargo to build functions/");
        assert!(status.success(), "building functions/ failed: {status}");
    });
}

/// Path of the built component of package `package` in `functions/` (built first if
/// needed).
pub fn component_path(package: &str) -> PathBuf {
    build_functions();
    let dir = repo_root().join("target/wasm32-wasip2/release");
    // Libraries are named with underscores, binaries as the package.
    let library = dir.join(format!("{}.wasm", package.replace('-', "_")));
    if library.exists() {
        library
    } else {
        dir.join(format!("{package}.wasm"))
    }
}

/// The metric families (`faas_...`, sample suffixes such as `_total` or `_bucket`
/// removed) that the Grafana dashboard in `charts/faas/dashboards/faas.json` queries
/// and whose names start with `prefix`, each once.
pub fn dashboard_families(prefix: &str) -> Vec<String> {
    let path = repo_root().join("charts/faas/dashboards/faas.json");
    let dashboard = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
    let mut families: Vec<String> = dashboard
        .match_indices(prefix)
        .map(|(at, _)| {
            let rest = &dashboard[at..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..end];
            ["_bucket", "_total", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name)
                .to_owned()
        })
        .collect();
    families.sort_unstable();
    families.dedup();
    families
}

/// The bytes of `package`'s component.
pub fn component(package: &str) -> Vec<u8> {
    let path = component_path(package);
    std::fs::read(&path).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()))
}

/// `component` with a custom section `name` holding `data` appended: the same code,
/// other bytes (another SHA-256), and as large as a test needs.
pub fn with_custom_section(component: &[u8], name: &str, data: &[u8]) -> Vec<u8> {
    let section = wasm_encoder::CustomSection {
        name: name.into(),
        data: data.into(),
    };
    let mut bytes = component.to_vec();
    bytes.push(wasm_encoder::ComponentSection::id(&section));
    wasm_encoder::Encode::encode(&section, &mut bytes);
    bytes
}

/// The `tenant` a workflow.toml text names, if it names one (and is TOML at all).
pub fn manifest_tenant(text: &str) -> Option<String> {
    let table: toml::Table = text.parse().ok()?;
    table.get("tenant")?.as_str().map(str::to_owned)
}

/// A fresh temporary directory, removed when dropped.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("creating a temporary directory")
}

/// Where the test tools are installed, each in its own versioned folder:
/// `$FAAS_TOOLS_DIR`, else `$HOME/.cache/faas-tools` (as the install scripts under
/// `testing/` resolve it).
pub fn tools_base_dir() -> PathBuf {
    std::env::var_os("FAAS_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").expect("HOME is set");
            Path::new(&home).join(".cache/faas-tools")
        })
}

/// The value of `key` in the text of a `versions.env` file (`KEY=value` lines).
fn env_file_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        .map(str::trim)
}

/// A loopback port nobody listens on right now (the OS picks it; it is released at once).
fn free_port() -> u16 {
    std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("finding a free loopback port")
        .port()
}

/// Kills a helper process (if still running) and reaps it, so no zombie or port is left.
fn stop(child: &mut std::process::Child) {
    // An error means it has already exited; wait() reaps it either way.
    let _ = child.kill();
    let _ = child.wait();
}

pub mod kube;
pub mod languages;
pub mod otel;

pub use redis_server::RedisServer;

/// A throwaway `redis-server` for tests of the Redis-backed stores.
mod redis_server {
    use crate::{free_port, stop};
    use std::io::{ErrorKind, Read, Write};
    use std::net::{Ipv4Addr, SocketAddr, TcpStream};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    /// How long a fresh server may take to answer PING before the test gives up.
    const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
    /// How often a starting server is probed.
    const POLL_INTERVAL: Duration = Duration::from_millis(10);
    /// Fresh ports tried before giving up, in case another process takes the free
    /// port between our probe and redis-server binding it.
    const PORT_ATTEMPTS: usize = 5;

    /// A `redis-server` on a free loopback port, without persistence, killed on drop.
    ///
    /// Each instance is its own server, so tests never see each other's keys and may
    /// run in parallel.
    #[derive(Debug)]
    pub struct RedisServer {
        child: Child,
        port: u16,
    }

    impl RedisServer {
        /// Starts a server and waits until it answers PING.
        ///
        /// # Panics
        /// If `redis-server` is not installed, or no server answers within 10 s.
        pub fn start() -> Self {
            let mut last_failure = String::new();
            for _ in 0..PORT_ATTEMPTS {
                let port = free_port();
                match spawn_and_wait(port) {
                    Ok(child) => return Self { child, port },
                    Err(failure) => last_failure = failure,
                }
            }
            panic!("redis-server did not start: {last_failure}");
        }

        /// The port the server listens on (on 127.0.0.1).
        pub fn port(&self) -> u16 {
            self.port
        }

        /// The server's URL, e.g. `redis://127.0.0.1:6379`.
        pub fn url(&self) -> String {
            format!("redis://127.0.0.1:{}", self.port)
        }

        /// How many clients the server has connected, as `INFO clients` counts them (the
        /// connection that asks among them).
        ///
        /// # Panics
        /// If the server does not answer within 5 s.
        pub fn connected_clients(&self) -> u64 {
            let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))
                .expect("connecting to redis-server");
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("a read timeout");
            stream
                .write_all(b"*2\r\n$4\r\nINFO\r\n$7\r\nclients\r\n")
                .expect("sending INFO clients");
            // A bulk string: `$<length>\r\n<text>\r\n`.
            let mut reply = Vec::new();
            let mut chunk = [0; 1024];
            loop {
                let text = String::from_utf8_lossy(&reply);
                if let Some((length, rest)) = text
                    .strip_prefix('$')
                    .and_then(|bulk| bulk.split_once("\r\n"))
                    && let Ok(length) = length.parse::<usize>()
                    && rest.len() >= length
                {
                    return rest[..length]
                        .lines()
                        .find_map(|line| line.strip_prefix("connected_clients:"))
                        .and_then(|count| count.trim().parse().ok())
                        .unwrap_or_else(|| panic!("no connected_clients in {rest}"));
                }
                let read = stream.read(&mut chunk).expect("reading INFO clients");
                assert!(read > 0, "redis-server closed the connection");
                reply.extend_from_slice(&chunk[..read]);
            }
        }

        /// Stops the server's process (SIGSTOP) until [`Self::resume`]: connections
        /// stay open and commands queue unanswered, as on a server too slow to reply.
        ///
        /// # Panics
        /// If the signal cannot be sent.
        pub fn pause(&self) {
            self.signal("-STOP");
        }

        /// Lets a [paused](Self::pause) server run again; it then answers what queued.
        ///
        /// # Panics
        /// If the signal cannot be sent.
        pub fn resume(&self) {
            self.signal("-CONT");
        }

        fn signal(&self, signal: &str) {
            let status = Command::new("kill")
                .arg(signal)
                .arg(self.child.id().to_string())
                .status()
                .expect("running kill");
            assert!(status.success(), "kill {signal} redis-server: {status}");
        }

        /// Kills the server and starts a new, empty one on the same port, returning
        /// once it answers PING. Clients see their connections drop, as after a real
        /// Redis restart.
        ///
        /// # Panics
        /// If the new server does not start.
        pub fn restart(&mut self) {
            stop(&mut self.child);
            let mut last_failure = String::new();
            // The port is ours until just now, but its old sockets may linger briefly.
            for _ in 0..PORT_ATTEMPTS {
                match spawn_and_wait(self.port) {
                    Ok(child) => {
                        self.child = child;
                        return;
                    }
                    Err(failure) => last_failure = failure,
                }
            }
            panic!(
                "redis-server did not restart on port {}: {last_failure}",
                self.port
            );
        }
    }

    impl Drop for RedisServer {
        fn drop(&mut self) {
            stop(&mut self.child);
        }
    }

    /// Starts `redis-server` on `port` and waits for PING. `Err` (with the reason)
    /// when the server exits or stays silent, so the caller may try again.
    fn spawn_and_wait(port: u16) -> Result<Child, String> {
        let spawned = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            // No snapshots and no append-only file: nothing is written to disk, and a
            // restart really starts empty.
            .args(["--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(err) if err.kind() == ErrorKind::NotFound => panic!(
                "redis-server is not installed (needed by the Redis tests); \
                 install it: apt-get install redis-server"
            ),
            Err(err) => panic!("starting redis-server: {err}"),
        };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                // Most likely the port was taken after all.
                return Err(format!("redis-server on port {port} exited with {status}"));
            }
            if answers_ping(port) {
                return Ok(child);
            }
            if Instant::now() > deadline {
                stop(&mut child);
                return Err(format!(
                    "redis-server on port {port} did not answer PING within {STARTUP_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Whether a Redis server on `port` answers `PING` with `+PONG`.
    fn answers_ping(port: u16) -> bool {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200))
        else {
            return false;
        };
        // A server that accepts but never answers must not hang the test.
        if stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .is_err()
            || stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_err()
        {
            return false;
        }
        let expected = b"+PONG\r\n";
        let mut reply = [0; 7];
        stream.read_exact(&mut reply).is_ok() && &reply == expected
    }
}
