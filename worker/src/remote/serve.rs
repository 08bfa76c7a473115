//! The worker's internal HTTP/2 API: the gateway forwards each event here.
//!
//! A request names its workflow in a header; `x-faas-call: http` runs an HTTP
//! function on it as it came, `x-faas-call: run` runs the workflow's steps on its body,
//! and `x-faas-call: branch` runs one fan-out branch for another worker (`branch.rs`).
//! Platform failures come back with the `x-faas-failure` header and an
//! [`EventFailure`] body, so the gateway tells them from a function's own response.

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
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

/// Serves the internal API on `listener` until the task is dropped.
pub(super) async fn serve(listener: TcpListener, node: Arc<Node>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                tracing::warn!("accepting an internal connection: {err}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let node = node.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let node = node.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&node, request).await) }
            });
            let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service);
            if let Err(err) = connection.await {
                tracing::debug!("internal connection ended: {err}");
            }
        });
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
    let Some(workflow) = node.loaded(&workflow_name) else {
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
            for name in [wire::TOKEN, wire::WORKFLOW, wire::FUNCTION, wire::CALL] {
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
            let peers = node.peers(&workflow_name);
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
