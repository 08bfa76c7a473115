//! Component bytes against a real redis-server, reached through a link slower than
//! loopback (as a real network is): a component travels whole though it takes longer
//! than a record's reply may, and on a connection of its own, so records do not wait
//! behind it.

use faas_shared_state::SharedState;
use faas_testing::RedisServer;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The link's speed each way.
const BYTES_PER_SECOND: usize = 8 << 20;
/// A component that takes about 6 s over the link: longer than a record's reply may
/// take (`faas_store::redis_connection::RESPONSE_TIMEOUT`, 5 s).
const LARGE: usize = 48 << 20;

/// Forwards `from` to `to` at [`BYTES_PER_SECOND`].
async fn throttle(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) {
    const CHUNK: usize = 64 << 10;
    let pause = Duration::from_secs_f64(CHUNK as f64 / BYTES_PER_SECOND as f64);
    let mut buffer = vec![0; CHUNK];
    while let Ok(read) = from.read(&mut buffer).await {
        if read == 0 || to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
        tokio::time::sleep(pause.mul_f64(read as f64 / CHUNK as f64)).await;
    }
}

/// A slow link to `redis`: the URL to connect to instead.
async fn slow_link(redis: &RedisServer) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let upstream = redis.url().trim_start_matches("redis://").to_owned();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(&upstream).await.unwrap();
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(throttle(client_read, server_write));
            tokio::spawn(throttle(server_read, client_write));
        }
    });
    format!("redis://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_slower_to_move_than_a_record_is_stored_and_read_back_whole() {
    let redis = RedisServer::start();
    let shared = SharedState::connect(&slow_link(&redis).await)
        .await
        .unwrap();
    let bytes: Vec<u8> = (0..LARGE).map(|i| (i % 251) as u8).collect();
    assert!(!shared.has_component("large").await.unwrap());
    shared.put_component("large", &bytes, "t").await.unwrap();
    assert!(shared.has_component("large").await.unwrap());
    let read = shared.component("large").await.unwrap();
    assert!(read == bytes, "the bytes read back differ");
}

/// While a worker fetches a component, its heartbeat (any record) is answered within
/// the heartbeat's lifetime (3 s by default), though the transfer takes about 6 s: it
/// does not queue behind the transfer, and the worker is not taken for dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_do_not_wait_behind_a_component_transfer() {
    let redis = RedisServer::start();
    // Stored directly, the fetch alone goes over the slow link.
    let direct = SharedState::connect(&redis.url()).await.unwrap();
    direct
        .put_component("large", &vec![7; LARGE], "t")
        .await
        .unwrap();
    let shared = SharedState::connect(&slow_link(&redis).await)
        .await
        .unwrap();
    let fetch = tokio::spawn({
        let shared = shared.clone();
        async move { shared.component("large").await.map(|bytes| bytes.len()) }
    });
    // The fetch is under way (it takes seconds) before the record is asked for.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked = std::time::Instant::now();
    shared.next_revision().await.unwrap();
    let waited = asked.elapsed();
    assert!(
        waited < Duration::from_secs(3) && !fetch.is_finished(),
        "the record waited {waited:?}, behind the component"
    );
    assert_eq!(fetch.await.unwrap().unwrap(), LARGE);
}
