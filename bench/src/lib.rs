//! Shared pieces of the benchmark drivers: talking to a running platform and
//! summarising latencies.

pub mod regions;

use anyhow::{Context, bail};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A running platform the driver talks to: its URL, and the `faas` binary to deploy
/// with.
pub struct Target {
    /// e.g. `http://127.0.0.1:3501`.
    pub url: String,
    /// The admin token.
    pub token: String,
    /// Path of the `faas` binary.
    pub faas: String,
}

impl Target {
    /// Reads `FAAS_URL`, `FAAS_TOKEN` and `FAAS_BIN` from the environment.
    pub fn from_env() -> anyhow::Result<Self> {
        let var = |name: &str| std::env::var(name).with_context(|| format!("{name} is not set"));
        Ok(Self {
            url: var("FAAS_URL")?,
            token: var("FAAS_TOKEN")?,
            faas: var("FAAS_BIN")?,
        })
    }

    /// `faas deploy --no-build <manifest>`, after creating the tenant the manifest
    /// names if it does not exist yet.
    pub fn deploy(&self, manifest: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(manifest)
            .with_context(|| format!("reading {}", manifest.display()))?;
        if let Some(tenant) = faas_testing::manifest_tenant(&text) {
            self.ensure_tenant(&tenant)?;
        }
        let output = self
            .faas()
            .args(["deploy", "--no-build"])
            .arg(manifest)
            .output()
            .context("running faas deploy")?;
        if !output.status.success() {
            bail!(
                "deploying {} failed: {}",
                manifest.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }
}

impl Target {
    /// The `faas` command, pointed at this platform.
    fn faas(&self) -> Command {
        let mut command = Command::new(&self.faas);
        command
            .env("FAAS_URL", &self.url)
            .env("FAAS_TOKEN", &self.token);
        command
    }

    /// `faas tenant create <tenant>`, unless it exists.
    pub fn ensure_tenant(&self, tenant: &str) -> anyhow::Result<()> {
        let output = self
            .faas()
            .args(["tenant", "create", tenant])
            .output()
            .context("running faas tenant create")?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() && !stderr.contains("already exists") {
            bail!("creating tenant {tenant} failed: {stderr}");
        }
        Ok(())
    }
}

/// The `q` quantile (0..=1) of `samples`, which it sorts.
pub fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[index]
}

/// Milliseconds with three decimals.
pub fn ms(duration: Duration) -> String {
    format!("{:.3}", duration.as_secs_f64() * 1e3)
}

/// A duration in µs, ms or s with three significant digits or so.
pub fn human(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs < 1e-3 {
        format!("{:.1} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}
