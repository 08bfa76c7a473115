//! Relays the message that started its run to the stream named by config `out`
//! (default `relay:out`) as `source|id|delivery-count|payload`, through the platform's
//! outbound messaging. A payload starting with `fail-once` fails its first delivery;
//! one starting with `poison` always fails. The Redis trigger tests drive it.

use faas_sdk::step::{Context, Region};

#[faas_sdk::step]
fn handle(ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let payload = inputs
        .first()
        .map(|region| region.bytes())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&payload);
    let (source, id, deliveries) = ctx
        .message
        .as_ref()
        .map(|m| (m.source.as_str(), m.id.as_str(), m.delivery_count))
        .unwrap_or(("http", "", 1));
    if text.starts_with("poison") {
        return Err(format!("poisoned message {id}"));
    }
    if text.starts_with("fail-once") && deliveries == 1 {
        return Err(format!("failing the first delivery of {id} on purpose"));
    }
    let out = faas_sdk::config::get("out").unwrap_or_else(|| "relay:out".to_owned());
    let line = format!("{source}|{id}|{deliveries}|{text}");
    faas_sdk::messaging::append(&out, line.as_bytes())?;
    Ok(vec![Region::from_bytes("text", line.as_bytes())])
}
