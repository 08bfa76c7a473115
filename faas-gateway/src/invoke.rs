//! The invocation path: route, enforce the body limit, hand the event to a replica's
//! worker (an HTTP function call, or a run of the workflow's steps), and turn a failed
//! event into a JSON error.

use crate::activator::{Activator, Look, Refusal};
use crate::body_budget::{Claim, Holder, OverBudget};
use crate::registry::Deployment;
use crate::replica::copy_request;
use crate::response::{self, Body, watched};
use crate::server::App;
use bytes::Bytes;
use faas_invoke::{
    EventFailure, FailureKind, LogLevel, LogLine, LogSink as _, LogSource, OutputRegion, ReplyRoom,
    RunReply, TriggerMessage,
};
use faas_workflow::TriggerTarget;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Body as _;
use hyper::body::Incoming;
use serde::Serialize;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument as _;

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
/// `client` is the address the request came from, whose share of the body budget its
/// body takes.
pub(crate) async fn invoke(
    app: &App,
    client: IpAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    let started = Instant::now();
    let path = request.uri().path();
    let Some((deployment, target)) = app.registry.route(path) else {
        let message = format!("no workflow serves {path}");
        return response::error(StatusCode::NOT_FOUND, "no_route", message);
    };
    let workflow = deployment.workflow.name.as_str();
    // Held until the answer is sent (its body read to the end, or dropped).
    let mut place = app.tenant_requests.claim(deployment.key.tenant.clone());
    if place.grow_to(1).is_err() {
        app.metrics.request_refused();
        return response::refused(
            StatusCode::TOO_MANY_REQUESTS,
            "tenant_requests_in_flight",
            format!(
                "the workflow's tenant has {} requests in flight on this gateway, the most \
                 one tenant may (--max-requests-per-tenant); try again shortly",
                app.config.max_requests_per_tenant
            ),
        );
    }
    if let Some(activator) = &app.activator {
        activator.note_event(workflow);
    }
    // A span attribute, unlike a metric label, may name the path: it costs nothing per value.
    let span = tracing::info_span!(
        "request",
        otel.kind = "server",
        workflow,
        target = %target,
        url.path = faas_invoke::trace::attribute(path),
        http.request.method = %request.method(),
        http.response.status_code = tracing::field::Empty,
    );
    faas_invoke::trace::continue_from(&span, request.headers());
    // The body is read (within its limits) before any wait: a held event holds
    // nothing more than its body, and its claim on the body budget until it is served.
    let response = async {
        match read_body(app, client, request).await {
            Err(response) => response,
            Ok((request, _claim)) => serve(app, client, &deployment, target, request).await,
        }
    }
    .instrument(span.clone())
    .await;
    span.record("http.response.status_code", response.status().as_u16());
    app.metrics
        .of(&deployment)
        .observe_request(response.status().as_u16(), started.elapsed());
    // `Tracked` forwards the body's length, so an answer of known length still goes
    // out with a Content-Length (with `map_frame` it went out chunked, and the busy
    // loops' fairness test saw its answers cut short: cause not pinned down).
    response.map(|body| faas_connections::Tracked::new(body, place).boxed_unsync())
}

/// Hands `request` to a replica of `deployment` (services mode: once the activator
/// saw one ready, if it has none). If no replica could be reached, so nothing ran
/// (their workers went away, as when the workers are scaled to zero, or dropped the
/// workflow for a moment, as after a Redis restart), the activator holds it again and
/// it is sent once more when a replica may take it, until the activator's timeout.
async fn serve(
    app: &App,
    client: IpAddr,
    deployment: &Arc<Deployment>,
    target: TriggerTarget,
    request: Request<Bytes>,
) -> Response<Body> {
    let Some(activator) = app.activator.as_ref() else {
        // Embedded mode: a deployment always has its replicas.
        return attempt(app, client, deployment, &target, request)
            .await
            .response(app, client, deployment);
    };
    let deadline = activator.deadline();
    let (mut ready, mut target) = if deployment.replicas.is_empty() {
        match hold(
            app,
            activator,
            deployment,
            &target,
            &request,
            Look::Now,
            deadline,
        )
        .await
        {
            Ok(found) => found,
            Err(response) => return response,
        }
    } else {
        (deployment.clone(), target)
    };
    let mut pause = FIRST_PAUSE;
    let mut request = request;
    loop {
        let again = copy_request(&request);
        match attempt(app, client, &ready, &target, request).await {
            Outcome::Unreached(_) if tokio::time::Instant::now() < deadline => {
                let look = Look::Again(pause);
                let held = hold(app, activator, &ready, &target, &again, look, deadline);
                (ready, target) = match held.await {
                    Ok(found) => found,
                    Err(response) => return response,
                };
                pause = (pause * 2).min(LAST_PAUSE);
                request = again;
            }
            outcome => return outcome.response(app, client, &ready),
        }
    }
}

/// How long an event whose replicas could not be reached waits before it is sent
/// again when nothing changed; the pause doubles up to [`LAST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between two sends of an event no replica could take.
const LAST_PAUSE: Duration = Duration::from_secs(1);

/// What `request` routes to once the activator found a deployment with a replica.
/// A refusal is the response, and a line in the workflow's logs.
async fn hold(
    app: &App,
    activator: &Activator,
    deployment: &Deployment,
    target: &TriggerTarget,
    request: &Request<Bytes>,
    look: Look,
    deadline: tokio::time::Instant,
) -> Result<(Arc<Deployment>, TriggerTarget), Response<Body>> {
    let workflow = deployment.workflow.name.as_str();
    let path = request.uri().path();
    activator
        .hold(
            app,
            &deployment.key,
            look,
            deadline,
            || app.registry.route(path),
            |d| !d.replicas.is_empty(),
        )
        .await
        .map_err(|refusal| {
            log_refusal(app, deployment, target, refusal);
            refusal.response(workflow)
        })
}

/// Tells the tenant, in `faas logs`, of an event the activator gave up holding (not
/// of one whose workflow was removed meanwhile: its logs went with it).
fn log_refusal(app: &App, deployment: &Deployment, target: &TriggerTarget, refusal: Refusal) {
    if refusal != Refusal::Removed {
        let why = refusal.message(&deployment.workflow.name);
        log_unserved(app, deployment, target, why);
    }
}

/// Leaves a line in `deployment`'s logs (`faas logs`, source `platform`) saying why an
/// event for `target` failed where no worker's line says it: no worker took it (none
/// ready or reachable), or its worker went away during it.
pub(crate) fn log_unserved(
    app: &App,
    deployment: &Deployment,
    target: &TriggerTarget,
    mut why: String,
) {
    let Some(logs) = &app.logs else {
        return;
    };
    let workflow = &deployment.workflow;
    let (function, step) = match target {
        TriggerTarget::Function(function) => (function.clone(), None),
        TriggerTarget::Step(step) => {
            let function = workflow.steps.get(step).map(|s| s.function.clone());
            (function.unwrap_or_default(), Some(step.clone()))
        }
    };
    LogLine::cut_text(&mut why);
    logs.push(LogLine {
        time_ms: LogLine::now_ms(),
        tenant: workflow.tenant.clone(),
        workflow: workflow.name.clone(),
        function,
        step,
        run: None,
        level: LogLevel::Error,
        source: LogSource::Platform,
        text: why,
    });
}

/// Tells `tenant`, in `faas logs` of its `workflow`, that a message on its pub/sub
/// channel `channel` was dropped unrun because no worker took it (pub/sub is at most
/// once).
pub(crate) fn log_dropped_message(
    app: &App,
    (tenant, workflow): (&str, &str),
    channel: &str,
    why: &EventFailure,
) {
    log_dropped_messages(app, (tenant, workflow), channel, 1, &why.message);
}

/// Leaves a line in the logs of `tenant`'s `workflow` saying that `count` messages on
/// `channel` were dropped, and `why`.
pub(crate) fn log_dropped_messages(
    app: &App,
    (tenant, workflow): (&str, &str),
    channel: &str,
    count: u64,
    why: &str,
) {
    // Gone with its workflow (removed meanwhile): its logs went with it. Another
    // tenant may have taken the name since: the line is not for its logs.
    if let Some(deployment) = app.registry.get_of(tenant, workflow) {
        let what = match count {
            1 => format!("a message on channel `{channel}` was dropped"),
            _ => format!("{count} messages on channel `{channel}` were dropped"),
        };
        let target = entry_target(&deployment);
        log_unserved(app, &deployment, &target, format!("{what}: {why}"));
    }
}

/// The target of a run of `deployment`'s steps: its entry step.
fn entry_target(deployment: &Deployment) -> TriggerTarget {
    TriggerTarget::Step(
        deployment
            .workflow
            .entry_step()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// The cause (`faas_function_failures_total`) of a function whose response body ended
/// with an error after a head that went out as a success.
const BODY_CUT: &str = "body_cut";

/// How one attempt to hand an event to a deployment's replicas ended.
enum Outcome {
    /// A replica took it: its response (or the function's or run's failure).
    Served(Response<Body>),
    /// No replica could be reached, so nothing ran.
    Unreached(Unreached),
}

/// An event no replica could take, with what to answer if it is not sent again.
enum Unreached {
    Function(String, EventFailure),
    Run(RunReply),
}

impl Outcome {
    fn response(self, app: &App, client: IpAddr, deployment: &Deployment) -> Response<Body> {
        match self {
            Outcome::Served(response) => response,
            Outcome::Unreached(Unreached::Function(function, failure)) => {
                failure_response(app, deployment, Some(&function), failure)
            }
            Outcome::Unreached(Unreached::Run(run)) => {
                let claim = app.bodies.claim(Holder::Client(client));
                run_response(app, deployment, run, claim)
            }
        }
    }
}

/// Calls the function, or runs the workflow, that `target` names on a replica, for
/// `client`.
async fn attempt(
    app: &App,
    client: IpAddr,
    deployment: &Arc<Deployment>,
    target: &TriggerTarget,
    request: Request<Bytes>,
) -> Outcome {
    match target {
        TriggerTarget::Function(function) => {
            match deployment.call_function(function, request).await {
                Ok(response) => {
                    // Its head went out as a success: only its body can tell otherwise.
                    // Its series are looked up only then, off the path of every event.
                    let (metrics, deployment) = (app.metrics.clone(), deployment.clone());
                    let function = function.clone();
                    Outcome::Served(response.map(|body| {
                        watched(body, move || {
                            metrics.of(&deployment).observe_failure(&function, BODY_CUT);
                        })
                    }))
                }
                Err(failure) if failure.is_unavailable() => {
                    Outcome::Unreached(Unreached::Function(function.clone(), failure))
                }
                Err(failure) => {
                    Outcome::Served(failure_response(app, deployment, Some(function), failure))
                }
            }
        }
        TriggerTarget::Step(_) => {
            let mut claim = app.bodies.claim(Holder::Client(client));
            let run = deployment
                .run(request.into_body(), None, &mut ClaimRoom(&mut claim))
                .await;
            match &run.result {
                Err(failure) if run.record.is_none() && failure.is_unavailable() => {
                    Outcome::Unreached(Unreached::Run(run))
                }
                _ => Outcome::Served(run_response(app, deployment, run, claim)),
            }
        }
    }
}

/// A failed function call as a JSON error, logged and counted.
fn failure_response(
    app: &App,
    deployment: &Deployment,
    function: Option<&str>,
    failure: EventFailure,
) -> Response<Body> {
    let workflow = deployment.workflow.name.as_str();
    let function = failure.function.as_deref().or(function).unwrap_or("");
    let kind = failure.kind.as_str();
    let message = faas_invoke::log_excerpt(&failure.message);
    tracing::warn!(workflow, function, cause = kind, detail = ?message, "function failed");
    app.metrics.of(deployment).observe_failure(function, kind);
    // The worker has told the tenant of its own failures; not of these.
    if matches!(
        failure.kind,
        FailureKind::Unavailable | FailureKind::WorkerLost
    ) {
        let target = TriggerTarget::Function(function.to_owned());
        log_unserved(app, deployment, &target, failure.message.clone());
    }
    let status = failure_status(failure.status);
    let details = FailureDetails { workflow, function };
    response::error_with(status, kind, failure.message, details)
}

/// Keeps a finished run for `faas runs` and counts it; returns its result.
fn settle(
    app: &App,
    deployment: &Deployment,
    run: RunReply,
) -> (String, Result<Vec<OutputRegion>, EventFailure>) {
    let Some(record) = run.record else {
        return (String::new(), run.result);
    };
    let run_id = record.run_id.clone();
    app.metrics.of(deployment).observe_run(&record);
    app.registry.record_run(&deployment.key, record);
    (run_id, run.result)
}

/// Why a run started by a Redis message did not succeed.
#[derive(Debug)]
pub(crate) struct MessageFailure {
    /// What went wrong.
    pub failure: EventFailure,
    /// Whether the run said nothing about the message, so that a stream trigger does
    /// not count it as a delivery: no worker took it, or its last failure was a step
    /// refused an instance (`overloaded`) before any step succeeded, or at any step
    /// for want of the worker's slots, which other tenants' load may hold
    /// ([`EventFailure::shared_capacity`]; the steps that ran run again).
    pub uncounted: bool,
}

/// Where to drive the run of a message for `workflow` from: the threads its steps run
/// on when its worker is in this process (embedded mode), so that the run's end wakes
/// the task on the thread it ran on rather than handing it over to another; the
/// current runtime otherwise. As three chained channel workflows, the sensor pipeline
/// (README, "Where a match's CPU time goes") saves a hand-off per run.
pub(crate) fn message_runtime(app: &App, workflow: &str) -> tokio::runtime::Handle {
    app.registry
        .get(workflow)
        .and_then(|deployment| deployment.replicas.first()?.target.runtime())
        .unwrap_or_else(tokio::runtime::Handle::current)
}

/// Runs the current version of `workflow` on a message from a Redis trigger, in a
/// `message` span that continues `traceparent` (a stream entry's field: the trace of
/// whoever appended it) when there is one.
///
/// # Errors
/// Why the run failed, and whether it started at all, for the trigger to settle the
/// message by.
pub(crate) async fn run_message(
    app: &App,
    tenant: &str,
    workflow: &str,
    payload: Vec<u8>,
    message: TriggerMessage,
    traceparent: Option<&str>,
) -> Result<(), MessageFailure> {
    let span = tracing::info_span!(
        "message",
        otel.kind = "consumer",
        workflow,
        messaging.system = "redis",
        messaging.destination.name = message.source,
        messaging.message.id = message.id,
    );
    if let Some(traceparent) = traceparent {
        faas_invoke::trace::continue_from_traceparent(&span, traceparent);
    }
    run_message_in(app, tenant, workflow, payload, message)
        .instrument(span)
        .await
}

async fn run_message_in(
    app: &App,
    tenant: &str,
    workflow: &str,
    payload: Vec<u8>,
    message: TriggerMessage,
) -> Result<(), MessageFailure> {
    // The trigger's tenant's workflow only: another tenant may take the name between
    // its removal and the moment its consumers stop, and must not get its messages.
    let deployed = || app.registry.get_of(tenant, workflow);
    let Some(mut deployment) = deployed() else {
        return Err(MessageFailure {
            failure: EventFailure::unavailable(format!("workflow `{workflow}` is not deployed")),
            uncounted: true,
        });
    };
    if let Some(activator) = &app.activator {
        activator.note_event(workflow);
        if deployment.replicas.is_empty() {
            let found = activator
                .hold(
                    app,
                    &deployment.key,
                    Look::Now,
                    activator.deadline(),
                    || deployed().map(|deployment| (deployment, ())),
                    |deployment| !deployment.replicas.is_empty(),
                )
                .await;
            deployment = match found {
                Ok((ready, ())) => ready,
                Err(refusal) => {
                    return Err(MessageFailure {
                        failure: refusal.failure(workflow),
                        uncounted: true,
                    });
                }
            };
        }
    }
    // Its outputs are not kept, and a worker process does not send them: its reply is
    // the run's record, which has a bound of its own. Not counted in the body budget,
    // which clients may fill: a reply refused there would fail runs that ran.
    let mut room = faas_invoke::AtMost(MAX_MESSAGE_RUN_REPLY_BYTES);
    let run = deployment
        .run(payload.into(), Some(message), &mut room)
        .await;
    let no_step_succeeded = run
        .record
        .as_ref()
        .is_none_or(|record| record.steps.iter().all(|step| !step.succeeded));
    settle(app, &deployment, run)
        .1
        .map(|_| ())
        .map_err(|failure| {
            let uncounted = failure.is_unavailable()
                || (failure.kind == FailureKind::Overloaded
                    && (no_step_succeeded || failure.shared_capacity));
            MessageFailure { failure, uncounted }
        })
}

/// The largest reply of a worker process to a message's run: its record (at most
/// [`faas_invoke::MAX_STEP_RECORD_BYTES`] of steps) with room to spare. A worker of an
/// earlier version sends the outputs too, which may not fit.
const MAX_MESSAGE_RUN_REPLY_BYTES: u64 = 16 << 20;

/// A claim in the body budget as the room a worker process's run reply is read into.
struct ClaimRoom<'a>(&'a mut Claim);

impl ReplyRoom for ClaimRoom<'_> {
    fn grow_to(&mut self, bytes: u64) -> Result<(), EventFailure> {
        self.0.grow_to(bytes).map_err(|over| {
            EventFailure::new(
                FailureKind::Overloaded,
                over_budget_status(over).as_u16(),
                format!(
                    "the run's reply from its worker (over {bytes} bytes so far) does not \
                     fit what may be held for it in the gateway: {}",
                    over_budget_message(over)
                ),
            )
        })
    }
}

/// The answer to a run of the workflow's steps started by a request from a client.
/// Its output is held until sent, so it takes a claim (`claim`, which a worker
/// process's reply was counted in as it was read) in the client's share of the body
/// budget for that long: a client that never reads its answers would otherwise have
/// the gateway hold any number of outputs, each as large as a run may make.
fn run_response(
    app: &App,
    deployment: &Deployment,
    run: RunReply,
    mut claim: Claim,
) -> Response<Body> {
    let workflow = deployment.workflow.name.as_str();
    // A run with no record never reached a worker's steps, so no worker said why.
    if let (None, Err(failure)) = (&run.record, &run.result) {
        log_unserved(
            app,
            deployment,
            &entry_target(deployment),
            failure.message.clone(),
        );
    }
    let (run_id, result) = settle(app, deployment, run);
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
            let output = concat_outputs(outputs);
            if let Err(over) = claim.grow_to(output.len() as u64) {
                let message = format!(
                    "the run's output ({} bytes) does not fit what this client may hold \
                     in the gateway: {}",
                    output.len(),
                    over_budget_message(over)
                );
                tracing::warn!(workflow, run_id, "run output refused: {message}");
                let details = RunFailureDetails {
                    workflow,
                    run_id: &run_id,
                };
                let status = over_budget_status(over);
                return response::error_with(status, "body_budget", message, details);
            }
            // The run id and the type come from the worker's reply: a worker process
            // that sends what no header may hold gets a 502, not a panic.
            builder
                .body(response::held(output, claim))
                .unwrap_or_else(|err| {
                    response::error(
                        StatusCode::BAD_GATEWAY,
                        FailureKind::BadReply.as_str(),
                        format!("the worker's reply to the run was malformed: {err}"),
                    )
                })
        }
        Err(failure) => {
            let kind = failure.kind.as_str();
            let message = faas_invoke::log_excerpt(&failure.message);
            tracing::warn!(workflow, run_id, kind, detail = ?message, "run failed");
            let status = failure_status(failure.status);
            let details = RunFailureDetails {
                workflow,
                run_id: &run_id,
            };
            response::error_with(status, kind, failure.message, details)
        }
    }
}

/// The status to answer a failure reported as `status` with: a final status (a worker
/// process's report may hold any number, and an informational one is no answer).
fn failure_status(status: u16) -> StatusCode {
    StatusCode::from_u16(status)
        .ok()
        .filter(|status| !status.is_informational())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
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

/// Reads the whole body within the size and time limits, and within the body budget
/// ([`crate::body_budget`]), whose claim it returns to be held until the event is
/// served. Functions see a complete body, and a body over the limit is refused with 413
/// (or over the budget with 429 or 503) before any guest runs.
async fn read_body(
    app: &App,
    client: IpAddr,
    request: Request<Incoming>,
) -> Result<(Request<Bytes>, Option<Claim>), Response<Body>> {
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
    if body.is_end_stream() {
        return Ok((Request::from_parts(parts, Bytes::new()), None));
    }
    let mut claim = app.bodies.claim(Holder::Client(client));
    // Refused before a byte of it is read, when its length is known.
    if let Some(declared) = declared {
        claim.grow_to(declared).map_err(over_budget)?;
    }
    let collected = tokio::time::timeout(
        app.config.read_timeout,
        collect_claimed(body, limit, declared, &mut claim),
    );
    match collected.await {
        Err(_) => Err(response::error(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "request body not received within {} ms",
                app.config.read_timeout.as_millis()
            ),
        )),
        Ok(Err(ReadFailure::Budget(over))) => Err(over_budget(over)),
        Ok(Err(ReadFailure::Body(err))) if err.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(ReadFailure::Body(err))) => Err(response::error(
            StatusCode::BAD_REQUEST,
            "bad_body",
            format!("reading the request body: {err}"),
        )),
        Ok(Ok(body)) => Ok((Request::from_parts(parts, body), Some(claim))),
    }
}

/// Why a body could not be read whole.
enum ReadFailure {
    /// The body did not fit the body budget.
    Budget(OverBudget),
    /// The client's body failed, or passed the body limit ([`LengthLimitError`]).
    Body(Box<dyn std::error::Error + Send + Sync>),
}

/// Reads `body` whole (at most `limit` bytes), the claim covering the memory it takes
/// as it arrives. A body of one chunk is kept as it came. Otherwise the chunks are
/// copied into one buffer as they come: kept as they came, each would hold its own
/// allocation (and hyper's read buffer behind it), so a body sent in one-byte chunks
/// would hold some 40 bytes for each byte the claim counts. The buffer is the declared
/// length; without one it doubles as it fills, and while it grows the claim covers
/// both the old buffer and the new. The claim is then the buffer's capacity.
async fn collect_claimed<B>(
    body: B,
    limit: usize,
    declared: Option<u64>,
    claim: &mut Claim,
) -> Result<Bytes, ReadFailure>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut body = Limited::new(body, limit);
    let mut first: Option<Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    let mut received = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(chunk) = frame.map_err(ReadFailure::Body)?.into_data() else {
            continue; // trailers, which functions are not given
        };
        received += chunk.len() as u64;
        claim.grow_to(received).map_err(ReadFailure::Budget)?;
        if first.is_none() && joined.capacity() == 0 {
            first = Some(chunk);
            continue;
        }
        let needed = joined.len() + first.as_ref().map_or(0, Bytes::len) + chunk.len();
        if needed > joined.capacity() {
            let declared = declared.map_or(0, |declared| declared as usize);
            let capacity = needed
                .max(declared)
                .max(2 * joined.capacity())
                .min(limit.max(needed));
            // The first chunk, copied over once, is not counted twice: it is one
            // chunk, and goes right after.
            claim
                .grow_to((joined.capacity() + capacity) as u64)
                .map_err(ReadFailure::Budget)?;
            joined.reserve_exact(capacity - joined.len());
            if let Some(first) = first.take() {
                joined.extend_from_slice(&first);
            }
            claim.shrink_to((joined.capacity() as u64).max(received));
        }
        joined.extend_from_slice(&chunk);
    }
    Ok(match first {
        Some(first) => first,
        None => Bytes::from(joined),
    })
}

/// The answer to a body the budget has no room for: 429 when its client holds its
/// share, 503 when all holders hold the whole; either may be sent again shortly.
fn over_budget(over: OverBudget) -> Response<Body> {
    response::refused(
        over_budget_status(over),
        "body_budget",
        over_budget_message(over),
    )
}

/// 429 when the client holds its share of the body budget, 503 when all clients hold
/// the whole.
fn over_budget_status(over: OverBudget) -> StatusCode {
    match over {
        OverBudget::Share { .. } => StatusCode::TOO_MANY_REQUESTS,
        OverBudget::Total { .. } => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// What the body budget's refusal `over` says.
fn over_budget_message(over: OverBudget) -> String {
    match over {
        OverBudget::Share { limit } => format!(
            "this client's request bodies and answers in the gateway would exceed {} MiB \
             (--client-body-budget-mb); try again when one has been served",
            limit >> 20
        ),
        OverBudget::Total { limit } => format!(
            "the gateway holds {} MiB of request bodies and answers, its budget \
             (--body-budget-mb); try again shortly",
            limit >> 20
        ),
    }
}

#[cfg(test)]
mod tests {
    /// A worker process's failure report names the status to answer with: an
    /// informational one (an HTTP/2 protocol error with a body) or no status at all is
    /// answered 500.
    #[test]
    fn a_reported_failure_is_answered_with_a_final_status() {
        assert_eq!(failure_status(429), StatusCode::TOO_MANY_REQUESTS);
        for odd in [100, 103, 0, 1000] {
            assert_eq!(
                failure_status(odd),
                StatusCode::INTERNAL_SERVER_ERROR,
                "{odd}"
            );
        }
    }

    use super::*;
    use crate::body_budget::{BodyBudget, BodyBudgetLimits};
    use hyper::body::Frame;
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A body of the given chunks, with no declared length.
    struct Chunks(VecDeque<Bytes>);

    impl hyper::body::Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
        }
    }

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn budget(per_client: u64) -> Arc<BodyBudget> {
        Arc::new(BodyBudget::new(BodyBudgetLimits {
            total: 1 << 20,
            per_holder: per_client,
        }))
    }

    /// Collects `chunks` of `size` bytes each against `claim`, declaring their total
    /// length or not.
    async fn collect(
        chunks: usize,
        size: usize,
        declare: bool,
        claim: &mut Claim,
    ) -> Result<Bytes, ReadFailure> {
        let body = Chunks(
            (0..chunks)
                .map(|i| Bytes::from(vec![i as u8; size]))
                .collect(),
        );
        let declared = declare.then_some((chunks * size) as u64);
        if let Some(declared) = declared {
            claim.grow_to(declared).map_err(ReadFailure::Budget)?;
        }
        collect_claimed(body, 1 << 20, declared, claim).await
    }

    #[tokio::test]
    async fn a_declared_body_is_joined_as_it_comes_and_claimed_once() {
        let budget = budget(100);
        let mut claim = budget.claim(Holder::Client(CLIENT));
        // Joined at the end, it would need 180 bytes of the share of 100.
        let body = collect(3, 30, true, &mut claim).await.ok().unwrap();
        assert_eq!(body.len(), 90);
        assert_eq!((body[0], body[30], body[89]), (0, 1, 2));
        assert_eq!(budget.held(), 90);
    }

    #[tokio::test]
    async fn a_body_of_tiny_chunks_is_held_in_one_buffer() {
        let budget = budget(1 << 20);
        let mut claim = budget.claim(Holder::Client(CLIENT));
        let body = collect(100_000, 1, false, &mut claim).await.ok().unwrap();
        assert_eq!(body.len(), 100_000);
        assert!(
            budget.held() < 2 * 100_000,
            "{} bytes claimed: one buffer, at most twice the body",
            budget.held()
        );
    }

    #[tokio::test]
    async fn joining_an_undeclared_body_claims_both_copies_for_the_moment() {
        let budget = budget(100);
        let mut claim = budget.claim(Holder::Client(CLIENT));
        let body = collect(3, 16, false, &mut claim).await.ok().unwrap();
        assert_eq!(body.len(), 48);
        assert_eq!((body[0], body[16], body[47]), (0, 1, 2));
        assert_eq!(
            budget.held(),
            64,
            "the claim is the buffer's capacity, doubled from 32 to fit the third chunk"
        );
        drop(claim);

        // 90 bytes fit the share of 100, but the buffer of 60 and the one of 120 it
        // grows into do not.
        let mut claim = budget.claim(Holder::Client(CLIENT));
        let refused = collect(3, 30, false, &mut claim).await;
        assert!(matches!(
            refused,
            Err(ReadFailure::Budget(OverBudget::Share { .. }))
        ));
        drop(claim);

        let mut claim = budget.claim(Holder::Client(CLIENT));
        let one = collect(1, 90, false, &mut claim).await.ok().unwrap();
        assert_eq!(one.len(), 90, "a body of one chunk is kept as it came");
        assert_eq!(budget.held(), 90);
    }
}
