//! Nothing a guest returns is kept unbounded: error texts are cut, and run history has
//! a byte budget.

use super::{Watch, assert_bystander_served, deploy_bystander};
use crate::regions::{deploy_probe, start};
use crate::support::{TOKEN, client, error_of};

#[test]
fn a_32_mib_error_text_is_cut_in_the_response_and_in_run_history() {
    let dir = faas_testing::temp_dir();
    let platform = start(&[]);
    deploy_bystander(&platform, dir.path());
    deploy_probe(&platform, dir.path(), "huge-error", "");
    let watch = Watch::start(&platform);
    for _ in 0..5 {
        let error = error_of(platform.post("/regions", "1000"));
        assert_eq!(error["kind"], "step_failed", "{error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.len() < 8 << 10, "{} bytes", message.len());
        assert!(message.contains("more bytes cut"), "{}", &message[..200]);
    }
    watch.finish();
    let runs = client()
        .get(platform.at("/admin/v1/workflows/regions/runs"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(runs.status(), 200);
    let body = runs.bytes().unwrap();
    let records: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        records["runs"].as_array().map(Vec::len),
        Some(5),
        "{records}"
    );
    assert!(
        body.len() < 100 << 10,
        "run history answered {} bytes",
        body.len()
    );
    assert_bystander_served(&platform);
}
