//! `GET /metrics` on a listener of its own, for Prometheus scrapers: a worker's
//! (`faas worker --metrics-listen`) and the operator's (`faas operator
//! --metrics-listen`). The gateway serves its metrics on its public port instead.
//!
//! What is served is the caller's: a function that renders the text exposition at
//! each scrape. This crate only answers HTTP/1.1, under connection limits (a scraper
//! needs one connection, so a client that holds more is refused, as is one idle for
//! [`LIMITS`]'s timeout), so the port costs little when nobody scrapes it.

use bytes::Bytes;
use faas_connections::{Activity, Admission, ConnectionLimits, drive};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// The text exposition's media type (OpenMetrics, as `prometheus-client` writes it).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The connections the endpoint holds: a few per scraper, a few scrapers in all.
pub const LIMITS: ConnectionLimits = ConnectionLimits {
    per_client: 4,
    total: 32,
    idle_timeout: Duration::from_secs(60),
    // A scraper that stops reading holds one of a few connections.
    send_timeout: Some(Duration::from_secs(60)),
    // Scrapers are the operator's; each address counts.
    ipv6_client_prefix: 128,
};

/// What renders the metrics' text at each scrape.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Whether the process is ready to take work, asked at each `GET /readyz` (a
/// Kubernetes readiness probe).
pub type Ready = Arc<dyn Fn() -> bool + Send + Sync>;

/// Serves `render`'s text on `GET /metrics` of `listener` until the task is dropped,
/// and 200 on `GET /readyz`; any other path is a 404, any other method a 405.
pub async fn serve(listener: TcpListener, render: Render) {
    serve_with_readiness(listener, render, Arc::new(|| true)).await;
}

/// [`serve`], with `GET /readyz` answering 200 while `ready` says so and 503 otherwise.
pub async fn serve_with_readiness(listener: TcpListener, render: Render, ready: Ready) {
    let admission = Admission::new(LIMITS);
    loop {
        let (stream, slot) = admission.accept(&listener, |_| {}).await;
        let (render, ready) = (render.clone(), ready.clone());
        tokio::spawn(async move {
            let _slot = slot;
            serve_connection(stream, render, ready).await;
        });
    }
}

async fn serve_connection(stream: TcpStream, render: Render, ready: Ready) {
    let activity = Activity::for_timeouts(LIMITS.timeouts());
    let service = {
        let activity = activity.clone();
        service_fn(move |request: Request<Incoming>| {
            let busy = activity.busy();
            let response = respond(&request, &render, &ready).map(|body| busy.track(body));
            async move { Ok::<_, std::convert::Infallible>(response) }
        })
    };
    let connection =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    drive(
        connection,
        &activity,
        LIMITS.timeouts(),
        std::future::pending(),
    )
    .await;
}

fn respond(request: &Request<Incoming>, render: &Render, ready: &Ready) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, CONTENT_TYPE, render()),
        (&Method::GET, "/readyz") if ready() => (StatusCode::OK, "text/plain", "ready\n".into()),
        (&Method::GET, "/readyz") => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready\n".into(),
        ),
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET\n".into(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "metrics are at /metrics\n".into(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn endpoint(text: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, Arc::new(move || text.to_owned())));
        addr
    }

    /// Sends `request` on a new connection and reads the whole response (the request
    /// asks to close).
    async fn try_exchange(addr: SocketAddr, request: &str) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok(response)
    }

    async fn exchange(addr: SocketAddr, request: &str) -> String {
        try_exchange(addr, request).await.unwrap()
    }

    fn get(path: &str) -> String {
        format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    }

    #[tokio::test]
    async fn readyz_answers_as_the_process_says_it_is() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let asked = flag.clone();
        let ready: Ready = Arc::new(move || asked.load(std::sync::atomic::Ordering::Relaxed));
        tokio::spawn(serve_with_readiness(listener, Arc::new(String::new), ready));
        let not_yet = exchange(addr, &get("/readyz")).await;
        assert!(not_yet.starts_with("HTTP/1.1 503"), "{not_yet}");
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
        let now = exchange(addr, &get("/readyz")).await;
        assert!(now.starts_with("HTTP/1.1 200"), "{now}");
    }

    #[tokio::test]
    async fn a_scrape_gets_the_rendered_text_and_nothing_else_is_served() {
        let addr = endpoint("faas_up 1\n# EOF\n").await;
        let scraped = exchange(addr, &get("/metrics")).await;
        assert!(scraped.starts_with("HTTP/1.1 200"), "{scraped}");
        assert!(scraped.contains(CONTENT_TYPE), "{scraped}");
        assert!(scraped.ends_with("\r\n\r\nfaas_up 1\n# EOF\n"), "{scraped}");
        let other = exchange(addr, &get("/")).await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let ready = exchange(addr, &get("/readyz")).await;
        assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
        let posted = exchange(
            addr,
            "POST /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(posted.starts_with("HTTP/1.1 405"), "{posted}");
    }

    /// A client that opens connections and keeps them gets no more than its share;
    /// once it lets them go, scrapes are served again.
    #[tokio::test]
    async fn a_client_holding_connections_is_refused_more() {
        let addr = endpoint("faas_up 1\n").await;
        let mut held = Vec::new();
        for _ in 0..LIMITS.per_client {
            held.push(TcpStream::connect(addr).await.unwrap());
        }
        // Give the server time to admit them before the next one.
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Closed unanswered: an empty read, or a reset if the request arrived first.
        let refused = try_exchange(addr, &get("/metrics")).await;
        assert!(matches!(refused.as_deref(), Ok("") | Err(_)), "{refused:?}");
        drop(held);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let scraped = exchange(addr, &get("/metrics")).await;
        assert!(scraped.starts_with("HTTP/1.1 200"), "{scraped}");
    }
}
