//! The admin API requires the token.

use crate::support::{Platform, client, error_of, repo};

#[test]
fn deploying_without_a_token_gets_401() {
    let platform = Platform::start();
    let response = client()
        .post(platform.at("/admin/v1/workflows"))
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    assert_eq!(error_of(response)["kind"], "unauthorized");

    let wrong = client()
        .get(platform.at("/admin/v1/workflows"))
        .bearer_auth("not-the-token")
        .send()
        .unwrap();
    assert_eq!(wrong.status(), 401);

    let manifest = repo("functions/hello/workflow.toml");
    let cli = platform.faas(&["deploy", "--token", "wrong", manifest.to_str().unwrap()]);
    assert!(!cli.status.success());
    let stderr = String::from_utf8_lossy(&cli.stderr);
    assert!(stderr.contains("refused the token"), "{stderr}");
    assert_eq!(platform.get("/hello").status(), 404, "nothing was deployed");
}

#[test]
fn status_and_list_report_functions_limits_and_routes() {
    let platform = Platform::start();
    platform.deploy(&repo("functions/misbehave/workflow.toml"));
    let status = platform.faas(&["status", "misbehave", "--output", "json"]);
    assert!(status.status.success());
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["tenant"], "chaos");
    assert_eq!(status["routes"][0]["route"], "/misbehave/...");
    assert_eq!(status["functions"][0]["memory_mb"], 32);
    assert_eq!(status["functions"][0]["timeout_ms"], 1000);
    let text = platform.faas(&["ls"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("misbehave") && text.contains("chaos"),
        "{text}"
    );
}
