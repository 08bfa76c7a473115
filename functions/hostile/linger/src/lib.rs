//! Holds its instance after the response head is out, where a deadline that stops at
//! the head would no longer apply.
//!
//! - `/linger/sleep?ms=N`: sends the head and a first chunk, then sleeps N ms in the
//!   host (a `wasi:io` poll, where no epoch tick can interrupt it), then finishes.
//! - `/linger/spin`: sends the head and a first chunk, then spins forever.
//! - `/linger/trap`: sends the head and a first chunk, then traps (the body is never
//!   finished).
//! - `/linger/finish-then-trap`: sends the head and a first chunk, finishes the body,
//!   then traps: its client got a whole body.
//! - `/linger/leave`: sends the head and a first chunk, then returns without finishing
//!   or dropping the body (it forgets the handle).
//! - `/linger/answer?status=N&header-kib=K&body-kib=B&sleep-ms=S`: answers at once,
//!   with status N (200 by default), K headers of 1 KiB each (none by default) and a
//!   body of B KiB of `b` (by default `answered`), then sleeps S ms in the host (none
//!   by default) after finishing the body. It never reads the request's body.
//! - `/linger/error?mib=N`: answers with an error code, not a response: an internal
//!   error whose text is N MiB (1 by default) of a control character, which a `Debug`
//!   rendering escapes to six bytes each.
//! - `/linger/authority`: answers the authority the request names (`none` if none).
//! - anything else: answers `still here` at once.

use wasip2::exports::http::incoming_handler::Guest;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

struct Linger;

impl Guest for Linger {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path = request.path_with_query().unwrap_or_default();
        if let Some(query) = path.strip_prefix("/linger/answer") {
            answer(query, out);
            return;
        }
        if let Some(query) = path.strip_prefix("/linger/error") {
            let text = "\u{1}".repeat(param(query, "mib").unwrap_or(1) << 20);
            ResponseOutparam::set(out, Err(ErrorCode::InternalError(Some(text))));
            return;
        }
        if path.starts_with("/linger/authority") {
            let authority = request.authority().unwrap_or_else(|| "none".to_owned());
            text(out, &format!("{authority}\n"));
            return;
        }
        let response = OutgoingResponse::new(Fields::new());
        let body = response
            .body()
            .expect("a new response's body is taken once");
        ResponseOutparam::set(out, Ok(response));
        let stream = body.write().expect("a new body's stream is taken once");
        if stream.blocking_write_and_flush(b"first chunk\n").is_err() {
            return;
        }
        if path.starts_with("/linger/finish-then-trap") {
            drop(stream);
            let _ = OutgoingBody::finish(body, None);
            std::process::abort();
        }
        if path.starts_with("/linger/leave") {
            drop(stream);
            std::mem::forget(body);
            return;
        }
        if let Some(query) = path.strip_prefix("/linger/sleep") {
            let ms: u64 = query
                .strip_prefix("?ms=")
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(60_000);
            sleep(ms);
        } else if path.starts_with("/linger/trap") {
            std::process::abort();
        } else if path.starts_with("/linger/spin") {
            let mut n: u64 = 0;
            loop {
                n = core::hint::black_box(n.wrapping_add(1));
            }
        } else {
            let _ = stream.blocking_write_and_flush(b"still here\n");
        }
        drop(stream);
        let _ = OutgoingBody::finish(body, None);
    }
}

/// Answers 200 with `body`.
fn text(out: ResponseOutparam, body: &str) {
    let response = OutgoingResponse::new(Fields::new());
    let outgoing = response
        .body()
        .expect("a new response's body is taken once");
    ResponseOutparam::set(out, Ok(response));
    let stream = outgoing.write().expect("a new body's stream is taken once");
    let _ = stream.blocking_write_and_flush(body.as_bytes());
    drop(stream);
    let _ = OutgoingBody::finish(outgoing, None);
}

/// The number `name=` gives in `query`, if any.
fn param(query: &str, name: &str) -> Option<usize> {
    query
        .trim_start_matches('?')
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .and_then(|(_, value)| value.parse().ok())
}

/// `/linger/answer`: whatever status and headers `query` asks for, then a body.
fn answer(query: &str, out: ResponseOutparam) {
    let headers = Fields::new();
    let value = vec![b'p'; 1000];
    for i in 0..param(query, "header-kib").unwrap_or(0) {
        if headers.append(&format!("x-pad-{i}"), &value).is_err() {
            break;
        }
    }
    let response = OutgoingResponse::new(headers);
    let status = param(query, "status").unwrap_or(200);
    let _ = response.set_status_code(u16::try_from(status).unwrap_or(200));
    let body = response
        .body()
        .expect("a new response's body is taken once");
    ResponseOutparam::set(out, Ok(response));
    let stream = body.write().expect("a new body's stream is taken once");
    match param(query, "body-kib") {
        None => {
            let _ = stream.blocking_write_and_flush(b"answered\n");
        }
        Some(kib) => {
            // 4 KiB at a time: the most one blocking write takes.
            let chunk = [b'b'; 4096];
            for _ in 0..kib / 4 {
                if stream.blocking_write_and_flush(&chunk).is_err() {
                    return;
                }
            }
        }
    }
    drop(stream);
    let _ = OutgoingBody::finish(body, None);
    if let Some(ms) = param(query, "sleep-ms") {
        sleep(ms as u64);
    }
}

/// Sleeps `ms` in the host: a `wasi:io` poll, where no epoch tick can interrupt it.
fn sleep(ms: u64) {
    wasip2::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
}

wasip2::http::proxy::export!(Linger);
