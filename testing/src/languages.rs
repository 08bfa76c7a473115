//! The toolchains that build Python, JavaScript and TypeScript functions
//! (componentize-py, componentize-js and tsc), installed by `testing/languages/install` (which `./test` runs).

use std::ffi::OsString;
use std::process::Command;

/// `PATH` with componentize-py, componentize-js and tsc in front, installing them first if
/// they are missing (the script is idempotent and takes milliseconds when they are
/// there).
///
/// # Panics
/// If the install script fails (no python3 or npm, or no registry).
pub fn path() -> OsString {
    let script = crate::repo_root().join("testing/languages/install");
    let output = Command::new(&script)
        .output()
        .unwrap_or_else(|err| panic!("running {}: {err}", script.display()));
    assert!(
        output.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let tools = String::from_utf8(output.stdout).expect("the script prints UTF-8 paths");
    let mut path = OsString::from(tools.trim());
    if let Some(rest) = std::env::var_os("PATH") {
        path.push(":");
        path.push(rest);
    }
    path
}
