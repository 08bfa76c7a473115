//! The scheduler process of services mode: the [`Planner`] run against the shared
//! state in Redis.
//!
//! Every `interval` it reads the registered workers and the deployments, drops the
//! workers whose heartbeat expired (their workflows are placed again on the others),
//! places every deployment that lacks replicas, and writes back the placements that
//! changed. Placements are desired state: a deployment that fits nowhere now is
//! placed as soon as a worker with room registers. A staged version (a deploy in
//! progress) is placed like a live one, so its workers load it; a staged version whose
//! deploy lost its lease (the gateway died) is removed.

use crate::metrics::PlacementMetrics;
use crate::{Planner, WorkerId, WorkerSpec, WorkflowKey};
use faas_shared_state::{DeploymentRecord, PlacementRecord, SharedState, SharedStateError};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How often the scheduler deletes the components no deployment names any more.
const COLLECT_EVERY: Duration = Duration::from_secs(10);

/// Runs placement against the shared state `shared` until the task is dropped, riding out Redis
/// outages (a failed round is retried at the next tick), counting into `metrics`.
/// Components that no deployment names and that were stored more than
/// `component_ttl` ago are deleted from Redis.
pub async fn run(
    shared: SharedState,
    interval: Duration,
    component_ttl: Duration,
    metrics: PlacementMetrics,
) {
    let mut rounds = Rounds::new(component_ttl, metrics);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        rounds.run_once(&shared).await;
    }
}

/// Placement rounds and the collection of unnamed components, as [`run`] does them at
/// each tick; the Kubernetes operator drives the same rounds at its own ticks.
pub(crate) struct Rounds {
    scheduler: Scheduler,
    collected: tokio::time::Instant,
    component_ttl: Duration,
    metrics: PlacementMetrics,
}

impl Rounds {
    /// Rounds that delete the components no deployment names once `component_ttl` old,
    /// counting into `metrics`.
    pub(crate) fn new(component_ttl: Duration, metrics: PlacementMetrics) -> Self {
        Self {
            scheduler: Scheduler::default(),
            collected: tokio::time::Instant::now(),
            component_ttl,
            metrics,
        }
    }

    /// One placement round, then a collection if one is due; failures are logged and
    /// retried at the next call (Redis outages are ridden out).
    pub(crate) async fn run_once(&mut self, shared: &SharedState) {
        let round = self.scheduler.round(shared, &self.metrics).await;
        self.metrics.round(round.is_ok());
        if let Err(err) = round {
            err.log_retry("a placement round");
        }
        if self.collected.elapsed() >= COLLECT_EVERY.min(self.component_ttl) {
            self.collected = tokio::time::Instant::now();
            match shared.collect_components(self.component_ttl).await {
                Ok(deleted) if !deleted.is_empty() => {
                    self.metrics.components_deleted(deleted.len());
                    tracing::info!(?deleted, "deleted components no deployment names");
                }
                Ok(_) => {}
                Err(err) => tracing::warn!("collecting components failed: {err}"),
            }
        }
    }
}

/// The planner and what it last wrote.
#[derive(Default)]
struct Scheduler {
    planner: Planner,
    /// Whether placements already in Redis were read back (once, at start).
    seeded: bool,
    /// The workflows the planner holds, by name.
    placed: BTreeMap<String, WorkflowKey>,
    /// Workflows that fit nowhere at the last round, so each is logged once.
    unplaced: BTreeSet<String>,
}

impl Scheduler {
    async fn round(
        &mut self,
        shared: &SharedState,
        metrics: &PlacementMetrics,
    ) -> Result<(), SharedStateError> {
        let mut workers = shared.workers().await?;
        // A draining worker keeps serving until its workflows run elsewhere, but takes
        // nothing: for placement it is gone.
        workers.live.retain(|info| !info.draining);
        let live: BTreeSet<WorkerId> = workers
            .live
            .iter()
            .map(|info| WorkerId(info.id.clone()))
            .collect();
        let gone: Vec<WorkerId> = self
            .planner
            .worker_ids()
            .filter(|id| !live.contains(*id))
            .cloned()
            .collect();
        metrics.workers_lost(gone.len());
        for id in gone {
            let unplaced = self.planner.remove_worker(&id);
            tracing::warn!(worker = %id, ?unplaced, "worker left or is draining; re-placing its workflows");
        }
        shared.forget_workers(&workers.dead).await?;
        for info in &workers.live {
            self.planner.add_worker(WorkerSpec {
                id: WorkerId(info.id.clone()),
                capacity: info.capacity,
            });
        }
        let abandoned = shared.drop_abandoned_stages().await?;
        if !abandoned.is_empty() {
            tracing::warn!(
                ?abandoned,
                "removed staged versions whose deploy was abandoned"
            );
        }
        // The staged versions first: a promotion moves a version from staged to live
        // in one step, so read in this order every version is in one of the two. Read
        // live first, a first version promoted between the reads was in neither, and
        // the round removed its placement (its worker unloaded it) until the next.
        let staged = shared.staged_deployments().await?;
        let mut deployments = shared.deployments().await?;
        // A staged version is placed with its own replica count (same name, same tenant).
        deployments.extend(staged);
        let current = shared.placements().await?;
        if !self.seeded {
            self.seed(&deployments, &current);
        }
        self.place(&deployments);
        let desired: BTreeMap<String, PlacementRecord> = self
            .placed
            .iter()
            .filter_map(|(name, key)| {
                let workers = self.planner.replicas_of(key);
                (!workers.is_empty()).then(|| {
                    let record = PlacementRecord {
                        tenant: key.tenant.clone(),
                        workers: workers.iter().map(|id| id.0.clone()).collect(),
                    };
                    (name.clone(), record)
                })
            })
            .collect();
        let changed: BTreeMap<String, PlacementRecord> = desired
            .iter()
            .filter(|(name, record)| current.get(*name) != Some(*record))
            .map(|(name, record)| (name.clone(), record.clone()))
            .collect();
        let removed: Vec<String> = current
            .keys()
            .filter(|name| !desired.contains_key(*name))
            .cloned()
            .collect();
        if !changed.is_empty() || !removed.is_empty() {
            for (name, record) in &changed {
                tracing::info!(workflow = name, workers = ?record.workers, "placed");
            }
            shared.write_placements(&changed, &removed).await?;
        }
        metrics.placement(workers.live.len(), desired.len(), self.unplaced.len());
        Ok(())
    }

    /// Takes over the placements a previous scheduler wrote, so a restart moves nothing.
    fn seed(
        &mut self,
        deployments: &BTreeMap<String, DeploymentRecord>,
        current: &BTreeMap<String, PlacementRecord>,
    ) {
        for (name, placement) in current {
            if let Some(record) = deployments.get(name) {
                let key = key_of(record);
                let workers = placement.workers.iter().cloned().map(WorkerId).collect();
                self.planner.assign(&key, workers);
                self.placed.insert(name.clone(), key);
            }
        }
        self.seeded = true;
    }

    /// Places every deployment (keeping replicas already placed) and forgets removed ones:
    /// those whose name is gone, and those whose name another tenant took since (one
    /// removed it and another deployed it between two rounds), which would otherwise
    /// hold their workers' room for good.
    fn place(&mut self, deployments: &BTreeMap<String, DeploymentRecord>) {
        let removed: Vec<String> = self
            .placed
            .iter()
            .filter(|(name, key)| {
                deployments
                    .get(*name)
                    .is_none_or(|record| key_of(record) != **key)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in removed {
            if let Some(key) = self.placed.remove(&name) {
                self.planner.remove(&key);
            }
        }
        for (name, record) in deployments {
            let key = key_of(record);
            let replicas = record.workflow.settings.replicas as usize;
            match self.planner.place_replicas(&key, replicas) {
                Ok(_) => {
                    self.unplaced.remove(name);
                    self.placed.insert(name.clone(), key);
                }
                Err(err) => {
                    if self.unplaced.insert(name.clone()) {
                        tracing::warn!(workflow = name, "cannot place yet: {err}");
                    }
                }
            }
        }
    }
}

fn key_of(record: &DeploymentRecord) -> WorkflowKey {
    WorkflowKey {
        tenant: record.workflow.tenant.clone(),
        name: record.workflow.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tenant: &str, name: &str) -> DeploymentRecord {
        let manifest = format!(
            "name = \"{name}\"\ntenant = \"{tenant}\"\n\n[functions.f]\ncomponent = \"f.wasm\"\n\n\
             [[triggers.http]]\nroute = \"/{name}\"\nfunction = \"f\"\n"
        );
        DeploymentRecord {
            workflow: faas_workflow::Workflow::parse("workflow.toml", &manifest).unwrap(),
            digest: format!("{tenant}-{name}"),
            revision: 1,
            deployed_at: 0,
            components: BTreeMap::new(),
        }
    }

    #[test]
    fn a_name_another_tenant_took_between_two_rounds_gives_its_workers_room_back() {
        // The former owner's placement was kept, keyed by the bare name: every such
        // takeover left a workflow on its workers for good, until none had room.
        let mut scheduler = Scheduler::default();
        scheduler.planner.add_worker(WorkerSpec {
            id: WorkerId("w1".into()),
            capacity: 1,
        });
        let victim = record("victim", "shop");
        scheduler.place(&BTreeMap::from([("shop".to_owned(), victim.clone())]));
        assert_eq!(scheduler.planner.replicas_of(&key_of(&victim)).len(), 1);
        let taker = record("mallory", "shop");
        scheduler.place(&BTreeMap::from([("shop".to_owned(), taker.clone())]));
        assert!(scheduler.planner.replicas_of(&key_of(&victim)).is_empty());
        assert_eq!(scheduler.planner.replicas_of(&key_of(&taker)).len(), 1);
        assert!(scheduler.unplaced.is_empty(), "{:?}", scheduler.unplaced);
    }
}
