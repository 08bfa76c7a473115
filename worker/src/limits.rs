//! Process-wide limits the worker keeps guests under that Wasmtime does not know of:
//! file descriptors, which region memory files use, and the kernel's memory maps, which
//! region pages mapped or protected split.

use std::sync::Arc;

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

/// How many region memory files may be open at once in one worker
/// ([`crate::WorkerConfig::max_region_files`]), and by one tenant's regions (a quarter
/// of that, so one tenant's values cannot leave none for the others); each is a file
/// descriptor until the last region or mapping of it goes. One unit per file, held by
/// tenant.
pub(crate) type FileBudget = faas_budget::Budget<Arc<str>>;

/// The [`FileBudget`] of `max` files in all.
pub(crate) fn file_budget(max: usize) -> Arc<FileBudget> {
    Arc::new(FileBudget::new(faas_budget::BudgetLimits {
        total: max as u64,
        per_holder: (max / 4).max(1) as u64,
    }))
}

/// One file of a [`FileBudget`], given back when dropped.
pub(crate) type FileTicket = faas_budget::Claim<Arc<str>>;

/// Takes one file of `files` for `tenant`'s region.
///
/// # Errors
/// [`faas_budget::OverBudget`] when the tenant's share, or the whole budget, is spent.
pub(crate) fn take_file(
    files: &Arc<FileBudget>,
    tenant: &Arc<str>,
) -> Result<FileTicket, faas_budget::OverBudget> {
    let mut ticket = files.claim(tenant.clone());
    ticket.grow_to(1)?;
    Ok(ticket)
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
        let budget = file_budget(8);
        let (hog, other): (Arc<str>, Arc<str>) = ("hog".into(), "other".into());
        let first = take_file(&budget, &hog).unwrap();
        let _second = take_file(&budget, &hog).unwrap();
        // A tenant's share is a quarter of the files; the others keep the rest.
        assert!(matches!(
            take_file(&budget, &hog),
            Err(faas_budget::OverBudget::Share { limit: 2 })
        ));
        let others: Vec<_> = (0..2)
            .map(|_| take_file(&budget, &other).unwrap())
            .collect();
        drop(first);
        assert_eq!(budget.held(), 3);
        assert!(take_file(&budget, &hog).is_ok());
        drop(others);
        assert_eq!(budget.held(), 1);
    }

    #[test]
    fn the_soft_descriptor_limit_is_raised_to_the_hard_limit() {
        raise_descriptor_limit();
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(limit.current, limit.maximum);
    }
}
