//! What the executor asks of another worker that runs some of a fan-out's branches
//! (`spread_branches`). Services mode implements it (`services::branch`, which knows
//! how peers are reached) and hands the peers in with the run, so the executor knows
//! nothing of networking and does not depend on it.

use super::StepRecord;
use crate::region::{Region, RegionOwner};
use faas_invoke::{BoxFuture, EventFailure, TriggerMessage};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// What a peer is asked to run: one branch of a fan-out, in the caller's run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BranchCall {
    /// The workflow (the peer uses its own loaded copy).
    pub workflow: String,
    /// Its tenant: the peer runs the branch only on its copy of that tenant's
    /// workflow, never on another tenant's that took the name since.
    #[serde(default)]
    pub tenant: String,
    /// The caller's run: the regions stay that run's.
    pub run_id: String,
    /// The message that started the run, if any.
    pub message: Option<TriggerMessage>,
    /// The steps of the branch, in order.
    pub segment: Vec<String>,
    /// Which branch, of how many.
    pub branch: u32,
    pub branches: u32,
    /// The revision the caller runs (the peer may hold it staged beside the live one).
    #[serde(default)]
    pub revision: Option<u64>,
    /// What is left of the caller's run, in milliseconds, when it sends the call: the
    /// branch ends by then, and the caller stops waiting for it then.
    #[serde(default)]
    pub remaining_ms: Option<u64>,
}

impl BranchCall {
    /// What is left of the caller's run ([`Self::remaining_ms`]; without it, from a
    /// caller of an older version, the workflow's own timeout applies).
    pub fn remaining(&self) -> Duration {
        self.remaining_ms
            .map_or(Duration::MAX, Duration::from_millis)
    }
}

/// A branch's step records and outputs, as its worker reported them.
pub(crate) type BranchReply = (Vec<StepRecord>, Result<Vec<Region>, EventFailure>);

/// Another worker holding a replica of the same workflow, which may run branches.
pub(crate) trait BranchPeer: Send + Sync {
    /// Its worker id, as step records name it.
    fn id(&self) -> &str;

    /// How regions reach it, as step records show it (`fd` or `network`).
    fn handoff(&self) -> &'static str;

    /// Runs `call` there with `inputs`; the outputs belong to `owner`'s run.
    ///
    /// # Errors
    /// An `unavailable` [`EventFailure`] when the peer could not be asked (then
    /// nothing ran there and the caller runs the branch itself); any other when the
    /// call reached the peer but no reply came back (the branch may have run there,
    /// so it fails).
    fn run_branch(
        &self,
        call: BranchCall,
        inputs: Vec<Region>,
        owner: RegionOwner,
    ) -> BoxFuture<'_, Result<BranchReply, EventFailure>>;
}

/// The peers a run may spread its branches to; empty outside services mode.
pub(crate) type Peers = Arc<[Arc<dyn BranchPeer>]>;
