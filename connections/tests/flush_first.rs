//! A response body that fails right after its head still gets the head, and what came
//! before the error, to its client, over real sockets: hyper drops an HTTP/1.1
//! connection before writing what it buffered with the error, and h2 clears a reset
//! stream's queued frames, so `Busy::track` holds the error back a moment.

use bytes::Bytes;
use faas_connections::{Activity, Timeouts};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A body of one chunk followed at once by an error: a guest that trapped right
/// after its first write.
struct FailsAfterFirstChunk {
    sent: bool,
}

impl Body for FailsAfterFirstChunk {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if std::mem::replace(&mut self.sent, true) {
            return Poll::Ready(Some(Err("the instance went".into())));
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"first chunk\n")))))
    }
}

/// Serves every connection on a fresh listener with a response whose body fails after
/// its first chunk, tracked as the platform's servers track theirs; returns its address.
async fn serve(http2: bool) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let activity = Activity::for_timeouts(Timeouts {
                idle: Duration::from_secs(30),
                send: Some(Duration::from_secs(30)),
            });
            let service = hyper::service::service_fn(move |_request| {
                let body = activity.busy().track(FailsAfterFirstChunk { sent: false });
                async move { Ok::<_, Infallible>(hyper::Response::new(body)) }
            });
            let io = TokioIo::new(stream);
            tokio::spawn(async move {
                let _ = if http2 {
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await
                } else {
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await
                };
            });
        }
    });
    address
}

#[tokio::test]
async fn over_http1_the_head_and_first_chunk_reach_the_client_before_the_cut() {
    let address = serve(false).await;
    for _ in 0..20 {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .unwrap();
        let mut received = Vec::new();
        let _ = stream.read_to_end(&mut received).await;
        let received = String::from_utf8_lossy(&received);
        assert!(received.starts_with("HTTP/1.1 200 OK\r\n"), "{received:?}");
        assert!(received.contains("first chunk\n"), "{received:?}");
        // Chunked, and never finished: the client can tell the body was cut.
        assert!(
            received.contains("transfer-encoding: chunked"),
            "{received:?}"
        );
        assert!(!received.ends_with("0\r\n\r\n"), "{received:?}");
    }
}

#[tokio::test]
async fn over_http2_the_head_and_first_chunk_reach_the_client_before_the_reset() {
    let address = serve(true).await;
    let stream = TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    for _ in 0..20 {
        let request = hyper::Request::get("http://test/")
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.expect("the head came");
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "first chunk\n");
        let end = body.frame().await;
        assert!(matches!(end, Some(Err(_))), "a reset, not an end: {end:?}");
    }
}
