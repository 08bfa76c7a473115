//! `faas logs`: what a function printed (stdout) and logged (`faas_sdk::log`) comes back
//! to its own tenant, with its function or step and run, filtered, followed, bounded.

use crate::support::{Platform, TOKEN, faas_as, repo};
use crate::tenants::scene::{Scene, VICTIM_WORKFLOW, assert_success, create_token, refused};
use reqwest::Method;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `faas logs <args> --output json` at `url` with `token`, asserting success: one JSON
/// object per printed line.
pub(crate) fn log_lines(url: &str, token: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["logs"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--output", "json"]);
    let output = faas_as(url, token, &all);
    assert!(
        output.status.success(),
        "faas {all:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON log line"))
        .collect()
}

/// The texts of `lines`.
fn texts(lines: &[serde_json::Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|line| line["text"].as_str().unwrap())
        .collect()
}

/// Polls `faas logs` until a line's text contains `needle` (lines reach the store
/// when the instance's store is dropped, just after the response).
pub(crate) fn wait_for_line(
    url: &str,
    token: &str,
    args: &[&str],
    needle: &str,
) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = log_lines(url, token, args);
        if texts(&lines).iter().any(|text| text.contains(needle)) {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "no line containing `{needle}` in {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks, on a running scene (embedded or services mode), that the victim reads its
/// function's printed line and mallory gets the same 404 as for a workflow that does
/// not exist, while the victim keeps being served and reading its logs.
pub(crate) fn check_tenant_logs<P>(scene: &Scene<P>) {
    assert_eq!(scene.get("/shop?name=alice").status(), 200);
    let lines = wait_for_line(
        &scene.url,
        &scene.victim,
        &[VICTIM_WORKFLOW],
        "greeting alice",
    );
    let line = lines
        .iter()
        .find(|line| line["text"] == "greeting alice")
        .expect("the printed line, whole");
    assert_eq!(line["workflow"], VICTIM_WORKFLOW);
    assert_eq!(line["function"], "main");
    assert_eq!(line["source"], "output");
    assert!(line["time_ms"].as_u64().unwrap() > 0);
    assert!(line.get("run").is_none(), "an HTTP function has no run");

    // Mallory: refused exactly as for a workflow that does not exist.
    let theirs = scene.api(
        Method::GET,
        &format!("workflows/{VICTIM_WORKFLOW}/logs"),
        &scene.mallory,
    );
    let absent = scene.api(Method::GET, "workflows/no-such-flow/logs", &scene.mallory);
    assert_eq!(theirs.status(), 404);
    assert_eq!(absent.status(), 404);
    let theirs: serde_json::Value = theirs.json().unwrap();
    let absent: serde_json::Value = absent.json().unwrap();
    assert_eq!(theirs["error"]["kind"], absent["error"]["kind"]);
    let stderr = refused(&scene.faas(&scene.mallory, &["logs", VICTIM_WORKFLOW]));
    assert!(stderr.contains("404"), "{stderr}");
    assert!(!stderr.contains("alice"), "no line leaks: {stderr}");
    let followed = refused(&scene.faas(&scene.mallory, &["logs", VICTIM_WORKFLOW, "-f"]));
    assert!(followed.contains("404"), "{followed}");

    // The victim is still served, and still reads its own logs (so does the admin).
    scene.assert_victim_served();
    assert_eq!(scene.get("/shop?name=bob").status(), 200);
    wait_for_line(
        &scene.url,
        &scene.victim,
        &[VICTIM_WORKFLOW],
        "greeting bob",
    );
    wait_for_line(&scene.url, TOKEN, &[VICTIM_WORKFLOW], "greeting bob");
}

#[test]
fn a_functions_printed_lines_come_back_to_its_tenant_and_not_to_another() {
    check_tenant_logs(&Scene::embedded());
}

/// Checks, on a platform serving `functions/wordcount` at `url`, that the merge step's
/// `faas_sdk::log` line carries its step and run, and that `--run` and `--function`
/// select lines.
pub(crate) fn check_step_logs(url: &str, post: impl Fn() -> u16) {
    assert_eq!(post(), 200);
    assert_eq!(post(), 200);
    let runs = faas_as(url, TOKEN, &["runs", "wordcount", "--output", "json"]);
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    let run_ids: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(run_ids.len(), 2, "{runs}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let lines = log_lines(url, TOKEN, &["wordcount"]);
        if lines.len() >= 2 || Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(lines.len(), 2, "one line per run's merge: {lines:?}");
    for line in &lines {
        assert_eq!(line["step"], "merge");
        assert_eq!(line["function"], "merge");
        assert_eq!(line["level"], "info");
        assert_eq!(line["source"], "log");
        assert!(line["text"].as_str().unwrap().starts_with("merged "));
        assert!(run_ids.contains(&line["run"].as_str().unwrap()), "{line}");
    }
    for run in &run_ids {
        let one = log_lines(url, TOKEN, &["wordcount", "--run", run]);
        assert_eq!(one.len(), 1, "--run {run}: {one:?}");
        assert_eq!(one[0]["run"], *run);
    }
    assert_eq!(
        log_lines(url, TOKEN, &["wordcount", "--function", "merge"]).len(),
        2
    );
    assert!(log_lines(url, TOKEN, &["wordcount", "--function", "split"]).is_empty());
    assert!(log_lines(url, TOKEN, &["wordcount", "--run", "no-such-run"]).is_empty());
    // Lines older than `--since` are left out; these are all recent.
    assert_eq!(
        log_lines(url, TOKEN, &["wordcount", "--since", "10m"]).len(),
        2
    );
}

#[test]
fn step_lines_carry_their_step_and_run_and_filters_select_them() {
    let platform = Platform::start();
    platform.deploy(&repo("functions/wordcount/workflow.toml"));
    check_step_logs(&platform.url, || {
        platform
            .post("/wordcount", "one two two three three three")
            .status()
            .as_u16()
    });
}

/// The lines of `lines` the platform wrote (why an event failed), not the guest.
fn platform_lines(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    lines
        .iter()
        .filter(|line| line["source"] == "platform")
        .collect()
}

#[test]
fn a_failed_event_leaves_a_line_saying_why_in_its_workflows_logs() {
    let platform = Platform::start();
    for manifest in ["misbehave", "retry-chain", "hello"] {
        platform.deploy(&repo(&format!("functions/{manifest}/workflow.toml")));
    }

    // HTTP functions: a trap and a deadline, one error line each.
    assert_eq!(platform.get("/misbehave/trap").status(), 500);
    assert_eq!(platform.get("/misbehave/loop").status(), 504);
    let lines = wait_for_line(
        &platform.url,
        TOKEN,
        &["misbehave"],
        "did not finish within 1000ms",
    );
    let failures = platform_lines(&lines);
    assert_eq!(failures.len(), 2, "{lines:?}");
    let text = |line: &serde_json::Value| line["text"].as_str().unwrap().to_owned();
    assert!(
        text(failures[0]).starts_with("function `misbehave` trapped: "),
        "{}",
        text(failures[0])
    );
    assert_eq!(
        text(failures[1]),
        "function `misbehave` did not finish within 1000ms"
    );
    for line in &failures {
        assert_eq!(line["level"], "error");
        assert_eq!(line["function"], "misbehave");
        assert!(line.get("run").is_none(), "{line}");
    }

    // A step's attempt that failed and was retried: a warning of its step and run.
    assert_eq!(platform.post("/retry-chain", "x").status(), 200);
    let runs = platform.faas(&["runs", "retry-chain", "--output", "json"]);
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    let run_id = runs["runs"][0]["run_id"].as_str().unwrap().to_owned();
    let lines = wait_for_line(
        &platform.url,
        TOKEN,
        &["retry-chain"],
        "attempt 1 of 3 failed, retrying: ",
    );
    let failures = platform_lines(&lines);
    assert_eq!(failures.len(), 1, "only the failed attempt: {lines:?}");
    assert_eq!(failures[0]["level"], "warn");
    assert_eq!(failures[0]["step"], "flaky");
    assert_eq!(failures[0]["function"], "flaky");
    assert_eq!(failures[0]["run"], run_id.as_str());

    // A request that succeeds leaves no such line.
    assert_eq!(platform.get("/hello?name=fine").status(), 200);
    let lines = wait_for_line(&platform.url, TOKEN, &["hello"], "greeting fine");
    assert!(platform_lines(&lines).is_empty(), "{lines:?}");
}

/// A running `faas logs -f`: the process and its stdout lines as they come.
pub(crate) struct Follower {
    /// The `faas logs -f` process.
    pub child: std::process::Child,
    /// Its stdout lines so far.
    pub seen: Arc<Mutex<Vec<String>>>,
    /// The thread reading its stdout, done once the process has exited and every line
    /// it printed is in `seen`.
    reader: std::thread::JoinHandle<()>,
}

impl Follower {
    /// The first line seen that contains `needle`.
    fn line_containing(&self, needle: &str) -> Option<String> {
        let seen = self.seen.lock().unwrap();
        seen.iter().find(|line| line.contains(needle)).cloned()
    }

    /// Sends a request through `send` every 200 ms, until a line containing `needle`
    /// shows; returns that line. `send` is given a fresh number each time, for a line
    /// of its own: a name no line printed before `-f` started has, so that once this
    /// returns, the follow is open.
    fn wait_for_new_line(&self, needle: &str, mut send: impl FnMut(usize)) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut sent = 0;
        loop {
            sent += 1;
            send(sent);
            std::thread::sleep(Duration::from_millis(200));
            if let Some(line) = self.line_containing(needle) {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "-f printed nothing new: {:?}",
                self.seen.lock().unwrap()
            );
        }
    }

    /// Waits up to `limit` for the follow to end on its own, failing at once should a
    /// line containing `never` show meanwhile; then checks, with every line it printed
    /// read, that none did.
    fn assert_ends_without(self, limit: Duration, never: &str) {
        self.assert_ends(limit, Some(never));
    }

    /// Waits up to `limit` for the follow to end on its own, and checks that no line
    /// containing `never` (if given) showed.
    fn assert_ends(mut self, limit: Duration, never: Option<&str>) {
        let deadline = Instant::now() + limit;
        while self.child.try_wait().unwrap().is_none() {
            if let Some(line) = never.and_then(|never| self.line_containing(never)) {
                let never = never.unwrap_or_default();
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the follow showed `{never}`, printed after it lost its access: {line}");
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the follow did not end within {limit:?} of losing its access; it saw {:?}",
                    self.seen.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let Self { seen, reader, .. } = self;
        reader.join().unwrap();
        if let Some(never) = never {
            let seen = seen.lock().unwrap();
            assert!(
                !seen.iter().any(|line| line.contains(never)),
                "the follow showed `{never}`: {seen:?}"
            );
        }
    }

    /// Stops the follow.
    fn stop(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// `faas logs -f` at `url` with `token`.
pub(crate) fn follow(url: &str, token: &str, workflow: &str) -> Follower {
    let mut child = Command::new(env!("CARGO_BIN_EXE_faas"))
        .args(["logs", workflow, "-f", "--output", "json"])
        .env("FAAS_URL", url)
        .env("FAAS_TOKEN", token)
        .env("FAAS_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting faas logs -f");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let stdout = child.stdout.take().expect("stdout is piped");
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    Follower {
        child,
        seen,
        reader,
    }
}

/// Checks that `faas logs -f` prints a line printed after it started, sending
/// requests until it does.
pub(crate) fn check_follow<P>(scene: &Scene<P>) {
    let mut follower = follow(&scene.url, &scene.victim, VICTIM_WORKFLOW);
    let found = follower.wait_for_new_line("greeting later", |sent| {
        // A fresh name each time: only a line printed after `-f` started can match it.
        assert_eq!(scene.get(&format!("/shop?name=later{sent}")).status(), 200);
    });
    let line: serde_json::Value = serde_json::from_str(&found).unwrap();
    assert_eq!(line["workflow"], VICTIM_WORKFLOW);
    assert_eq!(line["function"], "main");
    assert!(
        follower.child.try_wait().unwrap().is_none(),
        "-f keeps following"
    );
    follower.stop();
}

#[test]
fn follow_prints_a_line_printed_after_it_started() {
    check_follow(&Scene::embedded());
}

#[test]
fn a_guest_flooding_its_logs_stays_within_the_budget_and_others_are_unaffected() {
    const BUDGET: usize = 256 << 10;
    // The flooding tenant's workflows together keep less than one workflow may.
    const TENANT_BUDGET: usize = 192 << 10;
    let platform = Platform::start_with(&[
        "--no-demo",
        "--log-budget-bytes",
        &BUDGET.to_string(),
        "--log-max-bytes",
        &TENANT_BUDGET.to_string(),
    ]);
    platform.deploy(&repo("functions/misbehave/workflow.toml"));
    platform.deploy(&repo("functions/hello/workflow.toml"));
    // Another workflow of the flooding tenant's, which logs a line per request.
    let dir = faas_testing::temp_dir();
    let quiet = crate::support::write_manifest(dir.path(), "quiet", "chaos", "hello", "/quiet", "");
    platform.deploy(&quiet);
    // 20 requests of 1000 lines each, cut to 4 KiB: 80 MB of log text.
    for _ in 0..20 {
        let response = platform.get("/misbehave/shout");
        assert_eq!(response.status(), 200);
        // Another tenant's requests are served meanwhile.
        let hello = platform.get("/hello?name=neighbour");
        assert_eq!(hello.status(), 200);
        assert!(hello.text().unwrap().contains("neighbour"));
        assert_eq!(platform.get("/quiet?name=quiet").status(), 200);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let kept = loop {
        let response = crate::support::client()
            .get(platform.at("/admin/v1/workflows/misbehave/logs"))
            .bearer_auth(TOKEN)
            .send()
            .unwrap();
        assert_eq!(response.status(), 200);
        let kept: serde_json::Value = response.json().unwrap();
        let total =
            kept["dropped"].as_u64().unwrap() + kept["lines"].as_array().unwrap().len() as u64;
        if total >= 20_000 || Instant::now() > deadline {
            break kept;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let lines = kept["lines"].as_array().unwrap();
    let dropped = kept["dropped"].as_u64().unwrap();
    assert_eq!(dropped + lines.len() as u64, 20_000, "every line counted");
    let text_bytes: usize = lines
        .iter()
        .map(|line| line["text"].as_str().unwrap().len())
        .sum();
    assert!(
        text_bytes <= TENANT_BUDGET,
        "{text_bytes} bytes kept, over the tenant's budget"
    );
    assert!(!lines.is_empty(), "the newest lines are kept");
    for line in lines {
        let text = line["text"].as_str().unwrap();
        assert!(text.len() <= 4096 + 16, "one line is cut: {}", text.len());
    }
    // The neighbour's lines are its own and all there.
    let hello = wait_for_line(&platform.url, TOKEN, &["hello"], "greeting neighbour");
    assert_eq!(hello.len(), 20);
    assert!(hello.iter().all(|line| line["workflow"] == "hello"));
    // The flooding tenant's quiet workflow kept its lines: the largest buffer gave.
    let quiet = wait_for_line(&platform.url, TOKEN, &["quiet"], "greeting quiet");
    assert_eq!(quiet.len(), 20);
    // Removing the workflow removes its logs.
    assert!(platform.faas(&["rm", "misbehave"]).status.success());
    platform.deploy(&repo("functions/misbehave/workflow.toml"));
    assert!(log_lines(&platform.url, TOKEN, &["misbehave"]).is_empty());
}

/// The text bytes of the lines `misbehave` keeps on the platform at `url`.
fn kept_text_bytes(url: &str) -> usize {
    let response = crate::support::client()
        .get(format!("{url}/admin/v1/workflows/misbehave/logs"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let kept: serde_json::Value = response.json().unwrap();
    kept["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|line| line["text"].as_str().unwrap().len())
        .sum()
}

/// Sends `path` to the platform at `url`, asserting 200.
fn get_ok(url: &str, path: &str) {
    let response = crate::support::client()
        .get(format!("{url}{path}"))
        .send()
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
}

/// Has tenant `chaos` flood its logs on the platform at `url` until they hold at most
/// `bytes` (its own quota, once read: within a second or the sync interval), for up
/// to 10 s.
fn flood_until_within(url: &str, bytes: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // 1000 lines of up to 4 KiB: past either budget.
        get_ok(url, "/misbehave/shout");
        let kept = kept_text_bytes(url);
        if kept <= bytes && kept > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{kept} bytes kept, over the tenant's own {bytes}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An operator's `log_max_bytes` quota for tenant `chaos` holds in place of the
/// platform's `--log-max-bytes`, and the default comes back with `default`; another
/// tenant's lines are its own throughout.
fn check_own_log_quota(url: &str) {
    const OWN: usize = 32 << 10;
    crate::support::deploy_at(url, &repo("functions/misbehave/workflow.toml"));
    crate::support::deploy_at(url, &repo("functions/hello/workflow.toml"));
    let own = OWN.to_string();
    let set = faas_as(
        url,
        TOKEN,
        &["tenant", "set", "chaos", "--log-max-bytes", &own],
    );
    assert!(set.status.success(), "{set:?}");
    flood_until_within(url, OWN);
    get_ok(url, "/hello?name=neighbour");
    let hello = wait_for_line(url, TOKEN, &["hello"], "greeting neighbour");
    assert_eq!(hello.len(), 1);
    let set = faas_as(
        url,
        TOKEN,
        &["tenant", "set", "chaos", "--log-max-bytes", "default"],
    );
    assert!(set.status.success(), "{set:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while kept_text_bytes(url) <= OWN {
        assert!(Instant::now() < deadline, "the default never came back");
        get_ok(url, "/misbehave/shout");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_tenants_own_log_quota_holds_in_place_of_the_platforms() {
    let budget = (192 << 10).to_string();
    let platform = Platform::start_with(&["--no-demo", "--log-max-bytes", &budget]);
    check_own_log_quota(&platform.url);
}

/// In services mode the worker process writes the lines to Redis, within the quota it
/// follows from the tenant store.
#[test]
fn services_mode_a_tenants_own_log_quota_holds_in_place_of_the_platforms() {
    let services = crate::services::Services::start(&["w1"]);
    check_own_log_quota(&services.url);
}

#[test]
fn services_mode_lines_reach_their_tenant_only_and_follow_shows_new_ones() {
    let services = crate::services::Services::start(&["w1"]);
    let scene = Scene::set_up(services.url.clone(), services);
    check_tenant_logs(&scene);
    check_follow(&scene);
}

#[test]
fn services_mode_step_lines_carry_their_run_and_go_with_their_workflow() {
    let services = crate::services::Services::start(&["w1"]);
    crate::support::deploy_at(&services.url, &repo("functions/wordcount/workflow.toml"));
    check_step_logs(&services.url, || {
        crate::support::client()
            .post(format!("{}/wordcount", services.url))
            .body("one two two three three three")
            .send()
            .unwrap()
            .status()
            .as_u16()
    });
    // The lines are in the workflow's own platform stream, trimmed by length...
    let mut redis = redis::Client::open(services.redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let len: usize = redis::cmd("XLEN")
        .arg("faas:logs:demo:wordcount")
        .query(&mut redis)
        .unwrap();
    assert_eq!(len, 2);
    // ...and removing the workflow removes them.
    assert!(
        faas_as(&services.url, TOKEN, &["rm", "wordcount"])
            .status
            .success()
    );
    let exists: bool = redis::cmd("EXISTS")
        .arg("faas:logs:demo:wordcount")
        .query(&mut redis)
        .unwrap();
    assert!(!exists, "the workflow's logs outlived it");
}

/// Mallory's guests log in a loop on the worker the victim shares (services mode, where
/// one queue per worker holds every tenant's lines for Redis): the flood overflows the
/// queue, yet every line the victim's function printed meanwhile reaches its logs, and
/// the victim is served throughout.
/// Deploys mallory's `chatter` (misbehave, whose `/misbehave/shout` logs 1,000 lines of
/// 4 KiB).
fn deploy_chatter<P>(scene: &Scene<P>) {
    let manifest = scene.dir.path().join("chatter.toml");
    std::fs::write(
        &manifest,
        format!(
            "name = \"chatter\"\ntenant = \"mallory\"\n\n[functions.misbehave]\n\
             component = \"{}\"\ntimeout_ms = 10000\n\n[[triggers.http]]\n\
             route = \"/misbehave/...\"\nfunction = \"misbehave\"\n",
            faas_testing::component_path("misbehave").display()
        ),
    )
    .unwrap();
    assert_success(&scene.deploy(&scene.mallory, &manifest), "mallory's deploy");
}

/// A log read is held whole in the gateway, parsed and answered as JSON, so it returns
/// at most 2 MiB of the newest lines: it returned up to 10,000 lines of up to 4 KiB
/// (40 MB), and a tenant's guests choose how long its lines are.
#[test]
fn services_mode_a_log_read_returns_at_most_two_mib_of_the_newest_lines() {
    let services = crate::services::Services::start(&["w1"]);
    let redis_url = services.redis.url();
    let scene = Scene::set_up(services.url.clone(), services);
    deploy_chatter(&scene);
    let response = scene.get("/misbehave/shout?kib=4");
    assert_eq!(response.status(), 200);
    // Every line written (1,000 of 4 KiB) before the read.
    let mut redis = redis::Client::open(redis_url)
        .unwrap()
        .get_connection()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis::cmd("XLEN")
        .arg("faas:logs:mallory:chatter")
        .query::<usize>(&mut redis)
        .unwrap()
        < 1000
    {
        assert!(Instant::now() < deadline, "the lines never all arrived");
        std::thread::sleep(Duration::from_millis(50));
    }
    let last = log_lines(&scene.url, &scene.mallory, &["chatter"]);
    let text: usize = last
        .iter()
        .map(|line| line["text"].as_str().unwrap().len())
        .sum();
    assert!(text <= 2 << 20, "a read returned {text} bytes of text");
    assert!(last.len() > 400, "{} lines", last.len());
    assert!(last.len() < 1000, "{} lines", last.len());
}

/// A log read costs Redis what it reads (about 3 ms for a full 2 MiB read), and the
/// reads a tenant may have open at once were its only bound: one reading in a loop took
/// most of the time of the Redis every tenant shares. Past its rate of log bytes read
/// (here 2 MiB a second, with a burst of two seconds' worth) a tenant's reads are
/// refused with 429 until its allowance refills, while another tenant reads its own
/// lines and is served, and the operator reads without limit. Reads made at once pass
/// the check together no more.
#[test]
fn services_mode_a_tenant_reading_its_logs_in_a_loop_is_held_to_its_rate() {
    let services = crate::services::Services::start_full(
        &["w1"],
        &[],
        &["--max-log-read-mib-per-sec-per-tenant", "2"],
    );
    let scene = Scene::set_up(services.url.clone(), services);
    deploy_chatter(&scene);
    // 1,000 lines of 4 KiB: each read of them is a full one, 2 MiB.
    assert_eq!(scene.get("/misbehave/shout?kib=4").status(), 200);
    wait_for_line(&scene.url, TOKEN, &["chatter"], "x");
    let read = |token: &str, workflow: &str| {
        crate::support::client()
            .get(format!("{}/admin/v1/workflows/{workflow}/logs", scene.url))
            .bearer_auth(token)
            .send()
            .expect("GET logs")
    };
    let mut served = 0;
    let refused = loop {
        let response = read(&scene.mallory, "chatter");
        if response.status() != 200 {
            break response;
        }
        served += 1;
        assert!(served < 10, "ten full reads at once were all served");
    };
    assert!(served >= 2, "its burst let only {served} reads in");
    assert_eq!(refused.status(), 429);
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=3).contains(&retry_after), "Retry-After: {retry_after}");
    let error: serde_json::Value = refused.json().unwrap();
    assert_eq!(error["error"]["kind"], "too_many_log_reads", "{error}");

    // Another tenant reads its own lines, and the operator mallory's, meanwhile.
    assert_eq!(scene.get("/shop?name=carol").status(), 200);
    wait_for_line(
        &scene.url,
        &scene.victim,
        &[VICTIM_WORKFLOW],
        "greeting carol",
    );
    assert_eq!(read(TOKEN, "chatter").status(), 200);
    scene.assert_victim_served();

    // Once its allowance refilled, mallory reads again.
    std::thread::sleep(Duration::from_secs(retry_after));
    assert_eq!(read(&scene.mallory, "chatter").status(), 200);

    // Reads made at once are charged as they are let in, not once done: with its
    // whole burst back (4 MiB), sixteen full reads at once get two or three in.
    std::thread::sleep(Duration::from_secs(4));
    let start = std::sync::Barrier::new(16);
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..16)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    read(&scene.mallory, "chatter").status().as_u16()
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|reader| reader.join().unwrap())
            .collect()
    });
    let served = statuses.iter().filter(|status| **status == 200).count();
    assert!(
        (1..=3).contains(&served),
        "{served} of 16 reads at once served: {statuses:?}"
    );
    assert!(
        statuses.iter().all(|status| [200, 429].contains(status)),
        "{statuses:?}"
    );
    scene.assert_victim_served();
}

#[test]
fn services_mode_a_tenant_flooding_its_logs_loses_its_own_lines_not_anothers() {
    const FLOODERS: usize = 4;
    const SHOUTS: usize = 10;
    const GREETINGS: usize = 20;
    let mut services = crate::services::Services::start(&[]);
    services.start_worker_with("w1", &["--log-stream-len", "0"]);
    let redis_url = services.redis.url();
    let scene = Scene::set_up(services.url.clone(), services);
    deploy_chatter(&scene);

    // Each shout logs 1,000 lines of 4 KiB (cut from 8).
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|_| {
            let url = format!("{}/misbehave/shout", scene.url);
            std::thread::spawn(move || {
                for _ in 0..SHOUTS {
                    let response = crate::support::client().get(&url).send().unwrap();
                    assert_eq!(response.status(), 200);
                }
            })
        })
        .collect();
    for index in 0..GREETINGS {
        let response = scene.get(&format!("/shop?name=v{index}"));
        assert_eq!(
            response.status(),
            200,
            "the victim is served during the flood"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for flooder in flooders {
        flooder.join().unwrap();
    }
    scene.assert_victim_served();

    // The queue overflowed: the stream (not trimmed here) holds fewer lines than were
    // logged...
    let logged = FLOODERS * SHOUTS * 1000;
    let mut redis = redis::Client::open(redis_url)
        .unwrap()
        .get_connection()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut kept = 0;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let now: usize = redis::cmd("XLEN")
            .arg("faas:logs:mallory:chatter")
            .query(&mut redis)
            .unwrap();
        if now == kept {
            break;
        }
        kept = now;
    }
    assert!(
        kept > 0 && kept < logged,
        "{kept} of {logged} flooded lines kept"
    );
    // ...but none of the victim's lines was lost.
    let victim = wait_for_line(
        &scene.url,
        &scene.victim,
        &[VICTIM_WORKFLOW],
        &format!("greeting v{}", GREETINGS - 1),
    );
    for index in 0..GREETINGS {
        let greeting = format!("greeting v{index}");
        assert!(
            victim.iter().any(|line| line["text"] == greeting.as_str()),
            "`{greeting}` is missing from the victim's logs"
        );
    }
}

/// Each `faas logs --follow` polls its workflow's lines for as long as it is open (in
/// services mode, Redis four times a second): a tenant opening them without end would
/// load Redis and the gateway every tenant shares. Past its limit a tenant's follow
/// is refused with 429, while another tenant and the operator still follow; a follow
/// closed gives its place back.
#[test]
fn a_tenant_past_its_log_follows_is_refused_and_another_tenant_follows() {
    let platform = Platform::start_with(&["--no-demo", "--max-log-follows-per-tenant", "2"]);
    let scene = Scene::set_up(platform.url.clone(), platform);
    let own = scene.manifest("tail", Some("mallory"), &["/tail"]);
    assert_success(&scene.deploy(&scene.mallory, &own), "mallory's deploy");
    let follow = |workflow: &str, token: &str| {
        crate::support::client()
            .get(format!(
                "{}/admin/v1/workflows/{workflow}/logs?follow=1",
                scene.url
            ))
            .bearer_auth(token)
            .send()
            .expect("GET logs?follow=1")
    };
    let mut open: Vec<_> = (0..2).map(|_| follow("tail", &scene.mallory)).collect();
    assert!(open.iter().all(|response| response.status() == 200));
    let refused = follow("tail", &scene.mallory);
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let error: serde_json::Value = refused.json().unwrap();
    assert_eq!(error["error"]["kind"], "too_many_follows", "{error}");

    // A plain read is held whole until sent, and counts with the follows too.
    let read = crate::support::client()
        .get(format!("{}/admin/v1/workflows/tail/logs", scene.url))
        .bearer_auth(&scene.mallory)
        .send()
        .unwrap();
    assert_eq!(read.status(), 429);

    assert_eq!(follow(VICTIM_WORKFLOW, &scene.victim).status(), 200);
    assert_eq!(follow("tail", TOKEN).status(), 200);

    // A follow whose client went gives its place back (once the gateway notices, at
    // the latest with the next heartbeat).
    open.pop();
    let deadline = Instant::now() + Duration::from_secs(15);
    let again = loop {
        let response = follow("tail", &scene.mallory);
        if response.status() == 200 || Instant::now() > deadline {
            break response;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        again.status(),
        200,
        "the closed follow's place is free again"
    );
    scene.assert_victim_served();
}

/// How long a follow that lost its access may take to end: a few of the gateway's
/// heartbeats (5 s), at each of which, at the latest, it asks again.
const FOLLOW_ENDS_WITHIN: Duration = Duration::from_secs(20);

/// The gateway flag that lets one tenant hold one log read or follow at a time, so
/// that a follow which kept its place after losing its access would show.
const ONE_FOLLOW: [&str; 2] = ["--max-log-follows-per-tenant", "1"];

/// `faas token create <tenant>` with the admin token: the new token's secret and id.
fn second_token(url: &str, tenant: &str) -> (String, String) {
    let issued = faas_as(
        url,
        TOKEN,
        &[
            "token", "create", tenant, "--label", "follower", "-o", "json",
        ],
    );
    assert_success(&issued, "faas token create");
    let issued: serde_json::Value = serde_json::from_slice(&issued.stdout).unwrap();
    (
        issued["secret"].as_str().unwrap().to_owned(),
        issued["token"]["id"].as_str().unwrap().to_owned(),
    )
}

/// Whether a follow of `workflow` with `token` is let in within 10 s (a place given
/// back is free once the gateway has dropped the ended stream).
fn follow_let_in(url: &str, token: &str, workflow: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = crate::support::client()
            .get(format!("{url}/admin/v1/workflows/{workflow}/logs?follow=1"))
            .bearer_auth(token)
            .send()
            .expect("GET logs?follow=1");
        if response.status() == 200 {
            return true;
        }
        assert_eq!(response.status(), 429, "only a full place refuses it");
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Checks, on a scene whose tenants may hold one follow each, that a follow opened
/// with a second token of the victim's ends once that token is revoked, that a line
/// printed after the revocation never reaches it, and that its place is free again.
fn check_follow_ends_when_its_token_is_revoked<P>(scene: &Scene<P>) {
    let (secret, id) = second_token(&scene.url, "victim");
    let follower = follow(&scene.url, &secret, VICTIM_WORKFLOW);
    follower.wait_for_new_line("greeting before", |sent| {
        assert_eq!(scene.get(&format!("/shop?name=before{sent}")).status(), 200);
    });
    let revoked = scene.faas(&scene.victim, &["token", "revoke", &id]);
    assert_success(&revoked, "faas token revoke");
    assert_eq!(scene.get("/shop?name=revoked").status(), 200);
    // The line is in the workflow's logs (read with the admin token, which holds no
    // place among the tenant's)...
    wait_for_line(&scene.url, TOKEN, &[VICTIM_WORKFLOW], "greeting revoked");
    // ...and never reaches the revoked token, whose follow ends...
    follower.assert_ends_without(FOLLOW_ENDS_WITHIN, "greeting revoked");
    // ...and gives its place back to the tenant's live tokens.
    assert!(
        follow_let_in(&scene.url, &scene.victim, VICTIM_WORKFLOW),
        "the revoked token's follow kept the tenant's one place"
    );
    scene.assert_victim_served();
}

#[test]
fn a_follow_ends_when_its_token_is_revoked_and_never_shows_a_later_line() {
    let mut args = vec!["--no-demo"];
    args.extend(ONE_FOLLOW);
    let platform = Platform::start_with(&args);
    check_follow_ends_when_its_token_is_revoked(&Scene::set_up(platform.url.clone(), platform));
}

#[test]
fn services_mode_a_follow_ends_when_its_token_is_revoked_and_never_shows_a_later_line() {
    let services = crate::services::Services::start_full(&["w1"], &[], &ONE_FOLLOW);
    check_follow_ends_when_its_token_is_revoked(&Scene::set_up(services.url.clone(), services));
}

/// In services mode a removed tenant's log streams are deleted, and a new stream under
/// the same key (a new tenant of the same name, deploying a workflow of the same name)
/// has entries later than where an old follow stands: the old tenant's follow ends
/// and never shows the new tenant's lines.
#[test]
fn services_mode_a_follow_ends_with_its_tenant_and_never_shows_the_names_next_owner() {
    let services = crate::services::Services::start(&["w1"]);
    let scene = Scene::set_up(services.url.clone(), services);
    let tail = scene.manifest("tail", Some("mallory"), &["/tail"]);
    assert_success(&scene.deploy(&scene.mallory, &tail), "mallory's deploy");
    let follower = follow(&scene.url, &scene.mallory, "tail");
    follower.wait_for_new_line("greeting before", |sent| {
        assert_eq!(scene.get(&format!("/tail?name=before{sent}")).status(), 200);
    });
    // The operator removes mallory's workflow and then mallory...
    assert_success(&scene.faas(TOKEN, &["rm", "tail"]), "faas rm");
    let removed = scene.faas(TOKEN, &["tenant", "rm", "mallory"]);
    assert_success(&removed, "faas tenant rm");
    // ...and a new tenant of the name deploys a workflow of the name, which prints.
    let created = scene.faas(TOKEN, &["tenant", "create", "mallory"]);
    assert_success(&created, "faas tenant create");
    let heir = create_token(&scene.url, TOKEN, "mallory");
    let tail = scene.manifest("tail", Some("mallory"), &["/tail"]);
    assert_success(&scene.deploy(&heir, &tail), "the new mallory's deploy");
    assert_eq!(scene.get("/tail?name=heir").status(), 200);
    wait_for_line(&scene.url, TOKEN, &["tail"], "greeting heir");
    follower.assert_ends_without(FOLLOW_ENDS_WITHIN, "greeting heir");
    scene.assert_victim_served();
}

/// With two gateways, a token revoked through the other one: no revocation is seen in
/// the follow's own process, and it ends at its next periodic check instead (every
/// heartbeat), whether or not lines come.
#[test]
fn services_mode_a_follow_ends_when_its_token_is_revoked_through_another_gateway() {
    let services = crate::services::Services::start(&["w1"]);
    let other = crate::services::spawn_gateway(
        &services.redis,
        &services.data.path().join("other-gateway"),
        "50",
    );
    let other_url = other.announced.clone();
    crate::support::wait_ready(&other_url, Duration::from_secs(30));
    // The other gateway stops first, before the Redis it uses.
    let scene = Scene::set_up(services.url.clone(), (other, services));
    let (secret, id) = second_token(&scene.url, "victim");
    let follower = follow(&scene.url, &secret, VICTIM_WORKFLOW);
    follower.wait_for_new_line("greeting before", |sent| {
        assert_eq!(scene.get(&format!("/shop?name=before{sent}")).status(), 200);
    });
    let revoked = faas_as(&other_url, &scene.victim, &["token", "revoke", &id]);
    assert_success(&revoked, "faas token revoke, through the other gateway");
    follower.assert_ends(FOLLOW_ENDS_WITHIN, None);
    scene.assert_victim_served();
}
