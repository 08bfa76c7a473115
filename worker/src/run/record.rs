//! Collecting what a run did, step by step (the records themselves are
//! `faas_invoke::RunRecord` and `StepRecord`: the gateway keeps them for `faas runs`).

use faas_invoke::StepRecord;
use std::sync::Mutex;

/// Collects step records from concurrently running branches.
#[derive(Debug, Default)]
pub(crate) struct Recorder(Mutex<Vec<StepRecord>>);

impl Recorder {
    pub(crate) fn push(&self, record: StepRecord) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(record);
    }

    pub(crate) fn take(&self) -> Vec<StepRecord> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }
}
