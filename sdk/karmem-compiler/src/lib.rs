//! Karmem schema compiler.
//!
//! * [`parse_file`] / [`parse_str`] read the Karmem schema language (header tags such as
//!   `@packed`, enums, `inline` and `table` structs, `[N]T`, `[]T`, `[<N]T`, `[]char`,
//!   per-struct `@packed`) plus interfaces with shared memories from the Karmem paper,
//!   and return a validated [`Schema`] with the wire layout computed.
//! * [`generate_rust`] produces a Rust module with, for every struct, a zero-copy view,
//!   an in-place writer and an owned type; it depends only on the `faas_karmem` runtime.
//! * [`build::compile`] does both from a `build.rs`.
//! * [`decode_to_json`] / [`encode_from_json`] are a schema-driven codec (no code
//!   generation) for inspecting and producing messages, e.g. from the CLI.

pub mod ast;
pub mod build;
mod codegen;
pub mod dynamic;
mod error;
mod lexer;
mod parser;
mod plan;
mod resolve;

use std::path::Path;

pub use ast::{
    Access, ArgDef, BaseType, EnumDef, EnumVariant, FieldDef, FieldType, FunctionDef, Interface,
    MemoryDef, Primitive, Schema, Shape, Span, StructDef, StructKind, StructSize, Tag,
};
pub use codegen::{Options, field_idents, rust_type_name, snake_case};
pub use dynamic::{CodecError, decode_to_json, encode_from_json};
pub use error::{CompileError, MAX_QUOTED_CHARS, SchemaError, shorten};

/// Parses schema text. `file_name` is only used in error messages and generated comments.
pub fn parse_str(file_name: &str, src: &str) -> Result<Schema, SchemaError> {
    let raw = parser::parse(file_name, lexer::Lexer::new(file_name, src))?;
    resolve::resolve(file_name, raw)
}

/// Reads and parses a schema file. Errors name the file as given.
pub fn parse_file(path: &Path) -> Result<Schema, SchemaError> {
    let name = path.display().to_string();
    let src = std::fs::read_to_string(path).map_err(|e| {
        SchemaError::new(
            &name,
            Span { line: 0, column: 0 },
            format!("cannot read file: {e}"),
        )
    })?;
    parse_str(&name, &src)
}

/// Generates the Rust module for `schema`, referring to the runtime as `::faas_karmem`.
pub fn generate_rust(schema: &Schema) -> String {
    codegen::generate(schema, &Options::default())
}

/// Generates the Rust module for `schema` with custom [`Options`].
pub fn generate_rust_with(schema: &Schema, options: &Options) -> String {
    codegen::generate(schema, options)
}
