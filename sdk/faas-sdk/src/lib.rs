//! The guest SDK: what a function author uses to write platform functions in Rust.
//!
//! An HTTP function is a plain Rust function plus one attribute:
//!
//! ```ignore
//! use faas_sdk::http::{Request, Response};
//!
//! #[faas_sdk::http]
//! fn handle(req: Request) -> Response {
//!     Response::text(200, format!("Hello from {}\n", req.path()))
//! }
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2`; the result is a
//! standard `wasi:http/proxy` component (it also runs on `wasmtime serve`, as long as
//! it does not use the platform interfaces below).
//!
//! A workflow step is a function over regions:
//!
//! ```ignore
//! use faas_sdk::step::{Context, Region};
//!
//! #[faas_sdk::step]
//! fn shout(ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
//!     let text = String::from_utf8(inputs[0].bytes()).map_err(|e| e.to_string())?;
//!     Ok(vec![Region::from_bytes("text", text.to_uppercase().as_bytes())])
//! }
//! ```
//!
//! Large values should not be copied at all: [`region::RegionWriter`] encodes a Karmem
//! value straight into pages the host can map into the next step, and
//! [`region::RegionExt::view`] reads an input where the host mapped it.
//!
//! The platform interfaces a function may use: [`key_value`] (tenant-scoped store),
//! [`config`] (the function's `config` table in workflow.toml), [`log`], [`messaging`]
//! and [`trace`] (the event's trace id).

pub mod config;
pub mod http;
pub mod key_value;
pub mod log;
pub mod messaging;
pub mod region;
pub mod step;
pub mod trace;

/// Marks `fn(Request) -> impl IntoResponse` as the component's HTTP handler.
///
/// The function receives the whole request (body included) and returns the whole
/// response; the SDK does the `wasi:http` plumbing.
pub use faas_sdk_macros::http;

/// Marks `fn(step::Context, Vec<step::Region>) -> Result<Vec<step::Region>, String>` as
/// the component's workflow step handler.
pub use faas_sdk_macros::step;

/// Bindings generated from the `step-function` world. Its exports are only emitted by
/// the export macro (which `#[faas_sdk::step]` calls), so HTTP functions carry the
/// platform imports alone. Function authors use the wrappers in this crate instead.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "step-function",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "_export_step",
        default_bindings_module: "faas_sdk::bindings",
    });
}

/// Items the macros expand to; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::bindings::_export_step as export_step;
    pub use crate::bindings::exports::faas::platform::handler::Guest as StepHandler;
    pub use crate::http::serve;
    pub use wasip2;
    pub use wasip2::exports::http::incoming_handler::Guest as IncomingHandler;
    pub use wasip2::http::types::{IncomingRequest, ResponseOutparam};
}
