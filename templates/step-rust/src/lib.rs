//! A workflow step: counts the words of its text input, and how often it ran, and
//! returns them as JSON.

use faas_sdk::step::{Context, Region};

#[faas_sdk::step]
fn handle(ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let text = match inputs.first() {
        Some(input) => String::from_utf8(input.bytes()).map_err(|err| err.to_string())?,
        None => String::new(),
    };
    let runs = faas_sdk::key_value::increment("runs", 1).map_err(|err| format!("{err:?}"))?;
    faas_sdk::log::info(&format!("run {} of step {}", ctx.run_id, ctx.step));
    let label = faas_sdk::config::get("label").unwrap_or_default();
    let words = text.split_whitespace().count();
    let json = serde_json::json!({ "words": words, "runs": runs, "label": label });
    Ok(vec![Region::from_bytes("json", json.to_string().as_bytes())])
}
