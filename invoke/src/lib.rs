//! The contract between the gateway and the workers: what one says to the other.
//!
//! - The event and its outcome: [`HttpResponse`], [`TriggerMessage`], [`RunRecord`],
//!   [`OutputRegion`] and [`EventFailure`] (with its [`FailureKind`]).
//! - Loading: [`LoadError`] and the [`FunctionSummary`] of each loaded function; the
//!   [`Component`]s loaded, hashed once and shared ([`ComponentPool`]).
//! - [`Invoke`]: one workflow on one worker, which takes events. The in-process worker
//!   (`faas-worker`) and the client of a worker process ([`RemoteWorker`]) both
//!   implement it, so the gateway holds replicas without knowing where they run.
//! - [`LocalWorker`]: a worker in the gateway's own process (embedded mode), which
//!   loads workflows and takes tenant quotas.
//! - [`wire`]: the internal API's headers and frames, and [`client`], the gateway's
//!   HTTP/2 client to it.
//! - [`Publisher`]: where functions' outbound messages go.
//! - [`metrics`]: Prometheus series per workflow ([`metrics::PerWorkflow`]), which
//!   the gateway and the workers both keep, dropped with their workflow.
//! - [`logs`]: guests' log lines ([`LogLine`]) and the [`LogSink`] workers hand them to.
//!
//! Invariant: this crate links neither Wasmtime nor Redis, so the gateway, which
//! depends on it and not on `faas-worker`, never carries a compiler.

pub mod client;
mod component;
mod failure;
mod load;
pub mod logs;
mod message;
pub mod metrics;
mod record;
mod replica;
pub mod trace;
pub mod wire;

pub use client::{RemoteWorker, RemoteWorkers};
pub use component::{Component, ComponentPool, Components, distinct_bytes};
pub use failure::{EventFailure, FailureKind};
pub use load::{FunctionSummary, LoadError, LoadErrorKind};
pub use logs::{LogLevel, LogLine, LogSink, LogSource, log_excerpt};
pub use message::{BoxFuture, MAX_MESSAGE_BYTES, PublishError, Publisher, TriggerMessage};
pub use record::{MAX_STEP_RECORD_BYTES, RunRecord, RunStatus, StepRecord};
pub use replica::{
    AtMost, BodyError, HttpResponse, InMemory, Invoke, Loaded, LocalWorker, OutputRegion,
    ReplyRoom, RunReply, WorkerQuotas,
};
