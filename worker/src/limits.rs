//! Process-wide limits the worker keeps guests under that Wasmtime does not know of:
//! file descriptors, which region memory files use, and the kernel's memory maps, which
//! region pages mapped or protected split.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Raises the process's soft limit on open files to its hard limit, so that sockets
/// and region memory files have all the room the operator allows. Idempotent; a
/// failure is logged, not fatal (the soft limit then stays as it was).
pub fn raise_descriptor_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return;
    }
    limit.current = limit.maximum;
    if let Err(err) = setrlimit(Resource::Nofile, limit) {
        tracing::warn!("cannot raise the open-file limit to its hard limit: {err}");
    }
}

/// How many region memory files may be open at once in one worker; each is a file
/// descriptor until the last region or mapping of it goes.
#[derive(Debug)]
pub(crate) struct FileBudget {
    open: AtomicUsize,
    max: usize,
}

impl FileBudget {
    /// A budget of `max` files.
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            open: AtomicUsize::new(0),
            max,
        })
    }

    /// Takes one file from the budget, or `None` when it is spent.
    pub(crate) fn take(self: &Arc<Self>) -> Option<FileTicket> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < self.max).then_some(open + 1)
            })
            .ok()
            .map(|_| FileTicket(self.clone()))
    }

    /// The budget's size.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// How many files are open now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// One file of a [`FileBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct FileTicket(Arc<FileBudget>);

impl Drop for FileTicket {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How many guest page ranges the host may have mapped or protected for regions at
/// once: [`crate::WorkerConfig::max_region_mappings`] in all, a quarter of that per
/// tenant. One unit per range, held by tenant.
pub(crate) type MappingBudget = faas_budget::Budget<Arc<str>>;

/// The [`MappingBudget`] of `max` ranges in all.
pub(crate) fn mapping_budget(max: u64) -> MappingBudget {
    MappingBudget::new(faas_budget::BudgetLimits {
        total: max,
        per_holder: max / 4,
    })
}

/// One store's share of the [`MappingBudget`]: as many units as its ranges.
pub(crate) type MappingClaim = faas_budget::Claim<Arc<str>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spent_budget_refuses_until_a_file_is_given_back() {
        let budget = FileBudget::new(2);
        let first = budget.take().unwrap();
        let _second = budget.take().unwrap();
        assert!(budget.take().is_none());
        drop(first);
        assert_eq!(budget.open(), 1);
        assert!(budget.take().is_some());
    }

    #[test]
    fn the_soft_descriptor_limit_is_raised_to_the_hard_limit() {
        raise_descriptor_limit();
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(limit.current, limit.maximum);
    }
}
