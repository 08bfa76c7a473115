//! What can go wrong running one event (loading is `faas_invoke::LoadError`).

use faas_invoke::{EventFailure, FailureKind};
use std::time::Duration;

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
    /// The worker's guest memory, or its tenant's share of it, was held by other
    /// instances when the guest's memory had to grow (`crate::memory_budget`).
    #[error("function `{function}` could not have more memory: {message}")]
    MemoryBudget {
        /// The function stopped.
        function: String,
        /// Which budget, and the flag that sets it.
        message: String,
    },
    /// The guest created more regions, or held more region memory files, than allowed.
    #[error("function `{function}` exceeded a region limit: {message}")]
    RegionLimit {
        /// The function stopped.
        function: String,
        /// Which limit.
        message: String,
    },
    /// The guest held as many resource handles at once as an instance may, and asked
    /// for one more.
    #[error(
        "function `{function}` held as many resource handles at once as an instance may \
         (header fields, bodies, streams, pollables and regions count; the worker's \
         --max-handles-per-instance) and asked for another"
    )]
    HandleLimit {
        /// The function stopped.
        function: String,
    },
    /// The guest made a set of header fields larger than an instance may.
    #[error(
        "function `{function}` made a set of header fields larger than an instance may \
         ({} KiB, or more fields than an HTTP header map holds)",
        crate::host_limits::MAX_FIELDS_BYTES >> 10
    )]
    FieldsLimit {
        /// The function stopped.
        function: String,
    },
    /// The guest burned all its fuel.
    #[error("function `{function}` ran out of fuel ({fuel} units)")]
    OutOfFuel {
        /// The function stopped.
        function: String,
        /// The fuel it had.
        fuel: u64,
    },
    /// Every instance slot is in use: the tenant's own, or the worker's.
    #[error("function `{function}` could not start: {message}")]
    Overloaded {
        /// The function that could not start.
        function: String,
        /// Which slots, and for how long.
        message: String,
        /// The slots were the worker's, which every tenant shares, or the tenant's own
        /// quota of them while some were held by its events waiting for the worker's.
        shared: bool,
    },
    /// A swap area was turned on after the worker started resetting instance slots by
    /// scanning for the pages an event wrote, which would miss swapped-out pages: no
    /// instance starts until the worker is restarted (`swap.rs`).
    #[error(
        "function `{function}` could not start: a swap area was turned on after this \
         worker started, so its instance slots can no longer be reset safely; the worker \
         must be restarted"
    )]
    SwapTurnedOn {
        /// The function that could not start.
        function: String,
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
    /// The HTTP status this failure maps to: 504 for a timeout, 503 when overloaded
    /// (or the worker can no longer start instances, or has no guest memory left),
    /// 404 for an unknown function, 500 otherwise.
    pub fn status(&self) -> u16 {
        match self {
            Self::UnknownFunction { .. } => 404,
            Self::Timeout { .. } => 504,
            Self::Overloaded { .. } | Self::SwapTurnedOn { .. } | Self::MemoryBudget { .. } => 503,
            _ => 500,
        }
    }

    /// The cause, for error bodies and metrics labels.
    pub fn cause(&self) -> FailureKind {
        match self {
            Self::UnknownFunction { .. } => FailureKind::UnknownFunction,
            Self::Trap { .. } => FailureKind::Trap,
            Self::Timeout { .. } => FailureKind::Timeout,
            Self::MemoryLimit { .. } => FailureKind::MemoryLimit,
            Self::MemoryBudget { .. } => FailureKind::MemoryBudget,
            Self::RegionLimit { .. } => FailureKind::RegionLimit,
            Self::HandleLimit { .. } => FailureKind::HandleLimit,
            Self::FieldsLimit { .. } => FailureKind::FieldsLimit,
            Self::OutOfFuel { .. } => FailureKind::OutOfFuel,
            Self::Overloaded { .. } => FailureKind::Overloaded,
            // Nothing ran, and another worker may take the event.
            Self::SwapTurnedOn { .. } => FailureKind::Unavailable,
            Self::BadResponse { .. } => FailureKind::BadResponse,
        }
    }

    /// The function the failure belongs to.
    pub fn function(&self) -> &str {
        match self {
            Self::UnknownFunction { function }
            | Self::Trap { function, .. }
            | Self::Timeout { function, .. }
            | Self::MemoryLimit { function, .. }
            | Self::MemoryBudget { function, .. }
            | Self::RegionLimit { function, .. }
            | Self::HandleLimit { function }
            | Self::FieldsLimit { function }
            | Self::OutOfFuel { function, .. }
            | Self::Overloaded { function, .. }
            | Self::SwapTurnedOn { function }
            | Self::BadResponse { function, .. } => function,
        }
    }

    /// Whether no instance could start for want of the worker's slots, which every
    /// tenant shares ([`EventFailure::shared_capacity`]).
    pub fn for_shared_capacity(&self) -> bool {
        matches!(self, Self::Overloaded { shared: true, .. })
    }
}

impl From<&InvokeError> for EventFailure {
    fn from(err: &InvokeError) -> Self {
        Self {
            function: Some(err.function().to_owned()),
            shared_capacity: err.for_shared_capacity(),
            ..Self::new(err.cause(), err.status(), err.to_string())
        }
    }
}

/// Why a worker could not start.
#[derive(Debug, thiserror::Error)]
#[error("starting the Wasmtime engine: {0}")]
pub struct StartError(pub String);
