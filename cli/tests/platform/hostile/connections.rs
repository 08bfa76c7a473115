//! A client that opens connections and keeps them, to take the descriptors every
//! tenant's requests need: beyond its share of connections it is refused at once, and
//! connections that carry nothing are closed after the idle timeout. The bystander is
//! served throughout. The attacker connects from 127.0.0.2, another address than the
//! bystander's client, as it would from another machine.

use super::{BYSTANDER_ROUTE, assert_bystander_served, deploy_bystander};
use crate::support::{Platform, closed_within, connect_from};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const ATTACKER: [u8; 4] = [127, 0, 0, 2];

/// The gateway's `host:port`.
fn gateway_addr(platform: &Platform) -> String {
    platform.url.trim_start_matches("http://").to_owned()
}

/// Sends a keep-alive `GET /healthz` and says whether an answer came back.
fn answered(stream: &mut TcpStream) -> bool {
    status_of(stream, "/healthz") == Some(200)
}

/// Sends a keep-alive `GET path` and gives the answer's status, if one came back
/// (reading the start of the answer only: one request per stream, but for
/// [`answered`]'s).
fn status_of(stream: &mut TcpStream, path: &str) -> Option<u16> {
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: gateway\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut buffer = [0u8; 256];
    let read = stream.read(&mut buffer).ok()?;
    let head = std::str::from_utf8(&buffer[..read]).ok()?;
    head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

#[test]
fn a_client_beyond_its_share_of_connections_is_refused_and_others_are_served() {
    let platform = Platform::start_with(&["--max-connections-per-client", "8"]);
    let dir = faas_testing::temp_dir();
    deploy_bystander(&platform, dir.path());
    let addr = gateway_addr(&platform);
    let mut held: Vec<TcpStream> = (0..8).map(|_| connect_from(ATTACKER, &addr)).collect();
    for stream in &mut held {
        assert!(answered(stream), "a connection within the share is served");
    }
    for _ in 0..20 {
        let mut extra = connect_from(ATTACKER, &addr);
        assert!(
            !answered(&mut extra),
            "a connection beyond the share is refused"
        );
    }
    assert_bystander_served(&platform);
    let metrics = platform.metrics();
    let refused = metrics
        .lines()
        .find_map(|line| line.strip_prefix("faas_connections_refused_total "))
        .expect("the refusals are counted");
    assert!(refused.trim().parse::<u64>().unwrap() >= 20, "{refused}");
    // Closing one frees its place.
    held.pop();
    std::thread::sleep(Duration::from_millis(200));
    assert!(answered(&mut connect_from(ATTACKER, &addr)));
}

#[test]
fn connections_that_carry_nothing_are_closed_after_the_idle_timeout() {
    let platform = Platform::start_with(&["--idle-timeout-ms", "500"]);
    let dir = faas_testing::temp_dir();
    deploy_bystander(&platform, dir.path());
    let addr = gateway_addr(&platform);
    // One that made a request and went quiet (HTTP/1.1 keep-alive), one that speaks
    // HTTP/2 and then nothing, and one that never says a word.
    let mut quiet = connect_from(ATTACKER, &addr);
    assert!(answered(&mut quiet));
    let mut http2 = connect_from(ATTACKER, &addr);
    http2
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .unwrap();
    let mut mute = connect_from(ATTACKER, &addr);
    for stream in [&mut quiet, &mut http2, &mut mute] {
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let closed = closed_within(stream, Duration::from_secs(10)).expect("never closed");
        assert!(closed < Duration::from_secs(4), "closed after {closed:?}");
    }
    assert_bystander_served(&platform);
}

/// A client that asks for a large answer and reads none of it was never idle: its
/// connection, the answer the gateway held for it and the guest writing it were held
/// for good (over HTTP/2, a stream granted no window was not even started). Each is
/// cut off once the answer waited for it a send timeout; the bystander is served
/// throughout.
#[test]
fn a_client_that_stops_reading_its_answers_is_cut_off() {
    let platform = Platform::start_with(&["--no-demo", "--send-timeout-ms", "500"]);
    let dir = faas_testing::temp_dir();
    deploy_bystander(&platform, dir.path());
    let answers = crate::support::write_manifest(
        dir.path(),
        "answers",
        "mallory",
        "linger",
        "/linger/...",
        "",
    );
    platform.deploy(&answers);
    let addr = gateway_addr(&platform);
    // Far more than the sockets' buffers hold between the two ends.
    const BODY_KIB: usize = 64 << 10;
    let path = format!("/linger/answer?body-kib={BODY_KIB}");

    // HTTP/1.1: asks, then reads nothing for a while.
    let mut http1 = connect_from(ATTACKER, &addr);
    let request = format!("GET {path} HTTP/1.1\r\nhost: gateway\r\n\r\n");
    http1.write_all(request.as_bytes()).unwrap();
    // HTTP/2: a stream granted no window, for a large answer and for one that fits
    // in a frame (the server holds that frame, and the request's places, as well).
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let unread = |path: String| {
        let url = platform.url.clone();
        runtime.block_on(async move {
            let mut sender = super::responses::unreading_connection(&url, ATTACKER).await;
            let response = super::responses::get_head(&mut sender, &format!("{url}{path}")).await;
            (sender, response)
        })
    };
    let http2 = [unread(path.clone()), unread("/linger/answer".to_owned())];
    std::thread::sleep(Duration::from_secs(3));
    assert_bystander_served(&platform);

    // Read now, what was sent ends before the answer does: the connection was cut.
    http1
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buffer = vec![0u8; 64 << 10];
    let mut received = 0;
    loop {
        match http1.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => received += read,
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(err) => panic!("the connection is still open after {received} bytes: {err}"),
        }
    }
    assert!(
        received < BODY_KIB << 10,
        "{received} bytes: the whole answer"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    for (index, (sender, _response)) in http2.iter().enumerate() {
        while !sender.is_closed() {
            assert!(
                Instant::now() < deadline,
                "HTTP/2 connection {index} is still open"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_bystander_served(&platform);
}

/// A request body that never sends a byte and never ends.
struct NeverEnds;

impl http_body::Body for NeverEnds {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Pending
    }
}

/// An HTTP/2 attack under way: its connections, and each stream's answer (its status,
/// and whether it said when to try again), or `None` if its connection failed.
pub(super) struct HeldStreams<B> {
    pub(super) connections: Vec<hyper::client::conn::http2::SendRequest<B>>,
    pub(super) answers: Vec<tokio::task::JoinHandle<Option<(u16, bool)>>>,
}

impl<B> HeldStreams<B> {
    /// How many streams have been answered.
    pub(super) fn answered(&self) -> usize {
        self.answers
            .iter()
            .filter(|answer| answer.is_finished())
            .count()
    }

    /// Takes out the answers that have come, in the order their streams were opened;
    /// the streams still held stay.
    pub(super) fn take_answered(
        &mut self,
        runtime: &tokio::runtime::Runtime,
    ) -> Vec<Option<(u16, bool)>> {
        let (answered, held) = std::mem::take(&mut self.answers)
            .into_iter()
            .partition(|answer| answer.is_finished());
        self.answers = held;
        answered
            .into_iter()
            .map(|answer: tokio::task::JoinHandle<_>| runtime.block_on(answer).unwrap())
            .collect()
    }
}

/// Opens `connections` HTTP/2 connections from [`ATTACKER`] to `addr` and `streams`
/// requests on each: POSTs to the bystander's route with a 60 KB head (a head may be
/// 64 KiB) and a body that never comes, so each is held until the gateway answers it
/// or gives up reading its body.
async fn hold_streams(addr: &str, connections: usize, streams: usize) -> HeldStreams<NeverEnds> {
    let padding = "p".repeat(4000);
    open_streams(ATTACKER, addr, connections, streams, || {
        let mut request = hyper::Request::post(format!("http://{addr}{BYSTANDER_ROUTE}"));
        for pad in 0..15 {
            request = request.header(format!("x-pad-{pad}"), &padding);
        }
        request.body(NeverEnds).unwrap()
    })
    .await
}

/// Opens `connections` HTTP/2 connections from `source` to `addr` and sends `streams`
/// requests made by `request` on each, without waiting for their answers.
pub(super) async fn open_streams<B>(
    source: [u8; 4],
    addr: &str,
    connections: usize,
    streams: usize,
    request: impl Fn() -> hyper::Request<B>,
) -> HeldStreams<B>
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut senders = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..connections {
        let stream = connect_from(source, addr);
        stream.set_nonblocking(true).unwrap();
        let stream = tokio::net::TcpStream::from_std(stream).unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        for _ in 0..streams {
            let response = sender.send_request(request());
            answers.push(tokio::spawn(async move {
                let response = response.await.ok()?;
                let retry = response.headers().contains_key("retry-after");
                Some((response.status().as_u16(), retry))
            }));
        }
        senders.push(sender);
    }
    HeldStreams {
        connections: senders,
        answers,
    }
}

/// HTTP/2 lets a client open many requests on one connection. Each stream's head (up
/// to 64 KiB, sent in a few bytes with HPACK) and handler are held until it is
/// answered, and a body that never comes holds them for the read timeout (30 s): 800
/// such streams on 8 connections grew the gateway by 60 MiB before requests in flight
/// were counted per client. Now the client's streams past its share are answered 429
/// at once, the rest stay held, and another client is served throughout.
#[test]
fn a_client_holding_http2_streams_open_is_refused_past_its_share_of_requests() {
    const SHARE: usize = 32;
    let platform = Platform::start_with(&["--max-requests-per-client", &SHARE.to_string()]);
    let dir = faas_testing::temp_dir();
    deploy_bystander(&platform, dir.path());
    let addr = gateway_addr(&platform);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let before = platform.memory("VmRSS");
    let attack = runtime.block_on(hold_streams(&addr, 8, 100));
    let opened = attack.answers.len();
    let deadline = Instant::now() + Duration::from_secs(20);
    while attack.answered() < opened - SHARE && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Time for a stream past the share to be held instead, if one would be.
    std::thread::sleep(Duration::from_millis(500));
    let grew = platform.memory("VmRSS").saturating_sub(before) >> 20;
    assert_bystander_served(&platform);
    // Over HTTP/1.1 too the client is past its share; the probes, which hold nothing,
    // are answered whatever the limits (the liveness probe must not fail under a flood).
    let status = |path| status_of(&mut connect_from(ATTACKER, &addr), path);
    assert_eq!(status(BYSTANDER_ROUTE), Some(429));
    assert_eq!(status("/healthz"), Some(200));

    let mut held = 0;
    for answer in attack.answers {
        if !answer.is_finished() {
            held += 1;
            continue;
        }
        let answer = runtime.block_on(answer).unwrap();
        assert_eq!(answer, Some((429, true)), "a stream past the share");
    }
    assert_eq!(held, SHARE, "the streams within the share are held");
    assert!(grew < 32, "the gateway grew by {grew} MiB");
    let metrics = platform.metrics();
    let refused = metrics
        .lines()
        .find_map(|line| line.strip_prefix("faas_requests_refused_total "))
        .expect("the refusals are counted");
    // The streams past the share, and the HTTP/1.1 request past it.
    assert_eq!(refused.trim().parse::<usize>().unwrap(), opened - SHARE + 1);

    // The attack's connections gone, its streams end and its client is served again.
    drop(attack.connections);
    drop(runtime);
    let served = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        status(BYSTANDER_ROUTE) == Some(200)
    });
    assert!(served, "the client is served once its streams are gone");
}

/// A tenant's slow function, called from enough addresses, held every place of the
/// gateway's `--max-requests`: each request waits for the function, and no limit of a
/// client's counts all of them. Then every other tenant's request was refused 503.
/// Now one tenant's routes have at most `--max-requests-per-tenant` requests in flight:
/// mallory's callers, from three addresses, get 429 past it, and the bystander is
/// served while they wait.
#[test]
fn a_tenants_slow_function_holds_at_most_its_share_of_the_gateways_requests() {
    const TOTAL: usize = 12;
    const SHARE: usize = 6;
    let platform = Platform::start_with(&[
        "--no-demo",
        "--max-requests",
        &TOTAL.to_string(),
        "--max-requests-per-tenant",
        &SHARE.to_string(),
        "--max-requests-per-client",
        &(TOTAL / 3).to_string(),
    ]);
    let dir = faas_testing::temp_dir();
    deploy_bystander(&platform, dir.path());
    let slow = crate::support::write_manifest(
        dir.path(),
        "patient",
        "mallory",
        "misbehave",
        "/misbehave/...",
        "",
    );
    platform.deploy(&slow);
    let addr = gateway_addr(&platform);
    // Four requests from each of three addresses: as many as the gateway holds in all.
    let callers: Vec<_> = (0..TOTAL)
        .map(|index| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let source = [127, 0, 0, 2 + (index % 3) as u8];
                let mut stream = connect_from(source, &addr);
                stream
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                write!(
                    stream,
                    "GET /misbehave/slow?ms=4000 HTTP/1.1\r\nHost: gateway\r\n\r\n"
                )
                .unwrap();
                let mut head = [0u8; 12];
                stream.read_exact(&mut head).unwrap();
                String::from_utf8_lossy(&head[9..12])
                    .parse::<u16>()
                    .unwrap()
            })
        })
        .collect();
    // Time for every caller's request to be held or refused.
    std::thread::sleep(Duration::from_millis(1500));
    assert_bystander_served(&platform);
    let mut statuses: Vec<u16> = callers.into_iter().map(|c| c.join().unwrap()).collect();
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [[200; SHARE], [429; TOTAL - SHARE]].concat(),
        "mallory's callers: its share served, the rest refused at once"
    );
}
