//! Outbound HTTP: a guest fetches only what its `allowed_outbound_hosts` names, and
//! neither a wildcard nor an entry naming them opens loopback, private networks or the
//! cloud metadata address unless the operator opened them
//! (`--outbound-private-networks`), whether the URL names them or a host name resolves
//! to them. An instance has at most
//! `--max-outbound-connections-per-instance` requests in flight.
//!
//! The attacker is `functions/hostile/outbound`, which fetches the URL in its query and
//! answers `status <code>` or `error <wasi:http error code>`. Every target is on
//! 127.0.0.1 or is denied before any connection is made: no test sends a packet beyond
//! loopback.

use super::{Watch, assert_bystander_served, deploy_bystander};
use crate::support::{Platform, TOKEN, Upload, error_of, write_manifest};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const ATTACKER_ROUTE: &str = "/outbound";
const DENIED: &str = "error ErrorCode::HttpRequestDenied";

/// A tiny HTTP server on 127.0.0.1 that answers every request with `body`, and counts
/// the connections it accepted.
struct TestServer {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl TestServer {
    fn start(body: &'static str) -> Self {
        Self::start_pausing(body, Duration::ZERO)
    }

    /// A server that answers each connection (on a thread of its own) `pause` after
    /// reading its request, so that requests overlap.
    fn start_pausing(body: &'static str, pause: Duration) -> Self {
        Self::serving(move |stream| {
            std::thread::sleep(pause);
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        })
    }

    /// A server that sends each connection `head_bytes` of a response head at once (in
    /// fields of 10 KB, so that a head of under 1 MB has fewer than Hyper's 100), then
    /// nothing for `hold`, then the head's end and an empty body.
    fn start_stalling(head_bytes: usize, hold: Duration) -> Self {
        Self::serving(move |stream| {
            let mut head = String::from("HTTP/1.1 200 OK\r\n");
            while head.len() < head_bytes {
                let line = format!("x-pad-{}: {}\r\n", head.len(), "a".repeat(10_000));
                head.push_str(&line);
            }
            if stream.write_all(head.as_bytes()).is_err() {
                return;
            }
            std::thread::sleep(hold);
            let _ = stream.write_all(b"content-length: 0\r\nconnection: close\r\n\r\n");
        })
    }

    /// A server that reads each connection's request head (on a thread of its own)
    /// and then has `respond` answer it.
    fn serving(respond: impl Fn(&mut std::net::TcpStream) + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding on loopback");
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = connections.clone();
        let respond = Arc::new(respond);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                let respond = respond.clone();
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                        head.push(byte[0]);
                    }
                    respond(&mut stream);
                });
            }
        });
        Self { port, connections }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// The port the platform listens on (its own `/metrics`, admin API...).
fn platform_port(platform: &Platform) -> u16 {
    platform
        .url
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .expect("the platform URL ends with its port")
}

/// Deploys the attacker for tenant `attacker` with `extra` in its function's table.
fn deploy_attacker(platform: &Platform, dir: &Path, extra: &str) {
    deploy_fetcher(
        platform,
        dir,
        ("attacker", "outbound"),
        ATTACKER_ROUTE,
        extra,
    );
}

/// Deploys the attacker's component as `(tenant, workflow)` on `route`.
fn deploy_fetcher(
    platform: &Platform,
    dir: &Path,
    (tenant, workflow): (&str, &str),
    route: &str,
    extra: &str,
) {
    let manifest = write_manifest(dir, workflow, tenant, "hostile-outbound", route, extra);
    platform.deploy(&manifest);
}

/// Has the attacker fetch `url`; returns its one-line report (and what follows).
fn fetch(platform: &Platform, url: &str) -> String {
    fetch_through(platform, ATTACKER_ROUTE, url)
}

/// Has the fetcher on `route` fetch `url`; returns its report.
fn fetch_through(platform: &Platform, route: &str, url: &str) -> String {
    let response = platform.get(&format!("{route}?url={url}"));
    assert_eq!(response.status(), 200, "the fetcher itself must answer");
    response.text().unwrap()
}

fn assert_denied(platform: &Platform, url: &str) {
    let report = fetch(platform, url);
    assert!(report.starts_with(DENIED), "{url} was not denied: {report}");
}

/// One test's world: a platform serving the bystander and the attacker (its table
/// given `extra`, which may name the test server's port), and a test server on loopback.
struct Scene {
    platform: Platform,
    server: TestServer,
    /// The platform's own port.
    port: u16,
    dir: tempfile::TempDir,
}

/// What an operator who opens loopback to outbound HTTP passes.
const LOOPBACK_OPENED: [&str; 3] = ["--no-demo", "--outbound-private-networks", "127.0.0.1,::1"];

impl Scene {
    fn start(body: &'static str, extra: impl FnOnce(u16) -> String) -> Self {
        Self::start_with(&["--no-demo"], body, extra)
    }

    /// As [`Self::start`], on a platform started with `args`.
    fn start_with(args: &[&str], body: &'static str, extra: impl FnOnce(u16) -> String) -> Self {
        let dir = faas_testing::temp_dir();
        let platform = Platform::start_with(args);
        deploy_bystander(&platform, dir.path());
        let server = TestServer::start(body);
        deploy_attacker(&platform, dir.path(), &extra(server.port));
        Self {
            port: platform_port(&platform),
            platform,
            server,
            dir,
        }
    }

    /// Asserts that every fetch of `urls` is denied while the bystander is watched, and
    /// that none reached the test server.
    fn assert_all_denied(&self, urls: &[String]) {
        let watch = Watch::start(&self.platform);
        for url in urls {
            assert_denied(&self.platform, url);
        }
        watch.finish();
        assert_eq!(
            self.server.connections(),
            0,
            "a denied request must not connect"
        );
        assert_bystander_served(&self.platform);
    }
}

#[test]
fn by_default_a_guest_cannot_fetch_the_platforms_own_metrics_or_anything_else() {
    let scene = Scene::start("reachable", |_| String::new());
    let (port, server) = (scene.port, scene.server.port);
    let mut urls = vec![format!("http://127.0.0.1:{port}/metrics"); 10];
    urls.extend([
        format!("http://localhost:{port}/metrics"),
        format!("http://[::1]:{port}/metrics"),
        format!("http://127.0.0.1:{server}/"),
        // Refused by the empty allow-list before any name is resolved or address
        // reached, so nothing can leave this machine.
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "https://example.com/".to_owned(),
    ]);
    scene.assert_all_denied(&urls);
}

#[test]
fn a_wildcard_host_does_not_open_loopback_private_or_cloud_metadata_addresses() {
    let scene = Scene::start("reachable", |_| {
        r#"allowed_outbound_hosts = ["http://*", "http://*:*", "*://*.localhost:*"]"#.into()
    });
    let (port, server) = (scene.port, scene.server.port);
    // Only loopback targets here: were the check ever broken, nothing would leave this
    // machine. Link-local (cloud metadata) and private addresses are the same rule,
    // covered address by address in `faas_workflow::outbound`'s unit tests.
    scene.assert_all_denied(&[
        format!("http://127.0.0.1:{port}/metrics"),
        format!("http://127.0.0.1:{server}/"),
        format!("http://127.1:{server}/"),
        format!("http://0.0.0.0:{server}/"),
        format!("http://[::1]:{port}/metrics"),
        format!("http://[::ffff:127.0.0.1]:{server}/"),
    ]);
}

#[test]
fn a_host_name_that_resolves_to_loopback_is_denied_under_a_wildcard() {
    let scene = Scene::start("reachable", |_| {
        r#"allowed_outbound_hosts = ["http://*:*"]"#.into()
    });
    // The URL names no address: only the resolved one shows where it goes.
    scene.assert_all_denied(&[
        format!("http://localhost:{}/", scene.server.port),
        format!("http://localhost:{}/metrics", scene.port),
    ]);
}

/// A tenant names its entries and chooses what their names resolve to: naming
/// loopback (as it could name the metadata address, or a private service of the
/// operator's, directly or by a name it points there) opens nothing by itself.
#[test]
fn an_explicit_entry_reaches_no_non_public_address_the_operator_did_not_open() {
    let scene = Scene::start("reachable", |server| {
        format!(
            r#"allowed_outbound_hosts = ["http://127.0.0.1:{server}", "http://localhost:{server}", "http://[::1]:{server}"]"#
        )
    });
    let server = scene.server.port;
    scene.assert_all_denied(&[
        format!("http://127.0.0.1:{server}/"),
        format!("http://localhost:{server}/"),
        format!("http://[::1]:{server}/"),
    ]);
}

#[test]
fn an_explicit_loopback_entry_lets_that_fetch_through_and_no_other() {
    let scene = Scene::start_with(&LOOPBACK_OPENED, "hello from the test server", |server| {
        format!(
            r#"allowed_outbound_hosts = ["http://127.0.0.1:{server}", "http://localhost:{server}"]"#
        )
    });
    let (platform, server) = (&scene.platform, scene.server.port);
    let report = fetch(platform, &format!("http://127.0.0.1:{server}/x"));
    assert_eq!(report, "status 200\nhello from the test server");
    // `localhost` named explicitly is allowed to resolve to loopback.
    let report = fetch(platform, &format!("http://localhost:{server}/x"));
    assert_eq!(report, "status 200\nhello from the test server");
    assert_eq!(scene.server.connections(), 2);
    // The entry names that port only: the platform's own port stays closed.
    assert_denied(
        platform,
        &format!("http://127.0.0.1:{}/metrics", scene.port),
    );
    // And that scheme only.
    assert_denied(platform, &format!("https://127.0.0.1:{server}/x"));
    assert_eq!(scene.server.connections(), 2);
    assert_bystander_served(platform);
}

#[test]
fn a_network_opened_to_one_tenant_stays_closed_to_every_other() {
    // The operator opens loopback (standing in for a database's private network) to
    // tenant `partner` alone; the attacker names the same address in its own entry.
    let opened = [
        "--no-demo",
        "--outbound-private-networks",
        "partner=127.0.0.1,partner=::1",
    ];
    let scene = Scene::start_with(&opened, "the partner's database", |server| {
        loopback_entry(server)
    });
    let (platform, server) = (&scene.platform, scene.server.port);
    deploy_fetcher(
        platform,
        scene.dir.path(),
        ("partner", "partner-db"),
        "/partner",
        &loopback_entry(server),
    );
    let url = format!("http://127.0.0.1:{server}/x");
    let watch = Watch::start(platform);
    assert_denied(platform, &url);
    assert_eq!(scene.server.connections(), 0, "the attacker connected");
    assert_eq!(
        fetch_through(platform, "/partner", &url),
        "status 200\nthe partner's database"
    );
    assert_eq!(scene.server.connections(), 1);
    assert_denied(platform, &url);
    watch.finish();
    assert_eq!(scene.server.connections(), 1);
    assert_bystander_served(platform);
}

#[test]
fn an_instance_has_at_most_its_limit_of_outbound_requests_in_flight() {
    let dir = faas_testing::temp_dir();
    let platform = Platform::start_with(
        &[
            &LOOPBACK_OPENED[..],
            &["--max-outbound-connections-per-instance", "8"],
        ]
        .concat(),
    );
    deploy_bystander(&platform, dir.path());
    // Each answer comes half a second late, so the guest's requests are all in flight
    // together.
    let server = TestServer::start_pausing("late", Duration::from_millis(500));
    let port = server.port;
    deploy_attacker(
        &platform,
        dir.path(),
        &format!(r#"allowed_outbound_hosts = ["http://127.0.0.1:{port}"]"#),
    );
    let watch = Watch::start(&platform);
    let url = format!("http://127.0.0.1:{port}/x&parallel=50");
    assert_eq!(
        fetch(&platform, &url),
        "42 x error ErrorCode::ConnectionLimitReached\n8 x status 200\n"
    );
    assert_eq!(
        server.connections(),
        8,
        "one connection per request let through"
    );
    // The limit is on requests in flight: once they are over, the next ones go.
    let url = format!("http://127.0.0.1:{port}/x&parallel=8");
    assert_eq!(fetch(&platform, &url), "8 x status 200\n");
    watch.finish();
    assert_bystander_served(&platform);
}

#[test]
fn a_malformed_entry_is_refused_naming_its_line_and_field() {
    let dir = faas_testing::temp_dir();
    let platform = Platform::start();
    deploy_bystander(&platform, dir.path());
    let manifest = write_manifest(
        dir.path(),
        "outbound",
        "attacker",
        "hostile-outbound",
        ATTACKER_ROUTE,
        r#"allowed_outbound_hosts = ["api.example.com"]"#,
    );

    // The CLI checks the manifest before uploading anything.
    let output = platform.faas(&["deploy", manifest.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(":6:27: functions.main.allowed_outbound_hosts[0]: "),
        "{stderr}"
    );
    assert!(stderr.contains("no scheme"), "{stderr}");

    // So does the server, which trusts no client.
    let text = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("api.example.com", "http://127.0.0.1:80800");
    let component = faas_testing::component("hostile-outbound");
    let response = Upload::of(&text, &[("main", &component)]).send(&platform.url, TOKEN);
    assert_eq!(response.status(), 400);
    let error = error_of(response);
    assert_eq!(error["kind"], "manifest");
    assert_eq!(error["line"], 6);
    assert_eq!(error["field"], "functions.main.allowed_outbound_hosts[0]");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("invalid port `80800`"), "{message}");

    // Nothing was deployed.
    assert_eq!(platform.get(ATTACKER_ROUTE).status(), 404);
    assert_bystander_served(&platform);
}

/// The allow-list entry, and a deadline far above what the tests below wait, for an
/// attacker fetching from `port` on loopback.
fn loopback_entry(port: u16) -> String {
    format!("allowed_outbound_hosts = [\"http://127.0.0.1:{port}\"]\ntimeout_ms = 60000")
}

#[test]
fn an_endless_response_head_fails_at_the_read_limit_and_holds_no_more_of_the_worker() {
    let dir = faas_testing::temp_dir();
    let platform = Platform::start_with(&LOOPBACK_OPENED);
    deploy_bystander(&platform, dir.path());
    // 400 KB of head: under Hyper's default read limit (about 408 KiB), over the
    // worker's (64 KiB). The server then holds it for 20 s.
    let server = TestServer::start_stalling(400_000, Duration::from_secs(20));
    deploy_attacker(&platform, dir.path(), &loopback_entry(server.port));
    let peak_before = platform.memory("VmHWM");
    let watch = Watch::start(&platform);
    // 8 instances of 32 requests each.
    let path = format!(
        "{ATTACKER_ROUTE}?url=http://127.0.0.1:{}/x&parallel=32",
        server.port
    );
    for (status, report) in super::guest_memory::get_at_once(&platform, &path, 8) {
        assert_eq!(status, 200, "{report}");
        assert!(
            report.starts_with("32 x error ErrorCode::HttpResponseHeaderSize"),
            "each request fails as its head passes the limit, not when the server \
             lets go: {report}"
        );
    }
    watch.finish();
    assert_bystander_served(&platform);
    // 256 heads of 400 KB would be 100 MB.
    let grew = platform.memory("VmHWM").saturating_sub(peak_before) >> 20;
    assert!(grew < 64, "the platform's peak memory grew by {grew} MiB");
}

#[test]
fn requests_waiting_on_their_heads_count_in_their_tenants_guest_memory_share() {
    let dir = faas_testing::temp_dir();
    let platform =
        Platform::start_with(&[&LOOPBACK_OPENED[..], &["--tenant-guest-memory-mb", "24"]].concat());
    deploy_bystander(&platform, dir.path());
    // Each connection reads 60 KB of head, just under the worker's read limit, and
    // waits 3 s for the rest: what it holds is more than its handles.
    let server = TestServer::start_stalling(60_000, Duration::from_secs(3));
    deploy_attacker(&platform, dir.path(), &loopback_entry(server.port));
    let watch = Watch::start(&platform);
    let path = format!(
        "{ATTACKER_ROUTE}?url=http://127.0.0.1:{}/x&parallel=32",
        server.port
    );
    let answers = super::guest_memory::get_at_once(&platform, &path, 4);
    watch.finish();
    let mut served = 0;
    for (status, body) in &answers {
        if *status == 200 {
            assert_eq!(body, "32 x status 200\n");
            served += 1;
        } else {
            assert_eq!(*status, 503, "{body}");
            assert!(body.contains("memory_budget"), "{body}");
        }
    }
    // Four instances of 32 waiting connections (8 MiB each as claimed now, 2 MiB as
    // their handles alone) cannot all fit a share of 24 MiB (claiming together, all
    // four may be refused).
    assert!(served < 4, "{served} of 4 ran: {answers:?}");
    assert_bystander_served(&platform);
}

#[test]
fn a_url_with_user_info_is_refused_before_it_connects() {
    let scene = Scene::start_with(&LOOPBACK_OPENED, "reachable", |port| {
        format!(r#"allowed_outbound_hosts = ["http://127.0.0.1:{port}"]"#)
    });
    let server = scene.server.port;
    // The check and the connection would see 127.0.0.1; the `host` header would have
    // carried the part before `@` to whatever routes by it.
    let report = fetch(
        &scene.platform,
        &format!("http://internal.example:80@127.0.0.1:{server}/x"),
    );
    assert!(
        report.starts_with("error ErrorCode::HttpRequestUriInvalid"),
        "{report}"
    );
    assert_eq!(scene.server.connections(), 0);
    assert_bystander_served(&scene.platform);
}

#[test]
fn wasi_sockets_reach_nothing_even_where_outbound_http_may() {
    // Loopback is opened to outbound HTTP and the function's allow-list names the test
    // server: `wasi:sockets` (linked for every component, with Wasmtime's default of
    // no network) must not be a way around the list.
    let scene = Scene::start_with(&LOOPBACK_OPENED, "reachable", |port| {
        format!(r#"allowed_outbound_hosts = ["http://127.0.0.1:{port}"]"#)
    });
    let server = scene.server.port;
    let datagrams = std::net::UdpSocket::bind("127.0.0.1:0").expect("a UDP port");
    let udp = datagrams.local_addr().unwrap().port();
    datagrams
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let watch = Watch::start(&scene.platform);
    let response = scene
        .platform
        .get(&format!("{ATTACKER_ROUTE}?sockets={server}&udp={udp}"));
    assert_eq!(response.status(), 200);
    let report = response.text().unwrap();
    watch.finish();
    for way in ["lookup", "tcp", "udp"] {
        assert!(
            report
                .lines()
                .any(|line| line.starts_with(&format!("{way} error "))),
            "{way} was not refused: {report}"
        );
    }
    assert_eq!(scene.server.connections(), 0, "{report}");
    let mut buffer = [0u8; 16];
    assert!(
        datagrams.recv(&mut buffer).is_err(),
        "a datagram arrived: {report}"
    );
    assert_bystander_served(&scene.platform);
}
