//! The polyglot workflow's middle step, in Rust: one branch per sensor (the Python
//! `parse` step's fan-out) computes count, mean, min and max of its values.

use faas_sdk::step::{Context, Region};
use serde_json::{Value, json};

#[faas_sdk::step]
fn handle(_ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let [input] = inputs.as_slice() else {
        return Err(format!("expected one region, got {}", inputs.len()));
    };
    let reading: Value = serde_json::from_slice(&input.bytes()).map_err(|e| e.to_string())?;
    let values: Vec<f64> = reading["values"]
        .as_array()
        .ok_or("no `values` array")?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    if values.is_empty() {
        return Err("no values".to_owned());
    }
    let stats = json!({
        "sensor": reading["sensor"],
        "count": values.len(),
        "mean": values.iter().sum::<f64>() / values.len() as f64,
        "min": values.iter().copied().fold(f64::INFINITY, f64::min),
        "max": values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    });
    Ok(vec![Region::from_bytes(
        "json",
        stats.to_string().as_bytes(),
    )])
}
