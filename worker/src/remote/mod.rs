//! Services mode: a worker in its own process, and the gateway's way to reach it.
//!
//! - [`Node`] (`node.rs`) registers the worker in the shared state, heartbeats, and
//!   loads (or drops) the workflows the scheduler places on it.
//! - `serve.rs` is the worker's internal HTTP/2 API: an HTTP function call forwarded
//!   as is, or a workflow run whose reply carries the run record and output regions.
//! - [`RemoteWorker`] (`client.rs`) is the gateway's client for that API.
//! - `wire.rs` holds what both sides must agree on: header names, the failure body, and
//!   the frame that carries regions (run replies and branch calls).
//! - `metrics.rs` serves the worker's Prometheus gauges (`--metrics-listen`).
//! - `branch.rs` runs fan-out branches on the workflow's other replicas when it spreads
//!   them; `socket.rs` serves such calls on a Unix socket, where region memory files
//!   pass as descriptors (SCM_RIGHTS) between workers on one host.
//!
//! Every call carries the cluster token; the worker refuses calls without it.

pub(crate) mod branch;
mod client;
mod metrics;
mod node;
mod serve;
mod socket;
mod wire;

pub use branch::MAX_CLUSTER_TOKEN_BYTES;
pub use client::{RemoteWorker, RemoteWorkers};
pub use node::{Node, NodeConfig, NodeListeners, RunningNode};
pub use wire::EventFailure;
