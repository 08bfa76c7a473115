//! The platform's host interfaces, one module each, registered in one place:
//! [`add_to_linker`]. Adding a capability means adding a module here and a line there.

mod config;
mod key_value;
mod log;
mod region;

pub use region::RegionData;

use crate::state::InstanceState;
use wasmtime::component::{HasSelf, Linker};

/// Host bindings generated from `wit/platform.wit`.
mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "faas:platform/platform",
        imports: { default: async | trappable },
        with: {
            "faas:platform/region.region": super::RegionData,
        },
    });
}

pub(crate) use bindings::faas::platform;

/// Registers WASI 0.2, `wasi:http` and every platform interface.
pub(crate) fn add_to_linker(linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    bindings::Platform::add_to_linker::<InstanceState, HasSelf<InstanceState>>(linker, |s| s)
}
