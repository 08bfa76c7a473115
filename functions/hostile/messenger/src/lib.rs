//! Sends what it is told where it is told, for the multi-tenant messaging tests: a
//! tenant's guest trying to reach the platform's own Redis keys or another tenant's
//! channels and streams.
//!
//! `POST <route>?op=publish|append&name=<channel or stream>[&count=N]` publishes or
//! appends the request body N times (1 by default) and answers `200` with the last
//! entry id (or `published`), or `502` with the platform's refusal. `op=publish-all`
//! publishes N messages in one call instead, the body followed by `#<i>` for i from 0.
//! `op=publish-all-aliased&kib=K` publishes N messages of K KiB that are all the same
//! K KiB of its memory: the lists of one call may point at the same bytes.

use faas_sdk::http::{Request, Response};
use faas_sdk::messaging;

/// More sends than any test needs; bounds a request's work.
const MAX_COUNT: u32 = 10_000;

#[faas_sdk::http]
fn handle(req: Request) -> Response {
    let (Some(op), Some(name)) = (req.query_param("op"), req.query_param("name")) else {
        return Response::text(
            400,
            "usage: ?op=publish|publish-all|append&name=<name>[&count=N]\n",
        );
    };
    let count = req
        .query_param("count")
        .and_then(|count| count.parse().ok())
        .unwrap_or(1u32)
        .min(MAX_COUNT);
    if op == "publish-all-aliased" {
        let kib: usize = req
            .query_param("kib")
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(1);
        return match publish_aliased(name, count as usize, kib << 10) {
            Ok(()) => Response::text(200, "published\n"),
            Err(err) => Response::text(502, format!("{err}\n")),
        };
    }
    if op == "publish-all" {
        let body = String::from_utf8_lossy(req.body());
        let batch: Vec<Vec<u8>> = (0..count)
            .map(|i| format!("{body}#{i}").into_bytes())
            .collect();
        return match messaging::publish_all(name, &batch) {
            Ok(()) => Response::text(200, "published\n"),
            Err(err) => Response::text(502, format!("{err}\n")),
        };
    }
    let mut last = String::new();
    for _ in 0..count {
        let sent = match op {
            "publish" => messaging::publish(name, req.body()).map(|()| "published".to_owned()),
            "append" => messaging::append(name, req.body()),
            _ => return Response::text(400, format!("unknown op `{op}`\n")),
        };
        match sent {
            Ok(id) => last = id,
            Err(err) => return Response::text(502, format!("{err}\n")),
        }
    }
    Response::text(200, format!("{last}\n"))
}

/// Publishes `count` messages of `len` bytes that all point at one buffer.
fn publish_aliased(name: &str, count: usize, len: usize) -> Result<(), String> {
    let buffer = vec![b'a'; len];
    // Each `Vec` claims the one buffer, which no Rust program may do; here they are
    // only read (lowered as lists) and never dropped, which is the attack.
    let aliased = std::mem::ManuallyDrop::new(
        (0..count)
            .map(|_| unsafe { Vec::from_raw_parts(buffer.as_ptr().cast_mut(), len, len) })
            .collect::<Vec<Vec<u8>>>(),
    );
    messaging::publish_all(name, &aliased)
}
