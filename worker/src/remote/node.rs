//! [`Node`]: a worker process in services mode.
//!
//! It heartbeats its registration into the shared state, serves the internal API, and
//! every `sync_interval` loads the revision of each workflow the scheduler placed on
//! it (reporting success or the load error) and drops the workflows no longer placed
//! there, compiled code included.

use super::serve;
use crate::function::LoadedWorkflow;
use crate::worker::Worker;
use faas_cluster::{Cluster, ClusterError, DeploymentRecord, LoadStatus, WorkerInfo};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// How a worker takes part in the cluster.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Its id, unique in the cluster.
    pub id: String,
    /// `host:port` where the gateway reaches its internal API.
    pub advertise: String,
    /// How many workflows it may hold.
    pub capacity: usize,
    /// The cluster token the gateway presents.
    pub token: String,
    /// How long its registration lives without a heartbeat; it heartbeats at a third.
    pub heartbeat_ttl: Duration,
    /// How often it looks for placement changes.
    pub sync_interval: Duration,
}

/// A worker taking part in the cluster.
pub struct Node {
    worker: Arc<Worker>,
    cluster: Cluster,
    config: NodeConfig,
    /// The workflows it serves now, each with the revision loaded.
    loaded: RwLock<HashMap<String, (u64, Arc<LoadedWorkflow>)>>,
    /// The revision whose load failed last, and why, so a bad deploy is reported and
    /// not retried.
    failed: RwLock<HashMap<String, (u64, String)>>,
}

impl Node {
    /// Starts serving on `listener`, heartbeating and following placements. The
    /// returned set holds the node's tasks: dropping it stops the node.
    pub fn start(
        worker: Arc<Worker>,
        cluster: Cluster,
        config: NodeConfig,
        listener: TcpListener,
    ) -> JoinSet<()> {
        let node = Arc::new(Self {
            worker,
            cluster,
            config,
            loaded: RwLock::default(),
            failed: RwLock::default(),
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(serve::serve(listener, node.clone()));
        tasks.spawn(node.clone().heartbeat());
        tasks.spawn(node.sync());
        tasks
    }

    pub(super) fn id(&self) -> &str {
        &self.config.id
    }

    pub(super) fn token(&self) -> &str {
        &self.config.token
    }

    pub(super) fn worker(&self) -> &Arc<Worker> {
        &self.worker
    }

    /// The version of workflow `name` this worker serves, if any.
    pub(super) fn loaded(&self, name: &str) -> Option<Arc<LoadedWorkflow>> {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        loaded.get(name).map(|(_, workflow)| workflow.clone())
    }

    async fn heartbeat(self: Arc<Self>) {
        let info = WorkerInfo {
            id: self.config.id.clone(),
            addr: self.config.advertise.clone(),
            capacity: self.config.capacity,
        };
        let mut ticker = tokio::time::interval(self.config.heartbeat_ttl / 3);
        loop {
            ticker.tick().await;
            if let Err(err) = self
                .cluster
                .heartbeat(&info, self.config.heartbeat_ttl)
                .await
            {
                tracing::warn!("heartbeat failed: {err}");
            }
        }
    }

    async fn sync(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(self.config.sync_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if let Err(err) = self.sync_once().await {
                tracing::warn!("following placements failed, retrying: {err}");
            }
        }
    }

    async fn sync_once(&self) -> Result<(), ClusterError> {
        let placements = self.cluster.placements().await?;
        let deployments = self.cluster.deployments().await?;
        let reported = self.cluster.load_statuses(&self.config.id).await?;
        let mine: BTreeMap<&String, &DeploymentRecord> = deployments
            .iter()
            .filter(|(name, _)| {
                placements
                    .get(*name)
                    .is_some_and(|placement| placement.workers.contains(&self.config.id))
            })
            .collect();
        let dropped: Vec<String> = {
            let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
            loaded
                .keys()
                .filter(|name| !mine.contains_key(name))
                .cloned()
                .collect()
        };
        for name in dropped {
            self.loaded
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&name);
            tracing::info!(workflow = name, "dropped: no longer placed here");
        }
        for name in reported.keys().filter(|name| !mine.contains_key(name)) {
            self.cluster
                .report_load(&self.config.id, name, None)
                .await?;
        }
        for (name, record) in mine {
            let status = self.load(record).await;
            if reported.get(name) != Some(&status) {
                self.cluster
                    .report_load(&self.config.id, name, Some(&status))
                    .await?;
            }
        }
        Ok(())
    }

    /// Loads `record`'s revision unless it is loaded or failed already, and says how
    /// it stands.
    async fn load(&self, record: &DeploymentRecord) -> LoadStatus {
        let name = &record.workflow.name;
        let revision = record.revision;
        if let Some((loaded, workflow)) = self
            .loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .filter(|(loaded, _)| *loaded == revision)
        {
            return ready(*loaded, workflow);
        }
        let failed = self
            .failed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .filter(|(failed, _)| *failed == revision)
            .map(|(_, error)| error.clone());
        let retried = failed.is_some();
        let result = match failed {
            Some(error) => Err(error),
            None => self.fetch_and_load(record).await,
        };
        match result {
            Ok(workflow) => {
                tracing::info!(workflow = name, revision, "loaded");
                let status = ready(revision, &workflow);
                self.loaded
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.clone(), (revision, Arc::new(workflow)));
                status
            }
            Err(error) => {
                if !retried {
                    tracing::warn!(workflow = name, revision, "loading failed: {error}");
                }
                self.failed
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.clone(), (revision, error.clone()));
                LoadStatus {
                    revision,
                    error: Some(error),
                    functions: Vec::new(),
                }
            }
        }
    }

    async fn fetch_and_load(&self, record: &DeploymentRecord) -> Result<LoadedWorkflow, String> {
        let mut components = BTreeMap::new();
        for (function, digest) in &record.components {
            let bytes = self
                .cluster
                .component(digest)
                .await
                .map_err(|err| format!("function `{function}`: {err}"))?;
            components.insert(function.clone(), bytes);
        }
        self.worker
            .load_workflow(&record.workflow, components)
            .await
            .map_err(|err| err.to_string())
    }
}

fn ready(revision: u64, workflow: &LoadedWorkflow) -> LoadStatus {
    LoadStatus {
        revision,
        error: None,
        functions: workflow.summaries(),
    }
}
