//! Collecting what a run did, step by step (the records themselves are
//! `faas_invoke::RunRecord` and `StepRecord`: the gateway keeps them for `faas runs`).

use faas_invoke::{MAX_STEP_RECORD_BYTES, StepRecord};
use std::sync::Mutex;

/// Collects step records from concurrently running branches, up to
/// [`MAX_STEP_RECORD_BYTES`]; past it, counts them.
#[derive(Debug, Default)]
pub(crate) struct Recorder(Mutex<Recorded>);

/// What a [`Recorder`] holds.
#[derive(Debug, Default)]
pub(crate) struct Recorded {
    /// The records kept, in the order they finished.
    pub(crate) steps: Vec<StepRecord>,
    /// Their size, by [`StepRecord::approx_bytes`].
    bytes: usize,
    /// How many finished past the budget.
    pub(crate) omitted: u64,
}

impl Recorder {
    pub(crate) fn push(&self, record: StepRecord) {
        let mut recorded = self.lock();
        let bytes = record.approx_bytes();
        if recorded.bytes + bytes > MAX_STEP_RECORD_BYTES {
            recorded.omitted += 1;
        } else {
            recorded.bytes += bytes;
            recorded.steps.push(record);
        }
    }

    pub(crate) fn take(&self) -> Recorded {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_past_the_budget_are_counted_not_kept() {
        let recorder = Recorder::default();
        let record = StepRecord {
            step: "fail".into(),
            branch: 0,
            attempts: 1,
            duration_ms: 1.0,
            succeeded: false,
            error: Some("e".repeat(4096)),
            worker: None,
            handoff: None,
        };
        for _ in 0..1000 {
            recorder.push(record.clone());
        }
        let recorded = recorder.take();
        let kept = recorded.steps.len();
        assert_eq!(kept, MAX_STEP_RECORD_BYTES / record.approx_bytes());
        assert_eq!(recorded.omitted, 1000 - kept as u64);
    }
}
