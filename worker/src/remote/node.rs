//! [`Node`]: a worker process in services mode.
//!
//! It heartbeats its registration into the shared state, serves the internal API, and
//! every `sync_interval` loads the revision of each workflow the scheduler placed on
//! it (reporting success or the load error) and drops the workflows no longer placed
//! there, compiled code included.

use super::branch::{BranchReply, CallHead, Peer, PeerLink, call_inputs};
use super::client::RemoteWorkers;
use super::wire::EventFailure;
use super::{metrics, serve, socket};
use crate::function::LoadedWorkflow;
use crate::run::{RunError, owner_of, run_branch};
use crate::worker::Worker;
use faas_cluster::{Cluster, ClusterError, DeploymentRecord, LoadStatus, WorkerInfo};
use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Identifies this machine; workers with the same host id pass regions as memory
    /// file descriptors over their Unix sockets.
    pub host_id: String,
    /// Where its Unix socket for descriptor passing is bound, if anywhere.
    pub socket: Option<std::path::PathBuf>,
}

/// Where a node listens.
pub struct NodeListeners {
    /// The internal API.
    pub internal: TcpListener,
    /// `GET /metrics`, if served.
    pub metrics: Option<TcpListener>,
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
    /// For workflows that spread their branches: the other workers holding them.
    peers: RwLock<HashMap<String, Arc<[Peer]>>>,
    /// Clients of the other workers.
    clients: RemoteWorkers,
    /// Set when the worker is stopping: it keeps what it holds and takes nothing new.
    draining: AtomicBool,
}

/// A started node: its tasks run until it is drained or dropped.
pub struct RunningNode {
    node: Arc<Node>,
    _tasks: JoinSet<()>,
}

impl RunningNode {
    /// Stops the worker without failing an event: marks it draining (the scheduler
    /// places its workflows elsewhere), keeps serving until every workflow it holds is
    /// loaded on another worker and the gateways have had time to notice, waits for
    /// its events in flight, then deregisters. Gives up waiting after `grace`.
    pub async fn drain(self, grace: Duration) {
        self.node.drain(grace).await;
    }
}

impl Node {
    /// Starts serving on `listener`, heartbeating and following placements. Dropping
    /// the returned node stops it at once; [`RunningNode::drain`] stops it gently.
    ///
    /// # Errors
    /// If the Unix socket cannot be bound.
    pub fn start(
        worker: Arc<Worker>,
        cluster: Cluster,
        config: NodeConfig,
        listeners: NodeListeners,
    ) -> std::io::Result<RunningNode> {
        let socket = match &config.socket {
            Some(path) => Some(socket::bind(path)?),
            None => None,
        };
        let node = Arc::new(Self {
            clients: RemoteWorkers::new(config.token.clone()),
            worker,
            cluster,
            config,
            loaded: RwLock::default(),
            failed: RwLock::default(),
            peers: RwLock::default(),
            draining: AtomicBool::new(false),
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(serve::serve(listeners.internal, node.clone()));
        if let Some(listener) = listeners.metrics {
            tasks.spawn(metrics::serve(listener, node.clone()));
        }
        if let Some(socket) = socket {
            tasks.spawn(socket::serve(socket, node.clone()));
        }
        tasks.spawn(node.clone().heartbeat());
        tasks.spawn(node.clone().sync());
        Ok(RunningNode {
            node,
            _tasks: tasks,
        })
    }

    /// See [`RunningNode::drain`].
    async fn drain(&self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        self.draining.store(true, Ordering::SeqCst);
        if let Err(err) = self
            .cluster
            .heartbeat(&self.info(), self.config.heartbeat_ttl)
            .await
        {
            tracing::warn!("announcing the drain failed: {err}");
        }
        tracing::info!(worker = self.config.id, "draining");
        let pause = self.config.sync_interval;
        while !self.handed_over().await.unwrap_or(false) {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!("workflows not placed elsewhere within {grace:?}; leaving anyway");
                break;
            }
            tokio::time::sleep(pause).await;
        }
        // The gateways switch to the new replicas at their next read of the state.
        tokio::time::sleep(pause * 4).await;
        while self.worker.active_instances() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if let Err(err) = self.cluster.deregister(&self.config.id).await {
            tracing::warn!("deregistering failed; the heartbeat will expire: {err}");
        }
        tracing::info!(worker = self.config.id, "drained");
    }

    /// Whether every workflow this worker holds is loaded, at its current revision, on
    /// some other worker the scheduler placed it on (or is no longer deployed). Also
    /// true when no other worker can take anything: then there is nothing to wait for.
    async fn handed_over(&self) -> Result<bool, ClusterError> {
        let others_alive = self
            .cluster
            .workers()
            .await?
            .live
            .iter()
            .any(|info| info.id != self.config.id && !info.draining);
        if !others_alive {
            return Ok(true);
        }
        let placements = self.cluster.placements().await?;
        let deployments = self.cluster.deployments().await?;
        let held: Vec<String> = {
            let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
            loaded.keys().cloned().collect()
        };
        for name in held {
            let Some(record) = deployments.get(&name) else {
                continue;
            };
            let others: Vec<&String> = placements
                .get(&name)
                .map(|placement| {
                    placement
                        .workers
                        .iter()
                        .filter(|id| **id != self.config.id)
                        .collect()
                })
                .unwrap_or_default();
            let mut ready = false;
            for other in others {
                let statuses = self.cluster.load_statuses(other).await?;
                ready |= statuses
                    .get(&name)
                    .is_some_and(|status| status.is_ready(record.revision));
            }
            if !ready {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// This worker as it registers.
    fn info(&self) -> WorkerInfo {
        WorkerInfo {
            id: self.config.id.clone(),
            addr: self.config.advertise.clone(),
            capacity: self.config.capacity,
            host: self.config.host_id.clone(),
            socket: self
                .config
                .socket
                .as_ref()
                .map(|path| path.display().to_string()),
            draining: self.draining.load(Ordering::SeqCst),
        }
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

    /// How many workflows it holds.
    pub(super) fn workflows_loaded(&self) -> usize {
        self.loaded.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether it is draining.
    pub(super) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// The other workers that run some of workflow `name`'s fan-out branches.
    pub(super) fn peers(&self, name: &str) -> Arc<[Peer]> {
        let peers = self.peers.read().unwrap_or_else(|p| p.into_inner());
        peers.get(name).cloned().unwrap_or_else(|| Arc::from([]))
    }

    /// Runs the branch a peer asked for (`head`, with the descriptors and inline bytes
    /// of its inputs) and returns its step records and outputs.
    pub(super) async fn branch(
        &self,
        mut head: CallHead,
        fds: Vec<OwnedFd>,
        inline: &[u8],
    ) -> BranchReply {
        let Some(workflow) = self.loaded(&head.call.workflow) else {
            let message = format!(
                "workflow `{}` is not loaded on worker `{}`",
                head.call.workflow, self.config.id
            );
            return (Vec::new(), Err(EventFailure::unavailable(message)));
        };
        let owner = owner_of(&workflow, &head.call.run_id);
        let inputs = match call_inputs(&mut head, fds, inline, &owner) {
            Ok(inputs) => inputs,
            Err(err) => {
                let failure = EventFailure::from(&RunError::Output(err.to_string()));
                return (Vec::new(), Err(failure));
            }
        };
        let (steps, result) = run_branch(self.worker.clone(), workflow, head.call, inputs).await;
        (steps, result.map_err(|err| EventFailure::from(&err)))
    }

    /// The version of workflow `name` this worker serves, if any.
    pub(super) fn loaded(&self, name: &str) -> Option<Arc<LoadedWorkflow>> {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        loaded.get(name).map(|(_, workflow)| workflow.clone())
    }

    async fn heartbeat(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(self.config.heartbeat_ttl / 3);
        loop {
            ticker.tick().await;
            if let Err(err) = self
                .cluster
                .heartbeat(&self.info(), self.config.heartbeat_ttl)
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
        // A draining worker keeps serving what it holds, as it is, until it leaves.
        if self.draining.load(Ordering::SeqCst) {
            return Ok(());
        }
        let placements = self.cluster.placements().await?;
        let deployments = self.cluster.deployments().await?;
        let reported = self.cluster.load_statuses(&self.config.id).await?;
        let workers = self.cluster.workers().await?.live;
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
        let mut peers = HashMap::new();
        for (name, record) in &mine {
            if record.workflow.settings.spread_branches
                && let Some(placement) = placements.get(*name)
            {
                peers.insert(
                    (*name).clone(),
                    self.peers_among(&placement.workers, &workers),
                );
            }
        }
        *self.peers.write().unwrap_or_else(|p| p.into_inner()) = peers;
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

    /// The workers of `placed` other than this one that are alive, each reached by
    /// descriptor passing when on this host and over the network otherwise.
    fn peers_among(&self, placed: &[String], live: &[WorkerInfo]) -> Arc<[Peer]> {
        let token: Arc<str> = self.config.token.as_str().into();
        placed
            .iter()
            .filter(|id| **id != self.config.id)
            .filter_map(|id| live.iter().find(|info| info.id == *id))
            .map(|info| {
                let link = match &info.socket {
                    Some(path) if info.host == self.config.host_id => PeerLink::Socket(path.into()),
                    _ => PeerLink::Network(self.clients.get(info)),
                };
                Peer {
                    id: info.id.clone(),
                    link,
                    token: token.clone(),
                }
            })
            .collect()
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
