//! A plain `wasi:http/proxy` component written with `wstd`, without the platform SDK.
//! It runs unchanged here, on Spin and on `wasmtime serve`: the benchmark serves this
//! same file on both the platform and `wasmtime serve`.

use wstd::http::body::Body;
use wstd::http::{Error, Request, Response};

#[wstd::http_server]
async fn main(request: Request<Body>) -> Result<Response<Body>, Error> {
    let path = request.uri().path().to_owned();
    Ok(Response::new(
        format!("Hello from a plain wasi:http component at {path}\n").into(),
    ))
}
