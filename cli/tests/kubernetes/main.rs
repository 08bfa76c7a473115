//! Kubernetes mode against a real control plane (`faas_testing::kube::ControlPlane`:
//! etcd, kube-apiserver, controller-manager, scheduler and kwok, started once for this
//! test binary), with real `faas` processes and a real redis-server. Grouped by part,
//! one module each.

// The platform tests' process helpers; this binary uses a part of them.
#[allow(dead_code)]
#[path = "../platform/support.rs"]
mod support;

mod end_to_end;
mod gateway;
mod operator;

/// Held by every test that runs an operator (real or stand-in) for as long as it runs.
/// An operator watches Workflows in every namespace, as it does in a cluster, so two
/// at once on the one control plane would each reconcile the other's Workflows against
/// their own Redis.
pub fn operator_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it leaves nothing the next one depends on.
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Serves `body` over HTTP/1.1 to every request on a free loopback port, for a Workflow
/// whose component the operator fetches by URL; returns the URL.
pub fn serve_file(body: Vec<u8>) -> String {
    serve_each(move || body.clone())
}

/// Serves 64 bytes of fresh random data to every request, as a hostile tenant's
/// component URL may, counting the requests in `served`; returns the URL.
pub fn serve_random(served: std::sync::Arc<std::sync::atomic::AtomicUsize>) -> String {
    serve_each(move || {
        served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        rand::random::<[u8; 64]>().to_vec()
    })
}

/// Serves what `body` makes, once per request, over HTTP/1.1 on a free loopback port;
/// returns the URL.
fn serve_each(body: impl Fn() -> Vec<u8> + Send + 'static) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let url = format!(
        "http://{}/component.wasm",
        listener.local_addr().expect("its address")
    );
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let body = body();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/wasm\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    url
}

/// A URL whose server accepts connections and never answers, as a hostile tenant's
/// component URL may: a fetch from it lasts until the operator's fetch timeout.
/// A URL whose server answers with a head announcing `len` bytes, and then sends none
/// of them for as long as the test runs.
pub fn stalling_body_url(len: usize) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let url = format!(
        "http://{}/component.wasm",
        listener.local_addr().expect("its address")
    );
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
            let _ = stream.write_all(head.as_bytes());
            held.push(stream);
        }
    });
    url
}

pub fn stalling_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let url = format!(
        "http://{}/component.wasm",
        listener.local_addr().expect("its address")
    );
    std::thread::spawn(move || {
        // Held open, unanswered, for as long as the test runs.
        let held: Vec<_> = listener.incoming().collect();
        drop(held);
    });
    url
}
