//! Outbound HTTP from guests (`wasi:http/outgoing-handler`): denied unless the
//! function's `allowed_outbound_hosts` allows it, as in Spin.
//!
//! Every request is checked twice. Its URL must match an entry
//! ([`AllowedOutboundHosts::access`]); then the host is resolved here, every address it
//! resolves to is checked ([`OutboundAccess::allows_address`]: public addresses, and
//! for an entry that names its host those of the non-public networks the operator
//! opened, `--outbound-private-networks`; so neither `http://*` nor a tenant's own
//! name for them opens loopback, private networks or the cloud metadata address), and
//! the connection goes to a checked address. Nothing
//! resolves the name again after the check, so a DNS answer that changes in between
//! (DNS rebinding) cannot redirect the request. A denied request fails in the guest with
//! `error-code.HTTP-request-denied`.
//!
//! The connect (DNS and TLS included), first-byte and between-bytes timeouts are the
//! guest's `request-options` if it sets them, bounded by what is left of the event's
//! deadline. An instance has at most
//! [`crate::WorkerConfig::max_outbound_connections_per_instance`] requests in flight
//! (each a connection, a descriptor, and a name lookup on a blocking thread until it
//! connects, or until the lookup returns if that is later: see [`crate::lookups`]);
//! one more fails at once with `error-code.connection-limit-reached`. A request's
//! connection and its I/O are polled only with one of its tenant's fair turns while
//! another tenant is active ([`crate::fair`]), so their CPU time counts in the
//! tenant's share.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use crate::fair::CpuShares;
use crate::host_limits::MAX_OUTBOUND_READ_BYTES;
use crate::lookups::{LookupError, Lookups};
use bytes::Bytes;
use faas_workflow::{AllowedOutboundHosts, OutboundAccess};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use ipnet::IpNet;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use wasmtime_wasi_http::p2::bindings::http::types::{ErrorCode, FieldSizePayload};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// How long a connection may take to open when the guest does not say, at most.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The future `send_request` hands back: the response head, and the connection's I/O
/// that carries its body.
type SendFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

/// Where an event's outbound requests may go: its function's allow-list, and the
/// non-public networks the operator opened to entries that name their host; and the
/// worker's name lookups that find them, counted for the tenant.
#[derive(Clone)]
pub(crate) struct Destinations {
    /// The function's `allowed_outbound_hosts`.
    pub(crate) allowed: Arc<AllowedOutboundHosts>,
    /// The networks the worker's `--outbound-private-networks` opens to the tenant.
    pub(crate) opened: Arc<[IpNet]>,
    /// The worker's lookups under way.
    pub(crate) lookups: Arc<Lookups>,
    /// Whose lookups and connections they are.
    pub(crate) tenant: Arc<str>,
    /// The worker's open connections, by tenant.
    pub(crate) connections: Arc<Connections>,
    /// The turns the worker's guests take: a request's connection (TLS included) and
    /// its I/O take its tenant's too ([`CpuShares::run_host`]).
    pub(crate) shares: Arc<CpuShares>,
}

/// A worker's open outbound connections, by tenant (each a descriptor): all instances'
/// at most `--max-outbound-connections`, one tenant's a quarter of them. An instance's
/// own cap times a tenant's instances allowed 16,000 per tenant.
pub(crate) type Connections = faas_budget::Budget<Arc<str>>;

/// The connections of a worker that has `max` places, none taken.
pub(crate) fn connections(max: usize) -> Arc<Connections> {
    let max = max as u64;
    Arc::new(Connections::new(faas_budget::BudgetLimits {
        total: max,
        per_holder: (max / 4).max(1),
    }))
}

/// The `wasi:http` hooks of one event's store: where it may send requests, and its
/// deadline.
#[derive(Clone)]
pub(crate) struct Outbound {
    destinations: Destinations,
    deadline: Instant,
    function: Arc<str>,
    /// The span of the event (a step attempt, an HTTP call) the store was made in: the
    /// parent of each outbound request's span, whose `traceparent` the request carries.
    span: tracing::Span,
    /// The requests this instance may still have in flight (connections open at once);
    /// made on the first request, so that an event that sends none pays nothing.
    connections: Option<Arc<Semaphore>>,
    max_connections: usize,
}

impl Outbound {
    /// How many outbound connections the instance has open (each until its response
    /// body is read or dropped), claimed in its guest memory (`State::claim_handles`).
    pub(crate) fn connections_open(&self) -> usize {
        self.connections.as_ref().map_or(0, |connections| {
            self.max_connections - connections.available_permits()
        })
    }

    /// The span of the event the store was made in.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The hooks of an event of `function` that must end within `timeout` from now,
    /// with at most `max_connections` requests in flight at once.
    pub fn new(
        destinations: Destinations,
        function: Arc<str>,
        timeout: Duration,
        max_connections: usize,
    ) -> Self {
        Self {
            destinations,
            deadline: Instant::now() + timeout,
            function,
            span: tracing::Span::current(),
            connections: None,
            max_connections,
        }
    }
}

impl WasiHttpHooks for Outbound {
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        crate::host_limits::MAX_BODY_WRITE_BYTES
    }

    // The three error hooks below are what a guest's failed requests come to, as
    // often as it likes to fail them: Wasmtime's defaults log each at `warn` in the
    // platform's log, so they log at `debug` here.

    fn p2_error_from_hyper(&mut self, err: &hyper::Error) -> ErrorCode {
        tracing::debug!(function = %self.function, error = %err, "outbound HTTP error");
        if err.is_parse_too_large() {
            ErrorCode::HttpResponseHeaderSize(FieldSizePayload {
                field_name: None,
                field_size: None,
            })
        } else {
            ErrorCode::HttpProtocolError
        }
    }

    fn p2_error_from_connect(&mut self, err: &std::io::Error) -> ErrorCode {
        tracing::debug!(function = %self.function, error = %err, "outbound connect error");
        ErrorCode::ConnectionRefused
    }

    fn p2_error_from_tls(&mut self, err: &std::io::Error) -> ErrorCode {
        tracing::debug!(function = %self.function, error = %err, "outbound TLS error");
        ErrorCode::TlsProtocolError
    }

    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> SendFuture {
        use tracing::Instrument as _;
        let max = self.max_connections;
        let connections = self
            .connections
            .get_or_insert_with(|| Arc::new(Semaphore::new(max)));
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::debug!(function = %self.function, "outbound connection limit reached");
            return Box::new(std::future::ready(Err(Error::ConnectionLimitReached)));
        };
        let mut place = self
            .destinations
            .connections
            .claim(self.destinations.tenant.clone());
        if place.grow_to(1).is_err() {
            tracing::debug!(function = %self.function, "the tenant's or the worker's outbound connection limit reached");
            return Box::new(std::future::ready(Err(Error::ConnectionLimitReached)));
        }
        let connection = Connection {
            _permit: permit,
            _place: place,
        };
        let destinations = self.destinations.clone();
        let deadline = self.deadline;
        let function = self.function.clone();
        let span = tracing::info_span!(
            parent: &self.span,
            "outbound",
            otel.kind = "client",
            http.request.method = %request.method(),
            server.address = faas_invoke::trace::attribute(request.uri().host().unwrap_or_default()),
        );
        // The platform's trace context replaces whatever the guest wrote: the callee
        // continues the trace this step is part of.
        faas_invoke::trace::inject(&span, request.headers_mut());
        // Shared with the request's name lookup, which may outlive the request.
        let connection = Arc::new(connection);
        let lookup_holds = connection.clone();
        let (shares, tenant) = (destinations.shares.clone(), destinations.tenant.clone());
        let sent = async move {
            let result = send(&destinations, deadline, request, options, lookup_holds).await;
            if let Err(Error::HttpRequestDenied) = &result {
                tracing::debug!(%function, "outbound request denied");
            }
            // The connection counts until its I/O ends (the body read, or dropped).
            result.map(|(response, io)| {
                let io = async move {
                    let _connection = connection;
                    Pin::from(io).await
                };
                let io: Box<dyn Future<Output = _> + Send> =
                    Box::new(destinations.shares.run_host(destinations.tenant, io));
                (response, io)
            })
        };
        // The CPU time of opening the connection (a TLS handshake's key exchange and
        // certificate checks, as often as the guest likes) and of moving its bytes is
        // the tenant's, taken in turns like its guests' (`fair.rs`): outside them, a
        // tenant's handshakes to a server of its own could take the cores from every
        // other tenant's guests.
        Box::new(shares.run_host(tenant, sent.instrument(span)))
    }
}

/// What an open connection holds: its place among its instance's connections, and
/// among its tenant's on the worker.
struct Connection {
    _permit: OwnedSemaphorePermit,
    _place: faas_budget::Claim<Arc<str>>,
}

/// A destination the allow-list let through, with the addresses to connect to.
#[derive(Debug)]
struct Checked {
    use_tls: bool,
    /// The host as in the URL, without IPv6 brackets.
    host: String,
    /// Set when the host is an IP address.
    ip: Option<IpAddr>,
    addresses: Vec<SocketAddr>,
}

/// Checks `uri` against `to`'s allow-list, resolves its host (within `connect_by`;
/// the lookup holds `connection` until it returns) and checks every address.
async fn check(
    to: &Destinations,
    uri: &http::Uri,
    connect_by: Instant,
    connection: Arc<Connection>,
) -> Result<Checked, Error> {
    let use_tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(Error::HttpRequestDenied),
    };
    let authority = uri.authority().ok_or(Error::HttpRequestUriInvalid)?;
    // User info would go out in the `host` header, which names the connection's host
    // otherwise: a proxy or virtual host there could route by the part no check saw.
    if authority.as_str().contains('@') {
        return Err(Error::HttpRequestUriInvalid);
    }
    let host = authority.host();
    let port = uri.port_u16().unwrap_or(if use_tls { 443 } else { 80 });
    let access = to
        .allowed
        .access(if use_tls { "https" } else { "http" }, host, port);
    if access == OutboundAccess::Denied {
        return Err(Error::HttpRequestDenied);
    }
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .to_owned();
    let ip = host.parse::<IpAddr>().ok();
    let addresses: Vec<SocketAddr> = match ip {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => {
            let lookup = to
                .lookups
                .resolve(&to.tenant, host.clone(), port, connection);
            match tokio::time::timeout_at(connect_by, lookup).await {
                Err(_) => return Err(Error::DnsTimeout),
                Ok(Err(err @ (LookupError::Busy | LookupError::Failed))) => {
                    return Err(Error::DnsError {
                        rcode: Some(err.to_string()),
                        info_code: None,
                    });
                }
                Ok(Ok(addresses)) => addresses,
            }
        }
    };
    if addresses.is_empty() {
        return Err(Error::DestinationNotFound);
    }
    // Every address, not only the first: which one is used is not ours to choose.
    if !addresses
        .iter()
        .all(|address| access.allows_address(address.ip(), &to.opened))
    {
        return Err(Error::HttpRequestDenied);
    }
    Ok(Checked {
        use_tls,
        host,
        ip,
        addresses,
    })
}

/// The timeouts of one request: the guest's, or the defaults, never past the deadline.
struct Timeouts {
    connect_by: Instant,
    first_byte: Duration,
    between_bytes: Duration,
}

impl Timeouts {
    fn new(options: Option<RequestOptions>, deadline: Instant) -> Result<Timeouts, Error> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::ConnectionTimeout);
        }
        let options = options.unwrap_or_default();
        let bounded =
            |asked: Option<Duration>, default: Duration| asked.unwrap_or(default).min(left);
        Ok(Timeouts {
            connect_by: Instant::now() + bounded(options.connect_timeout, DEFAULT_CONNECT_TIMEOUT),
            first_byte: bounded(options.first_byte_timeout, left),
            // Tokio panics on an interval of zero.
            between_bytes: bounded(options.between_bytes_timeout, left)
                .max(Duration::from_nanos(1)),
        })
    }
}

/// A connection, plain or TLS.
trait Stream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> Stream for T {}

/// Sends `request` if `to` lets it through; the connection goes to one of the
/// addresses that were checked.
async fn send(
    to: &Destinations,
    deadline: Instant,
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    connection: Arc<Connection>,
) -> Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), Error>> + Send>,
    ),
    Error,
> {
    let timeouts = Timeouts::new(options, deadline)?;
    let checked = check(to, request.uri(), timeouts.connect_by, connection).await?;
    let tcp = connect(&checked.addresses, timeouts.connect_by).await?;
    let stream: Box<dyn Stream> = if checked.use_tls {
        let server_name = match checked.ip {
            Some(ip) => rustls::pki_types::ServerName::IpAddress(ip.into()),
            None => rustls::pki_types::ServerName::try_from(checked.host.clone())?,
        };
        let connector = tokio_rustls::TlsConnector::from(tls_config());
        let tls = tokio::time::timeout_at(timeouts.connect_by, connector.connect(server_name, tcp))
            .await
            .map_err(|_| Error::ConnectionTimeout)?
            .map_err(Error::Tls)?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    let (mut sender, conn) = tokio::time::timeout_at(
        timeouts.connect_by,
        hyper::client::conn::http1::Builder::new()
            .max_buf_size(MAX_OUTBOUND_READ_BYTES)
            .handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)??;

    // The request goes to the origin itself, not to a proxy: origin-form. The `host`
    // header, set from the URL's authority, still names the host.
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .to_owned();
    *request.uri_mut() = http::Uri::try_from(path).map_err(|_| Error::HttpRequestUriInvalid)?;

    let first_byte = timeouts.first_byte;
    let between_bytes = timeouts.between_bytes;
    let mut response = pin!(async move {
        let response = tokio::time::timeout(first_byte, sender.send_request(request))
            .await
            .map_err(|_| Error::ConnectionReadTimeout)??;
        let mut timeout = tokio::time::interval(between_bytes);
        timeout.reset();
        Ok::<_, Error>(response.map(|incoming| TimedBody { incoming, timeout }.boxed_unsync()))
    });
    // Drive the connection until the response head arrives; the connection's I/O then
    // goes back to the caller, which runs it while the body is read.
    let mut conn = Some(conn);
    let response = std::future::poll_fn(|cx| {
        if let Poll::Ready(result) = response.as_mut().poll(cx) {
            return Poll::Ready(result);
        }
        let Some(io) = conn.as_mut() else {
            return Poll::Pending;
        };
        let result = ready!(Pin::new(io).poll(cx));
        conn = None;
        match result {
            Ok(()) => response.as_mut().poll(cx),
            Err(err) => Poll::Ready(Err(Error::from(err))),
        }
    })
    .await?;
    let io = async move {
        match conn {
            Some(conn) => conn.await.map_err(|err| {
                if err.is_timeout() {
                    Error::HttpResponseTimeout
                } else {
                    Error::from(err)
                }
            }),
            None => Ok(()),
        }
    };
    Ok((response, Box::new(io)))
}

/// Connects to the first of `addresses` that accepts, by `connect_by`.
async fn connect(addresses: &[SocketAddr], connect_by: Instant) -> Result<TcpStream, Error> {
    let mut last_error = None;
    for address in addresses {
        match tokio::time::timeout_at(connect_by, TcpStream::connect(address)).await {
            Err(_) => return Err(Error::ConnectionTimeout),
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(err)) => last_error = Some(err),
        }
    }
    Err(last_error.map_or(Error::DestinationNotFound, Error::Connect))
}

/// The TLS client configuration: the Mozilla roots (`webpki-roots`), no client
/// certificate.
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

/// A response body that fails when no frame arrives within the between-bytes timeout.
struct TimedBody {
    incoming: hyper::body::Incoming,
    timeout: tokio::time::Interval,
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Err(err))) if err.is_timeout() => {
                Poll::Ready(Some(Err(Error::HttpResponseTimeout)))
            }
            Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(Error::from(err)))),
            Poll::Ready(Some(Ok(frame))) => {
                self.timeout.reset();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                ready!(self.timeout.poll_tick(cx));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.incoming)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::Body::size_hint(&self.incoming)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faas_workflow::OutboundHost;
    use http_body_util::Empty;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A connection's places of its own, for a request sent without an [`Outbound`].
    fn permit() -> Arc<Connection> {
        let mut place = connections(64).claim("test".into());
        place.grow_to(1).unwrap();
        Arc::new(Connection {
            _permit: Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap(),
            _place: place,
        })
    }

    /// `entries`, with loopback opened by the operator (where the test servers are).
    fn hosts(entries: &[&str]) -> Destinations {
        let opened = ["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()];
        hosts_opening(entries, &opened)
    }

    /// `entries`, with `opened` opened by the operator.
    fn hosts_opening(entries: &[&str], opened: &[IpNet]) -> Destinations {
        let allowed = entries
            .iter()
            .map(|entry| OutboundHost::parse(entry).unwrap())
            .collect();
        Destinations {
            allowed: Arc::new(AllowedOutboundHosts(allowed)),
            opened: opened.into(),
            lookups: Lookups::new(),
            tenant: Arc::from("t"),
            connections: connections(64),
            shares: CpuShares::new(2, || ()),
        }
    }

    fn get(url: &str) -> http::Request<WasiBody> {
        let body = Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed_unsync();
        let authority = url.split('/').nth(2).unwrap().to_owned();
        http::Request::get(url)
            .header(http::header::HOST, authority)
            .body(body)
            .unwrap()
    }

    /// A server on 127.0.0.1 that answers each connection with `reply` (after reading
    /// the request head), or holds it open without answering when `reply` is `None`.
    fn server(reply: Option<&'static str>) -> u16 {
        recording_server(reply).0
    }

    /// Like [`server`], also passing on each request head it read.
    fn recording_server(reply: Option<&'static str>) -> (u16, std::sync::mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (heads, received) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let heads = heads.clone();
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                        head.push(byte[0]);
                    }
                    let _ = heads.send(String::from_utf8_lossy(&head).into_owned());
                    match reply {
                        Some(body) => {
                            let response = format!(
                                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = stream.write_all(response.as_bytes());
                        }
                        None => std::thread::sleep(Duration::from_secs(30)),
                    }
                });
            }
        });
        (port, received)
    }

    async fn fetch(to: &Destinations, url: &str, timeout: Duration) -> Result<String, Error> {
        let deadline = Instant::now() + timeout;
        let (response, io) = send(to, deadline, get(url), None, permit()).await?;
        let io = tokio::spawn(Pin::from(io));
        let body = response.into_body().collect().await?.to_bytes();
        let _ = io.await;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    fn denied(result: Result<String, Error>) -> bool {
        matches!(result, Err(Error::HttpRequestDenied))
    }

    #[tokio::test]
    async fn outbound_requests_carry_the_events_traceparent() {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let _default = tracing::subscriber::set_default(subscriber);
        let (port, heads) = recording_server(Some("ok"));
        let url = format!("http://127.0.0.1:{port}/");
        let step = tracing::info_span!("step");
        let trace_id = faas_invoke::trace::trace_id(&step).expect("the span is traced");
        let mut outbound = step.in_scope(|| {
            Outbound::new(
                hosts(&[&format!("http://127.0.0.1:{port}")]),
                Arc::from("f"),
                Duration::from_secs(5),
                1,
            )
        });
        // A guest's own `traceparent` does not pass for the platform's.
        let mut request = get(&url);
        request.headers_mut().insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        );
        let sent = outbound.send_request(request, None, Box::new(async { Ok(()) }));
        let (response, io) = Pin::from(sent).await.expect("sent");
        let io = tokio::spawn(Pin::from(io));
        response.into_body().collect().await.expect("the body");
        let _ = io.await;
        let head = heads
            .recv_timeout(Duration::from_secs(5))
            .expect("a request head");
        let traceparent = head
            .lines()
            .find_map(|line| line.strip_prefix("traceparent: "))
            .unwrap_or_else(|| panic!("no traceparent in {head:?}"));
        assert!(
            traceparent.starts_with(&format!("00-{trace_id}-")),
            "{traceparent} is not in trace {trace_id}"
        );
        assert_eq!(head.matches("traceparent").count(), 1, "{head}");
    }

    #[tokio::test]
    async fn every_request_is_denied_by_default() {
        let port = server(Some("secret"));
        let none = hosts(&[]);
        let url = format!("http://127.0.0.1:{port}/metrics");
        assert!(denied(fetch(&none, &url, Duration::from_secs(5)).await));
    }

    #[tokio::test]
    async fn wildcards_reach_no_loopback_even_by_name() {
        let port = server(Some("secret"));
        let wildcard = hosts(&["http://*:*", "*://*.localhost:*"]);
        for url in [
            format!("http://127.0.0.1:{port}/"),
            format!("http://localhost:{port}/"),
            format!("http://127.1:{port}/"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            format!("http://[::1]:{port}/"),
            // Only local targets: were the check broken, nothing would leave this
            // machine. Link-local and private addresses are classified by the same
            // rule, covered in `faas_workflow::outbound`'s unit tests.
            "http://0.0.0.0/".to_owned(),
        ] {
            let result = fetch(&wildcard, &url, Duration::from_secs(5)).await;
            assert!(denied(result), "{url} was not denied");
        }
    }

    // A tenant chooses its entries' names and what they resolve to: naming loopback (or
    // the metadata address, or a private network) opens nothing the operator did not.
    #[tokio::test]
    async fn an_explicit_entry_reaches_no_address_the_operator_did_not_open() {
        let port = server(Some("secret"));
        for (entries, url) in [
            (
                format!("http://127.0.0.1:{port}"),
                format!("http://127.0.0.1:{port}/"),
            ),
            (
                format!("http://localhost:{port}"),
                format!("http://localhost:{port}/"),
            ),
            (
                format!("http://[::1]:{port}"),
                format!("http://[::1]:{port}/"),
            ),
        ] {
            let closed = hosts_opening(&[&entries], &[]);
            let result = fetch(&closed, &url, Duration::from_secs(5)).await;
            assert!(denied(result), "{url} was not denied");
            // Another network opened does not open this one.
            let elsewhere = hosts_opening(&[&entries], &["10.0.0.0/8".parse().unwrap()]);
            let result = fetch(&elsewhere, &url, Duration::from_secs(5)).await;
            assert!(denied(result), "{url} was not denied");
        }
    }

    #[tokio::test]
    async fn an_explicit_entry_reaches_loopback_where_the_operator_opened_it() {
        let port = server(Some("hello from loopback"));
        let explicit = hosts(&[&format!("http://127.0.0.1:{port}")]);
        let url = format!("http://127.0.0.1:{port}/x");
        let body = fetch(&explicit, &url, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(body, "hello from loopback");
        // The entry names that address: the same server by another name is denied.
        let by_name = format!("http://localhost:{port}/x");
        assert!(denied(
            fetch(&explicit, &by_name, Duration::from_secs(5)).await
        ));
        // Named by `localhost`, the name is what is allowed.
        let localhost = hosts(&[&format!("http://localhost:{port}")]);
        let body = fetch(&localhost, &by_name, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(body, "hello from loopback");
    }

    // Two threads: the test blocks one waiting for the server's heads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_instance_has_at_most_its_limit_of_requests_in_flight() {
        let (port, heads) = recording_server(None);
        let url = format!("http://127.0.0.1:{port}/");
        let mut outbound = Outbound::new(
            hosts(&[&format!("http://127.0.0.1:{port}")]),
            Arc::from("f"),
            Duration::from_secs(30),
            2,
        );
        let send = |outbound: &mut Outbound| {
            Pin::from(outbound.send_request(get(&url), None, Box::new(async { Ok(()) })))
        };
        // Two requests the silent server holds open, each a connection.
        let held: Vec<_> = (0..2).map(|_| tokio::spawn(send(&mut outbound))).collect();
        for _ in 0..2 {
            heads
                .recv_timeout(Duration::from_secs(5))
                .expect("a connection");
        }
        // A third fails at once, without connecting.
        assert!(matches!(
            send(&mut outbound).await,
            Err(Error::ConnectionLimitReached)
        ));
        assert!(heads.recv_timeout(Duration::from_millis(200)).is_err());
        // One given up frees its place for the next.
        held[0].abort();
        let _ = (&mut { held }.remove(0)).await;
        let next = tokio::spawn(send(&mut outbound));
        heads
            .recv_timeout(Duration::from_secs(5))
            .expect("the next request connects");
        next.abort();
    }

    // Two threads: the test blocks one waiting for the server's heads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tenant_has_at_most_a_quarter_of_the_workers_connections_and_another_its_own() {
        let (port, heads) = recording_server(None);
        let url = format!("http://127.0.0.1:{port}/");
        // Eight on the worker: two a tenant.
        let worker = connections(8);
        let instance_of = |tenant: &str| {
            let mut destinations = hosts(&[&format!("http://127.0.0.1:{port}")]);
            destinations.tenant = Arc::from(tenant);
            destinations.connections = worker.clone();
            Outbound::new(destinations, Arc::from("f"), Duration::from_secs(30), 32)
        };
        let send = |outbound: &mut Outbound| {
            Pin::from(outbound.send_request(get(&url), None, Box::new(async { Ok(()) })))
        };
        // Tenant a's two instances each hold a request the silent server keeps open...
        let mut first = instance_of("a");
        let mut second = instance_of("a");
        let held = [
            tokio::spawn(send(&mut first)),
            tokio::spawn(send(&mut second)),
        ];
        for _ in 0..2 {
            heads
                .recv_timeout(Duration::from_secs(5))
                .expect("a connection");
        }
        // ...and its third fails at once, though its instances are far below their own
        // limit, without connecting.
        let mut third = instance_of("a");
        assert!(matches!(
            send(&mut third).await,
            Err(Error::ConnectionLimitReached)
        ));
        assert!(heads.recv_timeout(Duration::from_millis(200)).is_err());
        // Tenant b has its own.
        let mut other = instance_of("b");
        let theirs = tokio::spawn(send(&mut other));
        heads
            .recv_timeout(Duration::from_secs(5))
            .expect("the other tenant's request connects");
        for task in held.iter().chain([&theirs]) {
            task.abort();
        }
    }

    /// Sends a request of tenant `t` to a server on loopback while a poll of
    /// `holder`'s holds the only turn, and says whether it connected before that poll
    /// ended (waiting 300 ms for it); then checks that it connects and is answered
    /// once the poll has ended.
    async fn connects_while_the_turn_is_held_by(holder: &str) -> bool {
        let (port, heads) = recording_server(Some("served"));
        let url = format!("http://127.0.0.1:{port}/");
        let shares = CpuShares::new(1, || ());
        let mut to = hosts(&[&format!("http://127.0.0.1:{port}")]);
        to.shares = shares.clone();
        let (polling, polled) = std::sync::mpsc::channel();
        let (end, ended) = std::sync::mpsc::channel::<()>();
        let busy = shares.run(
            Arc::from(holder),
            std::future::poll_fn(move |_| {
                polling.send(()).unwrap();
                ended.recv().unwrap();
                Poll::Ready(())
            }),
        );
        let holding = std::thread::spawn(move || {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            assert!(pin!(busy).poll(&mut cx).is_ready());
        });
        polled.recv().unwrap();

        let mut outbound = Outbound::new(to, Arc::from("f"), Duration::from_secs(30), 2);
        let request = Pin::from(outbound.send_request(get(&url), None, Box::new(async { Ok(()) })));
        let response = tokio::spawn(async move {
            let (response, io) = request.await?;
            tokio::spawn(Pin::from(io));
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, Error>(body)
        });
        let connected = heads.recv_timeout(Duration::from_millis(300)).is_ok();
        end.send(()).unwrap();
        holding.join().unwrap();
        if !connected {
            heads
                .recv_timeout(Duration::from_secs(5))
                .expect("the request connects once the turn is free");
        }
        assert_eq!(response.await.unwrap().unwrap(), "served");
        connected
    }

    /// A tenant's TLS handshakes, at a rate of its choosing to a server of its own, ran
    /// outside its fair share. Now a request's connection is made only while it holds
    /// a turn of its tenant's once another tenant is active: while another tenant's
    /// guest holds the only turn, it does not connect, and it does once that poll ends.
    // Two threads: the test blocks one waiting for the server's heads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_connects_only_while_it_holds_a_turn_of_its_tenants() {
        assert!(
            !connects_while_the_turn_is_held_by("busy").await,
            "connected while another tenant held the turn"
        );
    }

    /// A tenant alone takes no one's cores: its requests connect without a turn, not
    /// behind its own guests' polls.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lone_tenants_requests_connect_without_a_turn() {
        assert!(connects_while_the_turn_is_held_by("t").await);
    }

    #[tokio::test]
    async fn a_silent_server_times_out_by_the_event_deadline() {
        let port = server(None);
        let explicit = hosts(&[&format!("http://127.0.0.1:{port}")]);
        let started = std::time::Instant::now();
        let url = format!("http://127.0.0.1:{port}/");
        let result = fetch(&explicit, &url, Duration::from_millis(300)).await;
        assert!(
            matches!(result, Err(Error::ConnectionReadTimeout)),
            "{result:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        // Past its deadline, an event sends nothing.
        let past = Instant::now();
        let result = send(&explicit, past, get(&url), None, permit()).await;
        assert!(matches!(result, Err(Error::ConnectionTimeout)));
    }
}
