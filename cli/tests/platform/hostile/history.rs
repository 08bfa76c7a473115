//! Nothing a guest returns is kept unbounded: error texts are cut, and run history has
//! a byte budget.

use super::{Watch, assert_bystander_served, deploy_bystander};
use crate::regions::{deploy_probe, start};
use crate::support::{TOKEN, client, error_of};

/// The admin API's answer listing `workflow`'s runs, as bytes.
fn runs_answer(platform: &crate::support::Platform, workflow: &str) -> bytes::Bytes {
    let runs = client()
        .get(platform.at(&format!("/admin/v1/workflows/{workflow}/runs")))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(runs.status(), 200);
    runs.bytes().unwrap()
}

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
    let body = runs_answer(&platform, "regions");
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

/// A run of 1,024 branches that each fail with about 4 KiB of error text made one
/// record of over 4 MiB, which the worker sent whole and the gateway kept whole as the
/// workflow's newest run (the history's byte budget always keeps the newest); 128
/// steps of such fan-outs made 500 MiB. A run keeps 1 MiB of step records
/// (`faas_invoke::MAX_STEP_RECORD_BYTES`) and counts the rest.
#[test]
fn a_run_of_many_failing_branches_keeps_a_bounded_record() {
    let dir = faas_testing::temp_dir();
    let platform = crate::support::Platform::start_with(&["--no-demo"]);
    deploy_bystander(&platform, dir.path());
    let component = faas_testing::component_path("retry-chain");
    let function = |name: &str, role: &str| {
        format!(
            "[functions.{name}]\ncomponent = {:?}\nkind = \"step\"\nconfig = {{ role = \"{role}\" }}\n\n\
             [steps.{name}]\nfunction = \"{name}\"\ninput = \"text\"\noutput = \"text\"\n\n",
            component.display().to_string()
        )
    };
    let manifest = format!(
        "name = \"wide\"\ntenant = \"wide\"\n\n{}{}{}\
         [[edges]]\nfrom = \"first\"\nto = \"fail\"\ntype = \"text\"\nfan_out = 1024\n\n\
         [[edges]]\nfrom = \"fail\"\nto = \"last\"\ntype = \"text\"\n\
         join = {{ timeout_ms = 60000, on_failure = \"continue\" }}\n\n\
         [workflow]\ntimeout_ms = 60000\n\n[[triggers.http]]\nroute = \"/wide\"\nstep = \"first\"\n",
        function("first", "first"),
        function("fail", &"x".repeat(4000)),
        function("last", "last"),
    );
    let path = dir.path().join("wide.toml");
    std::fs::write(&path, manifest).unwrap();
    platform.deploy(&path);
    let watch = Watch::start(&platform);
    let _ = platform.post("/wide", "go");
    watch.finish();
    let body = runs_answer(&platform, "wide");
    assert!(
        body.len() < 2 << 20,
        "one run's record is {} bytes",
        body.len()
    );
    let records: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let run = &records["runs"][0];
    let kept = run["steps"].as_array().map_or(0, Vec::len) as u64;
    let omitted = run["omitted_steps"].as_u64().unwrap_or(0);
    assert!(omitted > 0, "{kept} kept");
    assert!(kept + omitted > 1024, "{kept} kept, {omitted} omitted");
    assert_bystander_served(&platform);
}
