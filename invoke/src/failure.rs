//! [`EventFailure`]: a failed event as the gateway reports it and as it crosses the
//! internal API, with its cause as a [`FailureKind`].

use serde::{Deserialize, Serialize};

/// Why an event failed, in one word. Serialized as the snake_case word that error
/// bodies, metrics labels and the internal API carry (`trap`, `overloaded`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// No function of that name in the workflow.
    UnknownFunction,
    /// The guest trapped.
    Trap,
    /// The guest ran past its deadline.
    Timeout,
    /// The guest tried to grow its memory past its limit.
    MemoryLimit,
    /// The worker's guest memory, or the tenant's share of it, was held by other
    /// instances when the guest's memory had to grow.
    MemoryBudget,
    /// The guest created more regions, or held more memory files, than allowed.
    RegionLimit,
    /// The guest held as many resource handles at once as an instance may.
    HandleLimit,
    /// The guest made a set of header fields larger than an instance may.
    FieldsLimit,
    /// The guest burned all its fuel.
    OutOfFuel,
    /// No instance slot came free in time; no instance ran.
    Overloaded,
    /// The guest produced no valid response.
    BadResponse,
    /// The workflow has no steps.
    NoSteps,
    /// A step failed on every attempt its retry policy allows.
    StepFailed,
    /// Branches of a fan-out did not reach their join in time.
    JoinTimeout,
    /// The whole run passed its deadline.
    RunTimeout,
    /// The run's output could not be read.
    Output,
    /// No worker could take the event; nothing ran, so it may be tried again.
    Unavailable,
    /// A worker's reply could not be understood.
    BadReply,
    /// The connection to a worker broke after the event was sent.
    WorkerLost,
    /// A trigger message could not be turned into a run.
    BadMessage,
    /// A call to the internal API was malformed.
    BadRequest,
    /// A call's body could not be read.
    BadBody,
    /// A call to the internal API without the internal token.
    Unauthorized,
}

impl FailureKind {
    /// The word as error bodies and metrics labels show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownFunction => "unknown_function",
            Self::Trap => "trap",
            Self::Timeout => "timeout",
            Self::MemoryLimit => "memory_limit",
            Self::MemoryBudget => "memory_budget",
            Self::RegionLimit => "region_limit",
            Self::HandleLimit => "handle_limit",
            Self::FieldsLimit => "fields_limit",
            Self::OutOfFuel => "out_of_fuel",
            Self::Overloaded => "overloaded",
            Self::BadResponse => "bad_response",
            Self::NoSteps => "no_steps",
            Self::StepFailed => "step_failed",
            Self::JoinTimeout => "join_timeout",
            Self::RunTimeout => "run_timeout",
            Self::Output => "output",
            Self::Unavailable => "unavailable",
            Self::BadReply => "bad_reply",
            Self::WorkerLost => "worker_lost",
            Self::BadMessage => "bad_message",
            Self::BadRequest => "bad_request",
            Self::BadBody => "bad_body",
            Self::Unauthorized => "unauthorized",
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed event as it crosses a process boundary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct EventFailure {
    /// The cause.
    pub kind: FailureKind,
    /// The HTTP status it maps to.
    pub status: u16,
    /// What happened.
    pub message: String,
    /// The function at fault, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// An instance was refused for want of capacity that every tenant shares (the
    /// worker's instance slots, or its tenant's own while some of them waited for the
    /// worker's), not its tenant's own work: other tenants' load, which says nothing of
    /// the event (a stream trigger does not count the delivery).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_capacity: bool,
}

impl EventFailure {
    /// A failure of `kind` with `status` and `message`, naming no function.
    pub fn new(kind: FailureKind, status: u16, message: impl Into<String>) -> Self {
        Self {
            kind,
            status,
            message: message.into(),
            function: None,
            shared_capacity: false,
        }
    }

    /// No worker could take the event (none reachable, or the workflow is not loaded
    /// there yet); trying again later may succeed.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Unavailable, 503, message)
    }

    /// Whether no function ran: the event may be retried without counting against it.
    pub fn is_unavailable(&self) -> bool {
        self.kind == FailureKind::Unavailable
    }

    /// Whether a worker's internal API refused the call before running anything: it
    /// was unavailable there, or the call itself was refused (no internal token, a
    /// malformed call or body), so it may be run elsewhere.
    pub fn ran_nothing(&self) -> bool {
        matches!(
            self.kind,
            FailureKind::Unavailable
                | FailureKind::Unauthorized
                | FailureKind::BadRequest
                | FailureKind::BadBody
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_as_their_words() {
        for kind in [
            FailureKind::UnknownFunction,
            FailureKind::Overloaded,
            FailureKind::RunTimeout,
            FailureKind::WorkerLost,
        ] {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            assert_eq!(serde_json::from_str::<FailureKind>(&json).unwrap(), kind);
        }
    }
}
