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

/// Workers, their capacity, and which workflow replicas are on which.
#[derive(Debug, Default, Clone)]
pub struct Planner {
    workers: BTreeMap<WorkerId, usize>,
    /// Every replica of a workflow is whole (all its functions) and on its own worker.
    placements: BTreeMap<WorkflowKey, Vec<WorkerId>>,
}

impl Planner {
    /// Registers a worker (or updates its capacity).
    pub fn add_worker(&mut self, worker: WorkerSpec) {
        self.workers.insert(worker.id, worker.capacity);
    }

    /// Removes a worker and places the replicas it held again on the others. Returns
    /// the workflows that lost a replica that could not be placed anywhere.
    pub fn remove_worker(&mut self, id: &WorkerId) -> Vec<WorkflowKey> {
        self.workers.remove(id);
        let mut unplaced = Vec::new();
        let affected: Vec<WorkflowKey> = self
            .placements
            .iter()
            .filter(|(_, workers)| workers.contains(id))
            .map(|(key, _)| key.clone())
            .collect();
        for key in affected {
            let workers = self.placements.get_mut(&key).expect("just listed");
            workers.retain(|worker| worker != id);
            match self.choose(&key) {
                Some(worker) => self.placements.get_mut(&key).expect("present").push(worker),
                None => unplaced.push(key),
            }
        }
        self.placements.retain(|_, workers| !workers.is_empty());
        unplaced
    }

    /// Places `workflow` once (or returns where its first replica already is).
    ///
    /// # Errors
    /// [`PlacementError`] when there is no worker or none has room.
    pub fn place(&mut self, workflow: &WorkflowKey) -> Result<WorkerId, PlacementError> {
        Ok(self.place_replicas(workflow, 1)?.remove(0))
    }

    /// Places `replicas` whole copies of `workflow` on distinct workers (keeping the
    /// replicas it already has) and returns their workers.
    ///
    /// Each new replica goes to the worker holding most of the tenant's workflows that
    /// still has room and no replica of this workflow; failing that, to the least
    /// loaded such worker. Ties break by worker id, so placement is deterministic.
    ///
    /// # Errors
    /// [`PlacementError`] when there is no worker, or too few have room; nothing is
    /// placed then.
    pub fn place_replicas(
        &mut self,
        workflow: &WorkflowKey,
        replicas: usize,
    ) -> Result<Vec<WorkerId>, PlacementError> {
        if self.workers.is_empty() {
            return Err(PlacementError::NoWorkers);
        }
        let before = self.placements.get(workflow).cloned().unwrap_or_default();
        let mut placed = before.clone();
        placed.truncate(replicas.max(1));
        self.placements.insert(workflow.clone(), placed.clone());
        while placed.len() < replicas.max(1) {
            let Some(worker) = self.choose(workflow) else {
                self.restore(workflow, before);
                return Err(PlacementError::NoCapacity(workflow.clone()));
            };
            placed.push(worker);
            self.placements.insert(workflow.clone(), placed.clone());
        }
        Ok(placed)
    }

    /// Records that `workflow` already runs on `workers` (read back from shared state by
    /// a restarted scheduler), so nothing moves. Workers it does not know are left out.
    pub fn assign(&mut self, workflow: &WorkflowKey, mut workers: Vec<WorkerId>) {
        workers.retain(|worker| self.workers.contains_key(worker));
        workers.dedup();
        if !workers.is_empty() {
            self.placements.insert(workflow.clone(), workers);
        }
    }

    /// The registered workers.
    pub fn worker_ids(&self) -> impl Iterator<Item = &WorkerId> {
        self.workers.keys()
    }

    /// Forgets `workflow`.
    pub fn remove(&mut self, workflow: &WorkflowKey) {
        self.placements.remove(workflow);
    }

    /// Where `workflow`'s first replica is placed.
    pub fn placement_of(&self, workflow: &WorkflowKey) -> Option<&WorkerId> {
        self.placements
            .get(workflow)
            .and_then(|workers| workers.first())
    }

    /// Where every replica of `workflow` is placed.
    pub fn replicas_of(&self, workflow: &WorkflowKey) -> &[WorkerId] {
        self.placements.get(workflow).map_or(&[], Vec::as_slice)
    }

    /// The best worker for one more replica of `workflow`, if any has room.
    fn choose(&self, workflow: &WorkflowKey) -> Option<WorkerId> {
        let taken = self.replicas_of(workflow);
        self.workers
            .iter()
            .filter(|(id, capacity)| !taken.contains(id) && self.load(id) < **capacity)
            .map(|(id, _)| id)
            .max_by_key(|id| {
                (
                    self.tenant_load(id, &workflow.tenant),
                    std::cmp::Reverse(self.load(id)),
                    std::cmp::Reverse((*id).clone()),
                )
            })
            .cloned()
    }

    fn restore(&mut self, workflow: &WorkflowKey, before: Vec<WorkerId>) {
        if before.is_empty() {
            self.placements.remove(workflow);
        } else {
            self.placements.insert(workflow.clone(), before);
        }
    }

    fn load(&self, worker: &WorkerId) -> usize {
        self.placements
            .values()
            .filter(|workers| workers.contains(worker))
            .count()
    }

    fn tenant_load(&self, worker: &WorkerId, tenant: &str) -> usize {
        self.placements
            .iter()
            .filter(|(key, workers)| workers.contains(worker) && key.tenant == tenant)
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
    fn replicas_go_to_distinct_workers() {
        let mut planner = Planner::default();
        for name in ["w1", "w2", "w3"] {
            planner.add_worker(worker(name, 10));
        }
        let replicas = planner.place_replicas(&key("t", "a"), 3).unwrap();
        let mut distinct = replicas.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 3);
        assert_eq!(planner.replicas_of(&key("t", "a")), replicas.as_slice());
    }

    #[test]
    fn more_replicas_than_workers_fails_and_places_nothing() {
        let mut planner = Planner::default();
        planner.add_worker(worker("w1", 10));
        planner.add_worker(worker("w2", 10));
        assert_eq!(
            planner.place_replicas(&key("t", "a"), 3),
            Err(PlacementError::NoCapacity(key("t", "a")))
        );
        assert!(planner.replicas_of(&key("t", "a")).is_empty());
    }

    #[test]
    fn growing_and_shrinking_replicas_keeps_existing_ones() {
        let mut planner = Planner::default();
        for name in ["w1", "w2", "w3"] {
            planner.add_worker(worker(name, 10));
        }
        let one = planner.place_replicas(&key("t", "a"), 1).unwrap();
        let two = planner.place_replicas(&key("t", "a"), 2).unwrap();
        assert_eq!(two[0], one[0]);
        let back = planner.place_replicas(&key("t", "a"), 1).unwrap();
        assert_eq!(back, one);
    }

    #[test]
    fn a_lost_replica_is_replaced_on_a_worker_without_one() {
        let mut planner = Planner::default();
        for name in ["w1", "w2", "w3"] {
            planner.add_worker(worker(name, 10));
        }
        let replicas = planner.place_replicas(&key("t", "a"), 2).unwrap();
        assert!(planner.remove_worker(&replicas[0]).is_empty());
        let now = planner.replicas_of(&key("t", "a")).to_vec();
        assert_eq!(now.len(), 2);
        assert!(!now.contains(&replicas[0]));
        assert_ne!(now[0], now[1]);
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

    #[test]
    fn assigned_placements_are_kept_and_count_against_capacity() {
        let mut planner = Planner::default();
        planner.add_worker(worker("w1", 1));
        planner.add_worker(worker("w2", 1));
        planner.assign(&key("t", "a"), vec![id("w2"), id("gone")]);
        assert_eq!(planner.replicas_of(&key("t", "a")), [id("w2")]);
        // Placing it again keeps it where it is; w2 is full, so another goes to w1.
        assert_eq!(planner.place(&key("t", "a")).unwrap(), id("w2"));
        assert_eq!(planner.place(&key("u", "b")).unwrap(), id("w1"));
    }
}
