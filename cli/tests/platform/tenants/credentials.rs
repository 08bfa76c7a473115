//! Credentials per tenant: mallory, holding a token of its own tenant, tries to act for
//! the victim; every attempt is refused and the victim keeps being served.

use super::scene::{Scene, VICTIM_WORKFLOW, assert_success, create_token, refused, write_hello};
use crate::services::{INTERNAL_TOKEN, Services};
use crate::support::{Platform, Process, TOKEN, client, error_of, faas_as};
use reqwest::Method;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

#[test]
fn a_tenant_token_cannot_deploy_for_another_tenant() {
    let scene = Scene::embedded();
    // Claiming the victim's tenant, with a new workflow or over the victim's own.
    for name in ["claim", VICTIM_WORKFLOW] {
        let manifest = scene.manifest(name, Some("victim"), &["/claimed"]);
        let stderr = refused(&scene.deploy(&scene.mallory, &manifest));
        assert!(
            stderr.contains(":2:10: tenant: tenant `victim` is not this token's tenant `mallory`"),
            "{stderr}"
        );
        let response = scene.upload(&scene.mallory, &manifest);
        assert_eq!(response.status(), 403);
        let error = error_of(response);
        assert_eq!(error["field"], "tenant");
        assert_eq!(error["line"], 2);
    }
    assert_eq!(scene.get("/claimed").status(), 404);
    scene.assert_victim_served();
}

#[test]
fn a_manifest_without_a_tenant_is_deployed_for_the_tokens_tenant_only() {
    let scene = Scene::embedded();
    let manifest = scene.manifest("mine", None, &["/mine"]);
    assert_success(&scene.deploy(&scene.mallory, &manifest), "mallory's deploy");
    let status = scene.api(Method::GET, "workflows/mine", &scene.mallory);
    assert_eq!(
        status.json::<serde_json::Value>().unwrap()["tenant"],
        "mallory"
    );
    assert_eq!(scene.get("/mine?name=m").text().unwrap(), "Hello, m!\n");
    // The operator's deploy must say whom it is for.
    let stderr = refused(&scene.deploy(TOKEN, &scene.manifest("anon", None, &["/anon"])));
    assert!(
        stderr.contains("tenant: missing field `tenant`"),
        "{stderr}"
    );
    scene.assert_victim_served();
}

#[test]
fn another_tenants_workflows_and_runs_are_invisible() {
    invisible_workflows(&Scene::embedded());
}

#[test]
fn services_mode_another_tenants_workflows_and_runs_are_invisible() {
    let services = Services::start(&["w1"]);
    invisible_workflows(&Scene::set_up(services.url.clone(), services));
}

/// Mallory looks for, reads the runs of, and removes the victim's workflow.
fn invisible_workflows<P>(scene: &Scene<P>) {
    let path = format!("workflows/{VICTIM_WORKFLOW}");
    for (method, path) in [
        (Method::GET, path.clone()),
        (Method::GET, format!("{path}/runs")),
        (Method::DELETE, path.clone()),
    ] {
        let response = scene.api(method.clone(), &path, &scene.mallory);
        assert_eq!(response.status(), 404, "{method} {path}");
    }
    let list: serde_json::Value = scene
        .api(Method::GET, "workflows", &scene.mallory)
        .json()
        .unwrap();
    assert_eq!(list["workflows"], serde_json::json!([]), "{list}");
    for args in [
        ["status", VICTIM_WORKFLOW],
        ["runs", VICTIM_WORKFLOW],
        ["rm", VICTIM_WORKFLOW],
    ] {
        let stderr = refused(&scene.faas(&scene.mallory, &args));
        assert!(stderr.contains("HTTP 404"), "{stderr}");
    }
    // The victim and the operator still see it.
    let list: serde_json::Value = scene.api(Method::GET, "workflows", TOKEN).json().unwrap();
    assert_eq!(list["workflows"][0]["name"], VICTIM_WORKFLOW);
    scene.assert_victim_served();
}

#[test]
fn a_tenant_token_manages_its_own_tenants_tokens_only() {
    own_tokens_only(&Scene::embedded());
}

#[test]
fn services_mode_a_tenant_token_manages_its_own_tenants_tokens_only() {
    let services = Services::start(&["w1"]);
    own_tokens_only(&Scene::set_up(services.url.clone(), services));
}

/// Mallory makes, lists and revokes tokens of the victim.
fn own_tokens_only<P>(scene: &Scene<P>) {
    let stderr = refused(&scene.faas(&scene.mallory, &["token", "create", "victim"]));
    assert!(stderr.contains("its own tenant only"), "{stderr}");
    let stderr = refused(&scene.faas(&scene.mallory, &["token", "ls", "victim"]));
    assert!(stderr.contains("HTTP 403"), "{stderr}");
    // Its own list holds its own token only; the victim's cannot be revoked by id.
    let own: serde_json::Value = serde_json::from_slice(
        &scene
            .faas(&scene.mallory, &["token", "ls", "--output", "json"])
            .stdout,
    )
    .unwrap();
    let tenants: Vec<&str> = own["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|token| token["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(tenants, ["mallory"]);
    let all: serde_json::Value =
        serde_json::from_slice(&scene.faas(TOKEN, &["token", "ls", "-o", "json"]).stdout).unwrap();
    let victim_id = all["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|token| token["tenant"] == "victim")
        .expect("the victim's token is listed for the operator")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        !all.to_string().contains(&scene.victim),
        "a list shows no secret"
    );
    let stderr = refused(&scene.faas(&scene.mallory, &["token", "revoke", &victim_id]));
    assert!(stderr.contains("HTTP 404"), "{stderr}");
    // A tenant may make itself another token.
    let second = create_token(&scene.url, &scene.mallory, "mallory");
    assert_eq!(scene.api(Method::GET, "workflows", &second).status(), 200);
    scene.assert_victim_served();
    // But not without end: past its limit a create is refused, and it holds no more.
    let create = || {
        client()
            .post(format!("{}/admin/v1/tokens", scene.url))
            .bearer_auth(&scene.mallory)
            .json(&serde_json::json!({"tenant": "mallory", "label": "flood"}))
            .send()
            .unwrap()
    };
    let mut created = 2;
    let refusal = loop {
        let response = create();
        if !response.status().is_success() {
            break response;
        }
        created += 1;
        assert!(
            created <= faas_store::MAX_TOKENS_PER_TENANT,
            "{created} tokens"
        );
    };
    assert_eq!(created, faas_store::MAX_TOKENS_PER_TENANT);
    assert_eq!(refusal.status(), 403);
    let error = error_of(refusal);
    assert_eq!(error["kind"], "quota", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("revoke"),
        "{error}"
    );
    let listed: serde_json::Value = serde_json::from_slice(
        &scene
            .faas(&scene.mallory, &["token", "ls", "--output", "json"])
            .stdout,
    )
    .unwrap();
    let held = listed["tokens"].as_array().unwrap().len();
    assert_eq!(held, faas_store::MAX_TOKENS_PER_TENANT);
    scene.assert_victim_served();
}

#[test]
fn operator_endpoints_refuse_tenant_tokens() {
    let scene = Scene::embedded();
    for (method, path) in [
        (Method::GET, "workers"),
        (Method::DELETE, "workers/local-0"),
        (Method::GET, "tenants"),
        (Method::DELETE, "tenants/victim"),
    ] {
        let response = scene.api(method.clone(), path, &scene.mallory);
        assert_eq!(response.status(), 403, "{method} {path}");
    }
    let stderr = refused(&scene.faas(&scene.mallory, &["workers"]));
    assert!(stderr.contains("HTTP 403"), "{stderr}");
    let stderr = refused(&scene.faas(&scene.mallory, &["tenant", "create", "evil"]));
    assert!(stderr.contains("admin token"), "{stderr}");
    let tenants: serde_json::Value = scene.api(Method::GET, "tenants", TOKEN).json().unwrap();
    assert_eq!(tenant_names(&tenants), ["mallory", "victim"]);
    scene.assert_victim_served();
}

#[test]
fn a_revoked_token_is_refused() {
    revoked_token(&Scene::embedded());
}

#[test]
fn services_mode_a_revoked_token_is_refused() {
    let services = Services::start(&["w1"]);
    revoked_token(&Scene::set_up(services.url.clone(), services));
}

/// A token of mallory's, once revoked, opens nothing.
fn revoked_token<P>(scene: &Scene<P>) {
    let issued = scene.faas(
        TOKEN,
        &[
            "token", "create", "mallory", "--label", "spare", "-o", "json",
        ],
    );
    assert_success(&issued, "faas token create");
    let issued: serde_json::Value = serde_json::from_slice(&issued.stdout).unwrap();
    let (spare, newest) = (
        issued["secret"].as_str().unwrap().to_owned(),
        issued["token"]["id"].as_str().unwrap().to_owned(),
    );
    assert_eq!(issued["token"]["label"], "spare");
    assert_eq!(scene.api(Method::GET, "workflows", &spare).status(), 200);
    let revoked = scene.faas(&scene.mallory, &["token", "revoke", &newest, "-o", "json"]);
    assert_success(&revoked, "faas token revoke");
    let response = scene.api(Method::GET, "workflows", &spare);
    assert_eq!(response.status(), 401);
    let stderr = refused(&scene.deploy(&spare, &scene.manifest("late", None, &["/late"])));
    assert!(stderr.contains("refused the token"), "{stderr}");
    assert_eq!(
        scene.api(Method::GET, "workflows", &scene.mallory).status(),
        200
    );
    scene.assert_victim_served();
}

#[test]
fn a_deploy_for_an_unknown_tenant_is_refused_even_for_the_operator() {
    let scene = Scene::embedded();
    let manifest = scene.manifest("ghostly", Some("ghost"), &["/ghost"]);
    let stderr = refused(&scene.deploy(TOKEN, &manifest));
    assert!(
        stderr.contains(
            "tenant `ghost` does not exist; an operator creates it with `faas tenant create ghost`"
        ),
        "{stderr}"
    );
    assert_eq!(scene.get("/ghost").status(), 404);
    scene.assert_victim_served();
}

#[test]
fn removing_a_tenant_is_refused_while_it_has_workflows_and_revokes_its_tokens() {
    removal_refused_while_deployed(&Scene::embedded());
}

/// In services mode the check reads the deployments in Redis in the same step as the
/// removal (`faas_store::TenantWorkflows::InRedisHash`).
#[test]
fn services_mode_removing_a_tenant_is_refused_while_it_has_workflows_and_revokes_its_tokens() {
    let services = Services::start(&["w1"]);
    removal_refused_while_deployed(&Scene::set_up(services.url.clone(), services));
}

fn removal_refused_while_deployed<P>(scene: &Scene<P>) {
    let stderr = refused(&scene.faas(TOKEN, &["tenant", "rm", "victim"]));
    assert!(
        stderr.contains("tenant `victim` still has deployed workflows: storefront"),
        "{stderr}"
    );
    scene.assert_victim_served();
    let removed = scene.faas(TOKEN, &["tenant", "rm", "mallory", "--output", "json"]);
    assert_success(&removed, "faas tenant rm");
    let removed: serde_json::Value = serde_json::from_slice(&removed.stdout).unwrap();
    assert_eq!(removed["revoked_tokens"], 1);
    assert_eq!(
        scene.api(Method::GET, "workflows", &scene.mallory).status(),
        401
    );
    let tenants: serde_json::Value =
        serde_json::from_slice(&scene.faas(TOKEN, &["tenant", "ls", "-o", "json"]).stdout).unwrap();
    let names = tenant_names(&tenants);
    assert!(
        names.contains(&"victim") && !names.contains(&"mallory"),
        "{names:?}"
    );
    scene.assert_victim_served();
}

#[test]
fn faas_up_gives_a_demo_token_that_survives_restarts_and_secrets_are_never_stored() {
    let data = faas_testing::temp_dir();
    let manifests = faas_testing::temp_dir();
    let mut platform = start_with_demo(data.path(), manifests.path());
    let first = demo_token(&platform).expect("faas up prints the demo tenant's token");
    let manifest = write_hello(data.path(), "greeter", None, &["/greeter"]);
    let deployed = faas_as(
        &platform.url,
        &first,
        &["deploy", "--no-build", manifest.to_str().unwrap()],
    );
    assert_success(&deployed, "the demo token's deploy");
    let victim = create_token(&platform.url, TOKEN, "demo");
    platform.terminate();

    let platform = start_with_demo(data.path(), manifests.path());
    assert_eq!(
        demo_token(&platform).as_deref(),
        Some(first.as_str()),
        "the saved demo token is reused"
    );
    let response = crate::support::client()
        .get(platform.at("/admin/v1/workflows"))
        .bearer_auth(&victim)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200, "tokens survive a restart");
    let saved = std::fs::read_to_string(data.path().join("demo-token")).unwrap();
    assert_eq!(saved.trim(), first);
    // Only the demo token's own file holds a secret: the database keeps hashes.
    for entry in std::fs::read_dir(data.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() || path.ends_with("demo-token") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        for secret in [&first, &victim] {
            let needle = secret.as_bytes();
            assert!(
                !bytes.windows(needle.len()).any(|window| window == needle),
                "{} holds a token secret",
                path.display()
            );
        }
    }
}

#[test]
fn faas_up_no_demo_creates_no_demo_tenant_or_token_not_even_after_the_operator_removed_it() {
    let data = faas_testing::temp_dir();
    let manifests = faas_testing::temp_dir();
    let mut platform = Platform::start_in(data.path(), &["--no-demo"]);
    assert_eq!(demo_token(&platform), None);
    assert_eq!(tenants_of(&platform), Vec::<String>::new());
    assert!(!data.path().join("demo-token").exists());
    platform.terminate();

    // Started once with the demo, which the operator then removes.
    let mut platform = start_with_demo(data.path(), manifests.path());
    let demo = demo_token(&platform).expect("faas up prints the demo tenant's token");
    assert_eq!(tenants_of(&platform), ["acme", "demo"]);
    let removed = faas_as(&platform.url, TOKEN, &["tenant", "rm", "demo"]);
    assert_success(&removed, "faas tenant rm demo");
    platform.terminate();

    // It stays removed, and its token opens nothing.
    let platform = Platform::start_in(data.path(), &["--no-demo"]);
    assert_eq!(demo_token(&platform), None);
    assert_eq!(tenants_of(&platform), ["acme"]);
    let response = client()
        .get(platform.at("/admin/v1/workflows"))
        .bearer_auth(&demo)
        .send()
        .unwrap();
    assert_eq!(response.status(), 401);
}

#[test]
fn a_given_admin_token_is_printed_by_neither_faas_up_nor_a_gateway() {
    // Every test platform is given its token with --token.
    let platform = Platform::start();
    let printed = printed_until(|| platform.stdout(), "ready; press Ctrl-C");
    assert!(
        printed.contains("  admin token: from --token (also saved in "),
        "{printed}"
    );
    assert!(!printed.contains(TOKEN), "{printed}");

    // A gateway in Kubernetes is given it by a Secret, through FAAS_TOKEN.
    let redis = faas_testing::RedisServer::start();
    let data = faas_testing::temp_dir();
    let url = redis.url();
    let gateway = Process::spawn_with_env(
        &[
            "gateway",
            "--redis",
            &url,
            "--listen",
            "127.0.0.1:0",
            "--internal-token",
            INTERNAL_TOKEN,
            "--data-dir",
            data.path().to_str().unwrap(),
        ],
        &[("FAAS_TOKEN", std::ffi::OsStr::new(TOKEN))],
        "faas gateway is up at ",
    );
    let printed = printed_until(|| gateway.stdout.lock().unwrap().clone(), "admin token: ");
    assert!(
        printed.contains("  admin token: from FAAS_TOKEN (also saved in "),
        "{printed}"
    );
    assert!(!printed.contains(TOKEN), "{printed}");
    // Ready after the last of what it prints at start.
    crate::support::wait_ready(&gateway.announced, Duration::from_secs(30));
    let printed = gateway.stdout.lock().unwrap().join("\n");
    assert!(!printed.contains(TOKEN), "{printed}");
}

#[test]
fn a_platform_refuses_a_token_under_16_bytes_naming_where_it_came_from() {
    let data = faas_testing::temp_dir();
    let dir = data.path().join("data");
    let dir = dir.to_str().unwrap();
    let refusal = |args: &[&str], env: &[(&str, &str)]| {
        let output = faas_command(args, env);
        assert!(!output.status.success(), "{args:?} started");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let stderr = refusal(
        &[
            "up",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "",
            "--data-dir",
            dir,
        ],
        &[],
    );
    assert!(
        stderr.contains("the admin token from --token is 0 bytes long, fewer than the 16"),
        "{stderr}"
    );
    let redis = ["--redis", "redis://127.0.0.1:1"];
    let stderr = refusal(
        &[&["gateway", "--data-dir", dir][..], &redis].concat(),
        &[("FAAS_TOKEN", "bench")],
    );
    assert!(
        stderr.contains("the admin token from FAAS_TOKEN is 5 bytes long"),
        "{stderr}"
    );
    let stderr = refusal(
        &[
            &["worker", "--internal-token", "short", "--data-dir", dir][..],
            &redis,
        ]
        .concat(),
        &[],
    );
    assert!(
        stderr.contains("the internal token from --internal-token is 5 bytes long"),
        "{stderr}"
    );
    assert!(!Path::new(dir).exists(), "a refused token leaves no trace");
}

#[test]
fn a_gateway_refuses_an_internal_token_that_is_its_admin_token() {
    let data = faas_testing::temp_dir();
    let dir = data.path().to_str().unwrap();
    let args = [
        "gateway",
        "--redis",
        "redis://127.0.0.1:1",
        "--internal-token",
        INTERNAL_TOKEN,
        "--data-dir",
        dir,
    ];
    let output = faas_command(&args, &[("FAAS_TOKEN", INTERNAL_TOKEN)]);
    assert!(!output.status.success(), "the gateway started");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "the internal token (--internal-token, FAAS_INTERNAL_TOKEN) is the admin token"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains(INTERNAL_TOKEN), "{stderr}");
}

#[test]
fn faas_up_keeps_its_data_dir_owner_only_and_refuses_one_others_may_write_to() {
    let parent = faas_testing::temp_dir();
    let data = parent.path().join("data");
    let mut platform = Platform::start_in(&data, &["--no-demo"]);
    let mode = |name: &str| {
        let mode = std::fs::metadata(data.join(name))
            .unwrap()
            .permissions()
            .mode();
        format!("{:o}", mode & 0o777)
    };
    assert_eq!(mode(""), "700", "the data dir");
    for file in ["token", "faas.db", "faas.db-wal"] {
        assert_eq!(mode(file), "600", "{file}");
    }
    platform.terminate();

    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = faas_command(
        &[
            "up",
            "--listen",
            "127.0.0.1:0",
            "--token",
            TOKEN,
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("run `chmod 700 {}`", data.display())),
        "{stderr}"
    );
}

/// A `--cache-dir` outside the data dir holds the compiled code the worker loads and
/// runs as native code: one that another user made ahead of the platform (in a shared
/// `/tmp`, say), or that others may write to, would let them plant code that runs as
/// the worker. `faas up` refuses both before it serves anything, naming the flag.
#[test]
fn faas_up_refuses_a_cache_dir_another_user_owns_or_others_may_write_to() {
    let parent = faas_testing::temp_dir();
    let data = parent.path().join("data");
    let cache = parent.path().join("shared-cache");
    std::fs::create_dir(&cache).unwrap();
    let up = |cache: &Path| {
        let cache = cache.to_str().unwrap();
        let data = data.to_str().unwrap();
        let args = [
            "up",
            "--listen",
            "127.0.0.1:0",
            "--token",
            TOKEN,
            "--no-demo",
            "--data-dir",
            data,
            "--cache-dir",
            cache,
        ];
        let output = faas_command(&args, &[]);
        assert!(!output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let stderr = up(&cache);
    assert!(
        stderr.contains(&format!(
            "cache dir {} is writable by group or others",
            cache.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("or give another --cache-dir"), "{stderr}");
    // Owner-only, but another user's: only root can hand a dir to another user, so
    // this part needs the tests to run as root (as `.ci/run` does).
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&cache, Some(65534), None).unwrap();
        let stderr = up(&cache);
        assert!(stderr.contains("belongs to user 65534"), "{stderr}");
    }
    // The process's own, the same flags serve.
    let own = parent.path().join("own-cache");
    let cache_flag = ["--cache-dir", own.to_str().unwrap(), "--no-demo"];
    let platform = Platform::start_in(&data, &cache_flag);
    assert_eq!(
        std::fs::metadata(&own).unwrap().permissions().mode() & 0o777,
        0o700
    );
    drop(platform);
}

/// Starts `faas up` on `data` with its demo (no `--no-demo`), deploying at start a
/// hello of tenant `acme` written in `manifests` rather than the repository's demos.
fn start_with_demo(data: &Path, manifests: &Path) -> Platform {
    let manifest = write_hello(manifests, "started", Some("acme"), &["/started"]);
    Platform::start_in(data, &["--deploy", manifest.to_str().unwrap()])
}

/// The demo tenant's token `faas up` printed before it said it was ready, if any.
fn demo_token(platform: &Platform) -> Option<String> {
    let printed = printed_until(|| platform.stdout(), "ready; press Ctrl-C");
    let rest = printed.split("demo tenant token: ").nth(1)?;
    Some(rest.split_whitespace().next().unwrap().to_owned())
}

/// What a process printed once a line containing `last` is among it, `stdout` reading
/// the lines so far (after the announcement, a thread of their own collects them).
fn printed_until(stdout: impl Fn() -> Vec<String>, last: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = stdout();
        if lines.iter().any(|line| line.contains(last)) {
            return lines.join("\n");
        }
        assert!(Instant::now() < deadline, "no `{last}` in {lines:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The tenants the admin API lists.
fn tenants_of(platform: &Platform) -> Vec<String> {
    let list: serde_json::Value = client()
        .get(platform.at("/admin/v1/tenants"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap()
        .json()
        .unwrap();
    tenant_names(&list).into_iter().map(str::to_owned).collect()
}

/// `faas <args>` with `env`, which must exit within 30 s: each use expects a refusal,
/// and one that started instead would serve until killed.
fn faas_command(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_faas"))
        .args(args)
        .env_remove("FAAS_TOKEN")
        .envs(env.iter().copied())
        .env("FAAS_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running faas");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("waiting for faas").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("faas {args:?} was still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("reading faas's output")
}

/// The names in a tenants list.
fn tenant_names(list: &serde_json::Value) -> Vec<&str> {
    list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tenant| tenant["name"].as_str().unwrap())
        .collect()
}

/// `GET /metrics` names every tenant's workflows and functions and counts their
/// traffic: no one reads it without a credential, a tenant reads its own series only,
/// the operator everything.
#[test]
fn another_tenants_metrics_are_invisible() {
    let scene = Scene::embedded();
    let metrics = |token: Option<&str>| {
        let request = client().get(format!("{}/metrics", scene.url));
        let request = match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request.send().expect("GET /metrics");
        (response.status().as_u16(), response.text().unwrap())
    };
    let victims = format!(r#"{{tenant="victim",workflow="{VICTIM_WORKFLOW}",status="2xx"}}"#);
    let (status, text) = metrics(None);
    assert_eq!(status, 401, "{text}");
    assert!(!text.contains(VICTIM_WORKFLOW), "{text}");
    let error: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["kind"], "unauthorized", "{text}");

    let (status, text) = metrics(Some(&scene.mallory));
    assert_eq!(status, 200);
    assert!(text.contains("# TYPE faas_requests counter"), "{text}");
    for hidden in [VICTIM_WORKFLOW, "victim"] {
        assert!(!text.contains(hidden), "mallory reads {hidden}:\n{text}");
    }
    let process_wide = |text: &str| {
        text.lines()
            .any(|line| line.starts_with("faas_instances_active "))
    };
    assert!(!process_wide(&text), "{text}");

    let (status, text) = metrics(Some(&scene.victim));
    assert_eq!(status, 200);
    assert!(
        text.contains(&format!("faas_requests_total{victims} 3")),
        "{text}"
    );
    assert!(!process_wide(&text), "{text}");

    let (_, text) = metrics(Some(TOKEN));
    assert!(text.contains(&format!("faas_requests_total{victims} 3")));
    assert!(process_wide(&text), "{text}");
    scene.assert_victim_served();
}

#[test]
fn the_same_upload_as_another_tenants_workflow_is_a_conflict_not_its_status() {
    // The deploy's digest covers the manifest and components, not the tenant: an
    // identical upload was answered "unchanged" with the victim's workflow status.
    let scene = Scene::embedded();
    let manifest = scene.manifest("lookalike", None, &["/lookalike"]);
    assert_success(
        &scene.deploy(&scene.victim, &manifest),
        "the victim's deploy",
    );
    let response = scene.upload(&scene.mallory, &manifest);
    let status = response.status();
    let body = response.text().unwrap();
    assert_eq!(status, 409, "{body}");
    assert!(!body.contains("victim"), "{body}");
    assert!(!body.contains("revision"), "{body}");
    scene.assert_victim_served();
}

#[test]
fn a_workflow_name_taken_over_shows_none_of_its_former_owners_runs() {
    // A run that ended after its workflow was removed was recorded under the bare
    // name, so the next tenant to deploy that name read it (and the history of removed
    // names grew without end).
    let scene = Scene::embedded();
    let manifest = |tenant: &str, probe: &str| {
        let [component, config] = crate::regions::probe_as("consume", probe);
        let tenant = format!("tenant = \"{tenant}\"");
        crate::support::copy_manifest(
            scene.dir.path(),
            crate::regions::EXAMPLE,
            &[
                (&component.0, &component.1),
                (&config.0, &config.1),
                ("tenant = \"demo\"", &tenant),
                ("memory_mb = 1100", "memory_mb = 128"),
                ("timeout_ms = 60000", "timeout_ms = 1500"),
            ],
        )
    };
    assert_success(
        &scene.deploy(&scene.mallory, &manifest("mallory", "spin")),
        "mallory's deploy",
    );
    let run = {
        let url = format!("{}/regions", scene.url);
        std::thread::spawn(move || client().post(url).body("1000").send())
    };
    // The run is in its spinning step (until its 1.5 s deadline) when it is removed.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_success(
        &scene.faas(&scene.mallory, &["rm", "regions"]),
        "mallory's rm",
    );
    let ended = run.join().unwrap().expect("the run's response");
    assert_ne!(ended.status(), 200);
    assert_success(
        &scene.deploy(&scene.victim, &manifest("victim", "tail")),
        "the victim's deploy",
    );
    let runs: serde_json::Value = scene
        .api(Method::GET, "workflows/regions/runs", &scene.victim)
        .json()
        .unwrap();
    assert_eq!(runs["runs"], serde_json::json!([]), "{runs}");
    scene.assert_victim_served();
}

/// In services mode each token a gateway makes or revokes has it read every tenant's
/// tokens again (the copy it writes back should Redis lose its state): mallory making
/// and revoking tokens in a loop had the gateway, and Redis, read them all for each
/// of its changes. Copies now begin at most every 100 ms, each covering the changes
/// made before it.
#[test]
fn services_mode_a_tenants_token_churn_reads_every_tenants_tokens_at_most_once_an_interval() {
    const CHURN: Duration = Duration::from_secs(2);
    let services = Services::start(&["w1"]);
    let redis = redis::Client::open(services.redis.url()).unwrap();
    let scene = Scene::set_up(services.url.clone(), services);
    // Redis's count of HGETALLs (each copy is three of them).
    let hgetalls = || -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut redis.get_connection().unwrap())
            .unwrap();
        info.lines()
            .find_map(|line| line.strip_prefix("cmdstat_hgetall:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse().unwrap())
    };
    // What the platform reads in as long without the churn.
    let before = hgetalls();
    std::thread::sleep(CHURN);
    let idle = hgetalls() - before;

    let tokens = format!("{}/admin/v1/tokens", scene.url);
    let (before, started) = (hgetalls(), Instant::now());
    let mut changes = 0;
    while started.elapsed() < CHURN {
        let created: serde_json::Value = client()
            .post(&tokens)
            .bearer_auth(&scene.mallory)
            .json(&serde_json::json!({"tenant": "mallory", "label": "churn"}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let id = created["token"]["id"].as_str().unwrap();
        let revoked = client()
            .delete(format!("{tokens}/{id}"))
            .bearer_auth(&scene.mallory)
            .send()
            .unwrap();
        assert_eq!(revoked.status(), 200);
        changes += 2;
    }
    let took = started.elapsed();
    let churned = hgetalls() - before;
    let copies = took.as_millis() as u64 / 100 + 2;
    assert!(
        churned <= 2 * idle + 3 * copies,
        "{changes} token changes in {took:?} made {churned} HGETALLs ({idle} in as long idle)"
    );
    scene.assert_victim_served();
}
