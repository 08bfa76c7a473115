//! Functions in Rust, Python and JavaScript. `faas new`: every template becomes a
//! folder that `faas deploy` builds with its language's own tooling (cargo,
//! componentize-py, componentize-js) and deploys, and whose route answers, exactly as a
//! new user would do it. A workflow mixing the three languages in one run, and Python
//! and JavaScript steps using Redis messaging.

use redis::Commands;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{Platform, TOKEN, ensure_tenant_at};

/// Runs `faas args...` in `dir` against `platform`, with the language toolchains on
/// PATH, as a user's shell would after the README's set-up.
fn faas_in(platform: &Platform, dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_faas"))
        .args(args)
        .current_dir(dir)
        .env("FAAS_URL", &platform.url)
        .env("FAAS_TOKEN", TOKEN)
        .env("PATH", faas_testing::languages::path())
        // A Rust template builds into its own target/, where its manifest looks.
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("running faas")
}

fn ok(output: Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `faas new <template> <name> && faas deploy <name>/workflow.toml` in `dir`, as the
/// README has a new user do it.
fn new_and_deploy(platform: &Platform, dir: &Path, template: &str, name: &str) -> PathBuf {
    ok(faas_in(platform, dir, &["new", template, name]), "faas new");
    let folder = dir.join(name);
    let manifest = format!("{name}/workflow.toml");
    let deployed = ok(
        faas_in(platform, dir, &["deploy", &manifest]),
        "faas deploy",
    );
    assert!(deployed.contains(&format!("/{name}")), "{deployed}");
    folder
}

/// The HTTP template `template` greets whoever the query names.
fn check_http(platform: &Platform, dir: &Path, template: &str) {
    let name = format!("hi-{template}");
    let folder = new_and_deploy(platform, dir, template, &name);
    let answer = ok(
        faas_in(platform, &folder, &["invoke", &format!("/{name}?name=you")]),
        "faas invoke",
    );
    assert_eq!(answer, "Hello, you!\n", "{template}");
}

/// The step template `template` counts words, keeps a run count in the tenant's
/// key-value store, reads its config and logs a line per run.
fn check_step(platform: &Platform, dir: &Path, template: &str) {
    let name = format!("count-{template}");
    let folder = new_and_deploy(platform, dir, template, &name);
    for runs in 1..=2 {
        let answer = ok(
            faas_in(
                platform,
                &folder,
                &["invoke", &format!("/{name}"), "-d", "to be or not"],
            ),
            "faas invoke",
        );
        let answer: serde_json::Value = serde_json::from_str(&answer)
            .unwrap_or_else(|err| panic!("{template}: {err}: {answer}"));
        assert_eq!(answer["words"], 4, "{template}: {answer}");
        assert_eq!(answer["runs"], runs, "{template}: {answer}");
        assert_eq!(answer["label"], name.as_str(), "{template}: {answer}");
    }
    let logs = ok(
        faas_in(platform, &folder, &["logs", &name, "--output", "json"]),
        "faas logs",
    );
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{template}: {logs}");
    assert!(lines.iter().all(|line| {
        line["step"] == name.as_str()
            && line["text"]
                .as_str()
                .unwrap()
                .ends_with(&format!("of step {name}"))
    }));
}

fn platform() -> Platform {
    let platform = Platform::start();
    ensure_tenant_at(&platform.url, "demo");
    platform
}

#[test]
fn faas_new_lists_the_templates_and_refuses_what_it_cannot_make() {
    let platform = platform();
    let dir = faas_testing::temp_dir();
    let listed = ok(
        faas_in(&platform, dir.path(), &["new", "--list"]),
        "faas new --list",
    );
    for template in [
        "http-rust",
        "step-rust",
        "http-python",
        "step-python",
        "http-js",
        "step-js",
        "http-ts",
        "step-ts",
        "workflow",
    ] {
        assert!(listed.contains(template), "{listed}");
    }
    let refused = faas_in(&platform, dir.path(), &["new", "http-cobol", "x"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("no template `http-cobol`") && stderr.contains("http-python"));
    let refused = faas_in(&platform, dir.path(), &["new", "http-rust", "Bad_Name"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("`Bad_Name` is not a valid name"));
    ok(
        faas_in(&platform, dir.path(), &["new", "http-rust", "taken"]),
        "faas new",
    );
    let again = faas_in(&platform, dir.path(), &["new", "step-js", "taken"]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists already"));
}

#[test]
fn the_rust_templates_build_deploy_and_answer() {
    let platform = platform();
    let dir = faas_testing::temp_dir();
    check_http(&platform, dir.path(), "http-rust");
    check_step(&platform, dir.path(), "step-rust");
    // The workflow template: one `count` branch per non-empty line, then the join.
    let folder = new_and_deploy(&platform, dir.path(), "workflow", "lines");
    let answer = ok(
        faas_in(
            &platform,
            &folder,
            &[
                "invoke",
                "/lines",
                "-d",
                "one two\nthree\n\nfour five six\n",
            ],
        ),
        "faas invoke",
    );
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer, serde_json::json!({ "lines": 3, "words": 6 }));
    let runs = ok(
        faas_in(&platform, &folder, &["runs", "lines", "--output", "json"]),
        "faas runs",
    );
    let runs: serde_json::Value = serde_json::from_str(&runs).unwrap();
    let counts = runs["runs"][0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|step| step["step"] == "count")
        .count();
    assert_eq!(counts, 3, "{runs}");
}

#[test]
fn the_python_templates_build_deploy_and_answer() {
    let platform = platform();
    let dir = faas_testing::temp_dir();
    check_http(&platform, dir.path(), "http-python");
    check_step(&platform, dir.path(), "step-python");
}

#[test]
fn the_javascript_templates_build_deploy_and_answer() {
    let platform = platform();
    let dir = faas_testing::temp_dir();
    check_http(&platform, dir.path(), "http-js");
    check_step(&platform, dir.path(), "step-js");
}

#[test]
fn the_typescript_templates_build_deploy_and_answer_and_a_type_error_stops_the_deploy() {
    let platform = platform();
    let dir = faas_testing::temp_dir();
    check_http(&platform, dir.path(), "http-ts");
    check_step(&platform, dir.path(), "step-ts");
    // tsc checks the function against the SDK's types before componentize-js runs.
    ok(
        faas_in(&platform, dir.path(), &["new", "step-ts", "mistyped"]),
        "faas new",
    );
    let folder = dir.path().join("mistyped");
    let app = std::fs::read_to_string(folder.join("app.ts")).unwrap();
    std::fs::write(
        folder.join("app.ts"),
        app.replace("inputs[0].text()", "inputs[0].text(42)"),
    )
    .unwrap();
    let refused = faas_in(&platform, &folder, &["deploy"]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stdout).into_owned()
        + &String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("app.ts(") && said.contains("TS2554"),
        "{said}"
    );
    let invoked = faas_in(&platform, &folder, &["invoke", "/mistyped", "-d", "x"]);
    assert!(!invoked.status.success(), "nothing was deployed");
}

#[test]
fn a_workflow_mixes_a_python_parser_rust_branches_and_a_javascript_formatter() {
    let platform = platform();
    let example = faas_testing::repo_root().join("functions/polyglot");
    ok(
        faas_in(&platform, &example, &["deploy", "workflow.toml"]),
        "faas deploy",
    );
    let readings = "# sensor,value\nb,4\na,1\na,2.5\n\nc,-1\nb,6\na,3\n";
    let table = ok(
        faas_in(
            &platform,
            &example,
            &["invoke", "/polyglot", "-d", readings],
        ),
        "faas invoke",
    );
    assert_eq!(
        table,
        "a        n=3 mean=2.17 min=1 max=3\n\
         b        n=2 mean=5.00 min=4 max=6\n\
         c        n=1 mean=-1.00 min=-1 max=-1\n"
    );
    // One Rust branch per sensor, between the Python step and the JavaScript one.
    let runs = ok(
        faas_in(
            &platform,
            &example,
            &["runs", "polyglot", "--output", "json"],
        ),
        "faas runs",
    );
    let runs: serde_json::Value = serde_json::from_str(&runs).unwrap();
    let steps: Vec<&str> = runs["runs"][0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| step["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps.iter().filter(|s| **s == "stats").count(), 3, "{runs}");
    assert_eq!(steps.first(), Some(&"parse"));
    assert_eq!(steps.last(), Some(&"format"));
    // A Python exception fails the step with its text.
    let bad = faas_in(
        &platform,
        &example,
        &["invoke", "/polyglot", "-d", "a,1\na,x\n"],
    );
    let text =
        String::from_utf8_lossy(&bad.stdout).into_owned() + &String::from_utf8_lossy(&bad.stderr);
    assert!(text.contains("line 2: `x` is not a number"), "{text}");
}

/// A Python and a JavaScript step publish their input on the tenant's channel `news-<lang>`
/// (alone, then two numbered copies in one batch) and append it to its stream
/// `notes-<lang>`, on a platform with Redis: all land under the tenant's Redis names, in
/// order, and the entry id the guest got back is the one in Redis.
#[test]
fn python_and_javascript_steps_publish_and_append_through_redis() {
    let redis = faas_testing::RedisServer::start();
    let platform = Platform::start_with(&["--no-demo", "--redis", &redis.url()]);
    ensure_tenant_at(&platform.url, "demo");
    let dir = faas_testing::temp_dir();
    let python = "import faas\nfrom faas import Handler  # noqa: F401\n\n\n\
        @faas.step\ndef handle(ctx, inputs):\n    text = inputs[0].text()\n    \
        faas.publish(\"news-py\", text)\n    \
        faas.publish_all(\"news-py\", [text + \" (1)\", text + \" (2)\"])\n    \
        return faas.json({\"entry\": faas.append(\"notes-py\", text)})\n";
    let javascript = "import { append, json, publish, publishAll, step } from \"./faas.js\";\n\n\
        export const handler = step((ctx, inputs) => {\n  const text = inputs[0].text();\n  \
        publish(\"news-js\", text);\n  publishAll(\"news-js\", [text + \" (1)\", text + \" (2)\"]);\n  return json({ entry: append(\"notes-js\", text) });\n});\n";
    for (template, file, lang, source) in [
        ("step-python", "app.py", "py", python),
        ("step-js", "app.js", "js", javascript),
    ] {
        let name = format!("messenger-{lang}");
        ok(
            faas_in(&platform, dir.path(), &["new", template, &name]),
            "faas new",
        );
        let folder = dir.path().join(&name);
        std::fs::write(folder.join(file), source).unwrap();
        ok(faas_in(&platform, &folder, &["deploy"]), "faas deploy");

        let mut listener = redis::Client::open(redis.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut news = listener.as_pubsub();
        news.subscribe(format!("t:demo:news-{lang}")).unwrap();
        news.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let said = format!("hello from {lang}");
        let answer = ok(
            faas_in(
                &platform,
                &folder,
                &["invoke", &format!("/{name}"), "-d", &said],
            ),
            "faas invoke",
        );
        let answer: serde_json::Value = serde_json::from_str(&answer)
            .unwrap_or_else(|err| panic!("{template}: {err}: {answer}"));
        let published: Vec<String> = (0..3)
            .map(|_| news.get_message().unwrap().get_payload().unwrap())
            .collect();
        assert_eq!(
            published,
            [said.clone(), format!("{said} (1)"), format!("{said} (2)")],
            "{template}"
        );

        let stream = format!("t:demo:notes-{lang}");
        let entries: redis::streams::StreamRangeReply = redis::Client::open(redis.url())
            .unwrap()
            .get_connection()
            .unwrap()
            .xrange_all(&stream)
            .unwrap();
        let [entry] = entries.ids.as_slice() else {
            panic!("{stream}: {:?}", entries.ids);
        };
        assert_eq!(answer["entry"], entry.id.as_str(), "{template}");
        assert_eq!(
            entry.get::<String>("payload").as_deref(),
            Some(said.as_str())
        );
    }
}
