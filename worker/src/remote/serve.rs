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
//! `idle_timeout` is closed (HTTP/2 GOAWAY; the gateway's pool then reconnects).

use super::branch::{CallHead, reply_frame};
use super::node::Node;
use super::wire::{self, EventFailure, split_frame};
use crate::http::{BodyError, HttpResponse};
use crate::messaging::TriggerMessage;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tokio::net::{TcpListener, TcpStream};

/// Serves the internal API on `listener` until the task is dropped.
pub(super) async fn serve(listener: TcpListener, node: Arc<Node>) {
    let clients = Arc::new(Clients::default());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!("accepting an internal connection: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = clients.admit(peer.ip(), node.max_connections_per_client()) else {
            tracing::warn!(client = %peer.ip(), "too many internal connections; refused one");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(stream, node.clone(), slot));
    }
}

/// Serves one connection until the client closes it or it stays idle too long.
async fn serve_connection(stream: TcpStream, node: Arc<Node>, _slot: ClientSlot) {
    let idle_timeout = node.idle_timeout();
    let activity = Arc::new(Activity::new());
    let service = {
        let activity = activity.clone();
        service_fn(move |request| {
            let (node, busy) = (node.clone(), Busy::new(&activity));
            async move {
                let response = handle(&node, request).await;
                // Busy until the response body is sent to its end (or dropped).
                let response = response.map(|body| {
                    Tracked {
                        inner: body,
                        _busy: busy,
                    }
                    .boxed_unsync()
                });
                Ok::<_, std::convert::Infallible>(response)
            }
        })
    };
    let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let mut closing_since: Option<Instant> = None;
    loop {
        let wake = match closing_since {
            Some(since) => since + CLOSE_GRACE,
            None => activity.idle_since().unwrap_or_else(Instant::now) + idle_timeout,
        };
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!("internal connection ended: {err}");
                }
                return;
            }
            () = tokio::time::sleep_until(wake.into()) => {
                let idle = activity.idle_since();
                if closing_since.is_some() {
                    if idle.is_some() {
                        // A client that ignores GOAWAY (or never spoke HTTP/2) is cut off.
                        tracing::debug!("dropping an idle internal connection");
                        return;
                    }
                    // A request that came in meanwhile finishes first.
                    closing_since = Some(Instant::now());
                } else if idle.is_some_and(|since| since.elapsed() >= idle_timeout) {
                    connection.as_mut().graceful_shutdown();
                    closing_since = Some(Instant::now());
                }
            }
        }
    }
}

/// How long an idle connection told to close (GOAWAY) may take to do so before it is
/// dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Open internal connections per client address.
#[derive(Default)]
struct Clients(Mutex<HashMap<IpAddr, usize>>);

impl Clients {
    /// A slot for one more connection from `ip`, unless it holds `max` already.
    fn admit(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        let mut open = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(ip).or_default();
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            clients: self.clone(),
            ip,
        })
    }
}

/// One open connection of a client address; freed when dropped.
struct ClientSlot {
    clients: Arc<Clients>,
    ip: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// The requests in flight on one connection, and when the last one ended.
struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
}

impl Activity {
    fn new() -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        }
    }

    /// Since when the connection has carried nothing; `None` while it is busy.
    fn idle_since(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::SeqCst) == 0)
            .then(|| *self.last.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Marks a request in flight until dropped.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(activity: &Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(activity.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its request counted as in flight.
struct Tracked<B> {
    inner: B,
    _busy: Busy,
}

impl<B: http_body::Body + Unpin> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

async fn handle(node: &Node, request: Request<Incoming>) -> HttpResponse {
    match dispatch(node, request).await {
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
            "unauthorized",
            "missing or wrong cluster token",
        ));
    }
    let workflow_name = header(headers, wire::WORKFLOW)
        .unwrap_or_default()
        .to_owned();
    let revision = header(headers, wire::REVISION).and_then(|value| value.parse().ok());
    let Some((revision, workflow)) = node.serving(&workflow_name, revision) else {
        return Err(EventFailure::unavailable(format!(
            "workflow `{workflow_name}` is not loaded on worker `{}`",
            node.id()
        )));
    };
    let call = header(headers, wire::CALL).unwrap_or_default().to_owned();
    let function = header(headers, wire::FUNCTION)
        .unwrap_or_default()
        .to_owned();
    let message = match header(headers, wire::MESSAGE) {
        None => None,
        Some(json) => Some(
            serde_json::from_str::<TriggerMessage>(json)
                .map_err(|err| refused(400, "bad_request", &format!("bad message: {err}")))?,
        ),
    };
    let (mut parts, body) = request.into_parts();
    // The gateway already read the body within its limits: it arrives whole.
    let body = body
        .collect()
        .await
        .map_err(|err| refused(400, "bad_body", &format!("reading the body: {err}")))?
        .to_bytes();
    match call.as_str() {
        "http" => {
            for name in [
                wire::TOKEN,
                wire::WORKFLOW,
                wire::FUNCTION,
                wire::CALL,
                wire::REVISION,
            ] {
                parts.headers.remove(name);
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
            let input = workflow.entry_input(&body[..]);
            let peers = node.peers(&workflow_name, revision);
            let outcome = node
                .worker()
                .run_with_peers(&workflow, input, message, peers)
                .await;
            Ok(Response::new(full(wire::encode_run(outcome))))
        }
        "branch" => {
            let (head, inline) = split_frame::<CallHead>(&body)
                .map_err(|err| refused(400, "bad_request", &err.to_string()))?;
            let (steps, result) = node.branch(head, Vec::new(), inline).await;
            Ok(Response::new(full(reply_frame(steps, result, false).0)))
        }
        other => Err(refused(
            400,
            "bad_request",
            &format!("unknown call `{other}`"),
        )),
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn refused(status: u16, kind: &str, message: &str) -> EventFailure {
    EventFailure {
        kind: kind.to_owned(),
        status,
        message: message.to_owned(),
        function: None,
    }
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

fn full(bytes: impl Into<Bytes>) -> UnsyncBoxBody<Bytes, BodyError> {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}
