//! Test support shared by the workspace's integration tests and benchmarks: the real
//! components of `functions/`, built for wasm32-wasip2 once per process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testing/ sits in the repository root")
        .to_owned()
}

/// Builds every function in `functions/` (release, wasm32-wasip2) the first time it
/// is called in this process; later calls return at once.
///
/// # Panics
/// If cargo fails: a test cannot run without its components.
pub fn build_functions() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--release", "--quiet"])
            .current_dir(repo_root().join("functions"))
            .status()
            .expect("running cargo to build functions/");
        assert!(status.success(), "building functions/ failed: {status}");
    });
}

/// Path of the built component of package `package` in `functions/` (built first if
/// needed).
pub fn component_path(package: &str) -> PathBuf {
    build_functions();
    let dir = repo_root().join("target/wasm32-wasip2/release");
    // Libraries are named with underscores, binaries as the package.
    let library = dir.join(format!("{}.wasm", package.replace('-', "_")));
    if library.exists() {
        library
    } else {
        dir.join(format!("{package}.wasm"))
    }
}

/// The bytes of `package`'s component.
pub fn component(package: &str) -> Vec<u8> {
    let path = component_path(package);
    std::fs::read(&path).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()))
}

/// A fresh temporary directory, removed when dropped.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("creating a temporary directory")
}
