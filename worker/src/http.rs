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
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
            let owner = LineOwner {
                tenant: &workflow.tenant,
                workflow: &workflow.name,
                function,
                run: None,
            };
            self.log_failure(owner, LogLevel::Error, err.to_string());
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
        let cut_line = self.logs().map(|logs| CutLine {
            logs: logs.clone(),
            tenant: workflow.tenant.clone(),
            workflow: workflow.name.clone(),
            function: loaded.name.clone(),
            timeout: loaded.limits.timeout,
        });
        let guest = async move {
            let proxy = match pre.instantiate_async(&mut store).await {
                Ok(proxy) => proxy,
                Err(err) => return Err(Failure::Instantiate(err)),
            };
            proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut store, request, out)
                .await
                .map_err(Failure::Run)
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
                if at_deadline.head_sent.load(Ordering::Acquire)
                    && let Some(line) = cut_line
                {
                    line.push();
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
                    streaming.head_sent.store(true, Ordering::Release);
                    Ok(response.map(|body| {
                        CutAtDeadline {
                            body,
                            streaming,
                            function: loaded.name.clone(),
                            timeout: loaded.limits.timeout,
                        }
                        .boxed_unsync()
                    }))
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
                    Ok(Some(Err(failure))) => classify(loaded, failure, &output),
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

/// What an event's deadline and its response body share.
#[derive(Default)]
struct Streaming {
    /// The guest set the response head, so the event's result is its body.
    head_sent: AtomicBool,
    /// The deadline dropped the instance.
    cut: AtomicBool,
}

/// Why a response body ended early, as its client and its tenant's logs say it.
fn body_cut_message(function: &str, timeout: Duration) -> String {
    format!(
        "function `{function}` did not finish its response body within {}ms",
        timeout.as_millis()
    )
}

/// The line a body cut by its deadline leaves in its workflow's logs (`faas logs`):
/// the response went out as a success, so nothing else tells the tenant.
struct CutLine {
    logs: Arc<dyn LogSink>,
    tenant: Arc<str>,
    workflow: Arc<str>,
    function: Arc<str>,
    timeout: Duration,
}

impl CutLine {
    fn push(self) {
        let owner = LineOwner {
            tenant: &self.tenant,
            workflow: &self.workflow,
            function: &self.function,
            run: None,
        };
        let text = body_cut_message(&self.function, self.timeout);
        self.logs
            .push(owner.line(LogLevel::Error, LogSource::Platform, text));
    }
}

pin_project_lite::pin_project! {
    /// A guest's response body that ends with an error, not a clean end, when the
    /// event's deadline cut it short: Wasmtime ends a body whose instance was dropped
    /// as if it were complete.
    struct CutAtDeadline {
        #[pin]
        body: HyperOutgoingBody,
        streaming: Arc<Streaming>,
        function: Arc<str>,
        timeout: Duration,
    }
}

impl Body for CutAtDeadline {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.project();
        Poll::Ready(match std::task::ready!(this.body.poll_frame(cx)) {
            Some(Ok(frame)) => Some(Ok(frame)),
            Some(Err(err)) => Some(Err(Box::new(err))),
            None if this.streaming.cut.swap(false, Ordering::AcqRel) => {
                Some(Err(body_cut_message(this.function, *this.timeout).into()))
            }
            None => None,
        })
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream() && !self.streaming.cut.load(Ordering::Acquire)
    }
}

fn bad_response(function: &LoadedFunction, message: &str) -> InvokeError {
    InvokeError::BadResponse {
        function: function.name.to_string(),
        message: message.to_owned(),
    }
}
