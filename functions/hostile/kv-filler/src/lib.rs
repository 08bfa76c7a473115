//! Fills its tenant's key-value store until the platform refuses, for the quota tests.
//!
//! - `POST /kv-filler/keys/<prefix>`: sets `<prefix>:0`, `<prefix>:1`... to one byte
//!   each (many keys);
//! - `POST /kv-filler/bytes/<prefix>?size=N`: the same with values of N bytes (many
//!   bytes; 64 KiB by default);
//! - `POST /kv-filler/counters/<prefix>`: increments `<prefix>:0`, `<prefix>:1`...
//!   (new keys through `increment`);
//! - `POST /kv-filler/grow/<key>`: overwrites one key with ever longer values (a
//!   single key growing past the byte quota);
//! - `POST /kv-filler/overwrite/<key>?size=N`: overwrites one key with N bytes again
//!   and again (1 MiB by default): within every quota, so only the event's deadline
//!   stops it, and the store works as hard as one guest can make it.
//!
//! Each writes until a write fails (or a million writes) and answers `507` with
//! `wrote <n>, then <error>` when refused, `200` with `wrote <n>` otherwise.
//! `DELETE /kv-filler/keys/<prefix>` deletes `<prefix>:0...` while they exist and
//! answers how many. `PUT|GET|DELETE /kv-filler/key/<key>` sets (the body), reads or
//! deletes one key.

use faas_sdk::http::{Request, Response};
use faas_sdk::key_value::{self, Error};

/// More writes than any quota in the tests allows; a platform without quotas would
/// let them all through (and the test would see 200).
const MAX_WRITES: u64 = 1_000_000;

#[faas_sdk::http]
fn handle(req: Request) -> Response {
    let path = req.path().trim_start_matches("/kv-filler/");
    let Some((action, name)) = path.split_once('/') else {
        return Response::text(400, "usage: /kv-filler/<action>/<name>\n");
    };
    match (req.method(), action) {
        ("POST", "keys") => fill(|i| key_value::set(&format!("{name}:{i}"), b"x")),
        ("POST", "bytes") => {
            let value = vec![0xa5u8; size(&req, 64 << 10)];
            fill(|i| key_value::set(&format!("{name}:{i}"), &value))
        }
        ("POST", "overwrite") => {
            let value = vec![0x5au8; size(&req, 1 << 20)];
            fill(|_| key_value::set(name, &value))
        }
        ("POST", "counters") => fill(|i| key_value::increment(&format!("{name}:{i}"), 1).map(drop)),
        ("POST", "grow") => {
            let mut value = Vec::new();
            fill(|_| {
                value.resize(value.len() + 1024, b'g');
                key_value::set(name, &value)
            })
        }
        ("DELETE", "keys") => {
            let mut deleted = 0u64;
            loop {
                let key = format!("{name}:{deleted}");
                match key_value::get(&key) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(err) => return failed(&err),
                }
                if let Err(err) = key_value::delete(&key) {
                    return failed(&err);
                }
                deleted += 1;
            }
            Response::text(200, format!("deleted {deleted}\n"))
        }
        ("PUT", "key") => match key_value::set(name, req.body()) {
            Ok(()) => Response::new(204),
            Err(err) => failed(&err),
        },
        ("GET", "key") => match key_value::get(name) {
            Ok(Some(value)) => Response::new(200).with_body(value),
            Ok(None) => Response::new(404),
            Err(err) => failed(&err),
        },
        ("DELETE", "key") => match key_value::delete(name) {
            Ok(()) => Response::new(204),
            Err(err) => failed(&err),
        },
        _ => Response::text(404, "no such attack\n"),
    }
}

/// Calls `write(0)`, `write(1)`... until one fails.
fn fill(mut write: impl FnMut(u64) -> Result<(), Error>) -> Response {
    for i in 0..MAX_WRITES {
        if let Err(err) = write(i) {
            return Response::text(507, format!("wrote {i}, then {}\n", describe(&err)));
        }
    }
    Response::text(200, format!("wrote {MAX_WRITES}\n"))
}

/// The request's `size` query parameter, or `default` without one.
fn size(req: &Request, default: usize) -> usize {
    req.query_param("size")
        .and_then(|size| size.parse().ok())
        .unwrap_or(default)
}

fn failed(err: &Error) -> Response {
    Response::text(500, format!("{}\n", describe(err)))
}

/// `too-large: <message>` or `store: <message>`.
fn describe(err: &Error) -> String {
    match err {
        Error::TooLarge(message) => format!("too-large: {message}"),
        Error::Store(message) => format!("store: {message}"),
    }
}
