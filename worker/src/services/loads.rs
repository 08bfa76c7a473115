//! Which workflow loads a worker runs at once in services mode.
//!
//! A load fetches a revision's components and compiles those not in the cache: seconds
//! of a compile child for a large component, and a tenant decides how many it deploys
//! and how often. Loaded one after another, in the sync loop, a tenant's compile held
//! up every other tenant's deploy on that worker until it ended (up to
//! `--compile-timeout-secs`). Now each load runs on a task of its own, admitted here:
//! at most one per workflow and one per tenant at a time, at most [`MAX_LOADS`] in all
//! (each may be a compile child with its own memory limit), and the tenants with loads
//! waiting take turns for the places that free up.
//!
//! A load that compiles nothing (every component linked here already, or in the
//! compiled-code cache: a redeploy, a component many tenants deploy) takes none of
//! those places: it maps files and links, so two tenants' long compiles do not hold it
//! up, which could otherwise last as long as the gateway waits for a load. It still
//! waits for its own workflow's load in flight.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

/// How many loads that compile run at once, at most: as many as the worker compiles
/// at once.
pub(super) const MAX_LOADS: usize = crate::compiler::MAX_COMPILES;

/// A load waiting for a place: its workflow, its tenant, and what runs it.
pub(super) struct Pending<T> {
    /// The workflow's name.
    pub workflow: String,
    /// Its tenant.
    pub tenant: String,
    /// Whether it may compile (some component is not compiled here yet).
    pub compiles: bool,
    /// What the caller runs once admitted.
    pub item: T,
}

/// The loads in flight.
#[derive(Clone)]
pub(super) struct LoadQueue {
    state: Arc<Mutex<State>>,
    max: usize,
}

#[derive(Default)]
struct State {
    workflows: HashSet<String>,
    tenants: HashSet<String>,
    /// The tenant admitted last: the next admission looks at the tenants after it
    /// (by name) first, then from the start.
    last: Option<String>,
}

/// A load's place: released when dropped (its task ended, however).
pub(super) struct Ticket {
    state: Arc<Mutex<State>>,
    workflow: String,
    /// The tenant whose place it holds; `None` for a load that compiles nothing.
    tenant: Option<String>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        state.workflows.remove(&self.workflow);
        if let Some(tenant) = &self.tenant {
            state.tenants.remove(tenant);
        }
    }
}

impl LoadQueue {
    /// A queue running at most `max` loads at once (at least one).
    pub(super) fn new(max: usize) -> Self {
        Self {
            state: Arc::default(),
            max: max.max(1),
        }
    }

    /// The loads of `pending` to start now, each with the ticket that holds its place:
    /// every one that compiles nothing, of a workflow with no load in flight; of the
    /// others none of a workflow or a tenant with one in flight, at most one per
    /// tenant, and no more than the places left. Tenants are looked at in name order
    /// starting after the one admitted last (round robin), so a tenant whose name sorts
    /// first does not always get the place that freed up; a tenant's own loads go in
    /// the order given.
    pub(super) fn admit<T>(&self, pending: Vec<Pending<T>>) -> Vec<(T, Ticket)> {
        let mut state = lock(&self.state);
        let mut admitted = Vec::new();
        let (cheap, compiling): (Vec<_>, Vec<_>) =
            pending.into_iter().partition(|load| !load.compiles);
        for load in cheap {
            if state.workflows.insert(load.workflow.clone()) {
                let ticket = Ticket {
                    state: self.state.clone(),
                    workflow: load.workflow,
                    tenant: None,
                };
                admitted.push((load.item, ticket));
            }
        }
        // From what is left: a tenant's first load whose workflow is free goes on.
        let mut by_tenant: BTreeMap<String, Pending<T>> = BTreeMap::new();
        for load in compiling {
            if state.workflows.contains(&load.workflow) || state.tenants.contains(&load.tenant) {
                continue;
            }
            by_tenant.entry(load.tenant.clone()).or_insert(load);
        }
        let room = self.max.saturating_sub(state.tenants.len());
        if by_tenant.is_empty() || room == 0 {
            return admitted;
        }
        let mut candidates: Vec<Pending<T>> = by_tenant.into_values().collect();
        let first = state.last.as_ref().map_or(0, |last| {
            candidates.partition_point(|load| load.tenant <= *last) % candidates.len()
        });
        candidates.rotate_left(first);
        admitted.extend(candidates.into_iter().take(room).map(|load| {
            state.workflows.insert(load.workflow.clone());
            state.tenants.insert(load.tenant.clone());
            state.last = Some(load.tenant.clone());
            let ticket = Ticket {
                state: self.state.clone(),
                workflow: load.workflow,
                tenant: Some(load.tenant),
            };
            (load.item, ticket)
        }));
        admitted
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Each change is a set insert or remove: a poisoned lock still holds sound sets.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads that compile, of (tenant, workflow).
    fn pending(loads: &[(&str, &str)]) -> Vec<Pending<String>> {
        loads
            .iter()
            .map(|(tenant, workflow)| Pending {
                workflow: (*workflow).to_owned(),
                tenant: (*tenant).to_owned(),
                compiles: true,
                item: (*workflow).to_owned(),
            })
            .collect()
    }

    /// Loads that compile nothing, of (tenant, workflow).
    fn compiled(loads: &[(&str, &str)]) -> Vec<Pending<String>> {
        let mut loads = pending(loads);
        for load in &mut loads {
            load.compiles = false;
        }
        loads
    }

    fn names(admitted: &[(String, Ticket)]) -> Vec<&str> {
        let mut names: Vec<&str> = admitted.iter().map(|(name, _)| name.as_str()).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn one_load_per_tenant_and_per_workflow_within_the_places() {
        let queue = LoadQueue::new(2);
        let waiting = [
            ("mallory", "m1"),
            ("mallory", "m2"),
            ("mallory", "m3"),
            ("victim", "v1"),
        ];
        let first = queue.admit(pending(&waiting));
        // Mallory's three loads take one place; victim's gets the other.
        assert_eq!(names(&first), ["m1", "v1"]);
        // Nothing more while both run, even with places asked for again.
        assert!(queue.admit(pending(&waiting)).is_empty());
        // Victim's ended: its place goes to nobody of mallory's, who has one running.
        let (m1, v1): (Vec<_>, Vec<_>) = first.into_iter().partition(|(name, _)| name == "m1");
        drop(v1);
        assert!(
            queue
                .admit(pending(&[("mallory", "m2"), ("mallory", "m3")]))
                .is_empty()
        );
        // A workflow in flight is not loaded twice (its staged and live revisions).
        assert!(queue.admit(pending(&[("other", "m1")])).is_empty());
        drop(m1);
        assert_eq!(names(&queue.admit(pending(&[("mallory", "m2")]))), ["m2"]);
    }

    #[test]
    fn tenants_take_turns_for_a_place_that_frees_up() {
        let queue = LoadQueue::new(1);
        let waiting = [("aaa", "a1"), ("aaa", "a2"), ("zzz", "z1")];
        let mut served = Vec::new();
        for _ in 0..4 {
            let admitted = queue.admit(pending(&waiting));
            assert_eq!(admitted.len(), 1);
            served.push(admitted[0].0.clone());
        }
        // A tenant whose name sorts first does not get every place.
        assert_eq!(served, ["a1", "z1", "a1", "z1"]);
        // Round robin whatever the tenants waiting: after `mmm`, `zzz` then `aaa`.
        let queue = LoadQueue::new(1);
        let three = [("aaa", "a1"), ("mmm", "m1"), ("zzz", "z1")];
        let order: Vec<String> = (0..4)
            .map(|round| {
                let waiting = if round == 1 { &three[1..] } else { &three[..] };
                queue.admit(pending(waiting))[0].0.clone()
            })
            .collect();
        assert_eq!(order, ["a1", "m1", "z1", "a1"]);
    }

    #[test]
    fn a_load_that_compiles_nothing_takes_no_place_but_waits_for_its_workflow() {
        let queue = LoadQueue::new(2);
        let compiling = queue.admit(pending(&[("mallory", "m1"), ("eve", "e1")]));
        assert_eq!(names(&compiling), ["e1", "m1"]);
        assert!(queue.admit(pending(&[("victim", "v1")])).is_empty());
        // Both places taken, by other tenants or by its own: admitted all the same.
        let mut waiting = compiled(&[("victim", "v1"), ("mallory", "m2")]);
        waiting.extend(compiled(&[("victim", "v2")]));
        let cheap = queue.admit(waiting);
        assert_eq!(names(&cheap), ["m2", "v1", "v2"]);
        // Not beside another load of its workflow (in flight, or admitted with it).
        assert!(queue.admit(compiled(&[("mallory", "m1")])).is_empty());
        let mut both = pending(&[("victim", "v3")]);
        both.extend(compiled(&[("victim", "v3")]));
        assert_eq!(names(&queue.admit(both)), ["v3"]);
        // They held no tenant's place: once mallory's compile ends, its next goes.
        drop(compiling);
        assert_eq!(names(&queue.admit(pending(&[("mallory", "m4")]))), ["m4"]);
        drop(cheap);
        assert_eq!(names(&queue.admit(compiled(&[("victim", "v1")]))), ["v1"]);
    }

    #[test]
    fn a_tenant_whose_first_load_waits_for_its_workflow_compiles_its_next() {
        let queue = LoadQueue::new(2);
        // v1's compiling revision waits for its other one, let past the queue; the
        // tenant's next load that compiles takes the place meanwhile.
        let mut waiting = pending(&[("victim", "v1"), ("victim", "v2")]);
        waiting.extend(compiled(&[("victim", "v1")]));
        let admitted = queue.admit(waiting);
        assert_eq!(names(&admitted), ["v1", "v2"]);
    }
}
