//! The platform's host interfaces, one module each, registered in one place:
//! [`add_to_linker`]. Adding a capability means adding a module here and a line there.

mod config;
mod key_value;
mod log;
mod messaging;
mod region;
mod trace;

use crate::state::InstanceState;
use wasmtime::component::{HasSelf, Linker};

/// Host bindings generated from `wit/platform.wit`: the `step-function` world's
/// imports are every platform interface, and its export is the step handler.
mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "faas:platform/step-function",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "faas:platform/region.region": crate::region::Region,
        },
    });
}

pub(crate) use bindings::StepFunctionPre;
pub(crate) use bindings::exports::faas::platform::handler::{Context as StepContext, MessageInfo};
pub(crate) use bindings::faas::platform;

/// Registers WASI 0.2, `wasi:http` and every platform interface.
pub(crate) fn add_to_linker(linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    bindings::StepFunction::add_to_linker::<InstanceState, HasSelf<InstanceState>>(linker, |s| s)?;
    region::add_page_functions(linker)
}
