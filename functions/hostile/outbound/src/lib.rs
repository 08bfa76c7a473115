//! A hostile guest: `GET /<route>?url=<url>` fetches `url` (percent-encoded or not)
//! through `wasi:http/outgoing-handler` and answers 200 with one line, `status <code>`
//! followed by the first bytes of the body, or `error <error-code>` (the `Debug` form
//! of the `wasi:http` error code, e.g. `error ErrorCode::HttpRequestDenied`). The
//! outbound tests use it to aim at the platform's own endpoints, loopback and cloud
//! metadata. With `&parallel=N` it sends N such requests at once, then waits for them
//! all, and answers how many ended each way (`<count> x <outcome>` lines, sorted).
//! `GET /<route>?sockets=<port>&udp=<port>` tries the network without `wasi:http`
//! instead, through `wasi:sockets`: a name lookup of `localhost`, a TCP connection to
//! 127.0.0.1:<sockets> and a UDP datagram to 127.0.0.1:<udp>; it answers one line for
//! each, `lookup`, `tcp` and `udp`, with `ok` or `error <wasi:sockets error code>`.

use faas_sdk::http::{Request, Response};
use std::collections::BTreeMap;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, FutureIncomingResponse, Method, OutgoingRequest, Scheme,
};
use wasip2::io::streams::StreamError;

/// How much of the fetched body the report quotes.
const QUOTED_BYTES: usize = 256;

#[faas_sdk::http]
fn handle(req: Request) -> Response {
    if let Some(tcp) = req
        .query_param("sockets")
        .and_then(|port| port.parse().ok())
    {
        let udp = req
            .query_param("udp")
            .and_then(|port| port.parse().ok())
            .unwrap_or(tcp);
        return Response::text(200, sockets::report(tcp, udp));
    }
    let Some(url) = req.query_param("url").map(percent_decode) else {
        return Response::text(400, "usage: ?url=http://host:port/path\n");
    };
    let parallel: usize = req
        .query_param("parallel")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    if parallel > 1 {
        let started: Vec<_> = (0..parallel).map(|_| start(&url)).collect();
        let mut outcomes = BTreeMap::<String, usize>::new();
        for request in started {
            let outcome = match request.and_then(finish) {
                Ok((status, _)) => format!("status {status}"),
                Err(error) => format!("error {error}"),
            };
            *outcomes.entry(outcome).or_default() += 1;
        }
        let report: String = outcomes
            .iter()
            .map(|(outcome, count)| format!("{count} x {outcome}\n"))
            .collect();
        return Response::text(200, report);
    }
    match start(&url).and_then(finish) {
        Ok((status, body)) => {
            let quoted = String::from_utf8_lossy(&body[..body.len().min(QUOTED_BYTES)]);
            Response::text(200, format!("status {status}\n{quoted}"))
        }
        Err(error) => Response::text(200, format!("error {error}\n")),
    }
}

/// Sends a GET of `url`; its response to come, or what went wrong.
fn start(url: &str) -> Result<FutureIncomingResponse, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("BadUrl no scheme in {url:?}"))?;
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_owned()),
    };
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    let set = request
        .set_method(&Method::Get)
        .and(request.set_scheme(Some(&scheme)))
        .and(request.set_authority(Some(authority)))
        .and(request.set_path_with_query(Some(path)));
    set.map_err(|()| format!("BadUrl {url:?}"))?;
    outgoing_handler::handle(request, None).map_err(code)
}

/// Waits for `future`; the status and body, or what went wrong.
fn finish(future: FutureIncomingResponse) -> Result<(u16, Vec<u8>), String> {
    future.subscribe().block();
    let response = future
        .get()
        .ok_or("NotReady")?
        .map_err(|()| "AlreadyTaken")?
        .map_err(code)?;
    let status = response.status();
    let body = response.consume().map_err(|()| "NoBody")?;
    let mut bytes = Vec::new();
    {
        let stream = body.stream().map_err(|()| "NoStream")?;
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(format!("BodyFailed {}", e.to_debug_string()));
                }
            }
        }
    }
    Ok((status, bytes))
}

fn code(error: ErrorCode) -> String {
    format!("{error:?}")
}

/// Decodes `%XX` escapes; anything else is kept as is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The network through `wasi:sockets`, which an HTTP function must not reach.
mod sockets {
    use wasip2::sockets::instance_network::instance_network;
    use wasip2::sockets::network::{
        ErrorCode, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress,
    };
    use wasip2::sockets::{ip_name_lookup, tcp_create_socket, udp_create_socket};

    /// One line per way out: `lookup`, `tcp`, `udp`.
    pub fn report(tcp_port: u16, udp_port: u16) -> String {
        let outcome = |result: Result<(), ErrorCode>| match result {
            Ok(()) => "ok".to_owned(),
            Err(code) => format!("error {code:?}"),
        };
        format!(
            "lookup {}\ntcp {}\nudp {}\n",
            outcome(lookup()),
            outcome(tcp(tcp_port)),
            outcome(udp(udp_port))
        )
    }

    fn loopback(port: u16) -> IpSocketAddress {
        IpSocketAddress::Ipv4(Ipv4SocketAddress {
            port,
            address: (127, 0, 0, 1),
        })
    }

    fn lookup() -> Result<(), ErrorCode> {
        let addresses = ip_name_lookup::resolve_addresses(&instance_network(), "localhost")?;
        addresses.subscribe().block();
        addresses.resolve_next_address().map(|_| ())
    }

    fn tcp(port: u16) -> Result<(), ErrorCode> {
        let socket = tcp_create_socket::create_tcp_socket(IpAddressFamily::Ipv4)?;
        socket.start_connect(&instance_network(), loopback(port))?;
        socket.subscribe().block();
        socket.finish_connect().map(|_| ())
    }

    fn udp(port: u16) -> Result<(), ErrorCode> {
        let socket = udp_create_socket::create_udp_socket(IpAddressFamily::Ipv4)?;
        socket.start_bind(&instance_network(), loopback(0))?;
        socket.subscribe().block();
        socket.finish_bind()?;
        let (_incoming, outgoing) = socket.stream(Some(loopback(port)))?;
        let datagram = wasip2::sockets::udp::OutgoingDatagram {
            data: b"out".to_vec(),
            remote_address: None,
        };
        outgoing.check_send()?;
        outgoing.send(&[datagram]).map(|_| ())
    }
}
