//! The worker's internal HTTP/2 API: the gateway forwards each event here.
//!
//! A request names its workflow in a header; `x-faas-call: http` runs an HTTP
//! function on it as it came, `x-faas-call: run` runs the workflow's steps on its body,
//! and `x-faas-call: branch` runs one fan-out branch for another worker (`branch.rs`).
//! Platform failures come back with the `x-faas-failure` header and an
//! [`EventFailure`] body, so the gateway tells them from a function's own response.
//!
//! A client address holds at most `max_connections_per_client` connections (more are
//! closed as soon as they are accepted), and a connection that carried no request for
//! `idle_timeout` is closed (HTTP/2 GOAWAY; the gateway's pool then reconnects); both
//! through `faas-connections`, as on the gateway's public port.

use super::branch::{CallHead, reply_frame};
use super::node::Node;
use crate::memory_budget::GuestMemoryClaim;
use bytes::Bytes;
use faas_connections::{Activity, Admission, ConnectionLimits, Timeouts, Tracked, drive};
use faas_invoke::wire::{self, split_frame};
use faas_invoke::{BodyError, EventFailure, FailureKind, HttpResponse};
use faas_invoke::{TriggerMessage, client};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tokio::net::{TcpListener, TcpStream};

/// Serves the internal API on `listener` until the task is dropped.
pub(super) async fn serve(listener: TcpListener, node: Arc<Node>) {
    let admission = Admission::new(ConnectionLimits {
        per_client: node.max_connections_per_client(),
        // The cap per client is what guards the internal API: only gateways and peer
        // workers are meant to reach it.
        total: usize::MAX,
        idle_timeout: node.idle_timeout(),
        // None: a gateway reads each event's answer as its own client does, and the
        // connection carries every tenant's events. A stream its client stopped
        // reading waits in that stream's window alone, until the gateway, which cuts
        // that client off, resets it.
        send_timeout: None,
        // Gateways' and workers' pods may share a /64: each address counts.
        ipv6_client_prefix: 128,
    });
    loop {
        let (stream, slot) = admission.accept(&listener, |_| {}).await;
        let _ = stream.set_nodelay(true);
        let node = node.clone();
        tokio::spawn(async move {
            let _slot = slot;
            serve_connection(stream, node).await;
        });
    }
}

/// Serves one connection until the client closes it or it stays idle too long.
async fn serve_connection(stream: TcpStream, node: Arc<Node>) {
    let timeouts = Timeouts {
        idle: node.idle_timeout(),
        send: None,
    };
    let activity = Activity::for_timeouts(timeouts);
    let service = {
        let activity = activity.clone();
        service_fn(move |request| {
            let (node, busy) = (node.clone(), activity.busy());
            async move {
                let response = handle(&node, request).await;
                // Busy until the response body is sent to its end (or dropped).
                let response = response.map(|body| busy.track(body).boxed_unsync());
                Ok::<_, std::convert::Infallible>(response)
            }
        })
    };
    // Pinged like the gateway pings a worker: a gateway gone with events in flight
    // ends them here too, and gives their instance slots back.
    let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(client::KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(client::KEEP_ALIVE_TIMEOUT)
        .max_header_list_size(client::MAX_HEADER_LIST_BYTES)
        .max_concurrent_streams(client::MAX_STREAMS)
        .initial_stream_window_size(client::STREAM_WINDOW_BYTES)
        .initial_connection_window_size(client::CONNECTION_WINDOW_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    // The task is dropped when the worker stops: no stop signal of its own.
    drive(connection, &activity, timeouts, std::future::pending()).await;
}

async fn handle(node: &Node, request: Request<Incoming>) -> HttpResponse {
    use tracing::Instrument as _;
    // The worker's side of the gateway's hand-over: the run (or function call) below is
    // its child, in the trace the gateway's `traceparent` names.
    let span = tracing::info_span!(
        "worker",
        otel.kind = "server",
        worker = node.id(),
        call = header(request.headers(), wire::CALL).unwrap_or_default(),
    );
    faas_invoke::trace::continue_from(&span, request.headers());
    match dispatch(node, request).instrument(span).await {
        Ok(response) => response,
        Err(failure) => failure_response(&failure),
    }
}

async fn dispatch(node: &Node, request: Request<Incoming>) -> Result<HttpResponse, EventFailure> {
    let headers = request.headers();
    let presented = header(headers, wire::TOKEN).unwrap_or_default();
    if !bool::from(presented.as_bytes().ct_eq(node.token().as_bytes())) {
        return Err(refused(
            401,
            FailureKind::Unauthorized,
            "missing or wrong internal token",
        ));
    }
    let workflow_name = header(headers, wire::WORKFLOW)
        .unwrap_or_default()
        .to_owned();
    let revision = header(headers, wire::REVISION).and_then(|value| value.parse().ok());
    let Some((revision, workflow)) = node.serving(&workflow_name, revision) else {
        // The reply may reach the workflow's tenant (after the gateway gives up
        // sending it again), so it names no worker: the platform's log does.
        tracing::debug!(
            workflow = workflow_name,
            worker = node.id(),
            "workflow not loaded here"
        );
        return Err(not_loaded(&workflow_name));
    };
    // The gateway's view of who owns the name may be a sync behind: another tenant's
    // workflow that took it here gets none of the old owner's events.
    if let Some(tenant) = header(headers, wire::TENANT)
        && tenant != workflow.tenant()
    {
        tracing::debug!(
            workflow = workflow_name,
            worker = node.id(),
            "the event is for another tenant's workflow of this name"
        );
        return Err(not_loaded(&workflow_name));
    }
    let call = header(headers, wire::CALL).unwrap_or_default().to_owned();
    let function = header(headers, wire::FUNCTION)
        .unwrap_or_default()
        .to_owned();
    let message = match header(headers, wire::MESSAGE) {
        None => None,
        Some(json) => Some(serde_json::from_str::<TriggerMessage>(json).map_err(|err| {
            refused(400, FailureKind::BadRequest, &format!("bad message: {err}"))
        })?),
    };
    let (mut parts, body) = request.into_parts();
    // The gateway already read the body within its limits: it arrives whole.
    let body = body
        .collect()
        .await
        .map_err(|err| {
            refused(
                400,
                FailureKind::BadBody,
                &format!("reading the body: {err}"),
            )
        })?
        .to_bytes();
    match call.as_str() {
        "http" => {
            for name in [
                wire::TOKEN,
                wire::WORKFLOW,
                wire::FUNCTION,
                wire::CALL,
                wire::REVISION,
                wire::TENANT,
            ] {
                parts.headers.remove(name);
            }
            // The URI names this worker; the function sees what the client asked for,
            // as in embedded mode. A caller that says nothing of it (a gateway of an
            // earlier version, during an upgrade) keeps its request as it sent it.
            if let Some(authority) = parts.headers.remove(wire::AUTHORITY) {
                parts.uri = parts
                    .uri
                    .path_and_query()
                    .cloned()
                    .map_or_else(|| http::Uri::from_static("/"), http::Uri::from);
                parts.headers.insert(http::header::HOST, authority);
            }
            let request = Request::from_parts(parts, Full::new(body));
            let mut response = node
                .worker()
                .handle_http(&workflow, &function, request)
                .await
                .map_err(|err| EventFailure::from(&err))?;
            // Only the platform marks failures; a function cannot pass for one.
            response.headers_mut().remove(wire::FAILURE);
            Ok(response)
        }
        "run" => {
            let input = workflow.entry_input(body);
            let peers = node.peers(&workflow_name, revision);
            let for_message = message.is_some();
            let mut outcome = node
                .worker()
                .run_with_peers(&workflow, input, message, peers)
                .await;
            if for_message {
                // Nobody is answered with a message's run's output: it is not sent.
                outcome.result = outcome.result.map(|_| Vec::new());
            }
            let mut claim = node.reply_claim(workflow.tenant());
            let reply = super::wire::encode_run(outcome, &mut claim);
            Ok(Response::new(holding(full(reply), claim)))
        }
        "branch" => {
            let (head, inline) = split_frame::<CallHead>(&body)
                .map_err(|err| refused(400, FailureKind::BadRequest, &err.to_string()))?;
            let mut claim = node.reply_claim(&head.call.tenant);
            let (steps, result) = node.branch(head, Vec::new(), body.slice_ref(inline)).await;
            let (reply, _) = reply_frame(steps, result, false, &mut claim);
            Ok(Response::new(holding(full(reply), claim)))
        }
        other => Err(refused(
            400,
            FailureKind::BadRequest,
            &format!("unknown call `{other}`"),
        )),
    }
}

/// What the gateway is told of an event for a workflow this worker does not serve: it
/// may pass the event on to another replica.
fn not_loaded(workflow_name: &str) -> EventFailure {
    EventFailure::unavailable(format!(
        "workflow `{workflow_name}` is not loaded on the worker the event was sent to"
    ))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn refused(status: u16, kind: FailureKind, message: &str) -> EventFailure {
    EventFailure::new(kind, status, message)
}

fn failure_response(failure: &EventFailure) -> HttpResponse {
    let body = serde_json::to_vec(failure).expect("a failure serializes");
    Response::builder()
        .status(StatusCode::from_u16(failure.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(wire::FAILURE, "1")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(full(body))
        .expect("static response parts are valid")
}

/// `body`, keeping `claim` (on the guest memory its bytes count in) until the
/// connection has taken it all or it is dropped. `Tracked` keeps the body's length,
/// which the gateway reads the reply by.
fn holding(
    body: UnsyncBoxBody<Bytes, BodyError>,
    claim: GuestMemoryClaim,
) -> UnsyncBoxBody<Bytes, BodyError> {
    Tracked::new(body, claim).boxed_unsync()
}

fn full(bytes: impl Into<Bytes>) -> UnsyncBoxBody<Bytes, BodyError> {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_budget::GuestMemory;

    /// A reply holding its claim keeps its length, which the gateway claims and
    /// allocates the reply by before reading it; without it, the reply was read by
    /// doubling a buffer, holding up to twice its size.
    #[test]
    fn a_reply_holding_its_claim_keeps_its_length_and_gives_the_claim_back() {
        let memory = Arc::new(GuestMemory::new(faas_budget::BudgetLimits {
            total: 1 << 20,
            per_holder: 1 << 20,
        }));
        let mut claim = memory.claim(Arc::from("t"));
        claim.grow_to(1000).unwrap();
        let body = holding(full(vec![7; 1000]), claim);
        assert_eq!(hyper::body::Body::size_hint(&body).exact(), Some(1000));
        assert_eq!(memory.held(), 1000);
        drop(body);
        assert_eq!(memory.held(), 0);
    }
}
