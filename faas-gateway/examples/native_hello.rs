//! A native hyper hello world: the benchmark's upper bound, served the same way the
//! gateway serves (hyper-util `auto`, HTTP/1.1 and HTTP/2, multi-threaded tokio).
//!
//! `cargo run --release -p faas-gateway --example native_hello -- 127.0.0.1:3400`

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::convert::Infallible;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3400".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!(
        "native hello listening on http://{}",
        listener.local_addr()?
    );
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(|_request| async {
                Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(
                    b"Hello, world!\n",
                ))))
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
