//! Schema-driven codec between Karmem messages and JSON, without code generation.
//!
//! JSON conventions (shared with the generated-code tests and the CLI): objects keep
//! schema field order and names; enums are integers (names are also accepted when
//! encoding); 64-bit integers are exact; `float32` values print in their shortest
//! 32-bit form; non-finite floats are the strings `"NaN"`, `"Infinity"`, `"-Infinity"`;
//! strings that are not valid UTF-8 are `{"invalid_utf8_hex": "..."}`; `[N]` arrays
//! always have N elements. When encoding, missing fields (or `null`) take their default.

mod decode;
mod encode;
mod json;

pub use decode::decode_to_json;
pub use encode::encode_from_json;
pub use json::{
    INVALID_UTF8_KEY, bytes_from_json, bytes_to_json, f32_to_json, f64_to_json, float_from_json,
};

/// Errors of the dynamic codec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The schema has no struct of that name.
    #[error("schema `{schema}` has no struct `{name}`")]
    UnknownType {
        /// Schema package name.
        schema: String,
        /// Requested type.
        name: String,
    },
    /// A JSON value does not fit the schema; `path` locates it (`Holder.Acc.Name`).
    #[error("{path}: {message}")]
    Value {
        /// Where in the value the problem is.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The encoded message would exceed 4 GiB.
    #[error("message of {0} bytes cannot be addressed with 32-bit offsets")]
    TooLarge(usize),
}
