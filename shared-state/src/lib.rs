//! Services mode: the state the gateway, scheduler and worker processes share in Redis.
//!
//! Workers register and heartbeat; the gateway writes deployments (the parsed
//! workflow, and component bytes stored once per digest); the scheduler writes
//! placements; each worker reports which revision of each workflow placed on it it
//! has loaded, or why it could not. [`SharedState`] has one method per read or write.
//!
//! A deploy is staged beside the live record and switched to only once its workers
//! loaded it, under a short lease on the workflow that fences every write (a gateway
//! whose lease expired writes nothing); the scheduler removes a staged record whose
//! lease is gone.
//!
//! For scaling workers to zero, gateways record when each workflow last had an event
//! and signal demand when an event waits for a worker (`faas:activity`,
//! `faas:demand`).
//!
//! Every process follows this state by reading it again at a short interval, so none
//! depends on a notification that a Redis restart could lose; workers register again
//! with every heartbeat.

mod activity;
mod records;
mod state;
mod worker_pods;

pub use records::{DeploymentRecord, LoadStatus, PlacementRecord, WorkerInfo};
pub use state::{
    DEPLOYMENTS, Promotion, Removal, SharedState, SharedStateError, StoredComponent, WorkerSets,
};
pub use worker_pods::{DEFAULT_WORKER_CAPACITY, WorkerPod};
