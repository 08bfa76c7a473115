//! The validated, deployable workflow. These types are what the CLI, gateway and worker
//! pass around (as JSON between processes); they carry no TOML spans.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{ManifestError, Source};
use crate::route::Route;

/// A parsed and validated `workflow.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workflow {
    /// Workflow name: `[a-z0-9-]`, 1 to 63 characters, starting with a letter.
    pub name: String,
    /// Tenant id, same rules as `name`.
    pub tenant: String,
    /// Free-form description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Functions by name (never empty once validated).
    pub functions: BTreeMap<String, Function>,
    /// `[[triggers.http]]` in file order; routes are unique and each names an `http`
    /// function.
    #[serde(default)]
    pub http_triggers: Vec<HttpTrigger>,
}

/// One `[functions.<name>]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Function {
    /// The component file, exactly as written: relative paths are relative to the
    /// directory holding the `workflow.toml` and are *not* resolved by the parser (the
    /// parsed workflow is sent to other machines, where the manifest's directory means
    /// nothing). Use [`Function::component_path`] to resolve it.
    pub component: PathBuf,
    /// Shell command that builds `component`, run in the manifest's directory before the
    /// component is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    /// Which interface the component exports.
    #[serde(default)]
    pub kind: FunctionKind,
    /// Per-function overrides of the platform's default limits.
    #[serde(default)]
    pub limits: Limits,
    /// String settings exposed to the function.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
}

/// Which interface a function's component exports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FunctionKind {
    /// Exports `wasi:http/incoming-handler`; reachable from HTTP triggers.
    #[default]
    Http,
    /// Exports the platform's workflow-step handler; invoked by the workflow engine, not
    /// by HTTP triggers.
    Step,
}

impl FunctionKind {
    /// The name used in `workflow.toml` (`http` or `step`).
    pub fn as_str(self) -> &'static str {
        match self {
            FunctionKind::Http => "http",
            FunctionKind::Step => "step",
        }
    }
}

/// Per-function limits; `None` means the platform default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Linear memory cap in MiB, within [`Limits::MEMORY_MB`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u32>,
    /// Wall-clock deadline per invocation in milliseconds, within [`Limits::TIMEOUT_MS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Wasmtime fuel per invocation; greater than 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
}

impl Limits {
    /// Accepted values of `memory_mb`.
    pub const MEMORY_MB: RangeInclusive<u32> = 1..=4096;
    /// Accepted values of `timeout_ms` (up to ten minutes).
    pub const TIMEOUT_MS: RangeInclusive<u64> = 1..=600_000;
}

/// One `[[triggers.http]]` entry: requests matching `route` go to `function`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpTrigger {
    /// Which request paths this trigger handles.
    pub route: Route,
    /// The `http` function that handles them.
    pub function: String,
}

impl Workflow {
    /// Parses and validates a manifest. `file_name` is only used in error messages.
    ///
    /// Returns the first problem in the file (by position) as
    /// [`ManifestError::Invalid`]; never [`ManifestError::Read`].
    pub fn parse(file_name: &str, text: &str) -> Result<Workflow, ManifestError> {
        let source = Source {
            file: file_name,
            text,
        };
        Ok(crate::validate::parse(source)?)
    }

    /// Reads and parses the manifest at `path`; errors name the file by `path` as given.
    ///
    /// Component paths stay relative: resolve them against `path`'s directory with
    /// [`Function::component_path`] or [`Workflow::component_path`].
    pub fn from_file(path: &Path) -> Result<Workflow, ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_owned(),
            source,
        })?;
        Workflow::parse(&path.display().to_string(), &text)
    }

    /// The component file of `function`, resolved against `manifest_dir` (the directory
    /// holding the `workflow.toml`); `None` if there is no such function.
    pub fn component_path(&self, manifest_dir: &Path, function: &str) -> Option<PathBuf> {
        self.functions
            .get(function)
            .map(|f| f.component_path(manifest_dir))
    }

    /// The HTTP trigger handling request path `path` (without query string): the most
    /// specific matching route, see [`Route::specificity`].
    pub fn route_for(&self, path: &str) -> Option<&HttpTrigger> {
        self.http_triggers
            .iter()
            .filter(|t| t.route.matches(path))
            .max_by_key(|t| t.route.specificity())
    }
}

impl Function {
    /// `component` resolved against `manifest_dir` (the directory holding the
    /// `workflow.toml`); absolute paths are returned unchanged.
    pub fn component_path(&self, manifest_dir: &Path) -> PathBuf {
        manifest_dir.join(&self.component)
    }
}
