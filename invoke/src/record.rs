//! What a run did, step by step: kept by the gateway for `faas runs` and turned into
//! per-step metrics.

use serde::{Deserialize, Serialize};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Every step needed succeeded.
    Succeeded,
    /// The run failed; [`RunRecord::error`] says why.
    Failed,
}

/// One run of a workflow.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// Unique id of the run.
    pub run_id: String,
    /// The workflow.
    pub workflow: String,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// How long it took, in milliseconds.
    pub duration_ms: f64,
    /// How it ended.
    pub status: RunStatus,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// Every step invocation, in the order they finished.
    pub steps: Vec<StepRecord>,
}

impl RunRecord {
    /// About how many bytes the record holds, to keep run history within a byte
    /// budget: its strings plus a fixed cost per step.
    pub fn approx_bytes(&self) -> usize {
        let step = |record: &StepRecord| {
            64 + record.step.len()
                + record.error.as_ref().map_or(0, String::len)
                + record.worker.as_ref().map_or(0, String::len)
        };
        128 + self.run_id.len()
            + self.workflow.len()
            + self.error.as_ref().map_or(0, String::len)
            + self.steps.iter().map(step).sum::<usize>()
    }
}

/// One step of a run, in one branch, with all its attempts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step's name.
    pub step: String,
    /// Its fan-out branch (0 outside fan-outs).
    pub branch: u32,
    /// Attempts made (more than 1 when retried).
    pub attempts: u32,
    /// Time from the first attempt's start to the last attempt's end, in milliseconds.
    pub duration_ms: f64,
    /// Whether the last attempt succeeded.
    pub succeeded: bool,
    /// The last failure, if any attempt failed.
    pub error: Option<String>,
    /// The worker that ran it, when another replica's worker ran its branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// How its branch's regions reached that worker: `fd` (memory file descriptors
    /// over a Unix socket, on the same host) or `network` (one copy over HTTP/2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<String>,
}
