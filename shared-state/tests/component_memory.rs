//! Storing a large component holds little more than its bytes: sent in one command,
//! the value was copied three more times on its way to Redis (the command's
//! arguments, the pipeline, the connection's buffer). A test binary of its own: the
//! process's peak memory is what it measures.

use faas_shared_state::SharedState;
use faas_testing::RedisServer;

/// A component larger than the pieces it is sent in by far.
const SIZE: usize = 96 << 20;

/// This process's peak resident memory so far, in KiB.
fn peak_kib() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches(" kB").parse().ok())
        .expect("a VmHWM line")
}

#[tokio::test(flavor = "current_thread")]
async fn storing_a_large_component_holds_little_more_than_its_bytes() {
    let redis = RedisServer::start();
    let shared = SharedState::connect(&redis.url()).await.unwrap();
    // Every page written, so the peak already counts them.
    let bytes: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    let before = peak_kib();
    let stored = shared.put_component("large", &bytes, "a").await.unwrap();
    let grown = peak_kib() - before;
    assert!(stored.created);
    assert!(
        grown < (SIZE >> 10) / 8,
        "storing {} MiB raised the peak by {} MiB",
        SIZE >> 20,
        grown >> 10
    );
    let read = shared.component("large").await.unwrap();
    assert!(read == bytes, "the bytes read back differ");
    assert!(shared.has_component_of("a", "large").await.unwrap());

    // Stored again by another tenant: the bytes stay as they are (the same: the key
    // is their digest), and that tenant may name them too.
    let again = shared.put_component("large", &bytes, "b").await.unwrap();
    assert!(!again.created);
    assert!(shared.has_component_of("b", "large").await.unwrap());
    assert!(shared.component("large").await.unwrap() == bytes);
}
