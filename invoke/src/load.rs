//! Loading a workflow on a worker: what can go wrong, and what each loaded function
//! looks like to the admin API.

use faas_workflow::FunctionKind;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Why a workflow's functions could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not a valid component, or compiling them failed.
    #[error("function `{function}`: not a valid WebAssembly component: {message}")]
    Compile {
        /// The function whose component failed.
        function: String,
        /// Wasmtime's explanation.
        message: String,
    },
    /// Compiling the component went past a limit of the worker's (time or memory), and
    /// was stopped.
    #[error("function `{function}`: {message}")]
    CompileLimit {
        /// The function whose component it is.
        function: String,
        /// Which limit, and the flag that sets it.
        message: String,
    },
    /// The bytes are not a component at all (another file, or a core module), found
    /// before compiling so the error is one line.
    #[error("function `{function}`: the component is {reason}")]
    NotAComponent {
        /// The function whose component it is.
        function: String,
        /// What the bytes are instead.
        reason: faas_workflow::NotAComponent,
    },
    /// The component does not fit the world its kind promises (a missing export or an
    /// import the platform does not provide).
    #[error("function `{function}`: {message}")]
    Link {
        /// The function whose component failed.
        function: String,
        /// Which import or export is wrong.
        message: String,
    },
    /// The deploy named a function without sending its component.
    #[error("function `{function}`: no component was uploaded for it")]
    MissingComponent {
        /// The function without a component.
        function: String,
    },
    /// The deploy sent a component for a function its manifest does not declare (a
    /// typo, or bytes that would be stored for nothing).
    #[error("a component was uploaded for `{function}`, which the manifest does not declare")]
    UndeclaredComponent {
        /// The name it was sent under.
        function: String,
    },
    /// The function asks for more memory than the worker's instance slots hold.
    #[error("function `{function}`: memory_mb = {asked} exceeds this worker's maximum of {max}")]
    MemoryTooLarge {
        /// The function asking.
        function: String,
        /// What it asked for, in MiB.
        asked: u32,
        /// The worker's maximum, in MiB.
        max: u32,
    },
    /// The engine the function needs (the fuel-metered one) could not be started.
    #[error("function `{function}`: starting the fuel-metered engine: {message}")]
    Engine {
        /// The function with a fuel limit.
        function: String,
        /// Wasmtime's explanation.
        message: String,
    },
    /// The compiled-code cache could not be written.
    #[error("compiled-code cache {}: {source}", path.display())]
    Cache {
        /// The file that could not be written.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Whose a [`LoadError`] is to fix, as the admin API's error `kind` names it: a deploy
/// reports it whether the load failed in the gateway's process or in a worker's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadErrorKind {
    /// The component is wrong for this platform (invalid, missing, not linking, or
    /// asking for more memory than a slot holds): the tenant's to fix.
    Component,
    /// Compiling a valid component went past a worker's limit (time or memory): the
    /// tenant's to shrink, or the operator's to raise (the message names the flag).
    CompileLimit,
    /// The worker could not write its compiled-code cache: the operator's to fix.
    Cache,
    /// The worker could not start the engine the function needs (the fuel-metered
    /// one): the operator's to fix.
    Engine,
}

impl LoadErrorKind {
    /// The name the admin API gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Component => "component",
            Self::CompileLimit => "compile_limit",
            Self::Cache => "cache",
            Self::Engine => "engine",
        }
    }
}

impl LoadError {
    /// Whose it is to fix.
    pub fn kind(&self) -> LoadErrorKind {
        match self {
            Self::CompileLimit { .. } => LoadErrorKind::CompileLimit,
            Self::Cache { .. } => LoadErrorKind::Cache,
            Self::Engine { .. } => LoadErrorKind::Engine,
            Self::Compile { .. }
            | Self::NotAComponent { .. }
            | Self::Link { .. }
            | Self::MissingComponent { .. }
            | Self::UndeclaredComponent { .. }
            | Self::MemoryTooLarge { .. } => LoadErrorKind::Component,
        }
    }
}

/// One loaded function as the admin API shows it: its component and effective limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionSummary {
    /// Its name.
    pub name: String,
    /// `http` or `step`.
    pub kind: FunctionKind,
    /// SHA-256 of its component.
    pub digest: String,
    /// Its memory limit.
    pub memory_mb: u32,
    /// Its deadline.
    pub timeout_ms: u64,
    /// Its fuel limit, if any.
    pub fuel: Option<u64>,
}
