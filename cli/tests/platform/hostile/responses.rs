//! What a guest's response head does to the HTTP/2 connection a gateway shares with a
//! worker in services mode: every tenant's events to that worker travel on it, so a
//! head the connection cannot carry must fail its own event only. An informational
//! status (1xx) followed by a body is a connection error in HTTP/2, which failed every
//! event in flight on it; headers past HTTP/2's default 16 KiB list reset the stream,
//! though a guest may write 64 KiB of them, as embedded mode serves.

use crate::logs::wait_for_line;
use crate::services::Services;
use crate::support::{Platform, TOKEN, deploy_at, metrics_at, sample_value, write_manifest};
use std::time::Duration;

/// Deploys the attacker (`linger`, tenant `mallory`) and the bystander (`misbehave`,
/// whose `/misbehave/slow` holds its request in flight) through the gateway at `url`.
fn deploy_both(url: &str, dir: &std::path::Path) {
    let attacker = write_manifest(dir, "answers", "mallory", "linger", "/linger/...", "");
    deploy_at(url, &attacker);
    let bystander = write_manifest(
        dir,
        "patient",
        "bystander",
        "misbehave",
        "/misbehave/...",
        "",
    );
    deploy_at(url, &bystander);
}

#[test]
fn a_guests_informational_status_fails_its_own_event_and_no_one_elses() {
    let dir = faas_testing::temp_dir();
    let services = Services::start(&["w1"]);
    deploy_both(&services.url, dir.path());
    // In flight on the gateway's connection to w1 while the attack runs.
    let url = services.url.clone();
    let slow = std::thread::spawn(move || {
        let response = crate::support::client()
            .get(format!("{url}/misbehave/slow?ms=3000"))
            .timeout(Duration::from_secs(30))
            .send()
            .unwrap();
        (response.status(), response.text().unwrap_or_default())
    });
    std::thread::sleep(Duration::from_millis(500));
    for status in [100, 103, 199] {
        let response = services.get(&format!("/linger/answer?status={status}"));
        assert_eq!(response.status(), 500, "status {status}");
        let body = response.text().unwrap();
        assert!(
            body.contains("bad_response") && body.contains(&status.to_string()),
            "{body}"
        );
    }
    let (status, text) = slow.join().unwrap();
    assert_eq!(status, 200, "the bystander's request in flight: {text}");
    assert!(text.contains("slept 3000 ms"), "{text}");
    // A final status still goes through.
    let response = services.get("/linger/answer?status=201");
    assert_eq!(response.status(), 201);

    // Embedded mode refuses it the same way.
    let platform = Platform::start_with(&["--no-demo"]);
    deploy_both(&platform.url, dir.path());
    let response = platform.get("/linger/answer?status=103");
    assert_eq!(response.status(), 500);
    assert!(response.text().unwrap().contains("bad_response"));
}

#[test]
fn a_response_head_as_large_as_a_guest_may_write_crosses_the_workers_connection() {
    let dir = faas_testing::temp_dir();
    let services = Services::start(&["w1"]);
    deploy_both(&services.url, dir.path());
    let platform = Platform::start_with(&["--no-demo"]);
    deploy_both(&platform.url, dir.path());
    for url in [&services.url, &platform.url] {
        let response = crate::support::client()
            .get(format!("{url}/linger/answer?header-kib=40"))
            .send()
            .unwrap();
        assert_eq!(response.status(), 200, "{url}");
        assert!(response.headers().len() >= 40, "{url}");
        assert_eq!(response.text().unwrap(), "answered\n");
    }
}

/// A guest's response body that its instance left unfinished (it trapped, or returned
/// first) ends with an error, never a clean end that passes for a whole body; one it
/// finished before trapping is whole. In embedded and services mode, with another
/// tenant's request in flight on the same worker connection meanwhile.
#[test]
fn a_guest_that_fails_after_its_head_cuts_its_own_body_and_no_one_elses() {
    let dir = faas_testing::temp_dir();
    let services = Services::start(&["w1"]);
    deploy_both(&services.url, dir.path());
    let platform = Platform::start_with(&["--no-demo"]);
    deploy_both(&platform.url, dir.path());
    let cut = r#"faas_function_failures_total{tenant="mallory",workflow="answers",function="main",cause="body_cut"}"#;
    let trapped = "function `main` trapped";
    for url in [&platform.url, &services.url] {
        // In flight on the gateway's connection to w1 (services mode) meanwhile.
        let slow_url = format!("{url}/misbehave/slow?ms=2000");
        let slow = std::thread::spawn(move || {
            let response = crate::support::client()
                .get(slow_url)
                .timeout(Duration::from_secs(30))
                .send()
                .unwrap();
            (response.status(), response.text().unwrap_or_default())
        });
        std::thread::sleep(Duration::from_millis(300));

        // The head and a first chunk went out before the trap: the body must not look
        // complete (Wasmtime ends the body of a dropped instance as if it were).
        assert_eq!(
            read_to_end(url, "/linger/trap"),
            Err(b"first chunk\n".to_vec())
        );
        // Its response went out as a success: the logs say why it failed, once, and
        // the failure is counted.
        let failures = lines_containing(url, trapped, 1);
        assert_eq!(failures.len(), 1, "{url}: {failures:?}");
        assert_eq!(
            (&failures[0]["source"], &failures[0]["level"]),
            (&"platform".into(), &"error".into()),
            "{url}"
        );
        assert_eq!(sample_value(&metrics_at(url), cut), 1.0, "{url}");

        // Returning with the body unfinished cuts it too, and says so.
        assert_eq!(
            read_to_end(url, "/linger/leave"),
            Err(b"first chunk\n".to_vec())
        );
        let left = lines_containing(url, "returned without finishing its response body", 1);
        assert_eq!(left.len(), 1, "{url}: {left:?}");
        assert_eq!(sample_value(&metrics_at(url), cut), 2.0, "{url}");

        // A body finished before the trap is whole; the trap is still logged.
        assert_eq!(
            read_to_end(url, "/linger/finish-then-trap"),
            Ok(b"first chunk\n".to_vec())
        );
        assert_eq!(lines_containing(url, trapped, 2).len(), 2, "{url}");
        assert_eq!(sample_value(&metrics_at(url), cut), 2.0, "{url}");

        let (status, text) = slow.join().unwrap();
        assert_eq!(
            status, 200,
            "{url}: the bystander's request in flight: {text}"
        );
        assert!(text.contains("slept 2000 ms"), "{text}");
        // The next event of the attacker is served by a fresh instance.
        assert_eq!(
            crate::support::client()
                .get(format!("{url}/linger/answer"))
                .send()
                .unwrap()
                .text()
                .unwrap(),
            "answered\n"
        );
    }
}

/// GETs `path` from the gateway at `url`, which must answer 200: the whole body, or
/// as much of it as came before it ended with an error.
fn read_to_end(url: &str, path: &str) -> Result<Vec<u8>, Vec<u8>> {
    let mut response = crate::support::client()
        .get(format!("{url}{path}"))
        .send()
        .unwrap();
    let mut body = Vec::new();
    let read = std::io::Read::read_to_end(&mut response, &mut body);
    let status = response.status();
    assert_eq!(
        status,
        200,
        "{url}{path}: {}",
        String::from_utf8_lossy(&body)
    );
    read.map(|_| body.clone()).map_err(|_| body)
}

/// The lines of workflow `answers` that contain `needle`, once there are `count` of
/// them (or after 10 s, however many there are).
fn lines_containing(url: &str, needle: &str, count: usize) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let found: Vec<_> = wait_for_line(url, TOKEN, &["answers"], needle)
            .into_iter()
            .filter(|line| line["text"].as_str().unwrap().contains(needle))
            .collect();
        if found.len() >= count || std::time::Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A function is told the authority its client asked for, over HTTP/1.1 (`Host`) and
/// HTTP/2 (`:authority`), in services mode as in embedded mode. In services mode the
/// gateway addresses the request to a worker, and the function was told that worker's
/// address, which the platform keeps from tenants.
#[test]
fn a_function_sees_its_clients_authority_never_the_workers_address() {
    let dir = faas_testing::temp_dir();
    let services = Services::start(&["w1"]);
    deploy_both(&services.url, dir.path());
    let platform = Platform::start_with(&["--no-demo"]);
    deploy_both(&platform.url, dir.path());
    let h2 = reqwest::blocking::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    for url in [&services.url, &platform.url] {
        let asked = |client: &reqwest::blocking::Client, host: Option<&str>| {
            let mut request = client.get(format!("{url}/linger/authority"));
            if let Some(host) = host {
                request = request.header("host", host);
            }
            let response = request.send().unwrap();
            assert_eq!(response.status(), 200, "{url}");
            response.text().unwrap().trim().to_owned()
        };
        let http1 = crate::support::client();
        assert_eq!(
            asked(&http1, Some("shop.example:8080")),
            "shop.example:8080"
        );
        let gateway = url.strip_prefix("http://").unwrap();
        assert_eq!(asked(&http1, None), gateway, "over HTTP/1.1");
        assert_eq!(asked(&h2, None), gateway, "over HTTP/2");
    }
}

/// Opens an HTTP/2 connection from `source` to the gateway at `url` that grants no
/// flow-control window to its streams: a client that never reads what it asked for.
pub(super) async fn unreading_connection(
    url: &str,
    source: [u8; 4],
) -> hyper::client::conn::http2::SendRequest<String> {
    let stream = crate::support::connect_from(source, url.trim_start_matches("http://"));
    stream.set_nonblocking(true).unwrap();
    let stream = tokio::net::TcpStream::from_std(stream).unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(0)
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

/// GETs `url` on `sender` and returns the response once its head is in (status 200).
pub(super) async fn get_head(
    sender: &mut hyper::client::conn::http2::SendRequest<String>,
    url: &str,
) -> hyper::Response<hyper::body::Incoming> {
    let request = hyper::Request::get(url).body(String::new()).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(20), sender.send_request(request))
        .await
        .expect("the head arrives")
        .unwrap();
    assert_eq!(response.status(), 200);
    response
}

/// Services mode: what a client leaves unread (a large answer) and what a guest leaves
/// unread (a large request body) wait in the HTTP/2 connection between the gateway and
/// a worker, each up to its stream's flow-control window. With hyper's defaults (2 MiB
/// a stream, 5 MiB the whole connection) three such requests held the connection's
/// window, and no tenant's body moved on it until they went.
#[test]
fn what_is_left_unread_holds_no_other_tenants_bodies_on_the_workers_connection() {
    let dir = faas_testing::temp_dir();
    let services = Services::start(&["w1"]);
    deploy_both(&services.url, dir.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let url = services.url.clone();
    // Four answers of 3 MiB, never read.
    let held = runtime.block_on(async {
        let mut sender = unreading_connection(&url, [127, 0, 0, 2]).await;
        let mut held = Vec::new();
        for _ in 0..4 {
            sender.ready().await.unwrap();
            held.push(get_head(&mut sender, &format!("{url}/linger/answer?body-kib=3072")).await);
        }
        held
    });
    // Four request bodies of 3 MiB that their guest never reads, held in flight.
    let unread: Vec<_> = (0..4)
        .map(|_| {
            let url = services.url.clone();
            std::thread::spawn(move || {
                crate::support::client()
                    .post(format!("{url}/linger/sleep?ms=15000"))
                    .body(vec![b'u'; 3 << 20])
                    .timeout(Duration::from_secs(30))
                    .send()
                    .map(|response| response.status())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    // The bystander's body goes to its worker, and its answer comes back.
    let started = std::time::Instant::now();
    let response = crate::support::client()
        .post(format!("{}/misbehave/slow?ms=10", services.url))
        .body(vec![b'b'; 1 << 20])
        .timeout(Duration::from_secs(10))
        .send()
        .expect("the bystander is served while bodies are left unread");
    assert_eq!(response.status(), 200);
    let answer = crate::support::client()
        .get(format!("{}/linger/answer?body-kib=1024", services.url))
        .timeout(Duration::from_secs(10))
        .send()
        .and_then(|response| response.bytes())
        .expect("an answer of 1 MiB arrives while others are left unread");
    assert_eq!(answer.len(), 1 << 20);
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(held);
    drop(runtime);
    for request in unread {
        let _ = request.join();
    }
}

/// Posts `body` to `path` of the platform at `url` from `source` on a connection of its
/// own, and reads only the answer's status line: the rest stays unread.
fn post_unread(
    url: &str,
    source: [u8; 4],
    path: &str,
    body: &str,
) -> (std::net::TcpStream, String) {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut stream = crate::support::connect_from(source, addr);
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: gateway\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut status = [0u8; 12];
    stream.read_exact(&mut status).unwrap();
    (stream, String::from_utf8_lossy(&status).into_owned())
}

/// Writes a one-step workflow `big` (tenant `hog`, route `/big`) whose output is a
/// blob of as many bytes as it is asked for, of a step allowed `memory_mb`.
fn big_outputs(dir: &std::path::Path, memory_mb: u32) -> std::path::PathBuf {
    std::fs::copy(
        crate::support::repo("functions/regions/blob.km"),
        dir.join("blob.km"),
    )
    .unwrap();
    let manifest = format!(
        "name = \"big\"\ntenant = \"hog\"\n\n[functions.produce]\ncomponent = \"{}\"\n\
         kind = \"step\"\nconfig = {{ role = \"produce\" }}\nmemory_mb = {memory_mb}\n\
         timeout_ms = 60000\n\n\
         [steps.produce]\nfunction = \"produce\"\ninput = \"text\"\noutput = \"blob.km:Blob\"\n\n\
         [[triggers.http]]\nroute = \"/big\"\nstep = \"produce\"\n",
        faas_testing::component_path("region-transfer").display()
    );
    let path = dir.join("big.toml");
    std::fs::write(&path, manifest).unwrap();
    path
}

/// A run's output is held until it is sent, and counted in its client's share of the
/// body budget for that long. It was held uncounted: a client that asked a workflow
/// for large outputs and never read them had the gateway every tenant shares hold any
/// number of them (up to 256 requests an address).
#[test]
fn run_outputs_a_client_leaves_unread_hold_at_most_its_share_of_the_body_budget() {
    let dir = faas_testing::temp_dir();
    let platform = Platform::start_with(&["--no-demo", "--client-body-budget-mb", "64"]);
    super::deploy_bystander(&platform, dir.path());
    platform.deploy(&big_outputs(dir.path(), 128));
    let before = platform.memory("VmRSS");
    // Six outputs of 24 MiB, never read: two fit the client's 64 MiB.
    let size = (24 << 20).to_string();
    let unread: Vec<_> = (0..6)
        .map(|_| post_unread(&platform.url, [127, 0, 0, 9], "/big", &size))
        .collect();
    let served = unread
        .iter()
        .filter(|(_, status)| status.contains(" 200"))
        .count();
    let refused = unread
        .iter()
        .filter(|(_, status)| status.contains(" 429"))
        .count();
    assert_eq!(
        (served, refused),
        (2, 4),
        "{:?}",
        unread.iter().map(|(_, status)| status).collect::<Vec<_>>()
    );
    super::assert_bystander_served(&platform);
    let grew = platform.memory("VmRSS").saturating_sub(before);
    assert!(grew < 112 << 20, "the platform grew by {} MiB", grew >> 20);
    // Once the client goes, its outputs are given back: another output fits.
    drop(unread);
    std::thread::sleep(Duration::from_millis(500));
    let (_stream, status) = post_unread(&platform.url, [127, 0, 0, 9], "/big", &size);
    assert!(status.contains(" 200"), "{status}");
}

/// In services mode the gateway reads a worker's run reply whole before it looks at
/// the output in it, and counted it only then: one run's 384 MiB output, refused at
/// the client's 64 MiB, grew the gateway by 384 MiB first (and more in growing its
/// buffer), so a few at once took the gateway every tenant shares past its memory.
/// Now the reply counts as it arrives, and is read no further once it does not fit.
#[test]
fn services_mode_a_run_reply_past_its_clients_share_is_read_no_further() {
    let services = Services::start_full(&["w1"], &[], &["--client-body-budget-mb", "64"]);
    let dir = faas_testing::temp_dir();
    deploy_at(&services.url, &big_outputs(dir.path(), 500));
    let size = (16 << 20).to_string();
    let (_stream, status) = post_unread(&services.url, [127, 0, 0, 9], "/big", &size);
    assert!(status.contains(" 200"), "{status}");
    let before = services.gateway_memory("VmHWM");
    let size = (384 << 20).to_string();
    let (_stream, status) = post_unread(&services.url, [127, 0, 0, 9], "/big", &size);
    assert!(status.contains(" 429"), "{status}");
    let grew = services.gateway_memory("VmHWM").saturating_sub(before) >> 20;
    assert!(grew < 160, "the gateway's peak memory grew by {grew} MiB");
    let size = (16 << 20).to_string();
    let (_stream, status) = post_unread(&services.url, [127, 0, 0, 10], "/big", &size);
    assert!(status.contains(" 200"), "the next run is served: {status}");
}

/// A gateway reaches a worker over one HTTP/2 connection of at most 1,024 streams
/// (`faas_invoke::MAX_STREAMS`), and an event holds its stream while it waits at the
/// worker for one of its tenant's instance slots. Mallory's 1,100 requests to a route
/// that sleeps, behind its two slots, took every stream, and the bystander's events to
/// that worker waited in the gateway until mallory's were done. Now one tenant has at
/// most half of a connection's streams (`MAX_STREAMS_PER_TENANT`), and its other
/// events wait in the gateway, holding none.
#[test]
fn one_tenants_events_waiting_for_its_slots_leave_the_workers_streams_to_others() {
    const MALLORY: [u8; 4] = [127, 0, 0, 3];
    let dir = faas_testing::temp_dir();
    let mut services = Services::start_full(&[], &[], &["--max-requests-per-client", "4096"]);
    // Mallory's events run out their sleep whoever went: the worker lets them go
    // when it stops.
    let worker = [
        "--max-instances-per-tenant",
        "2",
        "--shutdown-grace-ms",
        "1000",
    ];
    services.start_worker_with("w1", &worker);
    let sleeper = write_manifest(
        dir.path(),
        "sleeper",
        "mallory",
        "linger",
        "/linger/...",
        "timeout_ms = 300000",
    );
    deploy_at(&services.url, &sleeper);
    let hello = write_manifest(dir.path(), "greeter", "bystander", "hello", "/hello", "");
    deploy_at(&services.url, &hello);
    assert_eq!(services.get("/hello?name=b").status(), 200);

    let addr = services.url.trim_start_matches("http://").to_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut attack = runtime.block_on(super::connections::open_streams(
        MALLORY,
        &addr,
        11,
        100,
        || {
            hyper::Request::get(format!("http://{addr}/linger/sleep?ms=300000"))
                .body(String::new())
                .unwrap()
        },
    ));
    // Mallory's two slots run; the rest of its events wait, at the worker or here.
    services.wait_for("mallory's events to run", |_| attack.answered() >= 2);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        attack.answered(),
        2,
        "mallory's events were answered: {:?}",
        attack.take_answered(&runtime)
    );

    let url = services.url.clone();
    let bystander = std::thread::spawn(move || {
        crate::support::client()
            .get(format!("{url}/hello?name=bystander"))
            .timeout(Duration::from_secs(30))
            .send()
            .map(|response| response.status().as_u16())
    });
    let served = bystander.join().unwrap();
    assert_eq!(
        attack.answered(),
        2,
        "mallory's events were let go: {:?}",
        attack.take_answered(&runtime)
    );
    assert_eq!(
        served.ok(),
        Some(200),
        "the bystander was not served while mallory's events waited"
    );
    drop(attack);
    drop(runtime);
}
