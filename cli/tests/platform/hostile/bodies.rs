//! A client that sends request bodies and holds them, to fill the gateway's memory:
//! the body limit bounds one body, the body budget all that one client address and
//! all clients hold. Past its share a client is refused (429), past the whole budget
//! everyone with a body is (503), before a byte of the body is read; requests without
//! a body, and other clients within the budget, are served throughout, and what a
//! client held is given back when its connections go.

use super::{BYSTANDER_ROUTE, assert_bystander_served, deploy_bystander};
use crate::support::{Platform, connect_from};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const ATTACKER: [u8; 4] = [127, 0, 0, 2];
const ANOTHER_ATTACKER: [u8; 4] = [127, 0, 0, 3];
const LATECOMER: [u8; 4] = [127, 0, 0, 4];
const MIB: usize = 1 << 20;

/// Sends the head of a `POST` to the bystander from `source`, with `head` as its
/// body's framing header, then `body`; the connection is left open.
fn post_from(platform: &Platform, source: [u8; 4], framing: &str, body: &[u8]) -> TcpStream {
    let addr = platform.url.trim_start_matches("http://");
    let mut stream = connect_from(source, addr);
    let head =
        format!("POST {BYSTANDER_ROUTE}?name=body HTTP/1.1\r\nhost: gateway\r\n{framing}\r\n\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    stream
}

/// Starts a body of one MiB from `source` and sends half of it: the gateway holds it.
fn hold_body(platform: &Platform, source: [u8; 4]) -> TcpStream {
    let framing = format!("content-length: {MIB}");
    let stream = post_from(platform, source, &framing, &vec![b'x'; MIB / 2]);
    // Its claim is taken as its head is read, before its body.
    std::thread::sleep(Duration::from_millis(200));
    stream
}

/// The response to the request sent on `stream`: its head and its body (of the
/// length its head declares), as far as they come within ten seconds.
fn answer(stream: &mut TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut received = Vec::new();
    let mut buffer = vec![0u8; 4096];
    while !whole_response(&received) {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => received.extend_from_slice(&buffer[..read]),
        }
    }
    String::from_utf8_lossy(&received).into_owned()
}

/// Whether `received` holds a response's head and all its body: the length its head
/// declares, or chunks up to the last.
fn whole_response(received: &[u8]) -> bool {
    let text = String::from_utf8_lossy(received).to_ascii_lowercase();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with("0\r\n\r\n");
    }
    let length = head.lines().find_map(|line| {
        let value = line.strip_prefix("content-length:")?;
        value.trim().parse::<usize>().ok()
    });
    length.is_some_and(|length| body.len() >= length)
}

#[test]
fn bodies_past_a_clients_share_or_the_whole_budget_are_refused_and_others_are_served() {
    let platform = Platform::start_with(&[
        "--max-body-bytes",
        "1048576",
        "--client-body-budget-mb",
        "2",
        "--body-budget-mb",
        "3",
    ]);
    let dir = faas_testing::temp_dir();
    deploy_bystander(&platform, dir.path());

    // The attacker holds its share: two bodies of one MiB.
    let held = [
        hold_body(&platform, ATTACKER),
        hold_body(&platform, ATTACKER),
    ];
    // A third is refused as its head arrives, by its declared length...
    let mut third = post_from(&platform, ATTACKER, &format!("content-length: {MIB}"), &[]);
    let refused = answer(&mut third);
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    assert!(refused.contains("body_budget"), "{refused}");
    assert!(refused.contains("--client-body-budget-mb"), "{refused}");
    assert!(
        refused.to_lowercase().contains("retry-after: 1"),
        "{refused}"
    );
    // ... and one that declares no length, by its first chunk.
    let chunk = format!("{:x}\r\n{}\r\n", 64 << 10, "x".repeat(64 << 10));
    let mut chunked = post_from(
        &platform,
        ATTACKER,
        "transfer-encoding: chunked",
        chunk.as_bytes(),
    );
    let refused = answer(&mut chunked);
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");

    // Another client, with a body, is within the budget.
    let response = platform.post(
        &format!("{BYSTANDER_ROUTE}?name=bystander"),
        vec![b'y'; 100 << 10],
    );
    assert_eq!(response.status(), 200);
    assert_bystander_served(&platform);

    // A second attacker takes what is left of the whole; then anyone's body is
    // refused, but a request without one is still served.
    let also_held = hold_body(&platform, ANOTHER_ATTACKER);
    let mut late = post_from(&platform, LATECOMER, "content-length: 1024", &[b'z'; 1024]);
    let refused = answer(&mut late);
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("--body-budget-mb"), "{refused}");
    assert_bystander_served(&platform);

    // Gone with their connections, the held bodies give the budget back.
    drop(held);
    drop(also_held);
    std::thread::sleep(Duration::from_millis(500));
    let mut whole = post_from(
        &platform,
        ATTACKER,
        &format!("content-length: {MIB}"),
        &vec![b'x'; MIB],
    );
    let served = answer(&mut whole);
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    assert!(served.contains("Hello, body!"), "{served}");
}

/// Resident memory once it has settled: the same figure in three readings 200 ms
/// apart (or the last one, after ten seconds).
fn settled_memory(platform: &Platform) -> u64 {
    let mut readings = vec![platform.memory("VmRSS")];
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(200));
        readings.push(platform.memory("VmRSS"));
        if let [.., a, b, c] = readings[..]
            && a == b
            && b == c
        {
            break;
        }
    }
    readings[readings.len() - 1]
}

/// A body sent in one-byte chunks is held in one buffer. Each chunk kept as it came
/// held an allocation of its own and part of hyper's read buffer: about 40 bytes for
/// each byte the body budget counted, so a client's share of bodies held 40 times it.
#[test]
fn a_body_sent_in_one_byte_chunks_holds_about_its_own_size() {
    let dir = faas_testing::temp_dir();
    let platform = Platform::start_with(&["--no-demo", "--max-body-bytes", "8388608"]);
    deploy_bystander(&platform, dir.path());
    let before = settled_memory(&platform);
    // 4 MiB of body each, 24 MiB on the wire, never finished.
    let body = b"1\r\nx\r\n".repeat(4 * MIB);
    let held: Vec<TcpStream> = [ATTACKER, ANOTHER_ATTACKER]
        .into_iter()
        .map(|source| post_from(&platform, source, "transfer-encoding: chunked", &body))
        .collect();
    let grew = settled_memory(&platform).saturating_sub(before);
    assert!(
        grew < 64 * MIB as u64,
        "8 MiB of bodies in one-byte chunks grew the platform by {} MiB",
        grew >> 20
    );
    assert_bystander_served(&platform);
    drop(held);
}

/// Clients that hold the whole body budget with bodies they never finish leave every
/// tenant's pub/sub messages running: messages have a budget of their own. With one
/// budget for both, anyone who could reach the gateway had every message that came
/// meanwhile dropped, whatever its tenant's share.
#[test]
fn bodies_that_hold_the_whole_body_budget_leave_every_tenants_messages_running() {
    let redis = faas_testing::RedisServer::start();
    let redis_url = redis.url();
    let platform = Platform::start_with(&[
        "--no-demo",
        "--redis",
        &redis_url,
        "--max-body-bytes",
        "1048576",
        "--client-body-budget-mb",
        "2",
        "--body-budget-mb",
        "2",
    ]);
    let dir = faas_testing::temp_dir();
    deploy_bystander(&platform, dir.path());
    let channel = "[[triggers.redis]]\nchannel = \"news\"\nstep = \"relay\"\n";
    platform.deploy(&crate::redis::relay_manifest_for(
        dir.path(),
        "victim",
        "news",
        "",
        channel,
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while crate::services::subscribers(&redis, "t:victim:news") == 0 {
        assert!(std::time::Instant::now() < deadline, "never subscribed");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The attacker holds the whole body budget: anyone's body is refused.
    let held = [
        hold_body(&platform, ATTACKER),
        hold_body(&platform, ATTACKER),
    ];
    let mut late = post_from(&platform, LATECOMER, "content-length: 1024", &[b'z'; 1024]);
    let refused = answer(&mut late);
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");

    // The victim's messages, published meanwhile, all run.
    let mut connection = crate::redis::connect(&redis);
    for index in 0..20 {
        let receivers: i64 =
            redis::Commands::publish(&mut connection, "t:victim:news", format!("news-{index}"))
                .unwrap();
        assert_eq!(receivers, 1);
    }
    let out = crate::redis::payloads(&redis, "t:victim:news:out", 20, Duration::from_secs(30));
    assert_eq!(crate::redis::distinct_messages(&out).len(), 20, "{out:?}");
    drop(held);
}
