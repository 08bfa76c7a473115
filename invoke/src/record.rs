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
    /// Every step invocation, in the order they finished, as far as
    /// [`MAX_STEP_RECORD_BYTES`] keeps them.
    pub steps: Vec<StepRecord>,
    /// How many step invocations finished past [`MAX_STEP_RECORD_BYTES`], whose
    /// records were not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_steps: u64,
}

/// The most bytes of step records one run keeps (by [`StepRecord::approx_bytes`]):
/// a workflow of 128 steps that fan out to 1,024 branches each makes 131,072 of them,
/// each with up to 4 KiB of its guest's error text, some 500 MiB for the worker to
/// send and the gateway to keep. The records past it are counted, not kept.
pub const MAX_STEP_RECORD_BYTES: usize = 1 << 20;

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl RunRecord {
    /// About how many bytes the record holds, to keep run history within a byte
    /// budget: its strings plus a fixed cost per step.
    pub fn approx_bytes(&self) -> usize {
        128 + self.run_id.len()
            + self.workflow.len()
            + self.error.as_ref().map_or(0, String::len)
            + self
                .steps
                .iter()
                .map(StepRecord::approx_bytes)
                .sum::<usize>()
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

impl StepRecord {
    /// About how many bytes the record holds: its strings plus a fixed cost.
    pub fn approx_bytes(&self) -> usize {
        64 + self.step.len()
            + self.error.as_ref().map_or(0, String::len)
            + self.worker.as_ref().map_or(0, String::len)
            + self.handoff.as_ref().map_or(0, String::len)
    }
}
