//! The invocation path: route, enforce the body limit, hand the request to the
//! workflow's worker, and turn a failed event into a JSON error.

use crate::response::{self, Body};
use crate::server::App;
use bytes::Bytes;
use faas_workflow::TriggerTarget;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use serde::Serialize;
use std::time::Instant;

#[derive(Serialize)]
struct FailureDetails<'a> {
    workflow: &'a str,
    function: &'a str,
}

/// Serves an invocation request.
pub(crate) async fn invoke(app: &App, request: Request<Incoming>) -> Response<Body> {
    let started = Instant::now();
    let path = request.uri().path();
    let Some((deployment, target)) = app.registry.route(path) else {
        let message = format!("no workflow serves {path}");
        return response::error(StatusCode::NOT_FOUND, "no_route", message);
    };
    let function = match target {
        TriggerTarget::Function(function) => function,
        TriggerTarget::Step(step) => {
            let message = format!(
                "{path} starts a run of workflow `{}` at step `{step}`; \
                 workflow runs are not implemented yet",
                deployment.workflow.name
            );
            return response::error(StatusCode::NOT_IMPLEMENTED, "workflow_runs", message);
        }
    };
    let workflow = deployment.workflow.name.as_str();
    let response = match read_body(app, request).await {
        Err(response) => response,
        Ok(request) => match app.registry.worker(&deployment.worker) {
            None => response::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_worker",
                format!(
                    "worker {} of workflow `{workflow}` is gone",
                    deployment.worker
                ),
            ),
            Some(worker) => match worker
                .handle_http(&deployment.loaded, &function, request)
                .await
            {
                Ok(response) => response,
                Err(err) => {
                    tracing::warn!(workflow, function, cause = err.cause(), "{err}");
                    app.metrics
                        .observe_failure(workflow, err.function(), err.cause());
                    let status = StatusCode::from_u16(err.status())
                        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    let details = FailureDetails {
                        workflow,
                        function: err.function(),
                    };
                    response::error_with(status, err.cause(), err.to_string(), details)
                }
            },
        },
    };
    app.metrics
        .observe_request(workflow, response.status().as_u16(), started.elapsed());
    response
}

/// Reads the whole body within the size and time limits. Functions see a complete
/// body, and a body over the limit is refused with 413 before any guest runs.
async fn read_body(
    app: &App,
    request: Request<Incoming>,
) -> Result<Request<Full<Bytes>>, Response<Body>> {
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
        Ok(Ok(body)) => Ok(Request::from_parts(parts, Full::new(body.to_bytes()))),
    }
}
