//! The regions example as the benchmarks drive it: its manifests, and the consumer's
//! reports checked against the blob the producer made.

use anyhow::{Context, ensure};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Checks a consumer's report against the blob of `len` bytes the producer made;
/// its handoff and end-to-end times.
pub fn check_report(report: &Value, len: usize) -> anyhow::Result<(Duration, Duration)> {
    let field = |name: &str| {
        report[name]
            .as_u64()
            .with_context(|| format!("no `{name}` in {report}"))
    };
    ensure!(field("len")? == len as u64, "wrong length in {report}");
    ensure!(
        field("sum")? == expected_sum(len),
        "wrong sum in {report} (expected {})",
        expected_sum(len)
    );
    Ok((
        Duration::from_nanos(field("handoff_ns")?),
        Duration::from_nanos(field("read_ns")?),
    ))
}

/// The byte sum of the blob the example produces for `len` bytes: `data[i] = i ^ seed`.
pub fn expected_sum(len: usize) -> u64 {
    let seed = (len as u64 ^ 0x5a) as u8;
    let period: u64 = (0..=255u8).map(u64::from).sum();
    let tail: u64 = (0..len % 256).map(|i| u64::from(i as u8 ^ seed)).sum();
    (len / 256) as u64 * period + tail
}

/// `repo_manifest` (relative to the repository root) written into `dir/file_name` with
/// its build commands dropped, component paths made absolute and `replacements` applied; the
/// Karmem schemas beside it are copied along.
pub fn manifest(
    dir: &Path,
    file_name: &str,
    repo_manifest: &str,
    replacements: &[(&str, String)],
) -> anyhow::Result<PathBuf> {
    let source = faas_testing::repo_root().join(repo_manifest);
    let folder = source.parent().context("a manifest has a folder")?;
    let text = std::fs::read_to_string(&source)
        .with_context(|| format!("reading {}", source.display()))?;
    let mut text: String = text
        .lines()
        .filter(|line| !line.starts_with("build = "))
        .map(|line| match line.strip_prefix("component = \"") {
            Some(path) => format!(
                "component = \"{}\"\n",
                folder.join(path.trim_end_matches('"')).display()
            ),
            None => format!("{line}\n"),
        })
        .collect();
    for (from, to) in replacements {
        ensure!(text.contains(from), "{repo_manifest} has no `{from}`");
        text = text.replace(from, to);
    }
    for entry in std::fs::read_dir(folder)? {
        let schema = entry?.path();
        if schema.extension().is_some_and(|ext| ext == "km") {
            std::fs::copy(
                &schema,
                dir.join(schema.file_name().context("a file name")?),
            )?;
        }
    }
    let path = dir.join(file_name);
    std::fs::write(&path, text)?;
    Ok(path)
}
