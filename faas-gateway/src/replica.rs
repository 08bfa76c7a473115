//! [`Replica`]: one whole copy of a workflow on one worker, and how a deployment hands
//! an event to one of its replicas. The worker is behind `faas_invoke::Invoke`: a
//! worker in this process (embedded mode) or a worker process reached over its
//! internal HTTP/2 API (services mode); the registry does not tell them apart.

use crate::registry::Deployment;
use bytes::Bytes;
use faas_invoke::{EventFailure, HttpResponse, Invoke, ReplyRoom, RunReply, TriggerMessage};
use faas_scheduler::WorkerId;
use http::Request;
use std::sync::Arc;

/// One whole copy of a workflow on one worker.
#[derive(Clone)]
pub struct Replica {
    /// The worker it runs on.
    pub worker_id: WorkerId,
    /// The workflow loaded on that worker, which takes its events.
    pub target: Arc<dyn Invoke>,
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
        // The failure is built only if no replica answers: a request served on the
        // first replica pays for no formatting.
        let mut failure = None;
        let mut replicas = self.replicas_in_turn().peekable();
        while let Some(replica) = replicas.next() {
            // Only a request that may go on to another replica is copied.
            let attempt = match replicas.peek() {
                Some(_) => copy_request(&request),
                None => std::mem::take(&mut request),
            };
            match replica
                .target
                .call_function(&self.workflow.name, function, attempt)
                .await
            {
                Err(unreached) if unreached.is_unavailable() => failure = Some(unreached),
                outcome => return outcome,
            }
        }
        Err(failure.unwrap_or_else(|| self.no_replica()))
    }

    /// Runs the workflow's steps on a replica, passing the run on to the next replica
    /// while a worker cannot be reached (so no step ran there); its reply is counted
    /// in `room` as it arrives.
    pub(crate) async fn run(
        &self,
        payload: Bytes,
        message: Option<TriggerMessage>,
        room: &mut dyn ReplyRoom,
    ) -> RunReply {
        let mut unreached = None;
        for replica in self.replicas_in_turn() {
            let run = replica
                .target
                .run(&self.workflow.name, payload.clone(), message.clone(), room)
                .await;
            match &run.result {
                Err(failure) if run.record.is_none() && failure.is_unavailable() => {
                    unreached = Some(run);
                }
                _ => return run,
            }
        }
        unreached.unwrap_or_else(|| RunReply::not_run(self.no_replica()))
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
pub(crate) fn copy_request(request: &Request<Bytes>) -> Request<Bytes> {
    let mut copy = Request::new(request.body().clone());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    copy
}
