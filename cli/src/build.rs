//! `faas build`: run the build commands a workflow.toml names, with a progress bar.

use anyhow::{Context, bail};
use faas_workflow::Workflow;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Parses `manifest` and runs each distinct build command once, in the manifest's
/// directory. Returns the parsed workflow.
///
/// # Errors
/// If the manifest is invalid or a build command fails (its output is shown).
pub async fn build_manifest(manifest: &Path) -> anyhow::Result<Workflow> {
    let workflow = Workflow::from_file_scoped(manifest, crate::deploy::LOCAL_SCOPE)?;
    let dir = manifest_dir(manifest);
    let mut commands: Vec<(&str, &str)> = Vec::new();
    for (name, function) in &workflow.functions {
        if let Some(command) = &function.build
            && !commands.iter().any(|(_, seen)| seen == command)
        {
            commands.push((name, command));
        }
    }
    if commands.is_empty() {
        return Ok(workflow);
    }
    if commands
        .iter()
        .any(|(_, command)| command.contains("cargo"))
    {
        ensure_wasm_target(&dir).await?;
    }
    let bar = ProgressBar::new(commands.len() as u64).with_style(
        ProgressStyle::with_template("{spinner} [{pos}/{len}] {msg} ({elapsed})")
            .expect("the template is valid"),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    for (function, command) in commands {
        bar.set_message(format!("building {function}: {command}"));
        let started = Instant::now();
        let output = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&dir)
            .output()
            .await
            .with_context(|| format!("running the build command of `{function}`"))?;
        if !output.status.success() {
            bar.abandon_with_message(format!("building {function} failed"));
            bail!(
                "{}: function `{function}`: build command `{command}` failed ({}):\n{}{}",
                manifest.display(),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        bar.inc(1);
        bar.println(format!(
            "built {function} in {:.1}s",
            started.elapsed().as_secs_f64()
        ));
    }
    bar.finish_and_clear();
    Ok(workflow)
}

/// The Rust target guest functions are built for.
const WASM_TARGET: &str = "wasm32-wasip2";

/// Adds the wasm32-wasip2 target to the toolchain `dir` builds with, if rustup manages
/// it and the target is missing. rust-toolchain.toml lists the target, but rustup adds
/// listed targets only when it installs the toolchain, not to one already installed
/// under that name; without this a fresh machine fails with "can't find crate for
/// `core`".
async fn ensure_wasm_target(dir: &Path) -> anyhow::Result<()> {
    let installed = match tokio::process::Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(dir)
        .output()
        .await
    {
        Ok(output) if output.status.success() => output.stdout,
        // No rustup: the toolchain is managed otherwise; cargo says what is missing.
        _ => return Ok(()),
    };
    if String::from_utf8_lossy(&installed)
        .lines()
        .any(|line| line.trim() == WASM_TARGET)
    {
        return Ok(());
    }
    println!("adding the {WASM_TARGET} Rust target (rustup target add {WASM_TARGET})");
    let status = tokio::process::Command::new("rustup")
        .args(["target", "add", WASM_TARGET])
        .current_dir(dir)
        .status()
        .await
        .context("running rustup target add")?;
    if !status.success() {
        bail!("`rustup target add {WASM_TARGET}` failed ({status}); run it by hand and retry");
    }
    Ok(())
}

/// The directory relative paths in `manifest` are resolved against.
pub fn manifest_dir(manifest: &Path) -> PathBuf {
    match manifest.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    }
}
