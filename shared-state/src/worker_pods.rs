//! Which registered workers are genuine, in Kubernetes mode.
//!
//! Workers write their own registry entries (`faas:workers`), and every worker's Redis
//! user may write every entry: code that escaped one worker's sandbox could register
//! an address of its choosing under another worker's id, or as a worker of its own,
//! and be sent other tenants' events. A Redis user per worker would not stop it from
//! writing a new id.
//!
//! In Kubernetes a worker is its pod: its id is the pod's name, its address the pod's
//! IP and its host id the pod's UID (the chart sets all three from the downward API),
//! and the API server, not the worker, says which pod has which IP. The operator
//! writes what it sees of the worker pods into [`WORKER_PODS`], which the workers'
//! Redis user may read but not write; once it has, every reader of the registry
//! ([`SharedState::workers`]) takes only the entries that match their pod. A worker
//! that lies can then only be itself.

use crate::records::WorkerInfo;
use crate::state::{SharedState, SharedStateError, to_json};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// Worker pod name -> [`WorkerPod`], written by the operator only.
pub(crate) const WORKER_PODS: &str = "faas:worker-pods";

/// The field of [`WORKER_PODS`] that says its entries are complete and to be enforced.
/// No pod is named "" (nor any worker id a reader could be asked about).
const ENFORCED: &str = "";

/// What the API server says of one worker pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPod {
    /// `status.podIP`: the only address its worker may be reached at.
    pub ip: IpAddr,
    /// `metadata.uid`: its worker's host id.
    pub uid: String,
}

/// The worker pods as [`WORKER_PODS`] holds them, if the operator enforces them.
#[derive(Debug, Default)]
pub(crate) struct Vouched {
    pods: Option<BTreeMap<String, String>>,
}

impl Vouched {
    /// From the raw hash (empty when the key does not exist).
    pub(crate) fn from_hash(mut raw: BTreeMap<String, String>) -> Self {
        let enforced = raw.remove(ENFORCED).is_some();
        Self {
            pods: enforced.then_some(raw),
        }
    }

    /// Whether `worker` may be taken as registered: always without enforcement,
    /// otherwise only if its id is a worker pod's name, its address that pod's IP and
    /// its host that pod's UID.
    pub(crate) fn admits(&self, worker: &WorkerInfo) -> bool {
        let Some(pods) = &self.pods else {
            return true;
        };
        let Some(pod) = pods
            .get(&worker.id)
            .and_then(|json| serde_json::from_str::<WorkerPod>(json).ok())
        else {
            return false;
        };
        let ip_matches = worker
            .addr
            .parse::<SocketAddr>()
            .is_ok_and(|addr| addr.ip() == pod.ip);
        ip_matches && worker.host == pod.uid
    }
}

impl SharedState {
    /// Replaces every worker pod with `pods` (the operator's full list) and enforces
    /// them from now on: registry entries that match none are ignored.
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

    /// Records worker pod `name` (new, or its IP given).
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

    /// Forgets worker pod `name` (deleted): its worker is no longer admitted.
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
