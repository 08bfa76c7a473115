//! The workflow executor: runs a workflow's steps on this worker, each step a fresh
//! instance of its precompiled component.
//!
//! A workflow is a chain of steps (see `Workflow::chain`). An edge may fan out (a
//! static number of branches, or one branch per output region) and a later edge may
//! join the branches again. Between a fan-out and its join every branch runs the
//! steps of that segment on its own, concurrently, bounded by the run's concurrency
//! limit. A failed attempt is retried per the step's policy; a step that still fails
//! fails its branch, which fails the run unless the join's policy is to continue.

mod chain;
mod record;
mod spread;
mod step;

pub(crate) use chain::{owner_of, run_branch};
pub(crate) use spread::{BranchCall, BranchPeer, BranchReply, Peers};

use crate::error::InvokeError;
use crate::function::LoadedWorkflow;
use crate::region::Region;
use crate::worker::Worker;
use faas_invoke::{EventFailure, FailureKind, RunRecord, StepRecord, TriggerMessage};
use std::sync::Arc;
use std::time::Duration;

/// Why a run failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RunError {
    /// The workflow has no steps to run.
    #[error("workflow `{0}` has no steps")]
    NoSteps(String),
    /// A step failed on every attempt its retry policy allows.
    #[error("step `{step}` (branch {branch}) failed after {attempts} attempt(s): {cause}")]
    StepFailed {
        /// The step.
        step: String,
        /// Its fan-out branch (0 outside fan-outs).
        branch: u32,
        /// How many attempts were made.
        attempts: u32,
        /// The last attempt's failure.
        cause: StepFailure,
    },
    /// Branches of a fan-out did not finish before their join's timeout.
    #[error("{missing} branch(es) did not reach step `{step}` within {}ms", timeout.as_millis())]
    JoinTimeout {
        /// The joining step.
        step: String,
        /// How many branches were missing.
        missing: usize,
        /// The join's timeout.
        timeout: Duration,
    },
    /// The whole run passed its deadline.
    #[error("the run did not finish within {}ms", .0.as_millis())]
    Timeout(Duration),
    /// The run's output could not be read.
    #[error("cannot read the run's output: {0}")]
    Output(String),
    /// The worker stopped (its guest threads with it) before the run finished.
    #[error("the worker stopped before the run finished")]
    WorkerStopped,
    /// A branch run by another replica's worker failed.
    #[error("branch {branch} on worker `{worker}`: {failure}")]
    RemoteBranch {
        /// The branch.
        branch: u32,
        /// The worker that ran it.
        worker: String,
        /// What it reported.
        failure: EventFailure,
    },
}

impl RunError {
    /// The HTTP status this failure maps to.
    pub fn status(&self) -> u16 {
        if let Some(err) = self.not_started() {
            return err.status();
        }
        match self {
            Self::Timeout(_) | Self::JoinTimeout { .. } => 504,
            Self::StepFailed {
                cause: StepFailure::Invoke(err),
                ..
            } if err.status() == 504 => 504,
            Self::RemoteBranch { failure, .. } => failure.status,
            Self::WorkerStopped => 503,
            _ => 500,
        }
    }

    /// Whether a step failed only because it could not get an instance slot in time.
    pub fn is_overloaded(&self) -> bool {
        matches!(self.not_started(), Some(InvokeError::Overloaded { .. }))
    }

    /// Why a step failed, if it failed because no instance of it could start (no slot
    /// came free in time, or the worker can start no more instances).
    fn not_started(&self) -> Option<&InvokeError> {
        match self {
            Self::StepFailed {
                cause: StepFailure::Invoke(err),
                ..
            } if matches!(
                **err,
                InvokeError::Overloaded { .. } | InvokeError::SwapTurnedOn { .. }
            ) =>
            {
                Some(err)
            }
            _ => None,
        }
    }

    /// A one-word cause for error bodies.
    pub fn kind(&self) -> FailureKind {
        if let Some(err) = self.not_started() {
            // Said apart from other step failures: no instance of the step ran, so a
            // stream trigger does not count the attempt as a delivery.
            return err.cause();
        }
        match self {
            Self::NoSteps(_) => FailureKind::NoSteps,
            // Refused an instance on the other worker: said the same way as here.
            Self::RemoteBranch { failure, .. } if failure.kind == FailureKind::Overloaded => {
                FailureKind::Overloaded
            }
            Self::StepFailed { .. } | Self::RemoteBranch { .. } => FailureKind::StepFailed,
            Self::JoinTimeout { .. } => FailureKind::JoinTimeout,
            Self::Timeout(_) => FailureKind::RunTimeout,
            Self::Output(_) => FailureKind::Output,
            Self::WorkerStopped => FailureKind::Unavailable,
        }
    }
}

impl From<&RunError> for EventFailure {
    fn from(err: &RunError) -> Self {
        let shared_capacity = match err {
            RunError::RemoteBranch { failure, .. } => failure.shared_capacity,
            _ => err
                .not_started()
                .is_some_and(InvokeError::for_shared_capacity),
        };
        Self {
            shared_capacity,
            ..Self::new(err.kind(), err.status(), err.to_string())
        }
    }
}

/// Why one attempt of a step failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StepFailure {
    /// The instance trapped, timed out, ran out of memory or fuel...
    #[error("{0}")]
    Invoke(std::sync::Arc<InvokeError>),
    /// The step's handler returned an error.
    #[error("the step returned an error: {0}")]
    Returned(String),
    /// The step returned a region of another type than its manifest declares.
    #[error("returned a region of type `{found}`, but the step's output type is `{expected}`")]
    WrongOutputType {
        /// The declared output type.
        expected: String,
        /// The type returned.
        found: String,
    },
    /// A region could not be handed over (another run's, or not sealed).
    #[error("region refused: {0}")]
    Region(std::sync::Arc<crate::region::RegionError>),
}

/// The result of a run and its record (kept for `faas runs` either way).
#[derive(Debug)]
pub struct RunOutcome {
    /// What happened, step by step.
    pub record: RunRecord,
    /// The final step's output regions, or why the run failed.
    pub result: Result<Vec<Region>, RunError>,
}

impl Worker {
    /// Runs `workflow` from its entry step on `input` and returns the final step's
    /// output with the run's record. Runs on this worker only: every step is a fresh
    /// instance of a function of `workflow`.
    pub async fn run_workflow(
        self: &Arc<Self>,
        workflow: &Arc<LoadedWorkflow>,
        input: Region,
    ) -> RunOutcome {
        chain::run(self.clone(), workflow.clone(), input, None, Arc::from([])).await
    }

    /// Like [`Worker::run_workflow`], for a run started by `message` (every step sees
    /// its source, id and delivery count).
    pub async fn run_workflow_for_message(
        self: &Arc<Self>,
        workflow: &Arc<LoadedWorkflow>,
        input: Region,
        message: TriggerMessage,
    ) -> RunOutcome {
        chain::run(
            self.clone(),
            workflow.clone(),
            input,
            Some(message),
            Arc::from([]),
        )
        .await
    }

    /// A run (started by `message`, if any) whose fan-out branches may go to `peers`,
    /// the other workers holding `workflow` (services mode).
    pub(crate) async fn run_with_peers(
        self: &Arc<Self>,
        workflow: &Arc<LoadedWorkflow>,
        input: Region,
        message: Option<TriggerMessage>,
        peers: Peers,
    ) -> RunOutcome {
        chain::run(self.clone(), workflow.clone(), input, message, peers).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step no instance of which could start is said apart from one that ran and
    /// failed: a stream trigger does not count it as a delivery, and another worker
    /// may take it.
    #[test]
    fn a_step_that_could_not_start_is_said_apart_from_one_that_failed() {
        let failed = |err| RunError::StepFailed {
            step: "s".into(),
            branch: 0,
            attempts: 1,
            cause: StepFailure::Invoke(Arc::new(err)),
        };
        let function = || "f".to_owned();
        let overloaded = |shared| {
            failed(InvokeError::Overloaded {
                function: function(),
                message: "busy".into(),
                shared,
            })
        };
        for shared in [false, true] {
            let overloaded = overloaded(shared);
            assert!(overloaded.is_overloaded());
            assert_eq!(
                (overloaded.kind(), overloaded.status()),
                (FailureKind::Overloaded, 503)
            );
            // Only the worker's slots, which every tenant shares, say so.
            let failure = EventFailure::from(&overloaded);
            assert_eq!(failure.shared_capacity, shared);
            // A branch refused so on another worker fails its run the same way.
            let remote = RunError::RemoteBranch {
                branch: 1,
                worker: "w2".into(),
                failure,
            };
            let failure = EventFailure::from(&remote);
            assert_eq!(
                (failure.kind, failure.status),
                (FailureKind::Overloaded, 503)
            );
            assert_eq!(failure.shared_capacity, shared);
        }
        let swapping = failed(InvokeError::SwapTurnedOn {
            function: function(),
        });
        assert!(!swapping.is_overloaded());
        assert_eq!(
            (swapping.kind(), swapping.status()),
            (FailureKind::Unavailable, 503)
        );
        let trapped = failed(InvokeError::Trap {
            function: function(),
            message: "unreachable".into(),
        });
        assert_eq!(
            (trapped.kind(), trapped.status()),
            (FailureKind::StepFailed, 500)
        );
    }
}
