//! Holds host memory through WASI resources, which live in the host, outside the
//! instance's linear memory and so outside its memory limit. Each route keeps what it
//! made until the host refuses more (or the deadline), then answers how many it made.
//!
//! - `/resource-hog/handles`: empty header fields, only handles in the host's table.
//! - `/resource-hog/headers`: header fields, each holding 48 KiB of values.
//! - `/resource-hog/bodies`: outgoing requests that are never sent, each body's stream
//!   written until the host would block.
//! - `/resource-hog/wide-headers`: one set of header fields, 8 KiB values appended to it
//!   without end.
//! - `/resource-hog/hold?count=N&ms=M`: N header fields of 48 KiB each, within the
//!   instance's handle limit, held M ms: many instances at once hold many times that.
//! - anything else: answers `still here`.

use wasip2::exports::http::incoming_handler::Guest;
use wasip2::http::types::{
    Fields, IncomingRequest, OutgoingBody, OutgoingRequest, OutgoingResponse, ResponseOutparam,
};
use wasip2::io::streams::OutputStream;

/// The most of anything a route makes: far beyond any limit the host should allow.
const AS_MANY_AS: usize = 10_000_000;

struct ResourceHog;

/// Header fields holding six 8 KiB values: within the host's limit for one set of
/// fields (beyond it, appending traps).
fn full_fields(value: &[u8]) -> Fields {
    let fields = Fields::new();
    for index in 0..6 {
        let _ = fields.append(&format!("x-hog-{index}"), value);
    }
    fields
}

/// An unsent request whose body's stream holds as much as the host buffers.
fn filled_body(chunk: &[u8]) -> Option<(OutgoingRequest, OutgoingBody, OutputStream)> {
    let request = OutgoingRequest::new(Fields::new());
    let body = request.body().ok()?;
    let stream = body.write().ok()?;
    while let Ok(room) = stream.check_write() {
        if room == 0 {
            break;
        }
        let take = chunk.len().min(room as usize);
        if stream.write(&chunk[..take]).is_err() {
            break;
        }
    }
    Some((request, body, stream))
}

/// The number `name=` gives in `path`'s query, 0 where there is none.
fn query(path: &str, name: &str) -> usize {
    let Some((_, query)) = path.split_once('?') else {
        return 0;
    };
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}

impl Guest for ResourceHog {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path = request.path_with_query().unwrap_or_default();
        // Each route stops at the first refusal; an instance the host stops (a trap)
        // never answers, which is the point.
        let made = if path.starts_with("/resource-hog/handles") {
            let mut kept = Vec::new();
            while kept.len() < AS_MANY_AS {
                kept.push(Fields::new());
            }
            kept.len()
        } else if path.starts_with("/resource-hog/wide-headers") {
            let value = vec![b'w'; 8 << 10];
            let fields = Fields::new();
            let mut appended = 0;
            while appended < AS_MANY_AS {
                if fields
                    .append(&format!("x-wide-{appended}"), &value)
                    .is_err()
                {
                    break;
                }
                appended += 1;
            }
            appended
        } else if path.starts_with("/resource-hog/headers") {
            let value = vec![b'h'; 8 << 10];
            let mut kept = Vec::new();
            while kept.len() < AS_MANY_AS {
                kept.push(full_fields(&value));
            }
            kept.len()
        } else if path.starts_with("/resource-hog/hold") {
            let value = vec![b'h'; 8 << 10];
            let kept: Vec<Fields> = (0..query(&path, "count"))
                .map(|_| full_fields(&value))
                .collect();
            let nanos = query(&path, "ms").saturating_mul(1_000_000);
            wasip2::clocks::monotonic_clock::subscribe_duration(nanos as u64).block();
            kept.len()
        } else if path.starts_with("/resource-hog/bodies") {
            let chunk = vec![b'b'; 64 << 10];
            let mut kept = Vec::new();
            while kept.len() < AS_MANY_AS {
                match filled_body(&chunk) {
                    Some(body) => kept.push(body),
                    None => break,
                }
            }
            kept.len()
        } else {
            0
        };
        let text = if made == 0 {
            "still here\n".to_owned()
        } else {
            format!("{made}\n")
        };
        let response = OutgoingResponse::new(Fields::new());
        let body = response
            .body()
            .expect("a new response's body is taken once");
        ResponseOutparam::set(out, Ok(response));
        let stream = body.write().expect("a new body's stream is taken once");
        let _ = stream.blocking_write_and_flush(text.as_bytes());
        drop(stream);
        let _ = OutgoingBody::finish(body, None);
    }
}

wasip2::http::proxy::export!(ResourceHog);
