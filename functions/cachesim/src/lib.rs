//! The cache replacement simulation as an HTTP function (the compute-heavy benchmark of
//! `bench/cachesim.sh`): `GET /cachesim?requests=2000000&capacity=65536` replays the
//! trace through an LRU and an LFU cache and answers their hit ratios and a checksum as
//! JSON. The settings and their defaults are `cachesim_core::SimConfig`'s; the native
//! build (`bench/src/bin/cachesim.rs`) runs the same code and prints the same line.

use cachesim_core::{SimConfig, simulate};
use faas_sdk::http::{Request, Response};

#[faas_sdk::http]
fn handle(req: Request) -> Response {
    let mut config = SimConfig::default();
    if let Err(message) = config.set_query(req.query().unwrap_or_default()) {
        return Response::text(400, format!("{message}\n"));
    }
    Response::json(200, simulate(&config).to_json() + "\n")
}
