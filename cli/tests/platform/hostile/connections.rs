//! A client that opens connections and keeps them, to take the descriptors every
//! tenant's requests need: beyond its share of connections it is refused at once, and
//! connections that carry nothing are closed after the idle timeout. The bystander is
//! served throughout. The attacker connects from 127.0.0.2, another address than the
//! bystander's client, as it would from another machine.

use super::{assert_bystander_served, deploy_bystander};
use crate::support::{Platform, closed_within, connect_from};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const ATTACKER: [u8; 4] = [127, 0, 0, 2];

/// The gateway's `host:port`.
fn gateway_addr(platform: &Platform) -> String {
    platform.url.trim_start_matches("http://").to_owned()
}

/// Sends a keep-alive `GET /healthz` and says whether an answer came back.
fn answered(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    if stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: gateway\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buffer = [0u8; 256];
    matches!(stream.read(&mut buffer), Ok(read) if read > 0 && buffer.starts_with(b"HTTP/1.1 200"))
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
    let metrics = platform.get("/metrics").text().unwrap();
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
