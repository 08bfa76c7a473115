//! Bad workflow files and bad components are refused with errors that say where.

use crate::support::{Platform, TOKEN, Upload, error_of, repo};

const BAD_FIELD: &str = r#"name = "hello"
tenant = "demo"

[functions.hello]
component = "hello.wasm"
colour = "blue"

[[triggers.http]]
route = "/hello"
function = "hello"
"#;

/// Deploys `manifest` with `component` as function `hello` through the raw admin API,
/// bypassing the CLI's own checks.
fn upload(platform: &Platform, manifest: &str, component: &[u8]) -> reqwest::blocking::Response {
    Upload::of(manifest, &[("hello", component)]).send(&platform.url, TOKEN)
}

#[test]
fn the_cli_reports_a_bad_workflow_toml_with_its_line_and_field() {
    let platform = Platform::start();
    let dir = faas_testing::temp_dir();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, BAD_FIELD).unwrap();
    let output = platform.faas(&["deploy", path.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bad.toml:6:1: functions.hello.colour"),
        "{stderr}"
    );
    assert!(stderr.contains("unknown field `colour`"), "{stderr}");
}

#[test]
fn the_api_reports_a_bad_workflow_toml_with_its_line_and_field() {
    let platform = Platform::start();
    let manifest = BAD_FIELD
        .replace("colour = \"blue\"\n", "")
        .replace("function = \"hello\"", "function = \"helo\"");
    let response = upload(&platform, &manifest, &faas_testing::component("hello"));
    assert_eq!(response.status(), 400);
    let error = error_of(response);
    assert_eq!(error["kind"], "manifest");
    assert_eq!(error["line"], 9);
    assert_eq!(error["field"], "triggers.http[0].function");
    let message = error["message"].as_str().unwrap();
    assert!(message.starts_with("workflow.toml:9:"), "{message}");
    assert!(message.contains("unknown function `helo`"), "{message}");
}

#[test]
fn a_broken_component_is_refused_and_the_live_version_keeps_serving() {
    let platform = Platform::start();
    platform.deploy(&repo("functions/hello/workflow.toml"));
    let manifest = std::fs::read_to_string(repo("functions/hello/workflow.toml")).unwrap();
    let response = upload(
        &platform,
        &manifest.replace("Hello", "Broken"),
        b"not a component",
    );
    assert_eq!(response.status(), 400);
    let error = error_of(response);
    assert_eq!(error["kind"], "component");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("function `hello`"), "{message}");
    assert!(message.contains("not WebAssembly"), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert_eq!(platform.get("/hello").text().unwrap(), "Hello, world!\n");
}

#[test]
fn the_cli_names_function_and_file_of_a_component_that_is_not_wasm_in_one_line() {
    let platform = Platform::start();
    let dir = faas_testing::temp_dir();
    let text_file = dir.path().join("hello.wasm");
    std::fs::write(&text_file, "#!/bin/sh\necho hello\n").unwrap();
    let manifest = dir.path().join("workflow.toml");
    std::fs::write(
        &manifest,
        format!(
            "name = \"notwasm\"\ntenant = \"demo\"\n\n[functions.greet]\ncomponent = \"{}\"\n\n[[triggers.http]]\nroute = \"/notwasm\"\nfunction = \"greet\"\n",
            text_file.display()
        ),
    )
    .unwrap();
    let output = platform.faas(&["deploy", "--no-build", manifest.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("function `greet`"), "{stderr}");
    assert!(
        stderr.contains(&text_file.display().to_string()),
        "{stderr}"
    );
    assert!(stderr.contains("not WebAssembly"), "{stderr}");
}

#[test]
fn a_component_that_is_not_an_http_function_is_refused() {
    let platform = Platform::start();
    let dir = faas_testing::temp_dir();
    // A step function must export the step handler; the HTTP hello does not.
    let manifest = format!(
        "name = \"steps\"\ntenant = \"t\"\n\n[functions.step]\ncomponent = \"{}\"\nkind = \"step\"\n",
        faas_testing::component_path("hello").display()
    );
    let path = dir.path().join("workflow.toml");
    std::fs::write(&path, manifest).unwrap();
    let output = platform.faas(&["deploy", path.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("must export faas:platform/handler"),
        "{stderr}"
    );
}

#[test]
fn deploy_refuses_a_karmem_type_its_schema_file_does_not_define() {
    let platform = Platform::start();
    let dir = faas_testing::temp_dir();
    let manifest = crate::support::copy_manifest(
        dir.path(),
        "functions/wordcount/workflow.toml",
        &[(
            "output = \"wordcount.km:Chunk\"",
            "output = \"wordcount.km:Chunky\"",
        )],
    );
    // The copy must find wordcount.km beside it.
    std::fs::copy(
        repo("functions/wordcount/wordcount.km"),
        dir.path().join("wordcount.km"),
    )
    .unwrap();
    let edge_fixed = std::fs::read_to_string(&manifest)
        .unwrap()
        .replacen(
            "type = \"wordcount.km:Chunk\"",
            "type = \"wordcount.km:Chunky\"",
            1,
        )
        .replacen(
            "input = \"wordcount.km:Chunk\"",
            "input = \"wordcount.km:Chunky\"",
            1,
        );
    std::fs::write(&manifest, edge_fixed).unwrap();
    let output = platform.faas(&["deploy", "--no-build", manifest.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "steps.count.input: `wordcount.km` defines no type `Chunky` (defined: Chunk, Counts)"
        ),
        "{stderr}"
    );
}
