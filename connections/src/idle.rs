//! Closing connections that carry nothing, and closing all of them when the server
//! stops.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How long a connection told to close may take to do so, once it carries nothing,
/// before it is cut off (a client that ignores GOAWAY, or never spoke HTTP).
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The requests in flight on one connection, and when the last one ended.
pub struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
}

impl Activity {
    /// A connection that has carried nothing yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        })
    }

    /// Since when the connection has carried nothing; `None` while it is busy.
    pub fn idle_since(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::SeqCst) == 0)
            .then(|| *self.last.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Counts a request as in flight until the returned guard is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }
}

/// A request in flight; when dropped, the connection may become idle.
pub struct Busy(Arc<Activity>);

impl Busy {
    /// `body`, keeping the request in flight until it is sent to its end or dropped.
    pub fn track<B>(self, body: B) -> Tracked<B> {
        Tracked::new(body, self)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its request counted as in flight: `guard` (a [`Busy`],
/// or that and more) is dropped with the body.
pub struct Tracked<B, G = Busy> {
    inner: B,
    _guard: G,
}

impl<B, G> Tracked<B, G> {
    /// `body`, holding `guard` until it is sent to its end or dropped.
    pub fn new(body: B, guard: G) -> Self {
        Self {
            inner: body,
            _guard: guard,
        }
    }
}

impl<B: http_body::Body + Unpin, G: Unpin> http_body::Body for Tracked<B, G> {
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

/// A server connection that can be asked to close once its requests are answered.
pub trait GracefulConnection: Future {
    /// Stops taking new requests (HTTP/1 closes after the current one, HTTP/2 sends
    /// GOAWAY); the connection ends when those in flight are answered.
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S, E, B> GracefulConnection for hyper::server::conn::http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http2::Connection::graceful_shutdown(self);
    }
}

impl<I, S, B> GracefulConnection for hyper::server::conn::http1::Connection<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http1::Connection::graceful_shutdown(self);
    }
}

impl<I, S, E, B> GracefulConnection
    for hyper_util::server::conn::auto::UpgradeableConnection<'static, I, S, E>
where
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>,
    S::Future: 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper_util::server::conn::auto::UpgradeableConnection::graceful_shutdown(self);
    }
}

/// Serves `connection` until it ends. Once it has carried nothing for `idle_timeout`,
/// or once `stop` completes (the server is stopping), it is told to close; if it still
/// carries nothing [`CLOSE_GRACE`] later, it is dropped. Requests in flight finish
/// first either way.
pub async fn drive<C, E>(
    connection: C,
    activity: &Activity,
    idle_timeout: Duration,
    stop: impl Future<Output = ()>,
) where
    C: GracefulConnection<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::pin!(connection);
    tokio::pin!(stop);
    let mut stopped = false;
    let mut closing_since: Option<Instant> = None;
    loop {
        let wake = match closing_since {
            Some(since) => since + CLOSE_GRACE,
            None => activity.idle_since().unwrap_or_else(Instant::now) + idle_timeout,
        };
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!("connection ended: {err}");
                }
                return;
            }
            () = &mut stop, if !stopped => {
                stopped = true;
                if closing_since.is_none() {
                    connection.as_mut().graceful_shutdown();
                    closing_since = Some(Instant::now());
                }
            }
            () = tokio::time::sleep_until(wake.into()) => {
                let idle = activity.idle_since();
                if closing_since.is_some() {
                    if idle.is_some() {
                        tracing::debug!("dropping a connection that did not close");
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
