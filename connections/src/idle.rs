//! Closing connections that carry nothing, and closing all of them when the server
//! stops.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How long a connection told to close may take to do so, once it carries nothing,
/// before it is cut off (a client that ignores GOAWAY, or never spoke HTTP).
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How long a response body's error waits before [`Tracked`] hands it to the server
/// (of a body made by [`Busy::track`]): an error in the same write as the response
/// head takes the head with it (HTTP/1.1 drops the connection before writing it,
/// HTTP/2 clears a reset stream's queued frames), so what was sent before it is
/// flushed to the client first. Only failing bodies wait, so it can be generous
/// with a connection task that two busy cores let run late.
pub const ERROR_FLUSH_GRACE: Duration = Duration::from_millis(50);

/// How long [`drive`] lets a connection wait on its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// How long it may carry no request before it is told to close.
    pub idle: Duration,
    /// How long a response on it may wait for the client to take more of it (the
    /// server holding what it could not send, as the client reads nothing) before
    /// the connection is cut off; `None` for no limit.
    pub send: Option<Duration>,
}

/// The requests in flight on one connection, and when the last one ended.
pub struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
    /// The responses whose bodies were handed to the server ([`Tracked`]), to find
    /// one its client stopped reading; `None` on a connection with no send timeout,
    /// which need not pay for it on every request and frame.
    sending: Option<Mutex<Vec<Weak<Handed>>>>,
}

/// When a response body last handed the server a frame that the server has not come
/// back for more after: the server is waiting for its client to take what it holds.
#[derive(Default)]
struct Handed(Mutex<Option<Instant>>);

impl Handed {
    fn set(&self, at: Option<Instant>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }

    fn get(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Activity {
    /// A connection that has carried nothing yet, held to `timeouts`: with a send
    /// timeout, its responses tell [`Activity::stalled_since`] when their client stops
    /// taking them.
    pub fn for_timeouts(timeouts: Timeouts) -> Arc<Self> {
        Arc::new(Self {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
            sending: timeouts.send.map(|_| Mutex::default()),
        })
    }

    /// Since when the connection has carried nothing; `None` while it is busy.
    pub fn idle_since(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::SeqCst) == 0)
            .then(|| *self.last.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Since when the response that has waited longest for its client to take more of
    /// it has waited; `None` when none waits (or sends are not watched).
    pub fn stalled_since(&self) -> Option<Instant> {
        let mut sending = self
            .sending
            .as_ref()?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        sending.retain(|handed| handed.strong_count() > 0);
        sending
            .iter()
            .filter_map(|handed| handed.upgrade()?.get())
            .min()
    }

    /// Counts a request as in flight until the returned guard is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let handed = self.sending.as_ref().map(|sending| {
            let handed = Arc::new(Handed::default());
            let mut sending = sending.lock().unwrap_or_else(|p| p.into_inner());
            // Bodies that ended leave dead entries: swept as often as they are added.
            if sending.len() >= 16 && sending.len().is_power_of_two() {
                sending.retain(|handed| handed.strong_count() > 0);
            }
            sending.push(Arc::downgrade(&handed));
            handed
        });
        Busy {
            activity: self.clone(),
            handed,
        }
    }
}

/// A request in flight; when dropped, the connection may become idle.
pub struct Busy {
    activity: Arc<Activity>,
    handed: Option<Arc<Handed>>,
}

impl Busy {
    /// `body`, keeping the request in flight until it is sent to its end or dropped,
    /// and telling [`drive`] when its client stops taking it.
    /// An error of the body reaches the server [`ERROR_FLUSH_GRACE`] after it came.
    pub fn track<B: http_body::Body>(self, body: B) -> Tracked<B> {
        self.track_with(body, ())
    }

    /// [`Busy::track`], holding `guard` too until the body is sent or dropped.
    pub fn track_with<B: http_body::Body, G>(self, body: B, guard: G) -> Tracked<B, (Busy, G)> {
        // The head is handed over with it: until the server asks for the body, it
        // waits for the client as it would for the rest of it.
        if let Some(handed) = &self.handed {
            handed.set(Some(Instant::now()));
        }
        let handed = self.handed.clone();
        Tracked {
            inner: body,
            handed,
            flush_first: true,
            failing: None,
            _guard: (self, guard),
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let activity = &self.activity;
        *activity.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        activity.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that holds `guard` (a [`Busy`], or that and more) until it is
/// dropped; made by [`Busy::track`], it also tells [`drive`] while the server holds a
/// frame of it that the client does not take.
pub struct Tracked<B: http_body::Body, G = (Busy, ())> {
    inner: B,
    handed: Option<Arc<Handed>>,
    /// Whether an error waits out [`ERROR_FLUSH_GRACE`]: a body [`Busy`] hands to a
    /// server does.
    flush_first: bool,
    /// The body's error while it waits, taken when handed on.
    failing: Option<HeldError<B::Error>>,
    _guard: G,
}

/// A body's error and the grace it waits out, taken when handed on.
type HeldError<E> = (Pin<Box<tokio::time::Sleep>>, Option<E>);

/// What polling a body `B` gives.
type Polled<B> = Poll<
    Option<Result<http_body::Frame<<B as http_body::Body>::Data>, <B as http_body::Body>::Error>>,
>;

impl<B: http_body::Body, G> Tracked<B, G> {
    /// `body`, holding `guard` until it is sent to its end or dropped.
    pub fn new(body: B, guard: G) -> Self {
        Self {
            inner: body,
            handed: None,
            flush_first: false,
            failing: None,
            _guard: guard,
        }
    }
}

impl<B, G> http_body::Body for Tracked<B, G>
where
    B: http_body::Body + Unpin,
    B::Error: Unpin,
    G: Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if let Some((grace, error)) = &mut this.failing {
            std::task::ready!(grace.as_mut().poll(cx));
            // Once: a body polled again after its error ends.
            return Poll::Ready(error.take().map(Err));
        }
        match this.poll_inner(cx) {
            Poll::Ready(Some(Err(error))) if this.flush_first => {
                let grace = Box::pin(tokio::time::sleep(ERROR_FLUSH_GRACE));
                this.failing = Some((grace, Some(error)));
                self.poll_frame(cx)
            }
            polled => polled,
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.failing {
            Some((_, error)) => error.is_none(),
            None => self.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<B: http_body::Body + Unpin, G> Tracked<B, G> {
    /// The inner body's next frame, noting for [`drive`] what the server holds.
    fn poll_inner(&mut self, cx: &mut Context<'_>) -> Polled<B> {
        let Some(handed) = &self.handed else {
            return Pin::new(&mut self.inner).poll_frame(cx);
        };
        // The server came back for more: it sent what it held. A server only asks
        // for the next frame once the client has taken enough of the last one.
        handed.set(None);
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        // The last frame too: an HTTP/2 server asks for a frame before it has window
        // to send it, and holds the body (and its request's places) until it has.
        if let Poll::Ready(Some(Ok(_))) = &polled {
            handed.set(Some(Instant::now()));
        }
        polled
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

/// Serves `connection` until it ends. Once it has carried nothing for
/// `timeouts.idle`, or once `stop` completes (the server is stopping), it is told to
/// close; if it still carries nothing [`CLOSE_GRACE`] later, it is dropped. Requests
/// in flight finish first either way, but for a response whose client has taken none
/// of it for `timeouts.send`: its connection is dropped then, since a client that reads
/// nothing would hold it, and what the server holds for it, for good.
pub async fn drive<C, E>(
    connection: C,
    activity: &Activity,
    timeouts: Timeouts,
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
        let idle_timeout = timeouts.idle;
        let mut wake = match closing_since {
            Some(since) => since + CLOSE_GRACE,
            None => activity.idle_since().unwrap_or_else(Instant::now) + idle_timeout,
        };
        if let Some(send_timeout) = timeouts.send {
            let stalled = activity.stalled_since();
            if stalled.is_some_and(|since| since.elapsed() >= send_timeout) {
                tracing::debug!("dropping a connection whose client stopped reading");
                return;
            }
            // A response may stall at any time: looked at again a send timeout on,
            // or when the one stalled longest would pass it.
            wake = wake.min(stalled.unwrap_or_else(Instant::now) + send_timeout);
        }
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
                if closing_since.is_some_and(|since| since.elapsed() < CLOSE_GRACE) {
                    // Woken to look for a stalled response, not to close.
                    continue;
                }
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
