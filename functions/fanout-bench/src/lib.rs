//! The fan-out benchmark's function. One component, two entry points with the same
//! logic, so the benchmark compares the plumbing, not the work:
//!
//! - as a workflow step (`role` in config): `source` makes a payload of
//!   `payload_bytes` (default 64 KiB), `work` hashes its payload (SHA-256), `sink`
//!   joins the digests into JSON;
//! - as an HTTP function: `POST /fanout-http/source|work|sink` does the same with
//!   request and response bodies, for chaining with HTTP calls.

use faas_sdk::http::{Request, Response};
use faas_sdk::step::{Context, Region};
use sha2::{Digest, Sha256};

fn payload() -> Vec<u8> {
    let size = faas_sdk::config::get("payload_bytes")
        .and_then(|size| size.parse().ok())
        .unwrap_or(64 * 1024);
    (0..size).map(|i: usize| (i % 251) as u8).collect()
}

fn work(payload: &[u8]) -> Vec<u8> {
    Sha256::digest(payload).to_vec()
}

/// Folds the 32-byte digests in `digests` into one, and counts them.
fn sink(digests: &[u8]) -> String {
    let combined = Sha256::digest(digests);
    let hex: String = combined.iter().map(|byte| format!("{byte:02x}")).collect();
    format!(
        "{{\"branches\":{},\"digest\":\"{hex}\"}}",
        digests.len() / 32
    )
}

#[faas_sdk::step]
fn step(_ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let role = faas_sdk::config::get("role").unwrap_or_default();
    match role.as_str() {
        "source" => Ok(vec![Region::from_bytes("bytes", &payload())]),
        "work" => {
            let input = inputs.first().ok_or("work needs a payload")?;
            Ok(vec![Region::from_bytes("bytes", &work(&input.bytes()))])
        }
        "sink" => {
            let digests: Vec<u8> = inputs.iter().flat_map(|region| region.bytes()).collect();
            Ok(vec![Region::from_bytes("json", sink(&digests).as_bytes())])
        }
        other => Err(format!("unknown role `{other}`")),
    }
}

#[faas_sdk::http]
fn http(req: Request) -> Response {
    match req.path() {
        "/fanout-http/source" => Response::new(200).with_body(payload()),
        "/fanout-http/work" => Response::new(200).with_body(work(req.body())),
        "/fanout-http/sink" => Response::json(200, sink(req.body())),
        _ => Response::text(404, "use /fanout-http/source, /work or /sink\n"),
    }
}
