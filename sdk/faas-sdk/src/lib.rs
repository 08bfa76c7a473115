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
//! The platform interfaces a function may use: [`key_value`] (tenant-scoped store),
//! [`config`] (the function's `config` table in workflow.toml) and [`log`].

pub mod config;
pub mod http;
pub mod key_value;
pub mod log;

/// Marks `fn(Request) -> impl IntoResponse` as the component's HTTP handler.
///
/// The function receives the whole request (body included) and returns the whole
/// response; the SDK does the `wasi:http` plumbing.
pub use faas_sdk_macros::http;

/// Bindings generated from the platform's `platform` world (imports only). Function
/// authors use the safe wrappers in this crate instead.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "platform",
        path: "../../wit",
    });
}

/// Items the macros expand to; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::http::serve;
    pub use wasip2;
    pub use wasip2::exports::http::incoming_handler::Guest as IncomingHandler;
    pub use wasip2::http::types::{IncomingRequest, ResponseOutparam};
}
