//! What can go wrong loading a function, and running one event.

use std::path::PathBuf;
use std::time::Duration;

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

/// Why one event failed. Only that event: the function stays loaded and the next event
/// gets a fresh instance.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// No function of that name in the workflow.
    #[error("no function `{function}` in this workflow")]
    UnknownFunction {
        /// The name asked for.
        function: String,
    },
    /// The guest trapped (a panic, an unreachable, an out-of-bounds access...).
    #[error("function `{function}` trapped: {message}")]
    Trap {
        /// The function that trapped.
        function: String,
        /// The trap and its wasm backtrace.
        message: String,
    },
    /// The guest ran past its deadline and was interrupted.
    #[error("function `{function}` did not finish within {}ms", timeout.as_millis())]
    Timeout {
        /// The function interrupted.
        function: String,
        /// Its deadline.
        timeout: Duration,
    },
    /// The guest tried to grow its memory past its limit.
    #[error("function `{function}` exceeded its memory limit of {limit_mb} MiB")]
    MemoryLimit {
        /// The function stopped.
        function: String,
        /// Its limit in MiB.
        limit_mb: u32,
    },
    /// The guest created more regions, or held more region memory files, than allowed.
    #[error("function `{function}` exceeded a region limit: {message}")]
    RegionLimit {
        /// The function stopped.
        function: String,
        /// Which limit.
        message: String,
    },
    /// The guest burned all its fuel.
    #[error("function `{function}` ran out of fuel ({fuel} units)")]
    OutOfFuel {
        /// The function stopped.
        function: String,
        /// The fuel it had.
        fuel: u64,
    },
    /// Every instance slot is in use.
    #[error("function `{function}` could not start: {message}")]
    Overloaded {
        /// The function that could not start.
        function: String,
        /// Wasmtime's explanation.
        message: String,
    },
    /// The guest returned without producing a response, or produced an invalid one.
    #[error("function `{function}` returned no valid response: {message}")]
    BadResponse {
        /// The function at fault.
        function: String,
        /// What was wrong.
        message: String,
    },
}

impl InvokeError {
    /// The HTTP status this failure maps to: 504 for a timeout, 503 when overloaded,
    /// 404 for an unknown function, 500 otherwise.
    pub fn status(&self) -> u16 {
        match self {
            Self::UnknownFunction { .. } => 404,
            Self::Timeout { .. } => 504,
            Self::Overloaded { .. } => 503,
            _ => 500,
        }
    }

    /// A one-word cause for error bodies and metrics labels.
    pub fn cause(&self) -> &'static str {
        match self {
            Self::UnknownFunction { .. } => "unknown_function",
            Self::Trap { .. } => "trap",
            Self::Timeout { .. } => "timeout",
            Self::MemoryLimit { .. } => "memory_limit",
            Self::RegionLimit { .. } => "region_limit",
            Self::OutOfFuel { .. } => "out_of_fuel",
            Self::Overloaded { .. } => "overloaded",
            Self::BadResponse { .. } => "bad_response",
        }
    }

    /// The function the failure belongs to.
    pub fn function(&self) -> &str {
        match self {
            Self::UnknownFunction { function }
            | Self::Trap { function, .. }
            | Self::Timeout { function, .. }
            | Self::MemoryLimit { function, .. }
            | Self::RegionLimit { function, .. }
            | Self::OutOfFuel { function, .. }
            | Self::Overloaded { function, .. }
            | Self::BadResponse { function, .. } => function,
        }
    }
}

/// Why a worker could not start.
#[derive(Debug, thiserror::Error)]
#[error("starting the Wasmtime engine: {0}")]
pub struct StartError(pub String);
