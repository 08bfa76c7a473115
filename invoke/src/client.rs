//! [`RemoteWorker`]: the client side of a worker process's internal API, used by the
//! gateway (and by workers spreading branches to their peers).

use crate::wire;
use crate::{
    BodyError, BoxFuture, EventFailure, FailureKind, HttpResponse, InMemory, Invoke, ReplyRoom,
    RunReply, TriggerMessage,
};
use bytes::Bytes;
use http::{HeaderValue, Request};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long the gateway keeps an unused connection to a worker.
const POOL_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How a connection of the internal API finds out that its peer is gone while events
/// are in flight on it: an HTTP/2 ping after this long without a frame from the peer...
pub const KEEP_ALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// ...answered within this long, or the connection is closed and its events fail.
/// Without it a worker whose machine died (or froze) with events in flight held them,
/// and their clients, for good: nothing else bounds an event's wait, since a run may
/// take an hour and a function's response may stream for longer.
pub const KEEP_ALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The most header bytes one head may carry on the internal API, as HTTP/2 counts them
/// (each field's name and value, plus 32). HTTP/2's default, 16 KiB, is less than the
/// 64 KiB of headers a client's request (the gateway's limit) or a guest's response
/// (the worker's `MAX_FIELDS_BYTES`, which counts at least 72 bytes a field) may have:
/// a larger head reset its stream, failing the event as if its worker had gone.
pub const MAX_HEADER_LIST_BYTES: u32 = 128 << 10;

/// The most events a worker takes at once on one connection (HTTP/2 streams). Past
/// it, events wait in the client; HTTP/2's usual 200 would let one tenant's events,
/// waiting for its instance slots, hold every other tenant's back.
pub const MAX_STREAMS: u32 = 1024;

/// The most events of one tenant a client has in flight to one worker at once (HTTP/2
/// streams of its connection): half of [`MAX_STREAMS`], above a worker's default
/// instances per tenant (500), so that a tenant can use them all. An event holds its
/// stream while it waits at the worker for one of its tenant's instance slots, so one
/// tenant's events (a flood of requests to a route that sleeps) took every stream, and
/// every other tenant's events to that worker waited behind them. Its events past it
/// wait in the client, holding no stream.
pub const MAX_STREAMS_PER_TENANT: usize = MAX_STREAMS as usize / 2;

/// What may wait unread in one stream of the internal API, each way: an answer its
/// client does not read, a request body its guest does not read.
pub const STREAM_WINDOW_BYTES: u32 = 256 << 10;

/// What may wait unread in one connection of the internal API, each way: every
/// stream's window at once. HTTP/2 lets a connection's window be less than the sum of
/// its streams' (hyper's defaults: 2 MiB a stream, 5 MiB the connection), and then a
/// few streams left unread, by a client or a guest, held all of it: no tenant's body
/// moved on that connection until they went.
pub const CONNECTION_WINDOW_BYTES: u32 = STREAM_WINDOW_BYTES * MAX_STREAMS;

/// Clients of worker processes, one per worker id and address, so that connections
/// are reused across events.
pub struct RemoteWorkers {
    token: String,
    clients: Mutex<HashMap<(String, String), Arc<RemoteWorker>>>,
}

impl RemoteWorkers {
    /// Clients presenting `token`.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            clients: Mutex::default(),
        }
    }

    /// The client of worker `id` at `addr` (`host:port`).
    pub fn get(&self, id: &str, addr: &str) -> Arc<RemoteWorker> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients
            .entry((id.to_owned(), addr.to_owned()))
            .or_insert_with(|| Arc::new(RemoteWorker::new(id, addr, &self.token)))
            .clone()
    }
}

/// A worker in another process, reached over HTTP/2 (one multiplexed connection,
/// re-established when it drops).
#[derive(Clone)]
pub struct RemoteWorker {
    id: Arc<str>,
    base: Arc<str>,
    token: HeaderValue,
    /// The tenant and the workflow revision its events name, if any (see
    /// [`RemoteWorker::serving`]).
    revision: Option<(HeaderValue, HeaderValue)>,
    client: Client<HttpConnector, Full<Bytes>>,
    /// Each tenant's places among the connection's streams, shared by every clone.
    streams: Arc<TenantStreams>,
}

/// Each tenant's places among the streams of one worker's connection
/// ([`MAX_STREAMS_PER_TENANT`]). A tenant's entry stays once made: tenants are few,
/// and made by the operator.
#[derive(Default)]
struct TenantStreams(Mutex<HashMap<HeaderValue, Arc<Semaphore>>>);

impl TenantStreams {
    /// A place for one event of `tenant`, once one is free.
    async fn take(&self, tenant: &HeaderValue) -> OwnedSemaphorePermit {
        let places = {
            let mut by_tenant = self.0.lock().unwrap_or_else(|p| p.into_inner());
            by_tenant
                .entry(tenant.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(MAX_STREAMS_PER_TENANT)))
                .clone()
        };
        places
            .acquire_owned()
            .await
            .expect("a tenant's stream places are never closed")
    }
}

impl RemoteWorker {
    /// A client for worker `id` at `addr` (`host:port`), presenting `token`.
    ///
    /// # Panics
    /// If `token` is not a valid header value (it is generated or checked at start).
    pub fn new(id: &str, addr: &str, token: &str) -> Self {
        Self::with_keep_alive(id, addr, token, KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT)
    }

    /// [`RemoteWorker::new`] pinging a silent worker after `interval`, and giving up
    /// on it after `timeout` more.
    fn with_keep_alive(
        id: &str,
        addr: &str,
        token: &str,
        interval: std::time::Duration,
        timeout: std::time::Duration,
    ) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self {
            id: id.into(),
            base: format!("http://{addr}").into(),
            token: HeaderValue::from_str(token).expect("the internal token is a valid header"),
            revision: None,
            client: Client::builder(TokioExecutor::new())
                .http2_only(true)
                // Before the worker's own idle timeout (60 s by default) closes it.
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .http2_keep_alive_interval(interval)
                .http2_keep_alive_timeout(timeout)
                .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
                .http2_initial_stream_window_size(STREAM_WINDOW_BYTES)
                .http2_initial_connection_window_size(CONNECTION_WINDOW_BYTES)
                .build(connector),
            streams: Arc::default(),
        }
    }

    /// The worker's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// This client (sharing its connection) for events of `tenant`'s workflow at
    /// revision `revision`: a worker that holds that revision staged serves them with
    /// it, and none serves them with another tenant's workflow of the name.
    ///
    /// # Panics
    /// If `tenant` is not a valid header value (tenant names are checked at creation).
    pub fn serving(&self, tenant: &str, revision: u64) -> Arc<Self> {
        let tenant = HeaderValue::from_str(tenant).expect("a tenant name is a valid header");
        Arc::new(Self {
            revision: Some((tenant, HeaderValue::from(revision))),
            ..self.clone()
        })
    }

    /// Calls HTTP function `function` of `workflow` with `request`; the function's
    /// response streams back as it is.
    ///
    /// # Errors
    /// The [`EventFailure`] the worker reported, or an `unavailable` one when the
    /// worker cannot be reached.
    pub async fn call_function(
        &self,
        workflow: &str,
        function: &str,
        request: Request<Bytes>,
    ) -> Result<HttpResponse, EventFailure> {
        let (mut parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |path| path.as_str())
            .to_owned();
        let authority = parts
            .uri
            .authority()
            .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok())
            .or_else(|| parts.headers.get(http::header::HOST).cloned());
        parts.uri = format!("{}{path}", self.base)
            .parse()
            .map_err(|err| EventFailure::unavailable(format!("forwarding {path}: {err}")))?;
        parts.version = http::Version::HTTP_2;
        let headers = &mut parts.headers;
        // Empty for a client that named none (HTTP/1.0 without `Host`): the worker's
        // address is still not the function's to see.
        let authority = authority.unwrap_or_else(|| HeaderValue::from_static(""));
        headers.insert(wire::AUTHORITY, authority);
        headers.insert(wire::CALL, HeaderValue::from_static("http"));
        headers.insert(wire::FUNCTION, header_value(function)?);
        // Only the gateway speaks for a trigger message.
        headers.remove(wire::MESSAGE);
        self.prepare(headers, workflow)?;
        let place = self.stream_place(None).await;
        let response = self
            .send(Request::from_parts(parts, Full::new(body)))
            .await?;
        if response.headers().contains_key(wire::FAILURE) {
            return Err(failure_of(response).await);
        }
        // The place is the tenant's until the response's body is dropped (read to its
        // end, the stream is over sooner).
        Ok(response.map(|body| {
            body.map_frame(move |frame| {
                let _held = &place;
                frame
            })
            .map_err(|err| Box::new(err) as BodyError)
            .boxed_unsync()
        }))
    }

    /// Runs `workflow` from its entry step on `payload` (started by `message`, if
    /// any) and returns the run's record and result; without a record (an
    /// `unavailable` failure when the worker cannot be reached or does not hold the
    /// workflow) no step ran.
    pub async fn run(
        &self,
        workflow: &str,
        payload: Bytes,
        message: Option<&TriggerMessage>,
        room: &mut dyn ReplyRoom,
    ) -> RunReply {
        let place = self.stream_place(None).await;
        let body = match self.post("run", workflow, payload, message, room).await {
            Ok(body) => body,
            Err(failure) => return RunReply::not_run(failure),
        };
        drop(place);
        match wire::decode_run(&body) {
            Ok((record, result)) => RunReply {
                record: Some(record),
                result,
            },
            Err(mut failure) => {
                tracing::warn!(
                    worker = %self.id,
                    detail = ?crate::log_excerpt(&failure.message),
                    "a worker's run reply is malformed"
                );
                failure.message = "the worker's reply to the run was malformed".to_owned();
                RunReply::not_run(failure)
            }
        }
    }

    /// Sends a branch call frame (a worker spreading a fan-out branch to this one)
    /// and returns the reply frame.
    ///
    /// # Errors
    /// An `unavailable` [`EventFailure`] when the worker cannot be reached or does not
    /// hold the workflow.
    pub async fn branch(
        &self,
        tenant: &str,
        workflow: &str,
        frame: Vec<u8>,
    ) -> Result<Bytes, EventFailure> {
        let place = self.stream_place(Some(&header_value(tenant)?)).await;
        // A peer's reply, which the calling worker counts once it is read
        // (`uncarry`).
        let reply = self
            .post("branch", workflow, Bytes::from(frame), None, &mut InMemory)
            .await;
        drop(place);
        reply
    }

    /// POSTs `body` as a `call` of `workflow` and returns the reply's body, counted in
    /// `room` as it arrives.
    async fn post(
        &self,
        call: &'static str,
        workflow: &str,
        body: Bytes,
        message: Option<&TriggerMessage>,
        room: &mut dyn ReplyRoom,
    ) -> Result<Bytes, EventFailure> {
        let mut request = Request::post(format!("{}/", self.base))
            .version(http::Version::HTTP_2)
            .body(Full::new(body))
            .expect("a POST to the worker is valid");
        let headers = request.headers_mut();
        headers.insert(wire::CALL, HeaderValue::from_static(call));
        if let Some(message) = message {
            let json = serde_json::to_string(message).expect("a message serializes");
            headers.insert(wire::MESSAGE, header_value(&json)?);
        }
        self.prepare(headers, workflow)?;
        let response = self.send(request).await?;
        if response.headers().contains_key(wire::FAILURE) {
            return Err(failure_of(response).await);
        }
        let mut body = response.into_body();
        let mut reply: Vec<u8> = Vec::new();
        // A worker's reply has its length: counted before any of it is read, and
        // allocated once (up to a point: the length is the worker's word).
        if let Some(len) = hyper::body::Body::size_hint(&body).exact() {
            room.grow_to(len)?;
            reply.reserve_exact(usize::try_from(len.min(MAX_RESERVED)).unwrap_or(0));
        }
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|err| self.lost(&err))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let needed = reply.len() + data.len();
            if needed > reply.capacity() {
                // What is allocated is what is counted, growth included.
                let capacity = needed.max(2 * reply.capacity());
                room.grow_to(capacity as u64)?;
                reply.reserve_exact(capacity - reply.len());
            }
            reply.extend_from_slice(&data);
        }
        Ok(reply.into())
    }

    /// A place among the connection's streams for an event of `tenant`, or of the
    /// tenant this client serves ([`RemoteWorker::serving`]) when `None`; waited for
    /// while that tenant has [`MAX_STREAMS_PER_TENANT`] events in flight. None for a
    /// call of no tenant's.
    async fn stream_place(&self, tenant: Option<&HeaderValue>) -> Option<OwnedSemaphorePermit> {
        let tenant = tenant.or(self.revision.as_ref().map(|(tenant, _)| tenant))?;
        Some(self.streams.take(tenant).await)
    }

    fn prepare(&self, headers: &mut http::HeaderMap, workflow: &str) -> Result<(), EventFailure> {
        headers.insert(wire::WORKFLOW, header_value(workflow)?);
        headers.insert(wire::TOKEN, self.token.clone());
        // Only the gateway names a tenant and a revision, never the request it
        // forwards.
        match &self.revision {
            Some((tenant, revision)) => {
                headers.insert(wire::TENANT, tenant.clone());
                headers.insert(wire::REVISION, revision.clone());
            }
            None => {
                headers.remove(wire::TENANT);
                headers.remove(wire::REVISION);
            }
        }
        Ok(())
    }

    async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, EventFailure> {
        use tracing::Instrument as _;
        // The hand-over to the worker: its run or function span is this span's child.
        let span = tracing::info_span!(
            "handover",
            otel.kind = "client",
            worker = %self.id,
            call = request
                .headers()
                .get(wire::CALL)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default(),
        );
        crate::trace::inject(&span, request.headers_mut());
        self.client
            .request(request)
            .instrument(span)
            .await
            .map_err(|err| {
                if err.is_connect() {
                    self.unreachable(&err)
                } else {
                    self.lost(&err)
                }
            })
    }

    // The failures below reach tenants (responses, runs, `faas logs`), so their text
    // names no worker and no address inside the platform: those go to the platform's
    // log, with the error.

    /// The worker could not be reached: the event never got there, so it may go to
    /// another replica (at `debug`: the activator sends it again, and a worker's loss
    /// is the registry's to report).
    fn unreachable(&self, err: &dyn std::fmt::Display) -> EventFailure {
        tracing::debug!(worker = %self.id, address = %self.base, error = %err, "worker unreachable");
        EventFailure::unavailable(UNREACHABLE)
    }

    /// The connection broke after the event was sent: it may have run, so it is not
    /// passed on.
    fn lost(&self, err: &dyn std::fmt::Display) -> EventFailure {
        tracing::warn!(
            worker = %self.id,
            address = %self.base,
            error = %err,
            "a worker went away during an event"
        );
        EventFailure::new(FailureKind::WorkerLost, 502, LOST)
    }
}

/// What a tenant is told of an event whose worker could not be reached.
pub const UNREACHABLE: &str = "no worker could be reached to take the event";

/// What a tenant is told of an event whose worker went away while it ran.
pub const LOST: &str = "the worker running the event went away during it (it may have run)";

fn header_value(value: &str) -> Result<HeaderValue, EventFailure> {
    HeaderValue::from_str(value)
        .map_err(|_| EventFailure::unavailable(format!("`{value}` is not a valid header value")))
}

/// The most of a reply allocated before its bytes arrive, whatever length it
/// announces.
const MAX_RESERVED: u64 = 64 << 20;

/// The most of a worker's failure report that is read: far more than any (the
/// message in it is cut to a few KiB where it is made).
const MAX_FAILURE_BYTES: usize = 64 << 10;

async fn failure_of(response: http::Response<hyper::body::Incoming>) -> EventFailure {
    let status = response.status().as_u16();
    match Limited::new(response.into_body(), MAX_FAILURE_BYTES)
        .collect()
        .await
    {
        Ok(body) => serde_json::from_slice(&body.to_bytes()).unwrap_or_else(|err| {
            EventFailure::new(
                FailureKind::BadReply,
                status,
                format!("the worker's failure report is malformed: {err}"),
            )
        }),
        // It ran: a report past the limit is no reason to run it elsewhere.
        Err(err) if err.downcast_ref::<LengthLimitError>().is_some() => EventFailure::new(
            FailureKind::BadReply,
            502,
            format!("the worker's failure report is longer than {MAX_FAILURE_BYTES} bytes"),
        ),
        Err(err) => EventFailure::unavailable(format!("reading the worker's reply: {err}")),
    }
}

impl Invoke for RemoteWorker {
    fn call_function<'a>(
        &'a self,
        workflow: &'a str,
        function: &'a str,
        request: Request<Bytes>,
    ) -> BoxFuture<'a, Result<HttpResponse, EventFailure>> {
        Box::pin(RemoteWorker::call_function(
            self, workflow, function, request,
        ))
    }

    fn run<'a>(
        &'a self,
        workflow: &'a str,
        payload: Bytes,
        message: Option<TriggerMessage>,
        room: &'a mut dyn ReplyRoom,
    ) -> BoxFuture<'a, RunReply> {
        Box::pin(
            async move { RemoteWorker::run(self, workflow, payload, message.as_ref(), room).await },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker client for `addr`, and the event it fails.
    async fn call(addr: std::net::SocketAddr) -> EventFailure {
        let worker = RemoteWorker::new("w-secret", &addr.to_string(), "token");
        let request = Request::get("/hello").body(Bytes::new()).unwrap();
        worker
            .call_function("hello", "hello", request)
            .await
            .expect_err("no worker answers there")
    }

    fn assert_names_nothing_inside(failure: &EventFailure, addr: std::net::SocketAddr) {
        for inside in ["w-secret", &addr.to_string(), &addr.port().to_string()] {
            assert!(!failure.message.contains(inside), "{failure:?}");
        }
    }

    #[tokio::test]
    async fn an_unreachable_worker_is_not_named_to_the_tenant() {
        // A port that was just free: nothing listens there.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let failure = call(addr).await;
        assert_eq!(
            (failure.kind, failure.status),
            (FailureKind::Unavailable, 503)
        );
        assert_eq!(failure.message, UNREACHABLE);
        assert_names_nothing_inside(&failure, addr);
    }

    #[tokio::test]
    async fn a_worker_lost_during_an_event_is_not_named_to_the_tenant() {
        // Accepts the connection and drops it: the event was sent, then the worker went.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(stream);
            }
        });
        let failure = call(addr).await;
        assert_eq!(
            (failure.kind, failure.status),
            (FailureKind::WorkerLost, 502)
        );
        assert_eq!(failure.message, LOST);
        assert_names_nothing_inside(&failure, addr);
    }

    /// A worker that goes silent with an event in flight (its machine died or froze:
    /// the connection stays open, nothing answers) held the event, and its client,
    /// for good. A ping unanswered in time now ends it as a lost worker.
    #[tokio::test]
    async fn a_worker_gone_silent_during_an_event_is_lost_not_waited_for() {
        use std::time::Duration;
        // Accepts connections and keeps them open, reading nothing and sending nothing.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let worker = RemoteWorker::with_keep_alive(
            "w-secret",
            &addr.to_string(),
            "token",
            Duration::from_millis(100),
            Duration::from_millis(300),
        );
        let request = Request::get("/hello").body(Bytes::new()).unwrap();
        let event = worker.call_function("hello", "hello", request);
        let failure = tokio::time::timeout(Duration::from_secs(30), event)
            .await
            .expect("the event ends without an answer")
            .expect_err("no worker answers there");
        assert_eq!(
            (failure.kind, failure.status),
            (FailureKind::WorkerLost, 502)
        );
        assert_names_nothing_inside(&failure, addr);
    }
}
