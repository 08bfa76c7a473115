//! [`Invoke`]: one workflow loaded on one worker, taking events, wherever that worker
//! runs; [`LocalWorker`]: a worker in the gateway's own process.

use crate::{
    BoxFuture, Components, EventFailure, FunctionSummary, LoadError, RunRecord, TriggerMessage,
};
use bytes::Bytes;
use faas_workflow::Workflow;
use http_body_util::combinators::UnsyncBoxBody;
use std::sync::Arc;

/// Errors a function's response body can fail with while it streams.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// The response of an HTTP function; its body may still be streaming from the guest.
pub type HttpResponse = http::Response<UnsyncBoxBody<Bytes, BodyError>>;

/// One output region of a run, as the gateway needs it: its schema type and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRegion {
    /// The Karmem type (or `bytes`, `text`, `json`) the step declared.
    pub schema_type: String,
    /// The value.
    pub bytes: Bytes,
}

/// What a run came to: its record (none when no worker took it) and its outputs.
#[derive(Debug)]
pub struct RunReply {
    /// The run step by step, when a worker ran it.
    pub record: Option<RunRecord>,
    /// The final step's output regions, or why the run failed.
    pub result: Result<Vec<OutputRegion>, EventFailure>,
}

impl RunReply {
    /// A run no worker took: no record, and why.
    pub fn not_run(failure: EventFailure) -> Self {
        Self {
            record: None,
            result: Err(failure),
        }
    }
}

/// Where a run's reply is counted while it is read: a worker process's reply is read
/// whole before anything looks at it, and the tenant's steps decide its size, so the
/// reader counts it as it arrives (the gateway, in the body budget of the client that
/// will be sent the output) and stops at the first part that does not fit.
pub trait ReplyRoom: Send {
    /// Makes room for the reply's first `bytes`.
    ///
    /// # Errors
    /// Why there is none: the reply is read no further, and the run fails with it.
    fn grow_to(&mut self, bytes: u64) -> Result<(), EventFailure>;
}

/// Room without bounds, for a reply that is in this process's memory already (a run
/// on a worker in this process, whose output its tenant's guest memory counts).
#[derive(Debug, Default)]
pub struct InMemory;

impl ReplyRoom for InMemory {
    fn grow_to(&mut self, _bytes: u64) -> Result<(), EventFailure> {
        Ok(())
    }
}

/// Room for a reply of at most `.0` bytes, counted in no budget: for a reply whose
/// size the reader bounds by what it asked for (a message's run, whose output is not
/// sent, only its record). A larger one fails the run as a bad reply: it ran.
#[derive(Debug, Clone, Copy)]
pub struct AtMost(pub u64);

impl ReplyRoom for AtMost {
    fn grow_to(&mut self, bytes: u64) -> Result<(), EventFailure> {
        if bytes <= self.0 {
            return Ok(());
        }
        Err(EventFailure::new(
            crate::FailureKind::BadReply,
            502,
            format!(
                "the worker's reply to the run is larger than the {} bytes it may have \
                 (the run ran)",
                self.0
            ),
        ))
    }
}

/// One whole copy of a workflow on one worker, which takes its events: a worker in
/// this process (`faas-worker`) or a worker process reached over the internal API
/// ([`crate::RemoteWorker`]).
pub trait Invoke: Send + Sync {
    /// Calls HTTP function `function` of `workflow` with `request` in a fresh instance;
    /// the response body may still be streaming.
    ///
    /// # Errors
    /// Why the event failed: the function's failure, or
    /// [`crate::FailureKind::Unavailable`] when the worker could not take it (then
    /// nothing ran, and another replica may).
    fn call_function<'a>(
        &'a self,
        workflow: &'a str,
        function: &'a str,
        request: http::Request<Bytes>,
    ) -> BoxFuture<'a, Result<HttpResponse, EventFailure>>;

    /// Runs `workflow`'s steps from the entry step on `payload`, started by `message`
    /// when a Redis trigger started it, its reply counted in `room` as it is read. A
    /// reply without a record means no step ran.
    fn run<'a>(
        &'a self,
        workflow: &'a str,
        payload: Bytes,
        message: Option<TriggerMessage>,
        room: &'a mut dyn ReplyRoom,
    ) -> BoxFuture<'a, RunReply>;

    /// The runtime whose threads this replica's steps run on, when its worker is in
    /// this process; `None` for a worker reached over the network. A task that
    /// mostly waits on runs (a pub/sub message's) is best spawned there: each step's
    /// end then wakes it on the same thread, not another.
    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        None
    }
}

/// A workflow loaded on a [`LocalWorker`].
pub struct Loaded {
    /// The loaded workflow on that worker, ready for events.
    pub replica: Arc<dyn Invoke>,
    /// Each function as loaded, sorted by name.
    pub functions: Vec<FunctionSummary>,
}

/// The per-tenant limits a worker enforces; `None` is the worker's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerQuotas {
    /// Instances the tenant may run at once on this worker.
    pub max_instances: Option<u32>,
    /// Key-value keys the tenant may keep.
    pub kv_max_keys: Option<u64>,
    /// Bytes of key-value keys and values the tenant may keep.
    pub kv_max_bytes: Option<u64>,
    /// MiB of guest memory the tenant's instances may hold at once on this worker (0
    /// for no share of its own).
    pub guest_memory_mb: Option<u64>,
}

/// A worker in the gateway's own process (embedded mode): the registry loads
/// workflows on it and hands it the tenants' quotas.
pub trait LocalWorker: Send + Sync {
    /// Compiles and links every function of `workflow` from `components` (by
    /// function name).
    ///
    /// # Errors
    /// The [`LoadError`] naming the function that could not be loaded.
    fn load<'a>(
        self: Arc<Self>,
        workflow: &'a Workflow,
        components: Components,
    ) -> BoxFuture<'a, Result<Loaded, LoadError>>;

    /// Compiles the components of `workflow` (by function name) into the worker's
    /// compiled-code cache without linking them, so that a [`Self::load`] of them
    /// after it is quick: what a deploy does before it takes the deploy lock.
    ///
    /// # Errors
    /// The [`LoadError`] naming the function that could not be compiled.
    fn compile_ahead<'a>(
        self: Arc<Self>,
        workflow: &'a Workflow,
        components: &'a Components,
    ) -> BoxFuture<'a, Result<(), LoadError>>;

    /// Instances alive right now.
    fn active_instances(&self) -> usize;

    /// Sets `tenant`'s quotas (the defaults where `None`).
    fn set_tenant_quotas(&self, tenant: &str, quotas: &WorkerQuotas);

    /// Applies every tenant's quotas, the whole list as the tenant store has it: a
    /// tenant given quotas before and missing now gets the defaults.
    fn apply_tenant_quotas(&self, tenants: &[(String, WorkerQuotas)]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message's run ran whatever became of its reply: one past its bound fails it
    /// as a bad reply, which is not "not started" (that would run it again).
    #[test]
    fn a_reply_past_its_bound_is_a_bad_reply_of_a_run_that_ran() {
        let mut room = AtMost(1 << 20);
        assert!(room.grow_to(1 << 20).is_ok());
        let failure = room.grow_to((1 << 20) + 1).unwrap_err();
        assert_eq!(failure.kind, crate::FailureKind::BadReply);
        assert_eq!(failure.status, 502);
        assert!(!failure.is_unavailable());
    }
}
