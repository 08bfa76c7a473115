//! Serving one HTTP request with a fresh instance of an HTTP function.

use crate::engine::PoolWait;
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
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::body::{HostOutgoingBody, HyperOutgoingBody};

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
        let on_failure = streaming.clone();
        let line = |source: &Arc<dyn LogSink>| EventLine {
            logs: source.clone(),
            tenant: workflow.tenant.clone(),
            workflow: workflow.name.clone(),
            function: loaded.name.clone(),
        };
        let mut instance = EventStore {
            store,
            streaming: streaming.clone(),
            stopped: Some(Stopped {
                function: loaded.name.clone(),
                timeout: loaded.limits.timeout,
                line: self.logs().map(line),
            }),
        };
        let failure_line = self.logs().map(line);
        let loaded_function = loaded.clone();
        let guest_output = output.clone();
        let guest = async move {
            let store = &mut instance.store;
            let mut pool = PoolWait::default();
            let made = loop {
                let made = pre.instantiate_async(&mut *store).await;
                if !pool.again(&made).await {
                    break made;
                }
            };
            let ran = match made {
                Ok(proxy) => proxy
                    .wasi_http_incoming_handler()
                    .call_handle(&mut *store, request, out)
                    .await
                    .map_err(Failure::Run),
                Err(err) => Err(Failure::Instantiate(err)),
            };
            // Told before the store (and with it the body's sender) goes, so that a
            // body already under way sees the failure when it sees its end.
            let unfinished = instance.returned();
            let name = &loaded_function.name;
            match ran {
                Err(failure) => {
                    let err = classify(&loaded_function, failure, &guest_output);
                    let why = Why {
                        line: err.to_string(),
                        body: body_failed_message(name),
                    };
                    on_failure.fail(why, unfinished, failure_line);
                    Err(err)
                }
                Ok(()) if unfinished => {
                    on_failure.fail(Why::both(body_left_message(name)), true, failure_line);
                    Ok(())
                }
                Ok(()) => Ok(()),
            }
        };
        let first_poll = FirstPoll::Here;
        let task = self.spawn_guest(
            workflow.tenant.clone(),
            loaded,
            first_poll,
            guest,
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
                    Ok(response.map(|body| CutShort { body, streaming }.boxed_unsync()))
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
    /// [`HEAD_SENT`], [`FAILED`] and [`CUT`], as they happen: of the head's hand-off
    /// and the event's failure, whichever comes second logs the failure (with no head,
    /// the event's error is the result, and [`Worker::handle_http`] logs it).
    state: AtomicU8,
    /// Why the event failed, set before [`FAILED`]: its first failure only.
    why: OnceLock<Why>,
}

/// Why an event failed after it started streaming its response.
struct Why {
    /// What its tenant's logs say.
    line: String,
    /// What its client reads as its body's error, if it cut the body.
    body: String,
}

impl Why {
    /// `text`, for the logs and the client alike.
    fn both(text: String) -> Self {
        Self {
            line: text.clone(),
            body: text,
        }
    }
}

/// [`Streaming::state`]: the guest set the response head, so the event's result is
/// its body.
const HEAD_SENT: u8 = 1;
/// [`Streaming::state`]: the guest failed (trapped, ran out of fuel or memory), or the
/// deadline dropped its instance.
const FAILED: u8 = 2;
/// [`Streaming::state`]: the instance went with the response body unfinished, which
/// must end with an error, not the clean end Wasmtime gives it; cleared once told.
const CUT: u8 = 4;

impl Streaming {
    /// Marks the head handed on; returns why the event failed if it already had, for
    /// the caller to log.
    fn send_head(&self) -> Option<String> {
        let before = self.state.fetch_or(HEAD_SENT, Ordering::AcqRel);
        (before & FAILED != 0)
            .then(|| self.why.get().map(|why| why.line.clone()))
            .flatten()
    }

    /// Marks the event failed for `why`, its body `cut` short or not, and logs the
    /// failure on `line` if the head was already out. Only the first failure counts:
    /// a guest stopped at its deadline fails once.
    fn fail(&self, why: Why, cut: bool, line: Option<EventLine>) {
        if self.why.set(why).is_err() {
            return;
        }
        let flags = if cut { FAILED | CUT } else { FAILED };
        let before = self.state.fetch_or(flags, Ordering::AcqRel);
        if before & HEAD_SENT != 0
            && let Some(line) = line
            && let Some(why) = self.why.get()
        {
            line.push(why.line.clone());
        }
    }

    /// What the body's client reads as its error, if its instance cut it short; once:
    /// a body polled again after its error ends.
    fn take_cut(&self) -> Option<String> {
        let before = self.state.fetch_and(!CUT, Ordering::AcqRel);
        (before & CUT != 0)
            .then(|| self.why.get().map(|why| why.body.clone()))
            .flatten()
    }

    fn cut(&self) -> bool {
        self.state.load(Ordering::Acquire) & CUT != 0
    }
}

/// The store of an HTTP event's instance, which tells the event's [`Streaming`] how its
/// response body stood if the instance is dropped before its guest returned (its
/// deadline passed, or the worker is stopping). Told from `drop`, while the store (and
/// with it the body's sender) is still there, so the body sees the flag when it sees
/// its end; and judged by the store's resource table, so that a body the guest had
/// finished before it lingered in the host stays whole, however slowly its client
/// reads its end.
struct EventStore {
    store: wasmtime::Store<crate::state::InstanceState>,
    streaming: Arc<Streaming>,
    /// What to say if the instance is dropped first; taken once its guest returned.
    stopped: Option<Stopped>,
}

/// What an [`EventStore`] dropped before its guest returned says.
struct Stopped {
    function: Arc<str>,
    timeout: Duration,
    line: Option<EventLine>,
}

impl EventStore {
    /// Marks the guest returned (or failed): the caller tells the event's outcome
    /// from here. Returns whether it left an outgoing body unfinished.
    fn returned(&mut self) -> bool {
        self.stopped = None;
        unfinished_body(&mut self.store)
    }
}

impl Drop for EventStore {
    fn drop(&mut self) {
        let Some(stopped) = self.stopped.take() else {
            return;
        };
        // Before the head, the event fails as a whole (and that is logged); after it,
        // the tenant's client sees a cut body if it was unfinished, and its logs say
        // why either way.
        let cut = unfinished_body(&mut self.store);
        let text = if cut {
            body_cut_message(&stopped.function, stopped.timeout)
        } else {
            stopped_after_body_message(&stopped.function, stopped.timeout)
        };
        self.streaming.fail(Why::both(text), cut, stopped.line);
    }
}

/// Whether the guest in `store` left an outgoing body unfinished (its response's, or
/// an outbound request's): `finish` takes a body out of the resource table, and
/// Wasmtime ends a body whose instance goes as if it were complete.
fn unfinished_body(store: &mut wasmtime::Store<crate::state::InstanceState>) -> bool {
    store
        .data_mut()
        .http()
        .table
        .iter_mut()
        .any(|entry| entry.is::<HostOutgoingBody>())
}

/// Why a response body ended early, as its client and its tenant's logs say it.
fn body_cut_message(function: &str, timeout: Duration) -> String {
    format!(
        "function `{function}` did not finish its response body within {}ms",
        timeout.as_millis()
    )
}

/// Why an event whose guest finished its response body but not its own run within
/// its deadline failed, as its tenant's logs say it (its client got a whole body).
fn stopped_after_body_message(function: &str, timeout: Duration) -> String {
    format!(
        "function `{function}` was stopped at its deadline ({}ms), after it had finished \
         its response body",
        timeout.as_millis()
    )
}

/// What the client of a response whose guest failed after the head reads as the
/// body's error; the tenant's logs say why it failed.
fn body_failed_message(function: &str) -> String {
    format!("function `{function}` failed after its response head (see `faas logs`)")
}

/// Why a body ended early whose guest returned without finishing it (or another
/// outgoing body), as its client and its tenant's logs say it.
fn body_left_message(function: &str) -> String {
    format!(
        "function `{function}` returned without finishing its response body (or an outbound \
         request's)"
    )
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

pin_project_lite::pin_project! {
    /// A guest's response body that ends with an error, not a clean end, when its
    /// instance went before finishing it (the deadline cut it, or the guest failed or
    /// returned first): Wasmtime ends a body whose instance was dropped as if it were
    /// complete. The server holds the error back a moment, so that what came before
    /// it reaches the client (`faas_connections::ERROR_FLUSH_GRACE`).
    struct CutShort {
        #[pin]
        body: HyperOutgoingBody,
        streaming: Arc<Streaming>,
    }
}

impl Body for CutShort {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.project();
        match std::task::ready!(this.body.poll_frame(cx)) {
            Some(Ok(frame)) => Poll::Ready(Some(Ok(frame))),
            Some(Err(err)) => Poll::Ready(Some(Err(Box::new(err)))),
            None => Poll::Ready(this.streaming.take_cut().map(|why| Err(why.into()))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream() && !self.streaming.cut()
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

#[cfg(test)]
mod tests {
    use crate::worker::tests::{KeptLines, get, load_http};
    use crate::{Worker, WorkerConfig};
    use http_body_util::BodyExt;
    use std::sync::Arc;
    use std::time::Duration;

    /// A guest that finished its response body, then lingered in the host past its
    /// deadline, is stopped there, and its body stays whole however late its client
    /// reads the end; its tenant's logs say it was stopped. One that lingered with its
    /// body unfinished has it cut.
    #[tokio::test]
    async fn a_body_finished_before_the_deadline_stays_whole_however_late_its_end_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let lines = Arc::new(KeptLines::default());
        let worker = Worker::new(WorkerConfig::new(dir.path()))
            .unwrap()
            .with_logs(lines.clone());
        let workflow = load_http(&worker, "linger", "timeout_ms = 300").await;
        let past_the_deadline = Duration::from_millis(300) + crate::worker::HOST_WAIT_GRACE * 4;

        let finished = "/linger/answer?sleep-ms=60000";
        let unfinished = "/linger/sleep?ms=60000";
        for (path, whole, body) in [
            (finished, true, "answered\n"),
            (unfinished, false, "first chunk\n"),
        ] {
            let mut response = get(&worker, &workflow, path).await.unwrap().into_body();
            // Its first chunk now, and the rest only once the deadline has passed.
            let first = response.frame().await.unwrap().unwrap();
            assert_eq!(first.into_data().unwrap(), body.as_bytes(), "{path}");
            tokio::time::sleep(past_the_deadline).await;
            let end = response.collect().await;
            assert_eq!(end.is_ok(), whole, "{path}");
            if let Ok(rest) = end {
                assert!(rest.to_bytes().is_empty(), "{path}");
            }
        }

        let said: Vec<String> = lines
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|line| line.text.clone())
            .collect();
        assert_eq!(
            said,
            [
                "function `linger` was stopped at its deadline (300ms), after it had finished \
                 its response body",
                "function `linger` did not finish its response body within 300ms",
            ],
        );
    }
}
