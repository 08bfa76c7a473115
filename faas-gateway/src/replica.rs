//! [`Replica`]: one whole copy of a workflow on one worker, and the two ways of
//! handing it an event: a direct call to a worker in this process, or the worker's
//! internal HTTP/2 API in services mode. Callers see one result type either way.

use crate::registry::Deployment;
use bytes::Bytes;
use faas_scheduler::WorkerId;
use faas_worker::remote::{EventFailure, RemoteWorker};
use faas_worker::{HttpResponse, LoadedWorkflow, Region, RunRecord, TriggerMessage, Worker};
use http::Request;
use http_body_util::Full;
use std::sync::Arc;

/// One whole copy of a workflow on one worker.
#[derive(Clone)]
pub struct Replica {
    /// The worker it runs on.
    pub worker_id: WorkerId,
    /// How events reach it.
    pub target: ReplicaTarget,
}

/// Where a replica's worker is.
#[derive(Clone)]
pub enum ReplicaTarget {
    /// A worker in this process (embedded mode), with the workflow loaded on it.
    Local {
        /// The worker.
        worker: Arc<Worker>,
        /// The workflow's functions, compiled and linked on that worker.
        loaded: Arc<LoadedWorkflow>,
    },
    /// A worker process reached over HTTP/2 (services mode).
    Remote(Arc<RemoteWorker>),
}

/// What a run came to: its record (none when no worker took it) and its outputs.
pub(crate) struct RunResult {
    /// The run step by step, when a worker ran it.
    pub record: Option<RunRecord>,
    /// The final step's output regions, or why the run failed.
    pub result: Result<Vec<Region>, EventFailure>,
}

impl Replica {
    /// Calls HTTP function `function` of `workflow` with `request` in a fresh instance.
    ///
    /// # Errors
    /// Why the event failed (the function's failure, or no worker reachable).
    pub(crate) async fn call_function(
        &self,
        workflow: &str,
        function: &str,
        request: Request<Bytes>,
    ) -> Result<HttpResponse, EventFailure> {
        match &self.target {
            ReplicaTarget::Local { worker, loaded } => worker
                .handle_http(loaded, function, request.map(Full::new))
                .await
                .map_err(|err| EventFailure::from(&err)),
            ReplicaTarget::Remote(remote) => {
                remote.call_function(workflow, function, request).await
            }
        }
    }

    /// Runs `workflow`'s steps from the entry step on `payload`, started by `message`
    /// when a Redis trigger started it.
    pub(crate) async fn run(
        &self,
        workflow: &str,
        payload: Bytes,
        message: Option<TriggerMessage>,
    ) -> RunResult {
        match &self.target {
            ReplicaTarget::Local { worker, loaded } => {
                let input = loaded.entry_input(&payload[..]);
                let outcome = match message {
                    Some(message) => {
                        worker
                            .run_workflow_for_message(loaded, input, message)
                            .await
                    }
                    None => worker.run_workflow(loaded, input).await,
                };
                RunResult {
                    record: Some(outcome.record),
                    result: outcome.result.map_err(|err| EventFailure::from(&err)),
                }
            }
            ReplicaTarget::Remote(remote) => {
                match remote.run(workflow, payload, message.as_ref()).await {
                    Ok((record, result)) => RunResult {
                        record: Some(record),
                        result,
                    },
                    Err(failure) => RunResult {
                        record: None,
                        result: Err(failure),
                    },
                }
            }
        }
    }
}

impl Deployment {
    /// Calls HTTP function `function` on a replica. A replica whose worker cannot be
    /// reached (so nothing ran there) passes the event to the next one.
    ///
    /// # Errors
    /// The function's failure, or `unavailable` when no replica could take the event.
    pub(crate) async fn call_function(
        &self,
        function: &str,
        mut request: Request<Bytes>,
    ) -> Result<HttpResponse, EventFailure> {
        let mut failure = self.no_replica();
        let mut replicas = self.replicas_in_turn().peekable();
        while let Some(replica) = replicas.next() {
            // Only a request that may go on to another replica is copied.
            let attempt = match replicas.peek() {
                Some(_) => copy_request(&request),
                None => std::mem::take(&mut request),
            };
            match replica
                .call_function(&self.workflow.name, function, attempt)
                .await
            {
                Err(unreached) if unreached.is_unavailable() => failure = unreached,
                outcome => return outcome,
            }
        }
        Err(failure)
    }

    /// Runs the workflow's steps on a replica, passing the run on to the next replica
    /// while a worker cannot be reached (so no step ran there).
    pub(crate) async fn run(&self, payload: Bytes, message: Option<TriggerMessage>) -> RunResult {
        let mut unreached = RunResult {
            record: None,
            result: Err(self.no_replica()),
        };
        for replica in self.replicas_in_turn() {
            let run = replica
                .run(&self.workflow.name, payload.clone(), message.clone())
                .await;
            match &run.result {
                Err(failure) if run.record.is_none() && failure.is_unavailable() => {
                    unreached = run;
                }
                _ => return run,
            }
        }
        unreached
    }

    /// The failure of an event that found no replica ready to take it.
    fn no_replica(&self) -> EventFailure {
        EventFailure::unavailable(format!(
            "workflow `{}` has no replica ready (its worker is starting or was lost)",
            self.workflow.name
        ))
    }
}

/// A copy of `request` to send again (its extensions are not copied).
fn copy_request(request: &Request<Bytes>) -> Request<Bytes> {
    let mut copy = Request::new(request.body().clone());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    copy
}
