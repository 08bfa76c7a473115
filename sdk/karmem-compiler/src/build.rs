//! Helpers for `build.rs` scripts: compile `.km` files into `OUT_DIR`.
//!
//! In `build.rs`:
//!
//! ```no_run
//! faas_karmem_compiler::build::compile("schemas/frame.km").unwrap();
//! ```
//!
//! and in the crate, where `frame` is the schema's package name:
//!
//! ```ignore
//! mod frame {
//!     include!(concat!(env!("OUT_DIR"), "/frame.rs"));
//! }
//! ```

use std::path::{Path, PathBuf};

use crate::codegen::Options;
use crate::error::CompileError;

/// Compiles `km_path` into `<OUT_DIR>/<schema package name>.rs`, prints
/// `cargo:rerun-if-changed` for it and returns the path written.
pub fn compile(km_path: impl AsRef<Path>) -> Result<PathBuf, CompileError> {
    Builder::new().compile(km_path)
}

/// Build-script compiler with options.
#[derive(Debug, Clone, Default)]
pub struct Builder {
    options: Options,
    out_dir: Option<PathBuf>,
}

impl Builder {
    /// A builder with default options (runtime at `::faas_karmem`, output in `OUT_DIR`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the path of the runtime crate used by generated code.
    pub fn runtime_path(mut self, path: impl Into<String>) -> Self {
        self.options.runtime_path = path.into();
        self
    }

    /// Writes into `dir` instead of `OUT_DIR`.
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// Compiles one schema; see [`compile`].
    pub fn compile(&self, km_path: impl AsRef<Path>) -> Result<PathBuf, CompileError> {
        let km_path = km_path.as_ref();
        println!("cargo:rerun-if-changed={}", km_path.display());
        let schema = crate::parse_file(km_path)?;
        let code = crate::generate_rust_with(&schema, &self.options);
        let dir = match &self.out_dir {
            Some(d) => d.clone(),
            None => PathBuf::from(
                std::env::var_os("OUT_DIR").ok_or(CompileError::MissingEnv("OUT_DIR"))?,
            ),
        };
        let out = dir.join(format!("{}.rs", schema.name));
        std::fs::write(&out, code).map_err(|source| CompileError::Io {
            path: out.clone(),
            source,
        })?;
        Ok(out)
    }
}
