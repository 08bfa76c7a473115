//! Ahead-of-time compilation with an on-disk cache.
//!
//! An artifact is named by the SHA-256 of the component's bytes, inside a directory
//! named by the engine's compatibility hash: a new Wasmtime version or engine setting
//! never loads an old artifact, and the same component deployed twice (or by two
//! workflows) is compiled once.

use crate::error::LoadError;
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Whether a component came from the cache or had to be compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// A cached artifact was loaded; nothing was compiled.
    Hit,
    /// The component was compiled and the artifact stored.
    Miss,
}

/// The on-disk cache of precompiled components for one engine.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: PathBuf,
}

impl ComponentCache {
    /// A cache under `root` for artifacts of `engine`.
    pub fn new(root: &Path, engine: &Engine) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self {
            dir: root.join(format!("engine-{:016x}", hasher.finish())),
        }
    }

    /// The content hash that names a component's artifact.
    pub fn digest(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    /// Loads `bytes` as a component, compiling it only if no artifact is cached.
    ///
    /// This compiles on the calling thread: call it from a blocking context.
    ///
    /// # Errors
    /// [`LoadError::Compile`] if the bytes are not a valid component, or
    /// [`LoadError::Cache`] if the cache directory cannot be written.
    pub fn load(
        &self,
        engine: &Engine,
        function: &str,
        bytes: &[u8],
    ) -> Result<(Component, CacheOutcome), LoadError> {
        let path = self.dir.join(format!("{}.cwasm", Self::digest(bytes)));
        if path.exists() {
            // SAFETY: only this cache writes into its directory, always with output of
            // `Engine::precompile_component` for an engine of the same compatibility
            // hash (the directory name), and files appear atomically by rename.
            // Wasmtime also re-checks compatibility in the artifact's header.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(err) => {
                    tracing::warn!(path = %path.display(), "discarding unusable cached artifact: {err}");
                }
            }
        }
        let compiled = engine
            .precompile_component(bytes)
            .map_err(|err| LoadError::Compile {
                function: function.to_owned(),
                message: format!("{err:#}"),
            })?;
        self.store(&path, &compiled)?;
        // SAFETY: as above; the file was written by us a moment ago.
        let component = unsafe { Component::deserialize_file(engine, &path) }.map_err(|err| {
            LoadError::Compile {
                function: function.to_owned(),
                message: format!("{err:#}"),
            }
        })?;
        Ok((component, CacheOutcome::Miss))
    }

    /// Writes an artifact under a temporary name and renames it into place, so a
    /// reader never sees half a file.
    fn store(&self, path: &Path, compiled: &[u8]) -> Result<(), LoadError> {
        let cache_error = |err: std::io::Error| LoadError::Cache {
            path: path.to_owned(),
            source: err,
        };
        std::fs::create_dir_all(&self.dir).map_err(cache_error)?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, compiled).map_err(cache_error)?;
        std::fs::rename(&tmp, path).map_err(cache_error)
    }
}
