//! A removed tenant's data goes with it. Without that, a tenant created again under a
//! removed tenant's name (for someone else, perhaps) would read the removed one's
//! key-value entries and streams. Here tenant `victim`'s counters are removed with it,
//! a `victim` created again counts from nothing, and tenant `hog`'s entries, written
//! throughout, are all still there. A removal whose data step fails keeps the name
//! from being created again until a second removal, or the next start, finishes it.

use super::deploys::{answered_early, probe};
use super::quotas::{count, deploy_kv, operator, send};
use super::scene::Scene;
use crate::services::Services;
use crate::support::{Platform, TOKEN, deploy_at, faas_as, write_manifest};
use faas_testing::RedisServer;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Tenants `hog` and `victim`, each with key-value entries, and `victim` with no
/// workflow left: ready to be removed. Returns the manifests' folder.
fn victim_with_data(url: &str) -> tempfile::TempDir {
    operator(url, &["create", "hog"]);
    operator(url, &["create", "victim"]);
    let dir = faas_testing::temp_dir();
    deploy_kv(url, dir.path());
    count(url, "visits", 3);
    count(url, "orders", 1);
    assert_eq!(send(url, "PUT", "/kv-filler/key/kept", "v").0, 204);
    assert!(faas_as(url, TOKEN, &["rm", "counter"]).status.success());
    dir
}

/// Asserts that tenant `hog` is served and its entry is still there.
fn assert_hogs_entry_kept(url: &str) {
    assert_eq!(
        send(url, "GET", "/kv-filler/key/kept", ""),
        (200, "v".into())
    );
}

/// Runs the removal on the platform at `url`.
fn check_removal(url: &str) {
    let dir = victim_with_data(url);
    let removed = faas_as(url, TOKEN, &["tenant", "rm", "victim", "--output", "json"]);
    assert!(removed.status.success(), "{removed:?}");
    let removed: serde_json::Value = serde_json::from_slice(&removed.stdout).unwrap();
    assert_eq!(removed["removed_kv_entries"], 2, "{removed}");

    operator(url, &["create", "victim"]);
    check_victim_starts_afresh(url, dir.path());
}

/// Deploys the victim's counter again, created again, and checks that its counters
/// start from nothing while `hog`'s entry is still there.
fn check_victim_starts_afresh(url: &str, dir: &Path) {
    let again = write_manifest(dir, "counter", "victim", "kv-counter", "/counter/...", "");
    deploy_at(url, &again);
    // From nothing: the first increment of each counter gives 1.
    count(url, "visits", 1);
    count(url, "orders", 1);
    assert_hogs_entry_kept(url);
}

#[test]
fn a_removed_tenants_key_value_entries_go_with_it_and_anothers_stay() {
    let platform = Platform::start();
    check_removal(&platform.url);
}

/// In services mode the entries are in Redis, which every gateway and worker shares.
#[test]
fn services_mode_a_removed_tenants_key_value_entries_go_with_it_and_anothers_stay() {
    let services = Services::start(&["w1"]);
    check_removal(&services.url);
}

/// Embedded mode with Redis, keeping its state in `data`: the tenant is in the state
/// database, its entries in Redis.
fn platform_with_redis(data: &Path, redis: &RedisServer) -> Platform {
    Platform::start_in(data, &["--no-demo", "--redis", &redis.url()])
}

/// Removes `victim` while Redis is stopped: the tenant goes and its entries cannot, so
/// the name cannot be created again (which would hand the next owner the entries).
/// Another tenant is served meanwhile, its data whole.
fn fail_victims_removal(url: &str, redis: &RedisServer) {
    redis.pause();
    let failed = faas_as(url, TOKEN, &["tenant", "rm", "victim"]);
    redis.resume();
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "{failed:?}");
    assert!(
        stderr.contains("tenant `victim` is removed but not all of its data"),
        "{stderr}"
    );
    let refused = faas_as(url, TOKEN, &["tenant", "create", "victim"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        stderr.contains("finish with `faas tenant rm victim`"),
        "{stderr}"
    );
    assert_hogs_entry_kept(url);
}

/// A second removal, with Redis back, removes the rest and releases the name.
#[test]
fn a_removal_whose_data_step_fails_keeps_the_name_until_it_is_finished() {
    let redis = RedisServer::start();
    let data = faas_testing::temp_dir();
    let platform = platform_with_redis(data.path(), &redis);
    let url = &platform.url;
    let dir = victim_with_data(url);
    fail_victims_removal(url, &redis);

    let finished = faas_as(url, TOKEN, &["tenant", "rm", "victim", "--output", "json"]);
    assert!(finished.status.success(), "{finished:?}");
    let finished: serde_json::Value = serde_json::from_slice(&finished.stdout).unwrap();
    assert_eq!(finished["removed_kv_entries"], 2, "{finished}");
    operator(url, &["create", "victim"]);
    check_victim_starts_afresh(url, dir.path());
}

/// A removal left half-way is finished when the platform starts again.
#[test]
fn a_removal_left_half_way_is_finished_at_the_next_start() {
    let redis = RedisServer::start();
    let data = faas_testing::temp_dir();
    let platform = platform_with_redis(data.path(), &redis);
    let dir = victim_with_data(&platform.url);
    fail_victims_removal(&platform.url, &redis);
    drop(platform);

    let platform = platform_with_redis(data.path(), &redis);
    let url = &platform.url;
    operator(url, &["create", "victim"]);
    check_victim_starts_afresh(url, dir.path());
}

/// A deploy upload sent but for its last bytes: the gateway authenticated it and
/// reads on, waiting for the rest.
struct UnfinishedUpload {
    stream: TcpStream,
    rest: Vec<u8>,
}

impl UnfinishedUpload {
    /// Starts uploading `manifest` (the hello component as function `main`) to `url`
    /// with `token`.
    fn start(url: &str, token: &str, manifest: &Path) -> Self {
        use faas_gateway::admin::{COMPONENT_PART, HEAD_PART};
        let text = std::fs::read_to_string(manifest).unwrap();
        let hello = faas_testing::component("hello");
        let upload = crate::support::Upload::of(&text, &[("main", &hello)]);
        let mut body = format!(
            "--cut\r\nContent-Disposition: form-data; name=\"{HEAD_PART}\"\r\n\r\n{}\r\n\
             --cut\r\nContent-Disposition: form-data; name=\"{COMPONENT_PART}\"; \
             filename=\"main\"\r\n\r\n",
            serde_json::to_string(&upload.head).unwrap()
        )
        .into_bytes();
        body.extend_from_slice(&hello);
        body.extend_from_slice(b"\r\n--cut--\r\n");
        let addr = url.strip_prefix("http://").expect("an http:// URL");
        let mut stream = TcpStream::connect(addr).unwrap();
        write!(
            stream,
            "POST /admin/v1/workflows HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: multipart/form-data; boundary=cut\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            body.len()
        )
        .unwrap();
        let rest = body.split_off(body.len() - 8);
        stream.write_all(&body).unwrap();
        Self { stream, rest }
    }

    /// Sends the rest; returns the answer's status and body.
    fn finish(mut self) -> (u16, String) {
        self.stream.write_all(&self.rest).unwrap();
        self.stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut answer = String::new();
        self.stream.read_to_string(&mut answer).unwrap();
        let status = answer
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP answer: {answer}"));
        (status, answer)
    }
}

/// Waits until tenant `token`'s deploys at once are all taken (the gateway started
/// with `--max-deploys-per-tenant 1`): its `upload` under way was authenticated and
/// admitted; or, if `upload` was refused while a probe held that deploy, its answer,
/// to start again ([`probe`]).
fn wait_until_admitted(
    url: &str,
    token: &str,
    upload: &mut UnfinishedUpload,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(answer) = answered_early(&mut upload.stream) {
            return Err(answer);
        }
        if probe(url, token).status() == 429 {
            return Ok(());
        }
        assert!(Instant::now() < deadline, "the upload was never admitted");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Mallory's deploy upload is authenticated, and while the rest of it is on its way
/// the operator removes tenant mallory and makes a tenant of that name again (for
/// someone else, perhaps). The upload, once whole, went live in the new tenant's name:
/// the removed tenant's code on the new one's routes, with the new one's data. Now it
/// is refused: its token is no longer live.
fn upload_across_removal<P>(scene: &Scene<P>) {
    let url = &scene.url;
    let manifest = scene.manifest("stale", Some("mallory"), &["/stale"]);
    let mut refusals = Vec::new();
    let upload = loop {
        let mut upload = UnfinishedUpload::start(url, &scene.mallory, &manifest);
        match wait_until_admitted(url, &scene.mallory, &mut upload) {
            Ok(()) => break upload,
            Err(answer) => refusals.push(answer),
        }
        assert!(
            refusals.len() < 5,
            "every upload was refused: {refusals:#?}"
        );
    };
    let new_token = scene.make_mallory_again();

    let (status, answer) = upload.finish();
    assert_eq!(status, 403, "{answer}");
    scene.assert_stale_deploy_refused(&answer, &new_token, "stale", "/stale");
}

#[test]
fn a_deploy_uploaded_across_its_tenants_removal_and_re_creation_is_refused() {
    upload_across_removal(&Scene::embedded_with(&[
        "--no-demo",
        "--max-deploys-per-tenant",
        "1",
    ]));
}

#[test]
fn services_mode_a_deploy_uploaded_across_its_tenants_removal_and_re_creation_is_refused() {
    let services = Services::start_full(&["w1"], &[], &["--max-deploys-per-tenant", "1"]);
    upload_across_removal(&Scene::set_up(services.url.clone(), services));
}
