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
//! Architecture invariant: this is the only crate that touches Wasmtime. The gateway
//! hands it requests; it never parses HTTP routes or workflow files itself.

pub mod cache;
pub mod config;
mod engine;
mod error;
mod failure;
mod fair;
mod function;
mod host;
mod http;
mod limits;
pub mod messaging;
mod outbound;
mod region;
pub mod remote;
mod run;
mod state;
mod worker;

pub use config::{Limits, WorkerConfig};
pub use error::{InvokeError, LoadError, StartError};
/// The key-value store lives in `faas-store` with its backends; re-exported so the
/// worker's callers keep naming it `faas_worker::kv`.
pub use faas_store::kv;
pub use failure::GUEST_TEXT_BYTES;
pub use function::{LoadedFunction, LoadedWorkflow};
pub use http::{BodyError, HttpResponse};
pub use kv::KeyValueStore;
pub use limits::raise_descriptor_limit;
pub use messaging::{PublishError, Publisher, TriggerMessage};
pub use region::{MemoryRule, Region, RegionError, RegionOwner};
pub use run::{RunError, RunOutcome, RunRecord, RunStatus, StepRecord};
pub use worker::Worker;
