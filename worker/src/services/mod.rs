//! Services mode, the worker's side: a worker in its own process.
//!
//! - [`Node`] (`node.rs`) registers the worker in the shared state, heartbeats, and
//!   loads (or drops) the workflows the scheduler places on it.
//! - `serve.rs` is the worker's internal HTTP/2 API: an HTTP function call forwarded
//!   as is, or a workflow run whose reply carries the run record and output regions.
//!   Its contract (header names, the failure body, the frame) and the gateway's client
//!   for it (`RemoteWorker`) are in `faas-invoke`.
//! - `wire.rs` packs regions into that frame and rebuilds them from it.
//! - `metrics.rs` serves the worker's Prometheus gauges (`--metrics-listen`).
//! - `branch.rs` runs fan-out branches on the workflow's other replicas when it spreads
//!   them (it implements the executor's `BranchPeer`); `socket.rs` serves such calls on
//!   a Unix socket, where region memory files pass as descriptors (SCM_RIGHTS) between
//!   workers on one host.
//!
//! Every call carries the internal token; the worker refuses calls without it. The
//! executor (`run`) does not depend on this module: the peers it spreads branches to
//! are handed in with each run.

pub(crate) mod branch;
mod loads;
mod metrics;
mod node;
mod serve;
mod socket;
mod wire;

pub use branch::MAX_INTERNAL_TOKEN_BYTES;
pub use node::{Node, NodeConfig, NodeListeners, RunningNode};
