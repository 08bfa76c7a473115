//! A plain `wasi:http/proxy` component with 4 MiB of read-only data (a table built by
//! `build.rs`): `GET /?key=N` answers entry N of the table. It stands for components
//! that carry a dictionary, a model or an address table, whose instances each start
//! with that data in memory; `bench/sizes.sh` serves it on the platform and on
//! `wasmtime serve`.

use wstd::http::body::Body;
use wstd::http::{Error, Request, Response};

/// The table, as the build script wrote it: little-endian u32 entries.
static TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/table.bin"));

#[wstd::http_server]
async fn main(request: Request<Body>) -> Result<Response<Body>, Error> {
    let key: usize = request
        .uri()
        .query()
        .and_then(|query| query.strip_prefix("key="))
        .and_then(|key| key.parse().ok())
        .unwrap_or(0);
    let at = (key % (TABLE.len() / 4)) * 4;
    let entry = u32::from_le_bytes(TABLE[at..at + 4].try_into().expect("4 bytes"));
    Ok(Response::new(format!("entry {key}: {entry}\n").into()))
}
