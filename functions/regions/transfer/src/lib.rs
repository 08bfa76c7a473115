//! The regions example: one component, three roles (config `role`).
//!
//! - `produce`: reads a byte count (text), encodes a `blob.km:Blob` of that many data
//!   bytes straight into a region's pages and seals it. Writing is encoding; nothing is
//!   serialized or copied afterwards.
//! - `consume`: reads its input blob where the platform placed it (mapped from the
//!   producer's pages when large), checks every byte, and reports what it saw as JSON:
//!   length, byte sum, and the handoff and read times measured from the producer's seal.
//!   With config `dirty_tail = "true"` the producer scribbles over its pages past the
//!   value before sealing (consumers must see zeros there).
//!   With config `mutate = "true"` it then overwrites its copy (copy-on-write, so sibling
//!   branches must still see the original).
//! - `gather`: joins the consumers' JSON reports into one array (fan-in).

use blob::{Blob, BlobWriter};
use faas_sdk::region::{RegionExt, RegionWriter, type_label};
use faas_sdk::step::{Context, Region, StepResult};
use std::time::{SystemTime, UNIX_EPOCH};

#[path = "../../pattern.rs"]
mod pattern;
use pattern::{expected_byte, fill, seed_for};

#[allow(dead_code, clippy::all)]
mod blob {
    include!(concat!(env!("OUT_DIR"), "/blob.rs"));
}

/// Bytes of a blob's table and slice header ahead of its data.
const HEADER_BYTES: usize = Blob::SIZE + 64;

#[faas_sdk::step]
fn step(ctx: Context, inputs: Vec<Region>) -> StepResult {
    let role = faas_sdk::config::get("role").unwrap_or_default();
    match role.as_str() {
        "produce" => produce(&inputs).map(|region| vec![region]),
        "consume" => consume(&ctx, &inputs).map(|report| vec![json(report)]),
        "gather" => gather(&inputs).map(|report| vec![json(report)]),
        other => Err(format!("unknown role `{other}`")),
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
}

fn json(text: String) -> Region {
    Region::from_bytes("json", text.as_bytes())
}

fn produce(inputs: &[Region]) -> Result<Region, String> {
    let input = inputs.first().ok_or("produce needs a byte count")?;
    let text = String::from_utf8(input.bytes()).map_err(|err| err.to_string())?;
    let len: usize = text
        .trim()
        .parse()
        .map_err(|err| format!("input `{}` is not a byte count: {err}", text.trim()))?;
    let seed = seed_for(len);
    let mut writer = RegionWriter::<Blob>::new(HEADER_BYTES + len)?;
    let mut w = faas_karmem::Writer::new(writer.buffer());
    let mut blob = BlobWriter::new(&mut w).map_err(|err| err.to_string())?;
    blob.set_seed(seed);
    fill(blob.alloc_data(len).map_err(|err| err.to_string())?, seed);
    blob.set_sent_at_ns(now_ns());
    let encoded = w.len();
    if faas_sdk::config::get("dirty_tail").as_deref() == Some("true") {
        // Scribble past the value: consumers must see zeros there, not this.
        writer.buffer()[encoded..].fill(0xaa);
    }
    writer.finish(encoded)
}

fn consume(ctx: &Context, inputs: &[Region]) -> Result<String, String> {
    let input = inputs.first().ok_or("consume needs a blob")?;
    let blob = input.view::<Blob>()?;
    let placed_at = now_ns();
    let data = blob.data();
    let data = data.raw_bytes();
    let seed = blob.seed();
    let mut sum = 0u64;
    let mut wrong = 0usize;
    for (index, byte) in data.iter().enumerate() {
        sum += u64::from(*byte);
        wrong += usize::from(*byte != expected_byte(index, seed));
    }
    let read_at = now_ns();
    if wrong > 0 {
        return Err(format!(
            "{wrong} of {} bytes differ from the producer's",
            data.len()
        ));
    }
    if faas_sdk::config::get("mutate").as_deref() == Some("true") {
        // Overwrite this branch's copy; the next sibling must still see the original.
        let bytes = input.place_mut()?;
        bytes.fill(ctx.branch as u8 ^ 0xff);
    }
    let sent_at = blob.sent_at_ns();
    Ok(format!(
        "{{\"branch\":{},\"type\":\"{}\",\"len\":{},\"sum\":{sum},\"handoff_ns\":{},\"read_ns\":{}}}",
        ctx.branch,
        type_label::<Blob>(),
        data.len(),
        placed_at.saturating_sub(sent_at),
        read_at.saturating_sub(sent_at),
    ))
}

fn gather(inputs: &[Region]) -> Result<String, String> {
    let reports: Vec<String> = inputs
        .iter()
        .map(|region| String::from_utf8(region.bytes()).map_err(|err| err.to_string()))
        .collect::<Result<_, _>>()?;
    Ok(format!("[{}]", reports.join(",")))
}
