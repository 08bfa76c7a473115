//! A workflow of three steps played by one component, chosen by the config `role`:
//! `split` cuts the text it is given into lines (one region each), `count` runs once
//! per line, in parallel (a fan-out), and `merge` adds the counts up (the join).

use faas_sdk::step::{Context, Region};

#[faas_sdk::step]
fn handle(_ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let texts = inputs
        .iter()
        .map(|input| String::from_utf8(input.bytes()).map_err(|err| err.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let role = faas_sdk::config::get("role").unwrap_or_default();
    match role.as_str() {
        "split" => Ok(texts
            .concat()
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| Region::from_bytes("text", line.as_bytes()))
            .collect()),
        "count" => {
            let words: usize = texts.iter().map(|text| text.split_whitespace().count()).sum();
            Ok(vec![json(serde_json::json!({ "words": words }))])
        }
        "merge" => {
            let mut words = 0;
            for text in &texts {
                let counted: serde_json::Value =
                    serde_json::from_str(text).map_err(|err| err.to_string())?;
                words += counted["words"].as_u64().unwrap_or(0);
            }
            Ok(vec![json(serde_json::json!({ "lines": texts.len(), "words": words }))])
        }
        other => Err(format!("config `role` must be split, count or merge, not {other:?}")),
    }
}

fn json(value: serde_json::Value) -> Region {
    Region::from_bytes("json", value.to_string().as_bytes())
}
