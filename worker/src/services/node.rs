//! [`Node`]: a worker process in services mode.
//!
//! It heartbeats its registration into the shared state, serves the internal API, and
//! every `sync_interval` loads the revision of each workflow the scheduler placed on
//! it (reporting success or the load error) and drops the workflows no longer placed
//! there, compiled code included.
//!
//! A staged revision (a deploy in progress) is loaded beside the live one and reported
//! apart; it serves only the events that name its revision (the gateway that deployed
//! it, once it switched the live record), and becomes the live one when the live record
//! names it. Until then the live revision serves everything else, so a deploy whose
//! gateway died changes nothing.

use super::branch::{CallHead, Peer, PeerLink, call_inputs};
use super::loads::{LoadQueue, MAX_LOADS, Pending, Ticket};
use super::{metrics, serve, socket};
use crate::function::LoadedWorkflow;
use crate::memory_budget::GuestMemoryClaim;
use crate::run::{BranchPeer, BranchReply, Peers, RunError, owner_of, run_branch};
use crate::worker::Worker;
use faas_invoke::{EventFailure, LoadErrorKind, RemoteWorkers};
use faas_shared_state::{DeploymentRecord, LoadStatus, SharedState, SharedStateError, WorkerInfo};
use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::{AbortHandle, JoinSet};

/// Loaded revisions by workflow name.
type Slots = RwLock<HashMap<String, (Version, Arc<LoadedWorkflow>)>>;

/// Which deploy of a workflow a worker holds: its revision and its digest. The number
/// alone does not say: after Redis lost its state, revisions count from 1 again (the
/// Kubernetes operator deploys every Workflow anew), and a revision loaded before then
/// would go on serving the old code, or failing, in place of the new deploy's.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Version {
    revision: u64,
    digest: String,
}

impl Version {
    fn of(record: &DeploymentRecord) -> Self {
        Self {
            revision: record.revision,
            digest: record.digest.clone(),
        }
    }
}

/// A load running on a task of its own ([`Node::stop_unwanted_loads`]).
struct Loading {
    /// The revision it loads.
    version: Version,
    /// Stops it (and its compile child, dropped with it).
    task: AbortHandle,
    /// The last sync found its revision no longer placed here.
    unwanted: bool,
}

/// How a worker takes part in services mode.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Its id, unique among the workers.
    pub id: String,
    /// `host:port` where the gateway reaches its internal API.
    pub advertise: String,
    /// How many workflows it may hold.
    pub capacity: usize,
    /// The internal token the gateway presents.
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
    /// How long an internal API connection may carry no request before it is closed.
    pub idle_timeout: Duration,
    /// Most internal API connections one client address may hold open.
    pub max_connections_per_client: usize,
}

/// Where a node listens.
pub struct NodeListeners {
    /// The internal API.
    pub internal: TcpListener,
    /// `GET /metrics`, if served.
    pub metrics: Option<TcpListener>,
}

/// A worker taking part in services mode.
pub struct Node {
    worker: Arc<Worker>,
    shared: SharedState,
    config: NodeConfig,
    /// The workflows it serves now, each with the revision loaded.
    loaded: Slots,
    /// Staged revisions loaded, waiting for their deploy to make them live.
    staged: Slots,
    /// The revision whose load failed last, and why, so a bad deploy is reported and
    /// not retried.
    failed: RwLock<HashMap<String, (Version, Refusal)>>,
    /// For workflows that spread their branches: the other workers holding them.
    peers: RwLock<HashMap<String, Arc<[Peer]>>>,
    /// Places for branch calls over Unix sockets waiting for their replies, each on a
    /// blocking thread ([`super::branch::MAX_SOCKET_CALLS`], a share of them a tenant).
    socket_calls: Arc<super::branch::SocketCalls>,
    /// Clients of the other workers.
    clients: RemoteWorkers,
    /// Set when the worker is stopping: it keeps what it holds and takes nothing new.
    draining: AtomicBool,
    /// The loads running, each on a task of its own (`loads.rs`).
    loads: LoadQueue,
    /// The version each of those loads, by workflow, and how to stop it: a load whose
    /// version is no longer placed here (its deploy was given up, or replaced) is
    /// stopped, and its compile child with it, rather than compiling on to
    /// `--compile-timeout-secs` in a place another tenant's load is waiting for.
    loading: Mutex<HashMap<String, Loading>>,
    /// When its last heartbeat reached Redis: it is ready (`GET /readyz`) while that is
    /// within its heartbeat's time to live. In Kubernetes the workers are the Ready
    /// worker pods, so a worker cut off from Redis, or stuck, must stop being Ready.
    last_heartbeat: Mutex<Option<std::time::Instant>>,
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
        shared: SharedState,
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
            shared,
            config,
            loaded: RwLock::default(),
            staged: RwLock::default(),
            failed: RwLock::default(),
            peers: RwLock::default(),
            socket_calls: super::branch::socket_calls(),
            draining: AtomicBool::new(false),
            loads: LoadQueue::new(MAX_LOADS),
            loading: Mutex::default(),
            last_heartbeat: Mutex::default(),
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
            .shared
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
        if let Err(err) = self.shared.deregister(&self.config.id).await {
            tracing::warn!("deregistering failed; the heartbeat will expire: {err}");
        }
        tracing::info!(worker = self.config.id, "drained");
    }

    /// Whether every workflow this worker holds is loaded, at its current revision, on
    /// some other worker the scheduler placed it on (or is no longer deployed). Also
    /// true when no other worker can take anything: then there is nothing to wait for.
    async fn handed_over(&self) -> Result<bool, SharedStateError> {
        let others_alive = self
            .shared
            .workers()
            .await?
            .live
            .iter()
            .any(|info| info.id != self.config.id && !info.draining);
        if !others_alive {
            return Ok(true);
        }
        let placements = self.shared.placements().await?;
        let deployments = self.shared.deployments().await?;
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
                let statuses = self.shared.load_statuses(other).await?;
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

    pub(super) fn idle_timeout(&self) -> Duration {
        self.config.idle_timeout
    }

    pub(super) fn max_connections_per_client(&self) -> usize {
        self.config.max_connections_per_client
    }

    pub(super) fn worker(&self) -> &Arc<Worker> {
        &self.worker
    }

    /// An empty claim on `tenant`'s guest memory here, for the copy of a run's or
    /// branch's outputs sent back: it counts as the guest memory it came from did.
    pub(super) fn reply_claim(&self, tenant: &str) -> GuestMemoryClaim {
        self.worker.guest_memory().claim(Arc::from(tenant))
    }

    /// How many workflows it holds a revision of, live or staged.
    pub(super) fn workflows_loaded(&self) -> usize {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        let staged = self.staged.read().unwrap_or_else(|p| p.into_inner());
        loaded.len()
            + staged
                .keys()
                .filter(|name| !loaded.contains_key(*name))
                .count()
    }

    /// Whether it is draining.
    pub(super) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// The other workers that run some of workflow `name`'s fan-out branches.
    /// Its branches run there at `revision`, the revision the caller runs.
    pub(super) fn peers(&self, name: &str, revision: u64) -> Peers {
        let peers = self.peers.read().unwrap_or_else(|p| p.into_inner());
        let Some(peers) = peers.get(name) else {
            return Arc::from([]);
        };
        peers
            .iter()
            .map(|peer| {
                Arc::new(Peer {
                    revision: Some(revision),
                    ..peer.clone()
                }) as Arc<dyn BranchPeer>
            })
            .collect()
    }

    /// Runs the branch a peer asked for (`head`, with the descriptors and inline bytes
    /// of its inputs) and returns its step records and outputs.
    pub(super) async fn branch(
        &self,
        mut head: CallHead,
        fds: Vec<OwnedFd>,
        inline: bytes::Bytes,
    ) -> BranchReply {
        // The caller's own workflow, at the caller's revision: a name another tenant
        // took since (the caller's run outlives its removal, up to its deadline), or
        // another version, would run the branch on steps that are not the run's, and
        // hand them its inputs.
        let served = self
            .serving(&head.call.workflow, head.call.revision)
            .filter(|(revision, workflow)| {
                workflow.tenant() == head.call.tenant
                    && head.call.revision.is_none_or(|wanted| wanted == *revision)
            });
        let Some((_, workflow)) = served else {
            let message = format!(
                "workflow `{}` of tenant `{}` (revision {:?}) is not loaded on worker `{}`",
                head.call.workflow, head.call.tenant, head.call.revision, self.config.id
            );
            return (Vec::new(), Err(EventFailure::unavailable(message)));
        };
        let owner = owner_of(&workflow, &head.call.run_id);
        let received = received(&self.worker);
        let inputs = match call_inputs(&mut head, fds, inline, &owner, &received) {
            Ok(inputs) => inputs,
            Err(err) => {
                let failure = EventFailure::from(&RunError::Output(err.to_string()));
                return (Vec::new(), Err(failure));
            }
        };
        let (steps, result) = run_branch(self.worker.clone(), workflow, head.call, inputs).await;
        (steps, result.map_err(|err| EventFailure::from(&err)))
    }

    /// The version of workflow `name` that serves an event: its staged revision when
    /// the event names that `revision`, else the live one, else (a workflow deployed
    /// for the first time, whose worker has not seen it go live yet) the staged one.
    /// Returns the revision with it.
    pub(super) fn serving(
        &self,
        name: &str,
        revision: Option<u64>,
    ) -> Option<(u64, Arc<LoadedWorkflow>)> {
        let latest = |slots: &Slots| {
            let slots = slots.read().unwrap_or_else(|p| p.into_inner());
            let (version, workflow) = slots.get(name)?;
            Some((version.revision, workflow.clone()))
        };
        revision
            .and_then(|revision| {
                let staged = self.staged.read().unwrap_or_else(|p| p.into_inner());
                let (version, workflow) = staged.get(name)?;
                (version.revision == revision).then(|| (revision, workflow.clone()))
            })
            .or_else(|| latest(&self.loaded))
            .or_else(|| latest(&self.staged))
    }

    async fn heartbeat(self: Arc<Self>) {
        // What a former process of this id reported loaded is not loaded here (a
        // container restarted in its pod keeps the pod's name): gone before the first
        // heartbeat, and reported again by the syncs as this process loads.
        if let Err(err) = self.shared.forget_worker(&self.config.id).await {
            tracing::warn!("forgetting a former process's load reports: {err}");
        }
        let mut ticker = tokio::time::interval(self.config.heartbeat_ttl / 3);
        loop {
            ticker.tick().await;
            match self
                .shared
                .heartbeat(&self.info(), self.config.heartbeat_ttl)
                .await
            {
                Ok(()) => {
                    *self
                        .last_heartbeat
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
                }
                Err(err) => tracing::warn!("heartbeat failed: {err}"),
            }
        }
    }

    /// Whether the worker is ready to take events: its last heartbeat reached Redis
    /// within its time to live (`GET /readyz` of its metrics listener).
    pub(super) fn ready(&self) -> bool {
        self.last_heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < self.config.heartbeat_ttl)
    }

    async fn sync(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(self.config.sync_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if let Err(err) = self.sync_once().await {
                err.log_retry("following placements");
            }
        }
    }

    async fn sync_once(self: &Arc<Self>) -> Result<(), SharedStateError> {
        // A draining worker keeps serving what it holds, as it is, until it leaves.
        if self.draining.load(Ordering::SeqCst) {
            return Ok(());
        }
        let placements = self.shared.placements().await?;
        let deployments = self.shared.deployments().await?;
        let staged = self.shared.staged_deployments().await?;
        let reported = self.shared.load_statuses(&self.config.id).await?;
        let reported_staged = self.shared.staged_load_statuses(&self.config.id).await?;
        let workers = self.shared.workers().await?.live;
        let placed_here = |name: &String| {
            placements
                .get(name)
                .is_some_and(|placement| placement.workers.contains(&self.config.id))
        };
        let mine: BTreeMap<&String, &DeploymentRecord> = deployments
            .iter()
            .filter(|(name, _)| placed_here(name))
            .collect();
        // Staged revisions newer than the live one: older ones are leftovers.
        let mine_staged: BTreeMap<&String, &DeploymentRecord> = staged
            .iter()
            .filter(|(name, record)| {
                placed_here(name)
                    && mine
                        .get(name)
                        .is_none_or(|live| live.revision < record.revision)
            })
            .collect();
        self.staged
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|name, (version, _)| {
                mine_staged
                    .get(name)
                    .is_some_and(|record| Version::of(record) == *version)
                    || mine
                        .get(name)
                        .is_some_and(|live| Version::of(live) == *version)
            });
        for name in reported_staged
            .keys()
            .filter(|name| !mine_staged.contains_key(name))
        {
            self.shared
                .report_staged_load(&self.config.id, name, None)
                .await?;
        }
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
            self.shared.report_load(&self.config.id, name, None).await?;
        }
        let mut peers = HashMap::new();
        // A workflow's staged revision spreads its branches as the live one would.
        for (name, record) in mine.iter().chain(&mine_staged) {
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
        // What is loaded (or failed) already is reported here; the rest is loaded on
        // tasks of their own, as places free up, and each reports when done.
        let mut pending = Vec::new();
        let all = mine.iter().map(|entry| (entry, false));
        for ((name, record), staged) in all.chain(mine_staged.iter().map(|entry| (entry, true))) {
            let Some(status) = self.settled(record, staged) else {
                pending.push(Pending {
                    workflow: (*name).clone(),
                    tenant: record.workflow.tenant.clone(),
                    compiles: !self
                        .worker
                        .compiles_nothing(&record.workflow, &record.components),
                    item: ((*record).clone(), staged),
                });
                continue;
            };
            let reports = if staged { &reported_staged } else { &reported };
            if reports.get(*name) != Some(&status) {
                self.report(name, staged, &status).await?;
            }
        }
        self.stop_unwanted_loads(&mine, &mine_staged);
        for ((record, staged), ticket) in self.loads.admit(pending) {
            let (name, version) = (record.workflow.name.clone(), Version::of(&record));
            let node = self.clone();
            // Held while the task is made, so that its removal below comes after this
            // insert however soon the task ends.
            let mut loading = self.loading_lock();
            let task = tokio::spawn(async move {
                let (name, version) = (record.workflow.name.clone(), Version::of(&record));
                node.clone().load_and_report(record, staged, ticket).await;
                let mut loading = node.loading_lock();
                if loading
                    .get(&name)
                    .is_some_and(|held| held.version == version)
                {
                    loading.remove(&name);
                }
            });
            let task = task.abort_handle();
            loading.insert(
                name,
                Loading {
                    version,
                    task,
                    unwanted: false,
                },
            );
        }
        Ok(())
    }

    /// Stops the loads of versions neither `live` nor `staged` names, at the second
    /// sync in a row that finds it so.
    fn stop_unwanted_loads(
        &self,
        live: &BTreeMap<&String, &DeploymentRecord>,
        staged: &BTreeMap<&String, &DeploymentRecord>,
    ) {
        let wanted = |name: &String, version: &Version| {
            [live, staged].iter().any(|records| {
                records
                    .get(name)
                    .is_some_and(|r| Version::of(r) == *version)
            })
        };
        self.loading_lock().retain(|name, load| {
            // Seen unwanted twice in a row: a promotion between this sync's reads of
            // the live and the staged records leaves a wanted revision in neither once.
            let again = std::mem::replace(&mut load.unwanted, !wanted(name, &load.version));
            if !(again && load.unwanted) {
                return true;
            }
            let version = &load.version;
            load.task.abort();
            tracing::info!(
                workflow = name,
                revision = version.revision,
                "stopped loading a revision no longer placed here"
            );
            false
        });
    }

    fn loading_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Loading>> {
        // Each change is one insert or remove: a poisoned lock still holds a sound map.
        self.loading.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reports `status` of workflow `name` (its staged revision when `staged`).
    async fn report(
        &self,
        name: &str,
        staged: bool,
        status: &LoadStatus,
    ) -> Result<(), SharedStateError> {
        if staged {
            self.shared
                .report_staged_load(&self.config.id, name, Some(status))
                .await
        } else {
            self.shared
                .report_load(&self.config.id, name, Some(status))
                .await
        }
    }

    /// Loads `record`'s revision and reports how it stands, holding `ticket`'s place
    /// until done. A report that fails is made again by the next sync, which finds the
    /// revision settled and the report missing.
    async fn load_and_report(
        self: Arc<Self>,
        record: DeploymentRecord,
        staged: bool,
        ticket: Ticket,
    ) {
        let Some(status) = self.load(&record, staged).await else {
            return;
        };
        // A draining worker takes nothing new, and may have deregistered meanwhile:
        // a report now would make its keys again.
        if self.draining.load(Ordering::SeqCst) {
            return;
        }
        let name = &record.workflow.name;
        if let Err(err) = self.report(name, staged, &status).await {
            tracing::warn!(workflow = name, "reporting a load failed, retrying: {err}");
        }
        // Held until reported, so that a later revision's load cannot report before
        // this one and be overwritten by it.
        drop(ticket);
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
                    _ => PeerLink::Network(self.clients.get(&info.id, &info.addr)),
                };
                Peer {
                    id: info.id.clone(),
                    link,
                    token: token.clone(),
                    revision: None,
                    received: received(&self.worker),
                    socket_calls: self.socket_calls.clone(),
                }
            })
            .collect()
    }

    /// How `record`'s revision stands (in the staged slots when `staged`) if it is
    /// loaded or failed already, without loading anything; `None` if it is still to
    /// load. A live revision that was loaded staged moves over without loading again.
    fn settled(&self, record: &DeploymentRecord, staged: bool) -> Option<LoadStatus> {
        let name = &record.workflow.name;
        let revision = record.revision;
        let version = Version::of(record);
        let slots = if staged { &self.staged } else { &self.loaded };
        if let Some(workflow) = slot(slots, name, &version) {
            return Some(ready(revision, &workflow));
        }
        let promoted = (!staged)
            .then(|| {
                let mut slots = self.staged.write().unwrap_or_else(|p| p.into_inner());
                let held = slots.get(name).is_some_and(|(held, _)| *held == version);
                held.then(|| slots.remove(name)).flatten()
            })
            .flatten();
        if let Some((version, workflow)) = promoted {
            tracing::info!(workflow = name, revision, "staged revision now live");
            let status = ready(revision, &workflow);
            self.loaded
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.clone(), (version, workflow));
            return Some(status);
        }
        let failed = self.failed.read().unwrap_or_else(|p| p.into_inner());
        failed
            .get(name)
            .filter(|(failed, _)| *failed == version)
            .map(|(_, refusal)| refused(revision, refusal))
    }

    /// Loads `record`'s revision (into the staged slots when `staged`) unless it is
    /// [`Self::settled`] already, and says how it stands. `None` when Redis failed while
    /// its components were fetched: nothing is known of the revision yet, so nothing
    /// is reported, and the next sync tries again.
    async fn load(&self, record: &DeploymentRecord, staged: bool) -> Option<LoadStatus> {
        if let Some(status) = self.settled(record, staged) {
            return Some(status);
        }
        let name = &record.workflow.name;
        let revision = record.revision;
        let version = Version::of(record);
        let slots = if staged { &self.staged } else { &self.loaded };
        let result = match self.fetch_and_load(record).await {
            Err(LoadFailure::Unreachable(error)) => {
                tracing::warn!(
                    workflow = name,
                    revision,
                    "loading waits for Redis: {error}"
                );
                return None;
            }
            Err(LoadFailure::Failed(error)) => Err(error),
            Ok(workflow) => Ok(workflow),
        };
        Some(match result {
            Ok(workflow) => {
                tracing::info!(workflow = name, revision, staged, "loaded");
                let status = ready(revision, &workflow);
                slots
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.clone(), (version, Arc::new(workflow)));
                status
            }
            Err(refusal) => {
                let error = &refusal.message;
                tracing::warn!(workflow = name, revision, "loading failed: {error}");
                let status = refused(revision, &refusal);
                self.failed
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.clone(), (version, refusal));
                status
            }
        })
    }

    async fn fetch_and_load(
        &self,
        record: &DeploymentRecord,
    ) -> Result<LoadedWorkflow, LoadFailure> {
        let mut components = BTreeMap::new();
        for (function, digest) in &record.components {
            let bytes = self.shared.component(digest).await.map_err(|err| {
                let error = format!("function `{function}`: {err}");
                match err {
                    SharedStateError::Redis(_) => LoadFailure::Unreachable(error),
                    _ => LoadFailure::Failed(Refusal {
                        message: error,
                        kind: LoadErrorKind::Component,
                    }),
                }
            })?;
            components.insert(function.clone(), faas_invoke::Component::new(bytes));
        }
        self.worker
            .load_workflow(&record.workflow, components)
            .await
            .map_err(|err| {
                LoadFailure::Failed(Refusal {
                    message: err.to_string(),
                    kind: err.kind(),
                })
            })
    }
}

/// Why a revision did not load.
enum LoadFailure {
    /// Redis failed while its components were fetched: nothing is wrong with the
    /// revision (a restart, a network blip), so it is tried again, not reported.
    Unreachable(String),
    /// It cannot load (a component missing or refused): reported, and not tried again.
    Failed(Refusal),
}

/// Why a revision cannot load, as its [`LoadStatus`] reports it.
#[derive(Debug, Clone)]
struct Refusal {
    message: String,
    kind: LoadErrorKind,
}

/// What `slots` hold for workflow `name` at `version`.
fn slot(slots: &Slots, name: &str, version: &Version) -> Option<Arc<LoadedWorkflow>> {
    let slots = slots.read().unwrap_or_else(|p| p.into_inner());
    slots
        .get(name)
        .filter(|(loaded, _)| loaded == version)
        .map(|(_, workflow)| workflow.clone())
}

/// The status of a revision that failed to load with `refusal`.
fn refused(revision: u64, refusal: &Refusal) -> LoadStatus {
    LoadStatus {
        revision,
        error: Some(refusal.message.clone()),
        error_kind: Some(refusal.kind),
        functions: Vec::new(),
    }
}

fn ready(revision: u64, workflow: &LoadedWorkflow) -> LoadStatus {
    LoadStatus {
        revision,
        error: None,
        error_kind: None,
        functions: workflow.summaries(),
    }
}

/// What regions another worker process hands `worker` count against there.
fn received(worker: &Worker) -> super::wire::Received {
    super::wire::Received {
        files: worker.region_limits().files,
        memory: worker.guest_memory().clone(),
    }
}
