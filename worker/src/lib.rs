//! The worker: runs functions as WASI 0.2 components on Wasmtime.
//!
//! - Components are compiled once, ahead of time, and cached on disk by content hash
//!   and engine compatibility ([`cache`]); a cached artifact loads without compiling.
//! - Each function keeps one pre-instantiated component ([`LoadedFunction`]); every
//!   event gets a fresh store and instance, dropped when the event ends, so an idle
//!   function costs no instance at all.
//! - Every instance runs under limits ([`Limits`]): memory, a wall-clock deadline
//!   (epoch interruption) and optionally fuel. A guest that traps, loops or hogs memory
//!   fails its own event with an [`InvokeError`]; nothing else notices.
//!
//! What the gateway and the worker say to each other (events, runs, failures, the
//! internal API) is `faas-invoke`; this crate implements its traits: [`Worker`] is a
//! `LocalWorker`, and a workflow loaded on it an `Invoke` replica. [`services`] is the
//! worker's side of services mode (its node and internal API); the executor (`run`)
//! does not depend on it.
//!
//! Architecture invariant: this is the only crate that touches Wasmtime. The gateway
//! hands it requests; it never parses HTTP routes or workflow files itself.

pub mod cache;
mod compile_sandbox;
mod compile_threads;
pub mod compiler;
pub mod config;
mod engine;
mod error;
mod failure;
mod fair;
mod function;
mod host;
pub mod host_limits;
mod http;
mod limits;
mod linked;
mod lookups;
pub mod memory_budget;
pub mod metrics;
mod outbound;
mod placement;
mod region;
mod replica;
mod run;
mod runtimes;
pub mod services;
mod state;
mod swap;
mod worker;

pub use config::{Limits, SlotReset, WorkerConfig};
pub use error::{InvokeError, StartError};
/// The key-value store lives in `faas-store` with its backends; re-exported so the
/// worker's callers keep naming it `faas_worker::kv`.
pub use faas_store::kv;
pub use failure::GUEST_TEXT_BYTES;
pub use function::{LoadedFunction, LoadedWorkflow};
pub use kv::KeyValueStore;
pub use limits::raise_descriptor_limit;
pub use metrics::GuestMetrics;
pub use region::{MemoryRule, Region, RegionError, RegionOwner};
pub use replica::LocalReplica;
pub use run::{RunError, RunOutcome};
pub use worker::Worker;
