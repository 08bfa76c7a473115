//! A tenant's deploys at once. Mallory opens deploy uploads and never finishes them,
//! which would hold memory and, once uploaded, the deploy lock every tenant takes in
//! turn: at its limit (two by default) the next one is refused with 429 before its
//! upload is read, while the victim deploys and is served; `faas deploy` of mallory's
//! waits for its turn and gets through once the held uploads end, and they leave
//! nothing deployed. What uploads hold is bounded across tenants too: one tenant's at
//! most one upload at `--max-deploy-mb`, all of them at most two.

use super::scene::{Scene, assert_success};
use crate::support::{TOKEN, Upload, client, metrics_at, sample_value};
use reqwest::Method;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Starts a deploy upload with `token` that announces 64 MiB and sends its first
/// boundary only: it holds one of its tenant's places until the connection is closed.
fn held_upload(url: &str, token: &str) -> TcpStream {
    let addr = url.strip_prefix("http://").expect("an http:// URL");
    let mut stream = TcpStream::connect(addr).expect("connecting to the gateway");
    write!(
        stream,
        "POST /admin/v1/workflows HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: multipart/form-data; boundary=held\r\nContent-Length: {}\r\n\r\n\
         --held\r\n",
        64 << 20
    )
    .expect("sending the head of an upload");
    stream
}

/// A deploy upload of no parts: `400` when the gateway admits it (the upload is then
/// found to be no deploy), `429` when the tenant's places are taken.
///
/// A probe takes a place while it is read: an upload of the same tenant whose head
/// the gateway reads meanwhile may find none free and be refused before its body is
/// read. So a test that holds uploads and probes until their places are all taken
/// looks for such an answer on them ([`answered_early`]) and starts them again.
pub(super) fn probe(url: &str, token: &str) -> reqwest::blocking::Response {
    client()
        .post(format!("{url}/admin/v1/workflows"))
        .bearer_auth(token)
        .header("content-type", "multipart/form-data; boundary=none")
        .body("--none--\r\n")
        .send()
        .expect("deploy probe")
}

/// The gateway's answer on `stream`, an upload it has not all of yet, if it gave one
/// already: the upload was refused before its body was read.
pub(super) fn answered_early(stream: &mut TcpStream) -> Option<String> {
    stream.set_nonblocking(true).unwrap();
    let peeked = stream.peek(&mut [0; 1]);
    stream.set_nonblocking(false).unwrap();
    match peeked {
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(err) => Some(format!("the connection failed: {err}")),
        Ok(_) => {
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut answer = String::new();
            let _ = std::io::Read::read_to_string(stream, &mut answer);
            Some(answer)
        }
    }
}

/// `faas_deploys_refused_total` on the gateway at `url`.
fn refusals(url: &str) -> f64 {
    sample_value(&metrics_at(url), "faas_deploys_refused_total")
}

#[test]
fn a_tenant_past_its_deploys_at_once_is_refused_before_its_upload_is_read() {
    let scene = Scene::embedded();
    let mut held = [
        held_upload(&scene.url, &scene.mallory),
        held_upload(&scene.url, &scene.mallory),
    ];

    // Once the gateway has read both heads, mallory's places are taken.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut early = Vec::new();
    let refusal = loop {
        for stream in &mut held {
            if let Some(answer) = answered_early(stream) {
                early.push(answer);
                assert!(early.len() < 5, "held uploads were refused: {early:#?}");
                *stream = held_upload(&scene.url, &scene.mallory);
            }
        }
        let response = probe(&scene.url, &scene.mallory);
        match response.status().as_u16() {
            429 => break response,
            400 => {}
            other => panic!("probe answered {other}: {}", response.text().unwrap()),
        }
        assert!(
            Instant::now() < deadline,
            "mallory's third deploy at once was still admitted after 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        refusal
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok()),
        Some("2")
    );
    let body: serde_json::Value = refusal.json().unwrap();
    assert_eq!(body["error"]["kind"], "too_many_deploys");
    let message = body["error"]["message"].as_str().unwrap();
    for needed in [
        "tenant `mallory`",
        "2 deploys or removals in progress or waiting",
        "--max-deploys-per-tenant",
    ] {
        assert!(
            message.contains(needed),
            "`{needed}` missing from: {message}"
        );
    }
    assert!(!message.contains("victim"), "{message}");

    // The victim is not held back: it deploys a new version of its own and is served.
    let victim_manifest = scene.manifest("victim-extra", Some("victim"), &["/victim-extra"]);
    assert_success(
        &scene.deploy(&scene.victim, &victim_manifest),
        "the victim's deploy while mallory holds its places",
    );
    assert_eq!(scene.get("/victim-extra?name=v").status(), 200);
    scene.assert_victim_served();

    // `faas deploy` of mallory's is refused too, waits, and is sent again.
    let refused_before = refusals(&scene.url);
    let mallory_manifest = scene.manifest("mallory-app", None, &["/mallory-app"]);
    let cli = std::thread::scope(|scope| {
        let cli = scope.spawn(|| scene.deploy(&scene.mallory, &mallory_manifest));
        let deadline = Instant::now() + Duration::from_secs(60);
        while refusals(&scene.url) <= refused_before {
            assert!(
                Instant::now() < deadline,
                "mallory's `faas deploy` was not refused within 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // Its held uploads end: the places come back, and the CLI gets through.
        drop(held);
        cli.join().expect("the deploy thread")
    });
    assert_success(&cli, "mallory's `faas deploy` once its places came back");
    let said = String::from_utf8_lossy(&cli.stderr);
    assert!(
        said.contains("the gateway holds other deploys of this tenant"),
        "the CLI did not say it waited: {said}"
    );

    // The abandoned uploads deployed nothing: mallory has the CLI's workflow alone.
    let listed: serde_json::Value = client()
        .get(format!("{}/admin/v1/workflows", scene.url))
        .bearer_auth(&scene.mallory)
        .send()
        .and_then(reqwest::blocking::Response::json)
        .expect("mallory's workflows");
    let names: Vec<&str> = listed["workflows"]
        .as_array()
        .expect("a list of workflows")
        .iter()
        .filter_map(|workflow| workflow["name"].as_str())
        .collect();
    assert_eq!(names, ["mallory-app"]);
    scene.assert_victim_served();
}

/// Asserts that `response` refused an upload as too large, naming `what`.
fn assert_too_large(response: reqwest::blocking::Response, what: &str) {
    assert_eq!(response.status(), 413);
    let error: serde_json::Value = response.json().unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains(what), "{error}");
}

#[test]
fn a_manifest_or_schemas_past_their_size_are_refused_and_nothing_is_kept() {
    let scene = Scene::embedded();
    let manifest = scene.manifest("padded", None, &["/padded"]);
    let text = std::fs::read_to_string(&manifest).unwrap();
    // A comment is as good as any field for taking the gateway's memory.
    let padded = format!(
        "{text}\n# {}\n",
        "x".repeat(faas_gateway::admin::MAX_MANIFEST_BYTES)
    );
    std::fs::write(&manifest, &padded).unwrap();
    assert_too_large(scene.upload(&scene.mallory, &manifest), "manifest");
    scene.assert_victim_served();

    // Schemas are the deploy's text too, however many files they are cut into.
    let schema = "x".repeat(faas_gateway::admin::MAX_MANIFEST_BYTES / 2 + 1);
    let mut upload = Upload::of(&text, &[("main", &faas_testing::component("hello"))]);
    upload.head.schemas = [("a.km", &schema), ("b.km", &schema)]
        .map(|(name, text)| (name.to_owned(), text.clone()))
        .into();
    let response = upload.send(&scene.url, &scene.mallory);
    assert_too_large(response, "schemas");
    // Their names too (kept with the deployment, and in its digest), and the
    // manifest's file name: the head may have 8 MiB.
    let name = "x".repeat(faas_gateway::admin::MAX_MANIFEST_BYTES + 1);
    upload.head.schemas = [(name.clone(), String::new())].into();
    assert_too_large(upload.send(&scene.url, &scene.mallory), "schemas");
    upload.head.schemas.clear();
    upload.head.file_name = name;
    assert_too_large(upload.send(&scene.url, &scene.mallory), "file name");
    assert_eq!(scene.get("/padded").status(), 404, "nothing was deployed");
    // Within the limits, the same workflow deploys.
    assert_success(
        &scene.deploy(
            &scene.mallory,
            &scene.manifest("padded", None, &["/padded"]),
        ),
        "deploy",
    );
    scene.assert_victim_served();
}

#[test]
fn a_component_for_no_declared_function_is_refused_not_stored() {
    let scene = Scene::embedded();
    let manifest = scene.manifest("stowaway", None, &["/stowaway"]);
    let hello = faas_testing::component("hello");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let upload = Upload::of(&text, &[("main", &hello), ("stowaway", &hello)]);
    let response = upload.send(&scene.url, &scene.mallory);
    assert_eq!(response.status(), 400);
    let error: serde_json::Value = response.json().unwrap();
    assert_eq!(error["error"]["kind"], "component", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("`stowaway`"), "{error}");
    assert_eq!(scene.get("/stowaway").status(), 404, "nothing was deployed");
    scene.assert_victim_served();
}

/// An upload is read as it arrives and trusted for nothing: a body that is not
/// `multipart/form-data` (an older client's JSON) is 415 naming what it is; a head that
/// lists more bytes of components than the gateway takes is 413 before any is read; a
/// component of other than its listed size is 400. Nothing is deployed, and the victim
/// is served throughout.
#[test]
fn an_upload_that_lies_about_itself_is_refused_and_nothing_is_kept() {
    let scene = Scene::embedded();
    let text = std::fs::read_to_string(scene.manifest("liar", None, &["/liar"])).unwrap();
    let expect = |response: reqwest::blocking::Response, status: u16, says: &str| {
        assert_eq!(response.status(), status);
        let error: serde_json::Value = response.json().unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{error}");
        assert_eq!(scene.get("/liar").status(), 404, "nothing was deployed");
        scene.assert_victim_served();
    };

    let json = client()
        .post(format!("{}/admin/v1/workflows", scene.url))
        .bearer_auth(&scene.mallory)
        .json(&serde_json::json!({"manifest": text}))
        .send()
        .expect("deploy upload");
    expect(json, 415, "`application/json`");

    let hello = faas_testing::component("hello");
    let mut upload = Upload::of(&text, &[("main", &hello)]);
    upload.head.components.insert("main".to_owned(), 1 << 40);
    expect(
        upload.send(&scene.url, &scene.mallory),
        413,
        "exceeds the limit",
    );

    upload
        .head
        .components
        .insert("main".to_owned(), hello.len() as u64 + 1);
    expect(upload.send(&scene.url, &scene.mallory), 400, "fewer bytes");

    // The same upload, honest, deploys.
    let upload = Upload::of(&text, &[("main", &hello)]);
    assert_eq!(upload.send(&scene.url, &scene.mallory).status(), 200);
    assert_eq!(scene.get("/liar").status(), 200);
}

#[test]
fn services_mode_failed_replaced_and_removed_deploys_leave_no_component_bytes_in_redis() {
    // A deploy stores its components in the Redis every tenant shares before workers
    // load them; a failed one's, a replaced version's and a removed workflow's were
    // kept for --component-ttl-s (10 minutes), counted by no quota: a tenant failing
    // (or deploying and removing) deploy after deploy of 256 MiB could fill Redis, and
    // break every tenant's state.
    let services = crate::services::Services::start(&["w1"]);
    let redis_url = services.redis.url();
    let scene = Scene::set_up(services.url.clone(), services);
    let stored = || -> Vec<String> {
        let mut redis = redis::Client::open(redis_url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("faas:component:*")
            .query(&mut redis)
            .unwrap();
        keys.sort();
        keys
    };
    let victims = stored();
    assert_eq!(victims.len(), 1, "the victim's component");
    let text = std::fs::read_to_string(scene.manifest("swap", None, &["/swap"])).unwrap();
    for round in 0..3 {
        // A component header and 4 MiB of junk: stored, then failing to load.
        let mut junk = b"\0asm\x0d\x00\x01\x00".to_vec();
        junk.resize(4 << 20, round);
        let response = Upload::of(&text, &[("main", &junk)]).send(&scene.url, &scene.mallory);
        assert!(!response.status().is_success(), "{:?}", response.text());
        assert_eq!(stored(), victims, "round {round}");
        scene.assert_victim_served();
    }
    // Each new version of mallory's replaces the last: only the live one is kept.
    let hello = faas_testing::component("hello");
    for version in ["one", "two", "three"] {
        let component = faas_testing::with_custom_section(&hello, version, &[]);
        let response = Upload::of(&text, &[("main", &component)]).send(&scene.url, &scene.mallory);
        assert_eq!(response.status(), 200, "{:?}", response.text());
        assert_eq!(scene.get("/swap?name=m").status(), 200);
        assert_eq!(stored().len(), 2, "{version}: {:?}", stored());
    }
    assert!(victims.iter().all(|key| stored().contains(key)));
    // Removed, the last version's component goes too.
    let removed = scene.api(Method::DELETE, "workflows/swap", &scene.mallory);
    assert_eq!(removed.status(), 200, "{:?}", removed.text());
    assert_eq!(stored(), victims);
    scene.assert_victim_served();
}

/// Starts a deploy upload with `token` whose head lists one component of `size` bytes,
/// and sends all of it but its last byte: the gateway holds what arrived until the
/// connection is closed (or the upload's deadline passes).
fn upload_held_before_its_last_byte(url: &str, token: &str, size: u64) -> TcpStream {
    use faas_gateway::admin::{COMPONENT_PART, DeployHead, HEAD_PART};
    let head = serde_json::to_string(&DeployHead {
        file_name: "workflow.toml".to_owned(),
        manifest: "name = \"held\"".to_owned(),
        components: [("main".to_owned(), size)].into(),
        schemas: Default::default(),
    })
    .unwrap();
    let parts = format!(
        "--held\r\nContent-Disposition: form-data; name=\"{HEAD_PART}\"\r\n\r\n{head}\r\n\
         --held\r\nContent-Disposition: form-data; name=\"{COMPONENT_PART}\"; \
         filename=\"main\"\r\n\r\n"
    );
    let addr = url.strip_prefix("http://").expect("an http:// URL");
    let mut stream = TcpStream::connect(addr).expect("connecting to the gateway");
    write!(
        stream,
        "POST /admin/v1/workflows HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: multipart/form-data; boundary=held\r\nContent-Length: {}\r\n\r\n{parts}",
        parts.len() as u64 + size + 64
    )
    .expect("sending the start of an upload");
    let component = vec![7u8; usize::try_from(size).unwrap() - 1];
    stream
        .write_all(&component)
        .expect("sending all of the component but its last byte");
    // Left a moment to read what was sent (loopback: milliseconds), before any other
    // upload of its tenant takes part of its share; it must not have been answered.
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut answer = [0u8; 512];
    if let Ok(read) = std::io::Read::read(&mut stream, &mut answer) {
        panic!(
            "the held upload was answered: {}",
            String::from_utf8_lossy(&answer[..read])
        );
    }
    stream
}

/// Uploads a small hello named `name` of `tenant` (`None`: the token's) with `token`
/// until `wanted` is answered, for 20 s at most; returns the last status and body.
fn deploy_until(
    scene: &Scene<crate::support::Platform>,
    token: &str,
    tenant: Option<&str>,
    name: &str,
    wanted: u16,
) -> (u16, String) {
    let manifest =
        std::fs::read_to_string(scene.manifest(name, tenant, &[&format!("/{name}")])).unwrap();
    let component = faas_testing::component("hello");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = Upload::of(&manifest, &[("main", &component)]).send(&scene.url, token);
        let status = response.status().as_u16();
        let body = response.text().unwrap();
        if status == wanted || Instant::now() > deadline {
            return (status, body);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A component's size that makes, with its upload's head, an upload of almost 8 MiB:
/// the most one upload may be under `--max-deploy-mb 8`.
const ALMOST_8_MIB: u64 = (8 << 20) - 4096;

#[test]
fn deploy_uploads_hold_one_largest_upload_a_tenant_and_two_in_all() {
    let scene = Scene::embedded_with(&["--no-demo", "--max-deploy-mb", "8"]);
    // Mallory's upload of 8 MiB (with its head), sent but for its last byte, takes its
    // whole share: its next deploy, however small, is refused before its components
    // are kept.
    let mallory_held = upload_held_before_its_last_byte(&scene.url, &scene.mallory, ALMOST_8_MIB);
    let (status, body) = deploy_until(&scene, &scene.mallory, None, "mallory-small", 429);
    assert_eq!(status, 429, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["kind"], "deploy_budget", "{body}");
    assert!(body.contains("--max-deploy-mb"), "{body}");
    // The victim's upload of almost 8 MiB takes the rest of the whole (twice 8 MiB):
    // even the operator's small deploy (for the victim) waits, 503, until one is done.
    let victim_held = upload_held_before_its_last_byte(&scene.url, &scene.victim, ALMOST_8_MIB);
    let (status, body) = deploy_until(&scene, TOKEN, Some("victim"), "operator-small", 503);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("deploy_budget"), "{body}");
    scene.assert_victim_served();
    // The held uploads go, and what they held comes back.
    drop((mallory_held, victim_held));
    let (status, body) = deploy_until(&scene, &scene.victim, None, "victim-small", 200);
    assert_eq!(status, 200, "{body}");
    assert_eq!(scene.get("/victim-small?name=v").status(), 200);
    scene.assert_victim_served();
}
