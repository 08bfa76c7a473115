//! The placement algorithm, as plain data and functions so it can be tested alone.

use crate::{PlacementError, WorkerId, WorkflowKey};
use std::collections::BTreeMap;

/// A worker as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSpec {
    /// Its id.
    pub id: WorkerId,
    /// How many workflows it may hold.
    pub capacity: usize,
}

/// Workers, their capacity, and which workflow is on which.
#[derive(Debug, Default, Clone)]
pub struct Planner {
    workers: BTreeMap<WorkerId, usize>,
    placements: BTreeMap<WorkflowKey, WorkerId>,
}

impl Planner {
    /// Registers a worker (or updates its capacity).
    pub fn add_worker(&mut self, worker: WorkerSpec) {
        self.workers.insert(worker.id, worker.capacity);
    }

    /// Removes a worker and places its workflows again on the others. Returns the
    /// workflows that could not be placed anywhere (they are no longer placed).
    pub fn remove_worker(&mut self, id: &WorkerId) -> Vec<WorkflowKey> {
        self.workers.remove(id);
        let orphans: Vec<WorkflowKey> = self
            .placements
            .iter()
            .filter(|(_, worker)| *worker == id)
            .map(|(key, _)| key.clone())
            .collect();
        let mut unplaced = Vec::new();
        for key in orphans {
            self.placements.remove(&key);
            if self.place(&key).is_err() {
                unplaced.push(key);
            }
        }
        unplaced
    }

    /// Places `workflow` (or returns where it already is).
    ///
    /// New workflows go to the worker holding most of the tenant's workflows that
    /// still has room; failing that, to the least loaded worker with room. Ties break
    /// by worker id, so placement is deterministic.
    ///
    /// # Errors
    /// [`PlacementError`] when there is no worker or none has room.
    pub fn place(&mut self, workflow: &WorkflowKey) -> Result<WorkerId, PlacementError> {
        if let Some(worker) = self.placements.get(workflow) {
            return Ok(worker.clone());
        }
        if self.workers.is_empty() {
            return Err(PlacementError::NoWorkers);
        }
        let with_room = self
            .workers
            .iter()
            .filter(|(id, capacity)| self.load(id) < **capacity)
            .map(|(id, _)| id);
        let chosen = with_room
            .max_by_key(|id| {
                (
                    self.tenant_load(id, &workflow.tenant),
                    std::cmp::Reverse(self.load(id)),
                    std::cmp::Reverse((*id).clone()),
                )
            })
            .cloned()
            .ok_or_else(|| PlacementError::NoCapacity(workflow.clone()))?;
        self.placements.insert(workflow.clone(), chosen.clone());
        Ok(chosen)
    }

    /// Forgets `workflow`.
    pub fn remove(&mut self, workflow: &WorkflowKey) {
        self.placements.remove(workflow);
    }

    /// Where `workflow` is placed.
    pub fn placement_of(&self, workflow: &WorkflowKey) -> Option<&WorkerId> {
        self.placements.get(workflow)
    }

    fn load(&self, worker: &WorkerId) -> usize {
        self.placements.values().filter(|w| *w == worker).count()
    }

    fn tenant_load(&self, worker: &WorkerId, tenant: &str) -> usize {
        self.placements
            .iter()
            .filter(|(key, w)| *w == worker && key.tenant == tenant)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(id: &str, capacity: usize) -> WorkerSpec {
        WorkerSpec {
            id: WorkerId(id.into()),
            capacity,
        }
    }

    fn key(tenant: &str, name: &str) -> WorkflowKey {
        WorkflowKey {
            tenant: tenant.into(),
            name: name.into(),
        }
    }

    fn id(name: &str) -> WorkerId {
        WorkerId(name.into())
    }

    #[test]
    fn placing_without_workers_fails() {
        let mut planner = Planner::default();
        assert_eq!(
            planner.place(&key("t", "a")),
            Err(PlacementError::NoWorkers)
        );
    }

    #[test]
    fn a_tenants_workflows_are_packed_on_one_worker() {
        let mut planner = Planner::default();
        planner.add_worker(worker("w1", 10));
        planner.add_worker(worker("w2", 10));
        let first = planner.place(&key("acme", "a")).unwrap();
        assert_eq!(planner.place(&key("acme", "b")).unwrap(), first);
        assert_eq!(planner.place(&key("acme", "c")).unwrap(), first);
    }

    #[test]
    fn other_tenants_spread_to_the_least_loaded_worker() {
        let mut planner = Planner::default();
        planner.add_worker(worker("w1", 10));
        planner.add_worker(worker("w2", 10));
        let acme = planner.place(&key("acme", "a")).unwrap();
        let globex = planner.place(&key("globex", "a")).unwrap();
        assert_ne!(acme, globex);
    }

    #[test]
    fn a_tenant_spills_to_another_worker_when_full() {
        let mut planner = Planner::default();
        planner.add_worker(worker("w1", 2));
        planner.add_worker(worker("w2", 2));
        let first = planner.place(&key("acme", "a")).unwrap();
        assert_eq!(planner.place(&key("acme", "b")).unwrap(), first);
        let third = planner.place(&key("acme", "c")).unwrap();
        assert_ne!(third, first);
        assert_eq!(
            planner.place(&key("acme", "d")).unwrap(),
            third,
            "the spilled tenant packs onto its new worker too"
        );
        assert_eq!(
            planner.place(&key("acme", "e")),
            Err(PlacementError::NoCapacity(key("acme", "e")))
        );
    }

    #[test]
    fn placing_twice_returns_the_same_worker() {
        let mut planner = Planner::default();
        planner.add_worker(worker("w1", 1));
        let first = planner.place(&key("t", "a")).unwrap();
        assert_eq!(planner.place(&key("t", "a")).unwrap(), first);
    }

    #[test]
    fn removing_a_workflow_frees_its_capacity() {
        let mut planner = Planner::default();
        planner.add_worker(worker("w1", 1));
        planner.place(&key("t", "a")).unwrap();
        assert!(planner.place(&key("t", "b")).is_err());
        planner.remove(&key("t", "a"));
        assert_eq!(planner.place(&key("t", "b")).unwrap(), id("w1"));
    }

    #[test]
    fn a_lost_workers_workflows_are_placed_again_together() {
        let mut planner = Planner::default();
        planner.add_worker(worker("w1", 10));
        planner.add_worker(worker("w2", 10));
        planner.add_worker(worker("w3", 10));
        let home = planner.place(&key("acme", "a")).unwrap();
        planner.place(&key("acme", "b")).unwrap();
        let unplaced = planner.remove_worker(&home);
        assert!(unplaced.is_empty());
        let a = planner.placement_of(&key("acme", "a")).unwrap().clone();
        let b = planner.placement_of(&key("acme", "b")).unwrap().clone();
        assert_ne!(a, home);
        assert_eq!(a, b, "the tenant stays together after failover");
    }

    #[test]
    fn workflows_that_fit_nowhere_after_a_failure_are_reported() {
        let mut planner = Planner::default();
        planner.add_worker(worker("w1", 1));
        planner.add_worker(worker("w2", 1));
        planner.place(&key("t", "a")).unwrap();
        let lost = planner.place(&key("t", "b")).unwrap();
        planner.place(&key("u", "c")).ok();
        let unplaced = planner.remove_worker(&lost);
        assert_eq!(unplaced, vec![key("t", "b")]);
        assert_eq!(planner.placement_of(&key("t", "b")), None);
    }
}
