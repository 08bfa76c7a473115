//! The gateway: the platform's HTTP front door.
//!
//! It accepts HTTP/1.1 and HTTP/2 (cleartext, prior knowledge) on one port and sorts
//! requests into four kinds:
//! - `/healthz`, `/readyz`, `/metrics`: probes and Prometheus metrics;
//! - `/admin/v1/...`: the deploy API ([`admin`]), behind a bearer token;
//! - anything else: an invocation ([`invoke`]): the route table picks the workflow and
//!   function, the scheduler's placement picks the worker, the worker runs it.
//!
//! In Kubernetes mode ([`kubernetes`]) a deploy becomes a `Workflow` resource that the
//! operator turns into the deployment the gateways follow.
//!
//! In services mode, an event for a workflow with no ready replica (its workers scaled
//! to zero) is held by the [`activator`] until one has loaded.
//!
//! With a Redis broker (`faas_store::broker::RedisBroker`), it also consumes the workflows' Redis channel and stream
//! triggers (module `redis`).
//!
//! Architecture invariant: the gateway never runs guest code, and does not link
//! Wasmtime: it reaches workers only through `faas-invoke` (the `Invoke` and
//! `LocalWorker` traits; `faas up` hands it in-process workers). It parses, routes,
//! limits and accounts; only the worker touches Wasmtime.

pub mod activator;
pub mod admin;
mod auth;
pub mod body_budget;
pub mod config;
mod declared;
mod deploy_admission;
mod invoke;
pub mod kubernetes;
mod log_read_rate;
pub mod logs;
mod metrics;
mod redis;
pub mod registry;
mod replica;
mod response;
mod server;
pub mod services;
mod upload;

pub use auth::{Caller, TenantCredential};
pub use config::GatewayConfig;
pub use registry::{DeployOutcome, DeployRequest, Registry, Restored};
pub use server::{Gateway, RunningGateway};
