//! The invocation path: route, enforce the body limit, hand the event to a replica's
//! worker (an HTTP function call, or a run of the workflow's steps), and turn a failed
//! event into a JSON error.

use crate::registry::Deployment;
use crate::response::{self, Body};
use crate::server::App;
use bytes::Bytes;
use faas_invoke::{EventFailure, FailureKind, OutputRegion, RunReply, TriggerMessage};
use faas_workflow::TriggerTarget;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use serde::Serialize;
use std::time::Instant;

#[derive(Serialize)]
struct FailureDetails<'a> {
    workflow: &'a str,
    function: &'a str,
}

#[derive(Serialize)]
struct RunFailureDetails<'a> {
    workflow: &'a str,
    run_id: &'a str,
}

/// Serves an invocation request: an HTTP function, or a run of a workflow's steps.
pub(crate) async fn invoke(app: &App, request: Request<Incoming>) -> Response<Body> {
    let started = Instant::now();
    let path = request.uri().path();
    let Some((deployment, target)) = app.registry.route(path) else {
        let message = format!("no workflow serves {path}");
        return response::error(StatusCode::NOT_FOUND, "no_route", message);
    };
    let workflow = deployment.workflow.name.as_str();
    let response = match read_body(app, request).await {
        Err(response) => response,
        Ok(request) => match target {
            TriggerTarget::Function(function) => {
                match deployment.call_function(&function, request).await {
                    Ok(response) => response,
                    Err(failure) => failure_response(app, workflow, Some(&function), failure),
                }
            }
            TriggerTarget::Step(_) => run_workflow(app, &deployment, request).await,
        },
    };
    app.metrics
        .observe_request(workflow, response.status().as_u16(), started.elapsed());
    response
}

/// A failed function call as a JSON error, logged and counted.
fn failure_response(
    app: &App,
    workflow: &str,
    function: Option<&str>,
    failure: EventFailure,
) -> Response<Body> {
    let function = failure.function.as_deref().or(function).unwrap_or("");
    let kind = failure.kind.as_str();
    tracing::warn!(workflow, function, cause = kind, "{failure}");
    app.metrics.observe_failure(workflow, function, kind);
    let status = StatusCode::from_u16(failure.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let details = FailureDetails { workflow, function };
    response::error_with(status, kind, failure.message, details)
}

/// Keeps a finished run for `faas runs` and counts it; returns its result.
fn settle(
    app: &App,
    workflow: &str,
    run: RunReply,
) -> (String, Result<Vec<OutputRegion>, EventFailure>) {
    let Some(record) = run.record else {
        return (String::new(), run.result);
    };
    let run_id = record.run_id.clone();
    app.metrics.observe_run(&record);
    app.registry.record_run(workflow, record);
    (run_id, run.result)
}

/// Why a run started by a Redis message did not succeed.
#[derive(Debug)]
pub(crate) struct MessageFailure {
    /// What went wrong.
    pub failure: EventFailure,
    /// Whether the run never really started: no worker took it, or its last failure was
    /// a step refused an instance (`overloaded`) before any step succeeded. Such a run
    /// says nothing about the message, so a stream trigger does not count it as a
    /// delivery.
    pub not_started: bool,
}

/// Runs the current version of `workflow` on a message from a Redis trigger.
///
/// # Errors
/// Why the run failed, and whether it started at all, for the trigger to settle the
/// message by.
pub(crate) async fn run_message(
    app: &App,
    workflow: &str,
    payload: Vec<u8>,
    message: TriggerMessage,
) -> Result<(), MessageFailure> {
    let Some(deployment) = app.registry.get(workflow) else {
        return Err(MessageFailure {
            failure: EventFailure::unavailable(format!("workflow `{workflow}` is not deployed")),
            not_started: true,
        });
    };
    let run = deployment.run(payload.into(), Some(message)).await;
    let no_step_succeeded = run
        .record
        .as_ref()
        .is_none_or(|record| record.steps.iter().all(|step| !step.succeeded));
    settle(app, workflow, run).1.map(|_| ()).map_err(|failure| {
        let not_started = failure.is_unavailable()
            || (failure.kind == FailureKind::Overloaded && no_step_succeeded);
        MessageFailure {
            failure,
            not_started,
        }
    })
}

/// A run of the workflow's steps, from the entry step, on the request body.
async fn run_workflow(
    app: &App,
    deployment: &Deployment,
    request: Request<Bytes>,
) -> Response<Body> {
    let workflow = deployment.workflow.name.as_str();
    let run = deployment.run(request.into_body(), None).await;
    let (run_id, result) = settle(app, workflow, run);
    match result {
        Ok(outputs) => {
            let content_type = outputs.last().map_or("application/octet-stream", |region| {
                content_type(&region.schema_type)
            });
            let mut builder = Response::builder()
                .header(header::CONTENT_TYPE, content_type)
                .header("x-faas-run-id", &run_id)
                .header("x-faas-regions", outputs.len());
            if let Some(region) = outputs.last() {
                builder = builder.header("x-faas-schema-type", &region.schema_type);
            }
            builder
                .body(response::full(concat_outputs(outputs)))
                .expect("the headers are valid")
        }
        Err(failure) => {
            let kind = failure.kind.as_str();
            tracing::warn!(workflow, run_id, kind, "{failure}");
            let status =
                StatusCode::from_u16(failure.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let details = RunFailureDetails {
                workflow,
                run_id: &run_id,
            };
            response::error_with(status, kind, failure.message, details)
        }
    }
}

/// The run's output: every output region's bytes, in order (a single region's
/// without a copy).
fn concat_outputs(mut outputs: Vec<OutputRegion>) -> Bytes {
    if outputs.len() == 1 {
        return outputs.swap_remove(0).bytes;
    }
    let mut body = Vec::with_capacity(outputs.iter().map(|region| region.bytes.len()).sum());
    for region in &outputs {
        body.extend_from_slice(&region.bytes);
    }
    body.into()
}

/// The media type of a run's output, from the type of its last region.
fn content_type(schema_type: &str) -> &'static str {
    match schema_type {
        "json" => "application/json",
        "text" => "text/plain; charset=utf-8",
        "bytes" => "application/octet-stream",
        _ => "application/x-karmem",
    }
}

/// Reads the whole body within the size and time limits. Functions see a complete
/// body, and a body over the limit is refused with 413 before any guest runs.
async fn read_body(
    app: &App,
    request: Request<Incoming>,
) -> Result<Request<Bytes>, Response<Body>> {
    let limit = app.config.max_body_bytes;
    let too_large = || {
        response::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body exceeds the limit of {limit} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let (parts, body) = request.into_parts();
    let collected =
        tokio::time::timeout(app.config.read_timeout, Limited::new(body, limit).collect());
    match collected.await {
        Err(_) => Err(response::error(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "request body not received within {} ms",
                app.config.read_timeout.as_millis()
            ),
        )),
        Ok(Err(err)) if err.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(err)) => Err(response::error(
            StatusCode::BAD_REQUEST,
            "bad_body",
            format!("reading the request body: {err}"),
        )),
        Ok(Ok(body)) => Ok(Request::from_parts(parts, body.to_bytes())),
    }
}
