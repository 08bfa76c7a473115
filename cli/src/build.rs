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
    let workflow = Workflow::from_file(manifest)?;
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

/// The directory relative paths in `manifest` are resolved against.
pub fn manifest_dir(manifest: &Path) -> PathBuf {
    match manifest.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    }
}
