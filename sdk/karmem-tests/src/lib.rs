//! Conformance harness of the Karmem toolchain.
//!
//! `build.rs` compiles every schema of the compatibility vectors and of `schemas/`, and
//! generates glue converting JSON to and from the generated views, writers and owned
//! types, so tests can drive generated code by schema file and type name.

#![allow(missing_docs)]

pub mod compare;
pub mod j;
pub mod random;
pub mod vectors;

/// A compiled schema.
#[derive(Debug, Clone, Copy)]
pub struct SchemaEntry {
    /// `schemas/<file>` for vector schemas, `local/<file>` for this crate's.
    pub key: &'static str,
    /// Path of the `.km` file at build time.
    pub path: &'static str,
    /// Struct names in declaration order.
    pub types: &'static [&'static str],
}

include!(concat!(env!("OUT_DIR"), "/glue.rs"));
