//! The guest memory all of a worker's instances hold at once, and one tenant's.
//!
//! `memory_mb` bounds one instance, and a tenant may run up to
//! `max_instances_per_tenant` of them (500 by default) on a worker: half a thousand
//! instances of 512 MiB would ask for 250 GiB, and the first few dozen that touched
//! their memory would take a machine's, so one tenant's guests could have the worker,
//! and every other tenant's events on it, killed for memory. So every instance claims
//! its linear memory (from its creation, as it grows), the region bytes it copies into
//! the host, and the most its handles can hold in the host (`host_limits.rs`) against
//! a budget of the worker's (`--guest-memory-mb`), of which one
//! tenant's instances may hold a share (`--tenant-guest-memory-mb`). A growth that does
//! not fit traps its guest ([`GuestMemoryHeld`]): that event fails, with kind
//! `memory_budget` and status 503, and the next finds room as instances end. The claim
//! is given back when the instance's store is dropped.

use faas_budget::{Budget, BudgetLimits, OverBudget};
use std::sync::Arc;

/// What a worker's instances may hold, by tenant.
pub type GuestMemory = Budget<Arc<str>>;

/// The part of the budget one instance holds; given back when dropped.
pub(crate) type GuestMemoryClaim = faas_budget::Claim<Arc<str>>;

/// The default budget: half the memory this process may use (its cgroup's
/// `memory.max` where one is set, as in a Kubernetes pod, else the machine's), so that
/// guests cannot take what the worker itself, the other processes and the page cache
/// need; one tenant's share is half of that, as its instance slots are half of all.
pub fn default_guest_memory() -> BudgetLimits {
    let total = memory_available().map_or(4 << 30, |bytes| bytes / 2);
    BudgetLimits {
        total,
        per_holder: total / 2,
    }
}

/// The memory this process may use, in bytes: its cgroup's limit (cgroup v2), else
/// the machine's.
fn memory_available() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|max| max.trim().parse::<u64>().ok());
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|line| line.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib << 10)
        });
    match (cgroup, machine) {
        (Some(cgroup), Some(machine)) => Some(cgroup.min(machine)),
        (cgroup, machine) => cgroup.or(machine),
    }
}

/// Why a guest's memory could not grow: the budget had no room. It traps the guest,
/// as a memory limit does.
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(tenant, *over))]
pub(crate) struct GuestMemoryHeld {
    /// The instance's tenant.
    pub tenant: Arc<str>,
    /// Which limit had no room.
    pub over: OverBudget,
}

/// What a user needs to know of `over`, for `tenant`'s instance.
fn describe(tenant: &str, over: OverBudget) -> String {
    match over {
        OverBudget::Share { limit } => format!(
            "the instances of tenant `{tenant}` on this worker hold its whole share of \
             guest memory ({} MiB of linear memory, copied regions and host handles: the \
             worker's --tenant-guest-memory-mb, or the tenant's own quota, which an \
             operator sets with `faas tenant set {tenant} --guest-memory-mb N`); try again \
             as they end",
            limit >> 20
        ),
        OverBudget::Total { limit } => format!(
            "this worker's instances hold all its guest memory ({} MiB, its \
             --guest-memory-mb); try again as they end",
            limit >> 20
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_half_the_memory_there_is_and_a_tenant_half_of_that() {
        let limits = default_guest_memory();
        let available = memory_available().expect("Linux says how much memory there is");
        assert_eq!(limits.total, available / 2);
        assert_eq!(limits.per_holder, limits.total / 2);
    }

    #[test]
    fn a_refusal_names_the_flag_to_raise() {
        let tenant: Arc<str> = Arc::from("shop");
        let share = GuestMemoryHeld {
            tenant: tenant.clone(),
            over: OverBudget::Share { limit: 256 << 20 },
        };
        let message = share.to_string();
        assert!(
            message.contains("`shop`") && message.contains("256 MiB"),
            "{message}"
        );
        assert!(message.contains("--tenant-guest-memory-mb"), "{message}");
        assert!(
            message.contains("`faas tenant set shop --guest-memory-mb N`"),
            "{message}"
        );
        let total = GuestMemoryHeld {
            tenant,
            over: OverBudget::Total { limit: 1 << 30 },
        };
        assert!(
            total
                .to_string()
                .contains("1024 MiB, its --guest-memory-mb")
        );
    }
}
