//! Serving one HTTP request with a fresh instance of an HTTP function.

use crate::error::InvokeError;
use crate::failure::{Failure, classify, guest_debug_text};
use crate::fair::FirstPoll;
use crate::function::{Entry, LoadedFunction, LoadedWorkflow};
use crate::state::LineOwner;
use crate::worker::Worker;
use bytes::Bytes;
use faas_invoke::{BodyError, FailureKind, HttpResponse, LogLevel, LogSink, LogSource};
use http_body::Body;
use http_body::Frame;
use http_body_util::BodyExt;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

impl Worker {
    /// Runs `function` of `workflow` on `request` in a fresh instance.
    ///
    /// Returns as soon as the guest has set the response head; the body streams from
    /// the instance, which lives until it finishes or its deadline passes, whichever
    /// comes first (a body cut by the deadline ends with an error).
    ///
    /// # Errors
    /// An [`InvokeError`] saying why this request failed, which its tenant also finds
    /// in `faas logs`; the function stays loaded and the next request gets a new
    /// instance.
    pub async fn handle_http<B>(
        &self,
        workflow: &LoadedWorkflow,
        function: &str,
        request: hyper::Request<B>,
    ) -> Result<HttpResponse, InvokeError>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<wasmtime_wasi_http::Error>,
    {
        let result = self.serve_http(workflow, function, request).await;
        // A failure of kind `unavailable` ran nothing, and the gateway passes the event
        // on to another replica: the line is the gateway's to write if none takes it.
        if let Err(err) = &result
            && err.cause() != FailureKind::Unavailable
        {
            self.log_failure(owner(workflow, function), LogLevel::Error, err.to_string());
        }
        result
    }

    /// [`Self::handle_http`] without the log line a failure leaves.
    async fn serve_http<B>(
        &self,
        workflow: &LoadedWorkflow,
        function: &str,
        request: hyper::Request<B>,
    ) -> Result<HttpResponse, InvokeError>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<wasmtime_wasi_http::Error>,
    {
        let loaded = workflow
            .function(function)
            .ok_or_else(|| InvokeError::UnknownFunction {
                function: function.to_owned(),
            })?;
        let entry = loaded.entry();
        let Entry::Http(pre) = &*entry else {
            return Err(bad_response(
                loaded,
                "it is a step function, not an HTTP function",
            ));
        };
        let (mut store, output) = self.new_store(workflow, loaded, &entry, None).await?;
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let mut http = store.data_mut().http();
        let wiring = http
            .new_incoming_request(Scheme::Http, request)
            .and_then(|request| Ok((request, http.new_response_outparam(sender)?)));
        let (request, out) =
            wiring.map_err(|err: wasmtime::Error| bad_response(loaded, &format!("{err:#}")))?;

        let pre = pre.clone();
        // The deadline covers the whole event, the body's streaming included.
        let streaming = Arc::new(Streaming::default());
        let at_deadline = streaming.clone();
        let on_failure = streaming.clone();
        let line = |source: &Arc<dyn LogSink>| EventLine {
            logs: source.clone(),
            tenant: workflow.tenant.clone(),
            workflow: workflow.name.clone(),
            function: loaded.name.clone(),
        };
        let cut_line = self.logs().map(line);
        let failure_line = self.logs().map(line);
        let timeout = loaded.limits.timeout;
        let loaded_function = loaded.clone();
        let guest_output = output.clone();
        let guest = async move {
            let ran = match pre.instantiate_async(&mut store).await {
                Ok(proxy) => proxy
                    .wasi_http_incoming_handler()
                    .call_handle(&mut store, request, out)
                    .await
                    .map_err(Failure::Run),
                Err(err) => Err(Failure::Instantiate(err)),
            };
            // Told before the store (and with it the body's sender) goes, so that a
            // body already under way sees the failure when it sees its end.
            ran.map_err(|failure| {
                let err = classify(&loaded_function, failure, &guest_output);
                on_failure.guest_failed(err.to_string(), failure_line);
                err
            })
        };
        let first_poll = FirstPoll::Here;
        let task = self.spawn_guest(
            workflow.tenant.clone(),
            loaded,
            first_poll,
            guest,
            move || {
                // Flagged before the store (and with it the body's sender) goes, so the
                // body sees the flag when it sees its end.
                at_deadline.cut.store(true, Ordering::Release);
                // Before the head, the event fails as a whole (and that is logged);
                // after it, the tenant's client sees a cut body, and its logs say why.
                if at_deadline.head_sent()
                    && let Some(line) = cut_line
                {
                    let text = body_cut_message(&line.function, timeout);
                    line.push(text);
                }
            },
            // No region is mapped into an HTTP function: its inputs are a request.
            |_| false,
        );

        // On timeout the instance must go at once, freeing its slot.
        let abort = task.abort_handle();
        let deadline = loaded.limits.timeout + crate::worker::HOST_WAIT_GRACE;
        let outcome = tokio::time::timeout(deadline, async {
            match receiver.await {
                // An informational status is not an answer: over HTTP/2 (the internal
                // API in services mode) a body after it is an error of the whole
                // connection, which every tenant's events to this worker share.
                Ok(Ok(response)) if response.status().is_informational() => Err(bad_response(
                    loaded,
                    &format!(
                        "status {} is informational, not a final response (use 200 to 599)",
                        response.status().as_u16()
                    ),
                )),
                Ok(Ok(response)) => {
                    if let Some(failed) = streaming.send_head() {
                        self.log_failure(owner(workflow, function), LogLevel::Error, failed);
                    }
                    Ok(response.map(|body| CutShort::new(body, streaming, loaded).boxed_unsync()))
                }
                // The code may hold a string of the guest's, as long as its memory.
                Ok(Err(code)) => Err(bad_response(
                    loaded,
                    &format!("error code {}", guest_debug_text(&code)),
                )),
                // The guest dropped its response-outparam: it failed or returned early.
                Err(_) => Err(match task.await {
                    Ok(Some(Ok(()))) => {
                        bad_response(loaded, "it returned without setting a response")
                    }
                    Ok(Some(Err(failed))) => failed,
                    Ok(None) => classify(
                        loaded,
                        Failure::Run(wasmtime::Trap::Interrupt.into()),
                        &output,
                    ),
                    Err(join) => bad_response(loaded, &format!("instance task failed: {join}")),
                }),
            }
        })
        .await;
        outcome.unwrap_or_else(|_| {
            if let Some(abort) = abort {
                abort.abort();
            }
            Err(InvokeError::Timeout {
                function: loaded.name.to_string(),
                timeout: loaded.limits.timeout,
            })
        })
    }
}

/// What an event's deadline, its guest and its response body share.
#[derive(Default)]
struct Streaming {
    /// [`HEAD_SENT`] and [`FAILED`], as they happen: of the head's hand-off and the
    /// guest's failure, whichever comes second logs the failure (with no head, the
    /// event's error is the result, and [`Worker::handle_http`] logs it).
    state: AtomicU8,
    /// Why the guest failed, set before [`FAILED`].
    failure: OnceLock<String>,
    /// The deadline dropped the instance.
    cut: AtomicBool,
}

/// [`Streaming::state`]: the guest set the response head, so the event's result is
/// its body.
const HEAD_SENT: u8 = 1;
/// [`Streaming::state`]: the guest failed (trapped, ran out of fuel or memory).
const FAILED: u8 = 2;

impl Streaming {
    fn head_sent(&self) -> bool {
        self.state.load(Ordering::Acquire) & HEAD_SENT != 0
    }

    /// Marks the head handed on; returns why the guest failed if it already had, for
    /// the caller to log.
    fn send_head(&self) -> Option<String> {
        let before = self.state.fetch_or(HEAD_SENT, Ordering::AcqRel);
        (before & FAILED != 0)
            .then(|| self.failure.get().cloned())
            .flatten()
    }

    /// Marks the guest failed, and logs `why` on `line` if the head was already out.
    fn guest_failed(&self, why: String, line: Option<EventLine>) {
        let why = self.failure.get_or_init(|| why);
        let before = self.state.fetch_or(FAILED, Ordering::AcqRel);
        if before & HEAD_SENT != 0
            && let Some(line) = line
        {
            line.push(why.clone());
        }
    }

    fn failed(&self) -> bool {
        self.state.load(Ordering::Acquire) & FAILED != 0
    }
}

/// Why a response body ended early, as its client and its tenant's logs say it.
fn body_cut_message(function: &str, timeout: Duration) -> String {
    format!(
        "function `{function}` did not finish its response body within {}ms",
        timeout.as_millis()
    )
}

/// What the client of a response whose guest failed after the head reads as the
/// body's error; the tenant's logs say why it failed.
fn body_failed_message(function: &str) -> String {
    format!("function `{function}` failed after its response head (see `faas logs`)")
}

/// Where a line about an event goes once its response is out (`faas logs`): nothing
/// else tells the tenant, since the response went out as a success.
struct EventLine {
    logs: Arc<dyn LogSink>,
    tenant: Arc<str>,
    workflow: Arc<str>,
    function: Arc<str>,
}

impl EventLine {
    fn push(self, text: String) {
        let owner = LineOwner {
            tenant: &self.tenant,
            workflow: &self.workflow,
            function: &self.function,
            run: None,
        };
        self.logs
            .push(owner.line(LogLevel::Error, LogSource::Platform, text));
    }
}

/// How long a cut body waits, after its end, before it ends with its error: an error
/// in the same write as the response head would take the head with it (HTTP/1.1 drops
/// the connection before writing it, HTTP/2 clears a reset stream's queued frames), so
/// what the guest sent before failing is flushed to the client first.
const FLUSH_GRACE: Duration = Duration::from_millis(10);

pin_project_lite::pin_project! {
    /// A guest's response body that ends with an error, not a clean end, when its
    /// instance went before finishing it (the deadline cut it, or the guest failed):
    /// Wasmtime ends a body whose instance was dropped as if it were complete.
    struct CutShort {
        #[pin]
        body: HyperOutgoingBody,
        streaming: Arc<Streaming>,
        function: Arc<str>,
        timeout: Duration,
        // The error it ends with once the grace is over ([`FLUSH_GRACE`]).
        ending: Option<(Pin<Box<tokio::time::Sleep>>, String)>,
    }
}

impl CutShort {
    fn new(body: HyperOutgoingBody, streaming: Arc<Streaming>, function: &LoadedFunction) -> Self {
        Self {
            body,
            streaming,
            function: function.name.clone(),
            timeout: function.limits.timeout,
            ending: None,
        }
    }
}

impl Body for CutShort {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let mut this = self.project();
        loop {
            if let Some((grace, _)) = this.ending {
                std::task::ready!(grace.as_mut().poll(cx));
                let why = this.ending.take().map(|(_, why)| why).unwrap_or_default();
                return Poll::Ready(Some(Err(why.into())));
            }
            let why = match std::task::ready!(this.body.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => return Poll::Ready(Some(Ok(frame))),
                Some(Err(err)) => return Poll::Ready(Some(Err(Box::new(err)))),
                None if this.streaming.cut.swap(false, Ordering::AcqRel) => {
                    body_cut_message(this.function, *this.timeout)
                }
                // Once: a body polled again after its error ends.
                None if this.streaming.state.fetch_and(!FAILED, Ordering::AcqRel) & FAILED != 0 => {
                    body_failed_message(this.function)
                }
                None => return Poll::Ready(None),
            };
            *this.ending = Some((Box::pin(tokio::time::sleep(FLUSH_GRACE)), why));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
            && self.ending.is_none()
            && !self.streaming.cut.load(Ordering::Acquire)
            && !self.streaming.failed()
    }
}

/// Who a line about `function` of `workflow` is for (no run: an HTTP event).
fn owner<'a>(workflow: &'a LoadedWorkflow, function: &'a str) -> LineOwner<'a> {
    LineOwner {
        tenant: &workflow.tenant,
        workflow: &workflow.name,
        function,
        run: None,
    }
}

fn bad_response(function: &LoadedFunction, message: &str) -> InvokeError {
    InvokeError::BadResponse {
        function: function.name.to_string(),
        message: message.to_owned(),
    }
}
