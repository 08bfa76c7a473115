//! Quotas per tenant, set by the operator (`faas tenant create|set ... --max-workflows
//! --max-instances --kv-max-keys --stream-max-len --stream-max-bytes --code-max-mb`): a
//! tenant over one of its quotas is
//! refused with an error naming the quota and how an operator raises it (its streams
//! are trimmed), a change takes effect without a restart, and another tenant keeps
//! being served at its defaults throughout. In embedded mode, and through the shared
//! state to a worker process in services mode.

use super::scene::{Scene, assert_success, refused};
use crate::services::Services;
use crate::support::{
    Platform, TOKEN, client, deploy_at, error_of, faas_as, write_manifest, write_manifest_of,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `faas tenant <args>` with the admin token, asserting success.
pub(super) fn operator(url: &str, args: &[&str]) {
    let mut all = vec!["tenant"];
    all.extend(args);
    assert_success(
        &faas_as(url, TOKEN, &all),
        &format!("faas {}", all.join(" ")),
    );
}

/// Status and body text of `method path` with `body`.
pub(super) fn send(url: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = client()
        .request(method, format!("{url}{path}"))
        .body(body.to_owned())
        .send()
        .unwrap_or_else(|err| panic!("{path}: {err}"));
    (response.status().as_u16(), response.text().unwrap())
}

/// Asserts that `text` names the quota `flag` of `tenant`, its limit and how to raise
/// it.
fn assert_names_quota(text: &str, tenant: &str, flag: &str, limit: &str) {
    for needed in [
        format!("tenant `{tenant}`"),
        limit.to_owned(),
        format!("`faas tenant set {tenant} --{flag} N`"),
    ] {
        assert!(text.contains(&needed), "`{needed}` missing from: {text}");
    }
}

/// `faas tenant ls --output json`, tenant name to its quotas.
fn listed_quotas(url: &str) -> serde_json::Map<String, serde_json::Value> {
    let output = faas_as(url, TOKEN, &["tenant", "ls", "--output", "json"]);
    assert_success(&output, "faas tenant ls");
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tenant| {
            (
                tenant["name"].as_str().unwrap().to_owned(),
                tenant["quotas"].clone(),
            )
        })
        .collect()
}

#[test]
fn a_tenant_at_its_workflow_quota_deploys_no_new_workflow_but_redeploys_its_own() {
    let scene = Scene::embedded();
    // Only the operator sets quotas.
    let denied = scene.faas(
        &scene.mallory,
        &["tenant", "set", "mallory", "--max-workflows", "50"],
    );
    let denied = refused(&denied);
    assert!(denied.contains("HTTP 403"), "{denied}");
    let patched = client()
        .patch(format!("{}/admin/v1/tenants/mallory", scene.url))
        .bearer_auth(&scene.mallory)
        .json(&serde_json::json!({"max_workflows": 50}))
        .send()
        .unwrap();
    assert_eq!(patched.status(), 403);
    operator(&scene.url, &["set", "mallory", "--max-workflows", "1"]);

    let first = scene.manifest("m-first", None, &["/m/first"]);
    assert_success(
        &scene.deploy(&scene.mallory, &first),
        "mallory's first workflow",
    );
    let second = scene.manifest("m-second", None, &["/m/second"]);
    let message = refused(&scene.deploy(&scene.mallory, &second));
    assert_names_quota(&message, "mallory", "max-workflows", "max_workflows = 1");
    assert!(message.contains("has 1 workflows deployed"), "{message}");
    let upload = scene.upload(&scene.mallory, &second);
    assert_eq!(upload.status(), 403);
    assert_eq!(error_of(upload)["kind"], "quota");
    assert_eq!(scene.get("/m/second").status(), 404);

    // A new version of its one workflow is no new workflow.
    let changed = scene.manifest("m-first", None, &["/m/first", "/m/also"]);
    assert_success(
        &scene.deploy(&scene.mallory, &changed),
        "mallory's redeploy",
    );
    assert_eq!(scene.get("/m/also?name=m").status(), 200);

    // The victim, at the default quota, deploys on and is served.
    let more = scene.manifest("catalog", Some("victim"), &["/catalog"]);
    assert_success(
        &scene.deploy(&scene.victim, &more),
        "the victim's second workflow",
    );
    assert_eq!(scene.get("/catalog?name=victim").status(), 200);
    scene.assert_victim_served();

    let quotas = listed_quotas(&scene.url);
    assert_eq!(quotas["mallory"], serde_json::json!({"max_workflows": 1}));
    assert_eq!(quotas["victim"], serde_json::json!({}));
    let text = faas_as(&scene.url, TOKEN, &["tenant", "ls"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    let line = |name: &str| {
        text.lines()
            .find(|line| line.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .split_whitespace()
            .skip(2)
            .collect::<Vec<_>>()
    };
    // Every quota column after CREATED: mallory's workflows, and the defaults.
    let columns = 9;
    let mut mallory = vec!["default"; columns];
    mallory[0] = "1";
    assert_eq!(line("mallory"), mallory);
    assert_eq!(line("victim"), vec!["default"; columns]);

    // Raised, the refused deploy goes through.
    operator(&scene.url, &["set", "mallory", "--max-workflows", "2"]);
    assert_success(
        &scene.deploy(&scene.mallory, &second),
        "mallory's second workflow",
    );
}

/// Deploys `kv-filler` for tenant `hog` and `kv-counter` for tenant `victim`.
pub(super) fn deploy_kv(url: &str, dir: &Path) {
    let hog = write_manifest(dir, "filler", "hog", "kv-filler", "/kv-filler/...", "");
    deploy_at(url, &hog);
    let victim = write_manifest(dir, "counter", "victim", "kv-counter", "/counter/...", "");
    deploy_at(url, &victim);
}

/// Increments the victim's counter `key` `times` times, asserting every answer.
pub(super) fn count(url: &str, key: &str, times: u64) {
    for expected in 1..=times {
        assert_eq!(
            send(url, "POST", &format!("/counter/{key}"), ""),
            (200, format!("{expected}\n")),
            "the victim's counter {key}"
        );
    }
}

#[test]
fn a_tenant_at_its_key_quota_is_refused_until_the_operator_raises_it() {
    let platform = Platform::start();
    operator(&platform.url, &["create", "hog", "--kv-max-keys", "2"]);
    let dir = faas_testing::temp_dir();
    deploy_kv(&platform.url, dir.path());
    let url = &platform.url;

    for key in ["a", "b"] {
        assert_eq!(
            send(url, "PUT", &format!("/kv-filler/key/{key}"), "v").0,
            204
        );
    }
    let (status, body) = send(url, "PUT", "/kv-filler/key/c", "v");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("(the kv-max-keys quota)"), "{body}");
    assert_names_quota(&body, "hog", "kv-max-keys", "at most 2 keys");
    // The victim, at the default quota, writes five keys meanwhile.
    for key in ["k0", "k1", "k2", "k3", "k4"] {
        count(url, key, 1);
    }

    // Raised without a restart: the next write succeeds, the one after is refused.
    operator(url, &["set", "hog", "--kv-max-keys", "3"]);
    assert_eq!(send(url, "PUT", "/kv-filler/key/c", "v").0, 204);
    let (status, body) = send(url, "PUT", "/kv-filler/key/d", "v");
    assert_eq!(status, 500, "{body}");
    assert_names_quota(&body, "hog", "kv-max-keys", "at most 3 keys");
    // Back to the platform's default (10,000 keys).
    operator(url, &["set", "hog", "--kv-max-keys", "default"]);
    assert_eq!(send(url, "PUT", "/kv-filler/key/d", "v").0, 204);
    assert_eq!(listed_quotas(url)["hog"], serde_json::json!({}));
    // What each had is intact.
    assert_eq!(send(url, "GET", "/kv-filler/key/a", ""), (200, "v".into()));
    assert_eq!(send(url, "GET", "/counter/k4", "").1.trim(), "1");
}

#[test]
fn a_tenant_at_its_instance_quota_gets_overloaded_while_another_is_served() {
    let platform = Platform::start();
    let url = &platform.url;
    operator(url, &["create", "greedy", "--max-instances", "1"]);
    let dir = faas_testing::temp_dir();
    let slow = write_manifest(
        dir.path(),
        "slow",
        "greedy",
        "misbehave",
        "/misbehave/...",
        "timeout_ms = 5000",
    );
    deploy_at(url, &slow);
    let quick = write_manifest(
        dir.path(),
        "quick",
        "greedy",
        "hello",
        "/quick",
        "timeout_ms = 300",
    );
    deploy_at(url, &quick);
    let victim = write_manifest(
        dir.path(),
        "shop",
        "victim",
        "hello",
        "/shop",
        "timeout_ms = 300",
    );
    deploy_at(url, &victim);

    // One slow request holds greedy's only instance slot.
    let hold = |ms: u64| {
        let at = format!("{url}/misbehave/slow?ms={ms}");
        std::thread::spawn(move || client().get(at).send().unwrap().status().as_u16())
    };
    let holder = hold(2000);
    std::thread::sleep(Duration::from_millis(300));
    let response = client().get(format!("{url}/quick")).send().unwrap();
    assert_eq!(response.status(), 503);
    let error = error_of(response);
    assert_eq!(error["kind"], "overloaded");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("max-instances quota"), "{message}");
    assert_names_quota(
        message,
        "greedy",
        "max-instances",
        "all of its 1 instance slots",
    );
    // The other tenant is served at once meanwhile.
    let started = Instant::now();
    assert_eq!(send(url, "GET", "/shop?name=victim", "").0, 200);
    assert!(started.elapsed() < Duration::from_millis(250));
    assert_eq!(holder.join().unwrap(), 200);

    // Raised without a restart: a second instance runs beside a holder.
    operator(url, &["set", "greedy", "--max-instances", "2"]);
    let holder = hold(1500);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(send(url, "GET", "/quick?name=greedy", "").0, 200);
    assert_eq!(holder.join().unwrap(), 200);
}

#[test]
fn a_quota_set_through_the_admin_api_reaches_a_worker_process() {
    let services = Services::start(&["w1"]);
    let url = &services.url;
    let created = client()
        .post(format!("{url}/admin/v1/tenants"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"name": "hog", "quotas": {"kv_max_keys": 2}}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    let dir = faas_testing::temp_dir();
    deploy_kv(url, dir.path());

    for key in ["a", "b"] {
        assert_eq!(
            send(url, "PUT", &format!("/kv-filler/key/{key}"), "v").0,
            204
        );
    }
    let (status, body) = send(url, "PUT", "/kv-filler/key/c", "v");
    assert_eq!(status, 500, "{body}");
    assert_names_quota(&body, "hog", "kv-max-keys", "at most 2 keys");
    for key in ["k0", "k1", "k2"] {
        count(url, key, 1);
    }

    // Raised through the admin API; the worker reads it from the shared state.
    let patched = client()
        .patch(format!("{url}/admin/v1/tenants/hog"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"kv_max_keys": 4}))
        .send()
        .unwrap();
    assert_eq!(patched.status(), 200);
    let tenant: serde_json::Value = patched.json().unwrap();
    assert_eq!(tenant["quotas"], serde_json::json!({"kv_max_keys": 4}));
    services.wait_for("the raised quota reached the worker", |_| {
        send(url, "PUT", "/kv-filler/key/c", "v").0 == 204
    });
    assert_eq!(send(url, "PUT", "/kv-filler/key/d", "v").0, 204);
    let (status, body) = send(url, "PUT", "/kv-filler/key/e", "v");
    assert_eq!(status, 500, "{body}");
    assert_names_quota(&body, "hog", "kv-max-keys", "at most 4 keys");
    assert_eq!(send(url, "GET", "/counter/k2", "").1.trim(), "1");

    // The workflow quota holds in services mode too, counted in the shared state.
    operator(url, &["set", "hog", "--max-workflows", "1"]);
    let another = write_manifest(dir.path(), "filler-two", "hog", "kv-filler", "/two/...", "");
    let output = faas_as(url, TOKEN, &["deploy", another.to_str().unwrap()]);
    assert_names_quota(
        &refused(&output),
        "hog",
        "max-workflows",
        "max_workflows = 1",
    );
}

#[test]
fn a_tenants_own_stream_quota_trims_its_streams_only() {
    let services = Services::start(&["w1"]);
    let url = &services.url;
    operator(url, &["create", "mallory", "--stream-max-len", "200"]);
    let dir = faas_testing::temp_dir();
    for tenant in ["mallory", "victim"] {
        let route = format!("/{tenant}/messenger");
        let manifest = write_manifest(dir.path(), tenant, tenant, "messenger", &route, "");
        deploy_at(url, &manifest);
    }
    let append = |tenant: &str, count: u32| {
        let path = format!("/{tenant}/messenger?op=append&name=flood&count={count}");
        let (status, answer) = send(url, "POST", &path, "x");
        assert_eq!(status, 200, "{answer}");
    };
    append("mallory", 5_000);
    append("victim", 1_000);
    let mut redis = crate::redis::connect(&services.redis);
    let mut len = |tenant: &str| -> usize {
        redis::Commands::xlen(&mut redis, format!("t:{tenant}:flood")).unwrap()
    };
    // Trimmed 1/64 below the limit at a time, so it holds 197 to 200.
    let kept = len("mallory");
    assert!((197..=200).contains(&kept), "mallory's stream kept {kept}");
    // The victim, at the default (10,000), keeps every entry.
    assert_eq!(len("victim"), 1_000);

    // A byte quota smaller than a stream's own count refuses mallory's next new stream
    // once the worker has read it, and victim's goes on.
    operator(url, &["set", "mallory", "--stream-max-bytes", "1000"]);
    let path = "/mallory/messenger?op=append&name=another";
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        let (status, answer) = send(url, "POST", path, "x");
        if status == 502 {
            break answer;
        }
        assert_eq!(status, 200, "{answer}");
        assert!(Instant::now() < deadline, "the byte quota never applied");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_names_quota(&answer, "mallory", "stream-max-bytes", "at most 1000 bytes");
    append("victim", 1);
    assert_eq!(len("victim"), 1_001);
}

/// The components of a tenant's deployed workflows take at most its code quota: every
/// gateway keeps them in memory, so without it one tenant's deploys of large components
/// could take the memory every tenant's requests need. A new version counts in place
/// of the one it replaces, a removal makes room, and another tenant deploys and is
/// served at its default throughout.
#[test]
fn a_tenant_at_its_code_quota_deploys_no_more_components_until_it_makes_room() {
    let platform = Platform::start();
    check_code_quota(&platform.url);
}

/// In services mode the gateway counts what the shared state holds.
#[test]
fn services_mode_a_tenant_at_its_code_quota_deploys_no_more_components() {
    let services = Services::start(&["w1"]);
    check_code_quota(&services.url);
}

/// Runs the code quota's checks on the platform at `url`.
fn check_code_quota(url: &str) {
    // `wasi-hello` is some 230 KiB: four distinct copies fit in 1 MiB, a fifth does not.
    operator(url, &["create", "mallory", "--code-max-mb", "1"]);
    operator(url, &["create", "victim"]);
    let dir = faas_testing::temp_dir();
    let manifest = |name: &str, tenant: &str, component: &Path, extra: &str| {
        let route = format!("/{name}/...");
        write_manifest_of(dir.path(), name, tenant, component, &route, extra)
    };
    // One component named by six workflows is held once, so it counts once.
    let hello = faas_testing::component_path("wasi-hello");
    for name in ["s1", "s2", "s3", "s4", "s5", "s6"] {
        deploy_at(url, &manifest(name, "mallory", &hello, ""));
    }
    // Copies that differ by a byte are components of their own, and each counts.
    let copies: Vec<_> = (0..4)
        .map(|n| distinct_copy(dir.path(), &hello, n))
        .collect();
    for (name, copy) in ["c0", "c1", "c2"].into_iter().zip(&copies) {
        deploy_at(url, &manifest(name, "mallory", copy, ""));
    }
    let fifth = faas_as(
        url,
        TOKEN,
        &[
            "deploy",
            manifest("c3", "mallory", &copies[3], "").to_str().unwrap(),
        ],
    );
    let stderr = refused(&fifth);
    assert!(stderr.contains("code_max_mb = 1"), "{stderr}");
    assert!(
        stderr.contains("`faas tenant set mallory --code-max-mb N`"),
        "{stderr}"
    );
    assert_eq!(send(url, "GET", "/c3/", "").0, 404);
    // A new version of a deployed workflow takes its place.
    deploy_at(
        url,
        &manifest("c0", "mallory", &copies[0], "timeout_ms = 5000"),
    );
    // Another tenant deploys the same component and is served.
    deploy_at(url, &manifest("v1", "victim", &copies[3], ""));
    assert_eq!(send(url, "GET", "/v1/", "").0, 200);
    // A removal makes room.
    assert!(faas_as(url, TOKEN, &["rm", "c1"]).status.success());
    deploy_at(url, &manifest("c3", "mallory", &copies[3], ""));
    assert_eq!(send(url, "GET", "/c3/", "").0, 200);
    assert_eq!(send(url, "GET", "/s6/", "").0, 200);
}

/// A copy of `component` with a custom section naming `n` appended: the same code,
/// other bytes (and so another SHA-256), as a tenant could make any number of.
fn distinct_copy(dir: &Path, component: &Path, n: usize) -> PathBuf {
    copy_with_section(dir, component, &format!("copy-{n}"), &[])
}

/// `component` with a custom section `name` holding `data` appended, written in `dir`.
fn copy_with_section(dir: &Path, component: &Path, name: &str, data: &[u8]) -> PathBuf {
    let bytes = std::fs::read(component).expect("reading the component");
    let path = dir.join(format!("{name}.wasm"));
    std::fs::write(&path, faas_testing::with_custom_section(&bytes, name, data))
        .expect("writing the copy");
    path
}

/// The gateway holds one copy of a component however many workflows name it: eight
/// more workflows of one 24 MiB component grow the platform by less than four copies
/// of it, where a copy per workflow grew it by more than eight (226 MiB, measured
/// before the pool). Its code quota counts it once too (`check_code_quota`).
#[test]
fn one_component_named_by_many_workflows_is_held_once() {
    const SECTION_BYTES: usize = 24 << 20;
    let platform = Platform::start();
    operator(&platform.url, &["create", "acme"]);
    let dir = faas_testing::temp_dir();
    // Written bytes, so that every copy the platform keeps is resident.
    let data: Vec<u8> = (0..SECTION_BYTES).map(|i| (i % 251) as u8).collect();
    let hello = faas_testing::component_path("wasi-hello");
    let big = copy_with_section(dir.path(), &hello, "ballast", &data);
    let manifest =
        |name: &str| write_manifest_of(dir.path(), name, "acme", &big, &format!("/{name}/..."), "");
    // By the third deploy the allocator holds what one deploy uses for a moment (the
    // upload as JSON, decoded, hashed), and measuring starts.
    for n in 0..3 {
        platform.deploy(&manifest(&format!("big{n}")));
    }
    let resident_before = platform.memory("VmRSS");
    for n in 3..11 {
        platform.deploy(&manifest(&format!("big{n}")));
    }
    for n in 0..11 {
        assert_eq!(send(&platform.url, "GET", &format!("/big{n}/"), "").0, 200);
    }
    let grew = platform.memory("VmRSS").saturating_sub(resident_before);
    assert!(
        grew < 4 * SECTION_BYTES as u64,
        "eight more workflows of one component grew the platform by {} MiB",
        grew >> 20
    );
}

/// A deploy holds about one copy of its upload, and so does a restart that restores it.
/// The component is read from the multipart body straight into the buffer the platform
/// keeps, and the state database writes and reads it through incremental blob I/O. A
/// 64 MiB component's deploy raises the platform's peak memory by less than one and a
/// half copies of it (by 72-74 MiB in runs here; by 259-267 MiB before, when the upload
/// was base64 in JSON and SQLite took its own copies), and a restart peaks within as
/// much of a fresh start (by 72 MiB; 130 before).
#[test]
fn a_deploy_and_a_restart_hold_one_copy_of_a_component() {
    const SECTION_BYTES: usize = 64 << 20;
    let most = 3 * SECTION_BYTES as u64 / 2;
    let data = faas_testing::temp_dir();
    let platform = Platform::start_in(data.path(), &["--no-demo"]);
    operator(&platform.url, &["create", "acme"]);
    let dir = faas_testing::temp_dir();
    let ballast: Vec<u8> = (0..SECTION_BYTES).map(|i| (i % 251) as u8).collect();
    let hello = faas_testing::component_path("wasi-hello");
    let big = copy_with_section(dir.path(), &hello, "ballast", &ballast);
    let manifest = write_manifest_of(dir.path(), "big", "acme", &big, "/big/...", "");
    // The platform's peak so far is its start; the deploy's copies add to it.
    let started = platform.memory("VmHWM");
    let assert_peak_within = |platform: &Platform, what: &str| {
        assert_eq!(send(&platform.url, "GET", "/big/", "").0, 200);
        let grew = platform.memory("VmHWM").saturating_sub(started);
        assert!(
            grew < most,
            "{what} of a 64 MiB component peaked {} MiB over a fresh start",
            grew >> 20
        );
    };
    platform.deploy(&manifest);
    assert_peak_within(&platform, "a deploy");
    drop(platform);
    let platform = Platform::start_in(data.path(), &["--no-demo"]);
    assert_peak_within(&platform, "a restart");
}
