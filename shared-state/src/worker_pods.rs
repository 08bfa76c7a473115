//! Which workers there are, in Kubernetes mode: what the operator sees of the worker
//! pods, not what the workers say of themselves.
//!
//! Workers write their own registry entries (`faas:workers`, `faas:alive:*`), and every
//! worker's Redis user may write every entry: code that escaped one worker's sandbox
//! could register an address of its choosing under another worker's id, or a worker
//! of its own with room for every workflow, or make the other workers look dead or
//! draining, and have their workflows placed on itself and be sent other tenants'
//! events. A Redis user per worker would still let it write entries of new ids.
//!
//! In Kubernetes a worker is its pod, and the API server, not the worker, says what the
//! pod is: its name (the worker's id), IP, UID (its host id), the port its internal API
//! listens on, the capacity its arguments give, whether it is Ready and whether it is
//! being deleted (then it drains). The operator writes that into [`WORKER_PODS`], which
//! the workers' Redis user may read but not write, and in Kubernetes mode every reader
//! ([`SharedState::workers`]) takes the workers from there and ignores the registry;
//! a worker that lies can then only lie about itself, in what it reports it loaded.
//!
//! A process is in Kubernetes mode when it was told so ([`SharedState::requiring_worker_pods`]:
//! the operator, a `--kubernetes` gateway, a worker started with `--worker-pods`) or
//! once the operator has written [`WORKER_PODS`] (its field [`ENFORCED`]).

use crate::records::WorkerInfo;
use crate::state::{SharedState, SharedStateError, WorkerSets, to_json};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// Worker pod name -> [`WorkerPod`], written by the operator only.
pub(crate) const WORKER_PODS: &str = "faas:worker-pods";

/// The field of [`WORKER_PODS`] that says the operator keeps it. No pod is named "".
const ENFORCED: &str = "";

/// The default of a worker's `--worker-capacity`, which a worker pod without the flag
/// has.
pub const DEFAULT_WORKER_CAPACITY: usize = 1000;

/// What the API server says of one worker pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPod {
    /// `status.podIP`.
    pub ip: IpAddr,
    /// The port of its container port named `internal`: where its internal API listens.
    pub port: u16,
    /// `metadata.uid`: its worker's host id.
    pub uid: String,
    /// How many workflows it may hold: its `--worker-capacity`.
    pub capacity: usize,
    /// Its `Ready` condition is true: it takes events.
    pub ready: bool,
    /// It is being deleted: it drains (serves what it holds, takes nothing new).
    pub terminating: bool,
}

impl WorkerPod {
    /// The worker this pod is, as the registry would describe it.
    fn worker(&self, name: &str) -> WorkerInfo {
        WorkerInfo {
            id: name.to_owned(),
            addr: SocketAddr::new(self.ip, self.port).to_string(),
            capacity: self.capacity,
            host: self.uid.clone(),
            // Each pod is a host of its own: no other worker reaches its Unix socket.
            socket: None,
            draining: self.terminating,
        }
    }
}

/// The worker pods as [`WORKER_PODS`] holds them, if they are the workers.
#[derive(Debug, Default)]
pub(crate) struct Vouched {
    pods: Option<BTreeMap<String, String>>,
    /// The operator wrote them (the marker is there).
    recorded: bool,
}

impl Vouched {
    /// From the raw hash (empty when the key does not exist); `required` when this
    /// process is in Kubernetes mode whether or not the operator wrote it yet.
    pub(crate) fn from_hash(mut raw: BTreeMap<String, String>, required: bool) -> Self {
        let recorded = raw.remove(ENFORCED).is_some();
        Self {
            pods: (recorded || required).then_some(raw),
            recorded,
        }
    }

    /// Whether the pods are the workers.
    pub(crate) fn is_enforced(&self) -> bool {
        self.pods.is_some()
    }

    /// The workers, if the pods are them and recorded in full: the Ready pods live, and
    /// the registered ids of no pod dead (so that the scheduler forgets them). `None`
    /// while the operator has not recorded them (the marker is missing), or recorded
    /// them in a form this version does not read (an older one's): then which workers
    /// there are is not known.
    pub(crate) fn workers(&self, registered: Vec<String>) -> Option<WorkerSets> {
        let pods = self.pods.as_ref().filter(|_| self.recorded)?;
        let mut live = Vec::new();
        for (name, json) in pods {
            let pod = serde_json::from_str::<WorkerPod>(json).ok()?;
            if pod.ready {
                live.push(pod.worker(name));
            }
        }
        let dead = registered
            .into_iter()
            .filter(|id| !pods.contains_key(id))
            .collect();
        Some(WorkerSets { live, dead })
    }
}

impl SharedState {
    /// This shared state, in Kubernetes mode: the workers are the worker pods the
    /// operator records, none until it has (see the module docs).
    #[must_use]
    pub fn requiring_worker_pods(mut self) -> Self {
        self.worker_pods_required = true;
        self
    }

    /// Replaces every worker pod with `pods` (the operator's full list), and says the
    /// pods are the workers from now on.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn replace_worker_pods(
        &self,
        pods: &BTreeMap<String, WorkerPod>,
    ) -> Result<(), SharedStateError> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .del(WORKER_PODS)
            .ignore()
            .hset(WORKER_PODS, ENFORCED, "1")
            .ignore();
        for (name, pod) in pods {
            pipe.hset(WORKER_PODS, name, to_json(pod)).ignore();
        }
        pipe.query_async::<()>(&mut self.conn()).await?;
        Ok(())
    }

    /// Whether the worker pods are recorded (a Redis that restarted empty lost them).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn worker_pods_recorded(&self) -> Result<bool, SharedStateError> {
        Ok(self.conn().hexists(WORKER_PODS, ENFORCED).await?)
    }

    /// Records worker pod `name` as it is now.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn put_worker_pod(
        &self,
        name: &str,
        pod: &WorkerPod,
    ) -> Result<(), SharedStateError> {
        let _: i64 = self.conn().hset(WORKER_PODS, name, to_json(pod)).await?;
        Ok(())
    }

    /// Forgets worker pod `name` (deleted, or done): it is no worker any more.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn remove_worker_pod(&self, name: &str) -> Result<(), SharedStateError> {
        if name == ENFORCED {
            return Ok(());
        }
        let _: i64 = self.conn().hdel(WORKER_PODS, name).await?;
        Ok(())
    }
}
