//! The regions benchmark's serializing baseline: the same producer and consumer as
//! `region-transfer`, but chained the way plain `wasi:http` components chain today,
//! with an HTTP call carrying a JSON body (the bytes in base64).
//!
//! - `POST /regions-http/produce?to=<consume URL>` with a byte count as the body: builds
//!   the same blob as `region-transfer` (`data[i] = i ^ seed`, `seed = len ^ 0x5a`),
//!   takes `sent_at_ns` just before serializing, serializes
//!   `{"seed":..,"sent_at_ns":..,"data":"<base64>"}`, POSTs it to `to` and answers with
//!   the consumer's response.
//! - `POST /regions-http/consume`: reads the body, parses the JSON and decodes the
//!   base64 (the bytes are then usable: the end of the handoff), checks every byte and
//!   answers with the transfer consumer's report: `len`, `sum`, `handoff_ns`, `read_ns`.
//!
//! A plain `wasi:http` component (wstd, no platform SDK), so it runs anywhere.

use base64::Engine as _;
use base64::display::Base64Display;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize, Serializer};
use std::time::{SystemTime, UNIX_EPOCH};
use wstd::http::body::Body;
use wstd::http::{BodyExt, Client, Error, Request, Response, StatusCode};

#[path = "../../pattern.rs"]
mod pattern;
use pattern::{expected_byte, fill, seed_for};

/// What the producer sends: the blob's fields, with the data in base64.
#[derive(Serialize)]
struct Outgoing<'a> {
    seed: u64,
    sent_at_ns: u64,
    data: Base64<'a>,
}

/// What the consumer parses: the base64 text is borrowed from the body (JSON base64
/// needs no unescaping), so parsing copies nothing; decoding is the one copy.
#[derive(Deserialize)]
struct Incoming<'a> {
    seed: u64,
    sent_at_ns: u64,
    data: &'a str,
}

/// Bytes serialized as a base64 string, encoded straight into the JSON output.
struct Base64<'a>(&'a [u8]);

impl Serialize for Base64<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&Base64Display::new(self.0, &STANDARD))
    }
}

/// A failed request: its status and message.
type Failure = (StatusCode, String);

#[wstd::http_server]
async fn main(request: Request<Body>) -> Result<Response<Body>, Error> {
    let result = match request.uri().path() {
        "/regions-http/produce" => produce(request).await,
        "/regions-http/consume" => consume(request).await,
        other => Err((StatusCode::NOT_FOUND, format!("no route {other}"))),
    };
    let (status, body) = match result {
        Ok(json) => (StatusCode::OK, json),
        Err((status, message)) => (status, format!("{message}\n").into_bytes()),
    };
    Ok(Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(body.into())?)
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
}

fn bad_request(message: impl std::fmt::Display) -> Failure {
    (StatusCode::BAD_REQUEST, message.to_string())
}

fn internal(message: impl std::fmt::Display) -> Failure {
    (StatusCode::INTERNAL_SERVER_ERROR, message.to_string())
}

/// The whole body, in one buffer sized by the content length when known.
async fn read_all(body: Body) -> Result<Vec<u8>, Failure> {
    let capacity = body.content_length().unwrap_or(0) as usize;
    let mut bytes = Vec::with_capacity(capacity);
    let mut body = body.into_boxed_body();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| internal(format!("reading the body: {err:#}")))?;
        if let Some(data) = frame.data_ref() {
            bytes.extend_from_slice(data);
        }
    }
    Ok(bytes)
}

/// The value of query parameter `name`, percent-decoded.
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    let value = query?
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))?;
    let mut decoded = Vec::with_capacity(value.len());
    let mut bytes = value.bytes();
    while let Some(byte) = bytes.next() {
        match byte {
            b'%' => {
                let hex = [bytes.next()?, bytes.next()?];
                let hex = std::str::from_utf8(&hex).ok()?;
                decoded.push(u8::from_str_radix(hex, 16).ok()?);
            }
            b'+' => decoded.push(b' '),
            byte => decoded.push(byte),
        }
    }
    String::from_utf8(decoded).ok()
}

async fn produce(request: Request<Body>) -> Result<Vec<u8>, Failure> {
    let to = query_param(request.uri().query(), "to")
        .ok_or_else(|| bad_request("produce needs `?to=<URL of /regions-http/consume>`"))?;
    let text = read_all(request.into_body()).await?;
    let text = String::from_utf8_lossy(&text);
    let len: usize = text
        .trim()
        .parse()
        .map_err(|err| bad_request(format!("`{}` is not a byte count: {err}", text.trim())))?;
    let seed = seed_for(len);
    let mut data = vec![0u8; len];
    fill(&mut data, seed);

    let sent_at_ns = now_ns();
    let mut json = Vec::with_capacity(len.div_ceil(3) * 4 + 128);
    let payload = Outgoing {
        seed,
        sent_at_ns,
        data: Base64(&data),
    };
    serde_json::to_writer(&mut json, &payload).map_err(internal)?;
    drop(data);

    let outgoing = Request::post(to.as_str())
        .header("content-type", "application/json")
        .header("content-length", json.len())
        .body(Body::from(json))
        .map_err(|err| bad_request(format!("request to `{to}`: {err}")))?;
    let response = Client::new()
        .send(outgoing)
        .await
        .map_err(|err| internal(format!("POST {to}: {err:#}")))?;
    let status = response.status();
    let body = read_all(response.into_body()).await?;
    if !status.is_success() {
        let body = String::from_utf8_lossy(&body);
        return Err((status, format!("the consumer answered {status}: {body}")));
    }
    Ok(body)
}

async fn consume(request: Request<Body>) -> Result<Vec<u8>, Failure> {
    let body = read_all(request.into_body()).await?;
    let payload: Incoming<'_> = serde_json::from_slice(&body).map_err(bad_request)?;
    let data = STANDARD
        .decode(payload.data)
        .map_err(|err| bad_request(format!("data is not base64: {err}")))?;
    let placed_at = now_ns();
    let mut sum = 0u64;
    let mut wrong = 0usize;
    for (index, byte) in data.iter().enumerate() {
        sum += u64::from(*byte);
        wrong += usize::from(*byte != expected_byte(index, payload.seed));
    }
    let read_at = now_ns();
    if wrong > 0 {
        return Err(internal(format!(
            "{wrong} of {} bytes differ from the producer's",
            data.len()
        )));
    }
    let sent_at = payload.sent_at_ns;
    Ok(format!(
        "{{\"branch\":0,\"type\":\"json\",\"len\":{},\"sum\":{sum},\"handoff_ns\":{},\"read_ns\":{}}}",
        data.len(),
        placed_at.saturating_sub(sent_at),
        read_at.saturating_sub(sent_at),
    )
    .into_bytes())
}
