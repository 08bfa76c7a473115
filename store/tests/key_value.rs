//! The key-value contract, checked against every backend.
//!
//! Functions must not be able to tell which backend they run on, so each behaviour
//! below is written once, as an async function taking `&KeyValueStore`, and run
//! against a fresh in-memory store (`memory::*`), a fresh SQLite database in a
//! temporary data dir (`sqlite::*`) and a fresh store on a real `redis-server`
//! (`redis::*`). SQLite-only behaviour (reopening, usage kept exact) and Redis-only
//! behaviour (reconnecting, connection errors, key layout) follow at the end.

use faas_store::Database;
use faas_store::kv::{KeyValueStore, KvError, KvQuota, MAX_KEY_BYTES, MAX_VALUE_BYTES};
use faas_testing::RedisServer;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Generates, for each named check, one test on the in-memory backend (in module
/// `$memory`), one on the SQLite backend (in `$sqlite`, each in its own data dir) and
/// one on the Redis backend (in `$redis`, each with its own server, so tests can run in
/// parallel); every store has the quota `$quota()`.
macro_rules! on_every_backend {
    ($memory:ident, $sqlite:ident, $redis:ident, $quota:ident => $($check:ident),* $(,)?) => {
        mod $memory {
            $(
                #[tokio::test]
                async fn $check() {
                    let store = faas_store::KeyValueStore::memory().with_quota(super::$quota());
                    super::$check(&store).await;
                }
            )*
        }

        mod $sqlite {
            $(
                #[tokio::test]
                async fn $check() {
                    let dir = tempfile::tempdir().unwrap();
                    let store = super::sqlite_store(dir.path()).with_quota(super::$quota());
                    super::$check(&store).await;
                    super::assert_usage_is_exact(dir.path());
                }
            )*
        }

        mod $redis {
            $(
                #[tokio::test]
                async fn $check() {
                    let server = faas_testing::RedisServer::start();
                    let store = super::redis_store(&server).await.with_quota(super::$quota());
                    super::$check(&store).await;
                }
            )*
        }
    };
}

on_every_backend!(memory, sqlite, redis, default_quota =>
    set_get_and_delete,
    a_missing_key_is_none,
    tenants_never_see_each_others_keys,
    increment_counts_from_zero_and_accumulates,
    increment_refuses_values_that_are_not_integers,
    increment_refuses_to_overflow,
    oversized_keys_and_values_are_refused,
    binary_values_round_trip,
);

on_every_backend!(memory_quota, sqlite_quota, redis_quota, small_quota =>
    keys_beyond_the_quota_are_refused,
    bytes_beyond_the_quota_are_refused,
    increments_count_towards_the_quota,
    deletes_and_overwrites_credit_the_quota_back,
    a_full_tenant_can_still_read_shrink_and_delete,
    a_tenant_quota_overrides_the_default_for_that_tenant_only,
);

fn default_quota() -> KvQuota {
    KvQuota::default()
}

/// 3 keys and 100 bytes per tenant.
fn small_quota() -> KvQuota {
    KvQuota::new(3, 100)
}

/// A store in the state database of data dir `dir`.
fn sqlite_store(dir: &Path) -> KeyValueStore {
    KeyValueStore::sqlite(Database::open(dir).expect("opening the state database"))
}

/// Checks, on the file as another process would open it, that every tenant's usage
/// row equals what its entries add up to (keys counted in bytes), and that no tenant
/// without entries has a row.
fn assert_usage_is_exact(dir: &Path) {
    let database = Database::open(dir).unwrap();
    let connection = database.lock();
    let rows = |sql: &str| -> Vec<(String, u64, u64)> {
        let mut statement = connection.prepare(sql).unwrap();
        statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        rows("SELECT tenant, keys, bytes FROM kv_usage ORDER BY tenant"),
        rows(
            "SELECT tenant, count(*), sum(length(CAST(key AS BLOB)) + length(value))
             FROM kv_entries GROUP BY tenant ORDER BY tenant"
        )
    );
}

/// A store on `server`.
async fn redis_store(server: &RedisServer) -> KeyValueStore {
    KeyValueStore::redis(&server.url())
        .await
        .expect("connecting to the test redis-server")
}

async fn set_get_and_delete(store: &KeyValueStore) {
    store.set("t", "k", b"one".to_vec()).await.unwrap();
    assert_eq!(store.get("t", "k").await.unwrap(), Some(b"one".to_vec()));
    store.set("t", "k", b"two".to_vec()).await.unwrap();
    assert_eq!(store.get("t", "k").await.unwrap(), Some(b"two".to_vec()));
    store.delete("t", "k").await.unwrap();
    assert_eq!(store.get("t", "k").await.unwrap(), None);
    // Deleting what is not there is not an error: deletes are idempotent.
    store.delete("t", "k").await.unwrap();
    store.delete("t", "never-set").await.unwrap();
}

async fn a_missing_key_is_none(store: &KeyValueStore) {
    assert_eq!(store.get("t", "missing").await.unwrap(), None);
    assert_eq!(store.get("", "").await.unwrap(), None);
}

async fn tenants_never_see_each_others_keys(store: &KeyValueStore) {
    store.set("a", "k", b"from a".to_vec()).await.unwrap();
    assert_eq!(store.get("b", "k").await.unwrap(), None);
    store.set("b", "k", b"from b".to_vec()).await.unwrap();
    assert_eq!(store.get("a", "k").await.unwrap(), Some(b"from a".to_vec()));
    assert_eq!(store.get("b", "k").await.unwrap(), Some(b"from b".to_vec()));

    store.delete("a", "k").await.unwrap();
    assert_eq!(store.get("b", "k").await.unwrap(), Some(b"from b".to_vec()));

    assert_eq!(store.increment("a", "n", 1).await.unwrap(), 1);
    assert_eq!(store.increment("b", "n", 10).await.unwrap(), 10);
    assert_eq!(store.increment("a", "n", 1).await.unwrap(), 2);

    // Separators inside names must not let one tenant reach another's key.
    store.set("x:y", "z", b"x:y's".to_vec()).await.unwrap();
    assert_eq!(store.get("x", "y:z").await.unwrap(), None);
    store.set("1:x", "y", b"1:x's".to_vec()).await.unwrap();
    assert_eq!(store.get("1", "x:y").await.unwrap(), None);
    assert_eq!(
        store.get("x:y", "z").await.unwrap(),
        Some(b"x:y's".to_vec())
    );
}

async fn increment_counts_from_zero_and_accumulates(store: &KeyValueStore) {
    assert_eq!(store.increment("t", "n", 2).await.unwrap(), 2);
    assert_eq!(store.increment("t", "n", 3).await.unwrap(), 5);
    assert_eq!(store.increment("t", "n", -10).await.unwrap(), -5);
    assert_eq!(store.increment("t", "n", 0).await.unwrap(), -5);
    // Counters are stored as decimal text, readable with get and writable with set.
    assert_eq!(store.get("t", "n").await.unwrap(), Some(b"-5".to_vec()));
    store.set("t", "m", b"41".to_vec()).await.unwrap();
    assert_eq!(store.increment("t", "m", 1).await.unwrap(), 42);
    assert_eq!(store.increment("t", "zero", 0).await.unwrap(), 0);
    assert_eq!(store.get("t", "zero").await.unwrap(), Some(b"0".to_vec()));
}

async fn increment_refuses_values_that_are_not_integers(store: &KeyValueStore) {
    // Only the canonical decimal spelling of an i64 counts (what Redis's INCRBY takes).
    let not_integers: [&[u8]; 9] = [
        b"text",
        b"",
        b"1.5",
        b"+1",
        b"007",
        b"-0",
        b" 1",
        b"\xff",
        b"9223372036854775808",
    ];
    for value in not_integers {
        store.set("t", "s", value.to_vec()).await.unwrap();
        assert_eq!(
            store.increment("t", "s", 1).await,
            Err(KvError::Store("value of `s` is not an integer".into())),
            "{:?}",
            String::from_utf8_lossy(value)
        );
        // A refused increment leaves the value alone.
        assert_eq!(store.get("t", "s").await.unwrap(), Some(value.to_vec()));
    }
}

async fn increment_refuses_to_overflow(store: &KeyValueStore) {
    store
        .set("t", "max", i64::MAX.to_string().into_bytes())
        .await
        .unwrap();
    assert_eq!(
        store.increment("t", "max", 1).await,
        Err(KvError::Store("`max` would overflow".into()))
    );
    assert_eq!(
        store.get("t", "max").await.unwrap(),
        Some(i64::MAX.to_string().into_bytes())
    );
    assert_eq!(
        store.increment("t", "min", i64::MIN).await.unwrap(),
        i64::MIN
    );
    assert_eq!(
        store.increment("t", "min", -1).await,
        Err(KvError::Store("`min` would overflow".into()))
    );
}

async fn oversized_keys_and_values_are_refused(store: &KeyValueStore) {
    let long_key = "k".repeat(MAX_KEY_BYTES + 1);
    let too_long = KvError::TooLarge(format!(
        "key of {} bytes exceeds the limit of {MAX_KEY_BYTES}",
        MAX_KEY_BYTES + 1
    ));
    assert_eq!(store.get("t", &long_key).await.unwrap_err(), too_long);
    assert_eq!(
        store.set("t", &long_key, b"v".to_vec()).await.unwrap_err(),
        too_long
    );
    assert_eq!(store.delete("t", &long_key).await.unwrap_err(), too_long);
    assert_eq!(
        store.increment("t", &long_key, 1).await.unwrap_err(),
        too_long
    );

    let big = vec![7; MAX_VALUE_BYTES + 1];
    assert_eq!(
        store.set("t", "k", big).await,
        Err(KvError::TooLarge(format!(
            "value of {} bytes exceeds the limit of {MAX_VALUE_BYTES}",
            MAX_VALUE_BYTES + 1
        )))
    );
    assert_eq!(store.get("t", "k").await.unwrap(), None);

    // Exactly at the limits is fine.
    let longest_key = "k".repeat(MAX_KEY_BYTES);
    let largest = vec![7; MAX_VALUE_BYTES];
    store.set("t", &longest_key, largest.clone()).await.unwrap();
    assert_eq!(store.get("t", &longest_key).await.unwrap(), Some(largest));
}

async fn binary_values_round_trip(store: &KeyValueStore) {
    let every_byte: Vec<u8> = (0..=255).collect();
    store.set("t", "bytes", every_byte.clone()).await.unwrap();
    assert_eq!(store.get("t", "bytes").await.unwrap(), Some(every_byte));
    let reversed: Vec<u8> = (0..=255).rev().collect();
    store.set("t", "bytes", reversed.clone()).await.unwrap();
    assert_eq!(store.get("t", "bytes").await.unwrap(), Some(reversed));
    // An empty value is a value, not a missing key.
    store.set("t", "empty", Vec::new()).await.unwrap();
    assert_eq!(store.get("t", "empty").await.unwrap(), Some(Vec::new()));
    // Keys are UTF-8 of any kind, including the protocol's own delimiters.
    store.set("t", "ключ \r\n*$", b"v".to_vec()).await.unwrap();
    assert_eq!(
        store.get("t", "ключ \r\n*$").await.unwrap(),
        Some(b"v".to_vec())
    );
}

/// The message of a refusal by the key quota of `small_quota`.
fn keys_refused(tenant: &str) -> KvError {
    KvError::Quota(format!(
        "key-value quota exceeded: tenant `{tenant}` may keep at most 3 keys (the \
         kv-max-keys quota); delete keys to store new ones, or have an operator raise it \
         (`faas tenant set {tenant} --kv-max-keys N`)"
    ))
}

/// The message of a refusal by the byte quota of `small_quota`.
fn bytes_refused(tenant: &str) -> KvError {
    KvError::Quota(format!(
        "key-value quota exceeded: tenant `{tenant}` may keep at most 100 bytes of keys \
         and values (the kv-max-bytes quota); delete keys or store smaller values, or \
         have an operator raise it (`faas tenant set {tenant} --kv-max-bytes N`)"
    ))
}

/// A tenant given 1 key (and the default bytes) is refused its second key while another
/// tenant keeps the default 3; raised to 0 (no limit) it writes on; cleared, it is back
/// at the default.
async fn a_tenant_quota_overrides_the_default_for_that_tenant_only(store: &KeyValueStore) {
    store.set_tenant_quota("small", Some(1), None);
    assert_eq!(store.quota_of("small"), KvQuota::new(1, 100));
    assert_eq!(store.quota_of("other"), small_quota());
    store.set("small", "a", b"v".to_vec()).await.unwrap();
    let refused = store.set("small", "b", b"v".to_vec()).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("at most 1 keys (the kv-max-keys quota)")
            && refused
                .to_string()
                .contains("`faas tenant set small --kv-max-keys N`"),
        "{refused}"
    );
    assert!(store.increment("small", "c", 1).await.is_err());
    for key in ["a", "b", "c"] {
        store.set("other", key, b"v".to_vec()).await.unwrap();
    }
    store.set_tenant_quota("small", Some(0), None);
    for key in ["b", "c", "d", "e"] {
        store.set("small", key, b"v".to_vec()).await.unwrap();
    }
    store.set_tenant_quota("small", None, None);
    assert_eq!(store.quota_of("small"), small_quota());
    assert_eq!(
        store.set("small", "f", b"v".to_vec()).await,
        Err(keys_refused("small"))
    );
    // Over the restored quota, it can still clean up.
    store.delete("small", "e").await.unwrap();
}

async fn keys_beyond_the_quota_are_refused(store: &KeyValueStore) {
    for key in ["a", "b", "c"] {
        store.set("t", key, b"v".to_vec()).await.unwrap();
    }
    assert_eq!(
        store.set("t", "d", b"v".to_vec()).await,
        Err(keys_refused("t"))
    );
    assert_eq!(store.get("t", "d").await.unwrap(), None);
    // Overwriting a key adds none.
    store.set("t", "a", b"w".to_vec()).await.unwrap();
    // Another tenant has its own quota.
    for key in ["a", "b", "c"] {
        store.set("u", key, b"v".to_vec()).await.unwrap();
    }
    assert_eq!(
        store.set("u", "d", b"v".to_vec()).await,
        Err(keys_refused("u"))
    );
    // The refused writes changed nothing.
    assert_eq!(store.get("t", "a").await.unwrap(), Some(b"w".to_vec()));
    assert_eq!(store.get("t", "c").await.unwrap(), Some(b"v".to_vec()));
}

async fn bytes_beyond_the_quota_are_refused(store: &KeyValueStore) {
    // "a" + 89 bytes + "b" + 9 bytes = 100 bytes: exactly the quota.
    store.set("t", "a", vec![1; 89]).await.unwrap();
    store.set("t", "b", vec![2; 9]).await.unwrap();
    // One more byte in a new key or in an overwrite is refused.
    assert_eq!(
        store.set("t", "c", Vec::new()).await,
        Err(bytes_refused("t"))
    );
    assert_eq!(
        store.set("t", "b", vec![3; 10]).await,
        Err(bytes_refused("t"))
    );
    assert_eq!(store.get("t", "b").await.unwrap(), Some(vec![2; 9]));
    assert_eq!(store.get("t", "c").await.unwrap(), None);
    // A value over the whole quota is refused outright.
    assert_eq!(
        store.set("u", "big", vec![0; 200]).await,
        Err(bytes_refused("u"))
    );
    assert_eq!(store.get("u", "big").await.unwrap(), None);
}

async fn increments_count_towards_the_quota(store: &KeyValueStore) {
    // 96 bytes used; "n" with "9" makes 98.
    store.set("t", "f", vec![0; 95]).await.unwrap();
    assert_eq!(store.increment("t", "n", 9).await.unwrap(), 9);
    // "10" makes 99, "100" makes 100.
    assert_eq!(store.increment("t", "n", 1).await.unwrap(), 10);
    assert_eq!(store.increment("t", "n", 90).await.unwrap(), 100);
    // "1000" would make 101: refused, and the counter keeps its value.
    assert_eq!(
        store.increment("t", "n", 900).await,
        Err(bytes_refused("t"))
    );
    assert_eq!(store.get("t", "n").await.unwrap(), Some(b"100".to_vec()));
    // A shorter result is always fine.
    assert_eq!(store.increment("t", "n", -99).await.unwrap(), 1);
    // A new counter is a new key.
    store.delete("t", "f").await.unwrap();
    assert_eq!(store.increment("t", "m", 1).await.unwrap(), 1);
    assert_eq!(store.increment("t", "o", 1).await.unwrap(), 1);
    assert_eq!(store.increment("t", "p", 1).await, Err(keys_refused("t")));
    assert_eq!(store.get("t", "p").await.unwrap(), None);
    // Refusals by the value come before the quota's.
    store.set("t", "o", b"x".to_vec()).await.unwrap();
    assert_eq!(
        store.increment("t", "o", 1).await,
        Err(KvError::Store("value of `o` is not an integer".into()))
    );
}

async fn deletes_and_overwrites_credit_the_quota_back(store: &KeyValueStore) {
    for round in 0..5 {
        for key in ["a", "b", "c"] {
            store.set("t", key, vec![round; 30]).await.unwrap();
        }
        assert_eq!(
            store.set("t", "d", Vec::new()).await,
            Err(keys_refused("t")),
            "round {round}"
        );
        for key in ["a", "b", "c", "never-set"] {
            store.delete("t", key).await.unwrap();
        }
    }
    // Overwriting the same key many times counts it once.
    for round in 0..200u8 {
        store.set("t", "k", vec![round; 99]).await.unwrap();
    }
    store.delete("t", "k").await.unwrap();
    // Everything was credited back: the whole quota is free again.
    store.set("t", "x", vec![0; 99]).await.unwrap();
    store.delete("t", "x").await.unwrap();
    for key in ["a", "b", "c"] {
        store.set("t", key, Vec::new()).await.unwrap();
    }
}

async fn a_full_tenant_can_still_read_shrink_and_delete(store: &KeyValueStore) {
    store.set("t", "a", vec![0; 90]).await.unwrap();
    assert_eq!(
        store.set("t", "b", vec![0; 20]).await,
        Err(bytes_refused("t"))
    );
    // Shrinking, reading and deleting always work.
    store.set("t", "a", vec![0; 10]).await.unwrap();
    store.set("t", "b", vec![0; 20]).await.unwrap();
    assert_eq!(store.get("t", "b").await.unwrap(), Some(vec![0; 20]));
    store.delete("t", "b").await.unwrap();
}

#[tokio::test]
async fn redis_store_rides_over_a_restart_without_failing_repeatable_operations() {
    let mut server = RedisServer::start();
    let store = redis_store(&server).await;
    store.set("t", "before", b"1".to_vec()).await.unwrap();

    server.restart();

    // The first write after the restart meets the dropped connection and is sent again
    // on a new one: no operation a guest could repeat fails for the restart.
    store.set("t", "after", b"2".to_vec()).await.unwrap();
    assert_eq!(store.get("t", "after").await.unwrap(), Some(b"2".to_vec()));
    // The new server started empty, so this really is a new connection.
    assert_eq!(store.get("t", "before").await.unwrap(), None);

    // Reads and deletes too.
    server.restart();
    assert_eq!(store.get("t", "after").await.unwrap(), None);
    server.restart();
    store.delete("t", "after").await.unwrap();

    // An increment may have run when its connection dropped, so it is not sent again;
    // it fails (naming the command), and the next one runs on the new connection.
    server.restart();
    let mut failures = Vec::new();
    let mut result = store.increment("t", "n", 1).await;
    for _ in 0..40 {
        match result {
            Ok(_) => break,
            Err(err) => failures.push(err),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        result = store.increment("t", "n", 1).await;
    }
    assert_eq!(
        result.unwrap_or_else(|err| panic!("no reconnect within 2 s: {err}")),
        1
    );
    assert!(failures.len() <= 1, "{failures:?}");
    for failure in &failures {
        assert!(
            matches!(failure, KvError::Store(message) if message.contains("INCRBY")),
            "{failure:?}"
        );
    }
}

/// The server's count of each command it ran so far (`INFO commandstats`).
async fn command_stats(connection: &mut ::redis::aio::MultiplexedConnection) -> String {
    ::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(connection)
        .await
        .unwrap()
}

/// How many times `command` ran, in `stats` from [`command_stats`] (0 when it never
/// did).
fn calls(stats: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

// Writes go by the script's hash (EVALSHA); a server that forgot its scripts (flushed,
// or restarted on the same connection's address) gets each loaded again, and every
// operation, an increment included, succeeds the first time.
#[tokio::test]
async fn a_script_the_server_forgot_is_loaded_again() {
    let server = RedisServer::start();
    let store = redis_store(&server).await;
    store.set("t", "k", b"1".to_vec()).await.unwrap();
    assert_eq!(store.increment("t", "n", 2).await.unwrap(), 2);
    let mut direct = ::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let flushed: String = ::redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut direct)
        .await
        .unwrap();
    assert_eq!(flushed, "OK");
    store.set("t", "k", b"22".to_vec()).await.unwrap();
    assert_eq!(store.get("t", "k").await.unwrap(), Some(b"22".to_vec()));
    assert_eq!(store.increment("t", "n", 3).await.unwrap(), 5);
    store.delete("t", "k").await.unwrap();
    assert_eq!(store.get("t", "k").await.unwrap(), None);
    // The usage the scripts keep is still right: one key, `n` = "5".
    let usage: Vec<Option<u64>> = ::redis::cmd("HMGET")
        .arg("faas:kv-usage:1:t")
        .arg("keys")
        .arg("bytes")
        .query_async(&mut direct)
        .await
        .unwrap();
    assert_eq!(usage, vec![Some(1), Some(2)]);
    // Never the script's whole text (EVAL): its hash, and a load where it was missing.
    let stats = command_stats(&mut direct).await;
    assert!(stats.contains("cmdstat_evalsha:"), "{stats}");
    assert!(!stats.contains("cmdstat_eval:"), "{stats}");
    // The set whose script was missing left no value waiting in its staging key.
    assert_eq!(
        redis_keys(&server).await,
        ["faas:kv-usage:1:t", "faas:kv:1:t:n"]
    );
}

/// Every key on `server`, sorted.
async fn redis_keys(server: &RedisServer) -> Vec<String> {
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let mut keys: Vec<String> = ::redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut connection)
        .await
        .unwrap();
    keys.sort();
    keys
}

// A set goes through a staging key (the value never passes through Lua); one the quota
// refuses leaves nothing there, nor anything else.
#[tokio::test]
async fn a_refused_redis_set_leaves_nothing_behind() {
    let server = RedisServer::start();
    let store = redis_store(&server).await.with_quota(small_quota());
    assert!(matches!(
        store.set("t", "k", vec![0; 200]).await,
        Err(KvError::Quota(_))
    ));
    assert!(redis_keys(&server).await.is_empty());
    store.set("t", "k", vec![0; 50]).await.unwrap();
    assert!(matches!(
        store.set("t", "k", vec![0; 200]).await,
        Err(KvError::Quota(_))
    ));
    assert_eq!(store.get("t", "k").await.unwrap(), Some(vec![0; 50]));
    assert_eq!(
        redis_keys(&server).await,
        ["faas:kv-usage:1:t", "faas:kv:1:t:k"]
    );
}

// Redis copies what a script reads into Lua, about 2 ms of its one thread per MiB: an
// increment of a 1 MiB value that is no integer must not read it, or a tenant could
// hold Redis with increments that all fail.
#[tokio::test]
async fn a_redis_increment_never_reads_a_large_value() {
    let server = RedisServer::start();
    let store = redis_store(&server).await;
    store.set("t", "big", vec![b'x'; 1 << 20]).await.unwrap();
    store.set("t", "n", b"41".to_vec()).await.unwrap();
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = ::redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut connection)
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(
            store.increment("t", "big", 1).await,
            Err(KvError::Store("value of `big` is not an integer".into()))
        );
    }
    assert_eq!(store.increment("t", "n", 1).await.unwrap(), 42);
    let stats = command_stats(&mut connection).await;
    // Only the successful increment read its (short) new value.
    assert_eq!(calls(&stats, "get"), 1, "{stats}");
    assert_eq!(
        store.get("t", "big").await.unwrap(),
        Some(vec![b'x'; 1 << 20])
    );
}

#[tokio::test]
async fn a_redis_command_that_timed_out_is_not_sent_again() {
    let server = RedisServer::start();
    let store = redis_store(&server).await;
    assert_eq!(store.get("t", "k").await.unwrap(), None);
    // A server too slow to answer, not a dropped connection: the GET waits out its
    // reply timeout once and fails, rather than waiting as long again.
    server.pause();
    let slow = store.get("t", "k").await;
    server.resume();
    match slow {
        Err(KvError::Store(message)) => assert!(message.contains("GET"), "{message}"),
        other => panic!("expected a store error, got {other:?}"),
    }
    // The server ran what queued while it was stopped: one GET, not two.
    let mut direct = ::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut gets = 0;
    for _ in 0..50 {
        gets = calls(&command_stats(&mut direct).await, "get");
        if gets >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let info = command_stats(&mut direct).await;
    assert!(info.contains("cmdstat_get:calls=2,"), "{gets} {info}");
}

#[tokio::test]
async fn redis_errors_are_store_errors_naming_the_operation() {
    let server = RedisServer::start();
    let store = redis_store(&server).await;
    drop(server);
    match store.get("t", "k").await {
        Err(KvError::Store(message)) => assert!(message.contains("GET"), "{message}"),
        other => panic!("expected a store error, got {other:?}"),
    }
    match store.increment("t", "n", 1).await {
        Err(KvError::Store(message)) => assert!(message.contains("INCRBY"), "{message}"),
        other => panic!("expected a store error, got {other:?}"),
    }
}

#[tokio::test]
async fn connecting_to_no_server_fails_naming_the_url() {
    // A port that was free a moment ago: nothing answers there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    match KeyValueStore::redis(&url).await {
        Err(KvError::Store(message)) => assert!(message.contains(&url), "{message}"),
        other => panic!("expected a store error, got {other:?}"),
    }
    match KeyValueStore::redis("not a url").await {
        Err(KvError::Store(message)) => assert!(message.contains("invalid Redis URL"), "{message}"),
        other => panic!("expected a store error, got {other:?}"),
    }
}

#[tokio::test]
async fn redis_keys_are_laid_out_per_tenant_under_one_prefix() {
    let server = RedisServer::start();
    let store = redis_store(&server).await;
    store.set("acme", "hits", b"1".to_vec()).await.unwrap();
    // The values, and the tenant's usage for its quota beside them.
    assert_eq!(
        redis_keys(&server).await,
        ["faas:kv-usage:4:acme", "faas:kv:4:acme:hits"]
    );
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let usage: Vec<(String, String)> = ::redis::cmd("HGETALL")
        .arg("faas:kv-usage:4:acme")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(
        usage,
        [("keys".into(), "1".into()), ("bytes".into(), "5".into())]
    );
    // A tenant without keys has no usage left behind.
    store.delete("acme", "hits").await.unwrap();
    assert!(redis_keys(&server).await.is_empty());
}

#[tokio::test]
async fn concurrent_writers_in_two_processes_cannot_overshoot_the_quota() {
    let server = RedisServer::start();
    let quota = KvQuota::new(50, 0);
    let stores = [
        Arc::new(redis_store(&server).await.with_quota(quota)),
        Arc::new(redis_store(&server).await.with_quota(quota)),
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for round in 0..200 {
        let store = stores[round % 2].clone();
        tasks.spawn(async move {
            // Sets and increments of new keys race for the last places.
            if round % 3 == 0 {
                store
                    .increment("t", &format!("n{round}"), 1)
                    .await
                    .map(drop)
            } else {
                store.set("t", &format!("k{round}"), b"v".to_vec()).await
            }
        });
    }
    let results = tasks.join_all().await;
    let stored = results.iter().filter(|result| result.is_ok()).count();
    assert_eq!(stored, 50, "{results:?}");
    for result in results.iter().filter_map(|result| result.as_ref().err()) {
        assert!(
            matches!(result, KvError::Quota(message) if message.contains("50 keys")),
            "{result:?}"
        );
    }
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg("faas:kv:1:t:*")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(keys.len(), 50);
    let counted: u64 = ::redis::cmd("HGET")
        .arg("faas:kv-usage:1:t")
        .arg("keys")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(counted, 50);
}

#[tokio::test]
async fn concurrent_increments_from_two_processes_never_lose_an_update() {
    let server = RedisServer::start();
    // Two stores on one server stand for two platform processes sharing Redis.
    let stores = [
        Arc::new(redis_store(&server).await),
        Arc::new(redis_store(&server).await),
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for round in 0..200 {
        let store = stores[round % 2].clone();
        tasks.spawn(async move { store.increment("t", "n", 1).await.unwrap() });
    }
    tasks.join_all().await;
    assert_eq!(
        stores[0].get("t", "n").await.unwrap(),
        Some(b"200".to_vec())
    );
}

#[tokio::test]
async fn sqlite_store_keeps_entries_and_usage_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = sqlite_store(dir.path()).with_quota(small_quota());
        store.set("t", "a", vec![1; 50]).await.unwrap();
        assert_eq!(store.increment("t", "n", 41).await.unwrap(), 41);
        store.set("u", "a", b"u's".to_vec()).await.unwrap();
    }
    // A new process on the same data dir.
    let store = sqlite_store(dir.path()).with_quota(small_quota());
    assert_eq!(store.get("t", "a").await.unwrap(), Some(vec![1; 50]));
    assert_eq!(store.increment("t", "n", 1).await.unwrap(), 42);
    assert_eq!(store.get("u", "a").await.unwrap(), Some(b"u's".to_vec()));
    assert_eq!(store.get("u", "n").await.unwrap(), None);
    // The usage came back too: 3 keys is the quota, and 100 bytes.
    store.set("t", "b", Vec::new()).await.unwrap();
    assert_eq!(
        store.set("t", "c", Vec::new()).await,
        Err(keys_refused("t"))
    );
    assert_eq!(
        store.set("t", "a", vec![1; 97]).await,
        Err(bytes_refused("t"))
    );
    assert_usage_is_exact(dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_writers_in_two_processes_never_lose_an_update_nor_overshoot() {
    let dir = tempfile::tempdir().unwrap();
    // Two databases opened on one file stand for two processes sharing a data dir.
    let quota = KvQuota::new(50, 0);
    let stores = [
        Arc::new(sqlite_store(dir.path()).with_quota(quota)),
        Arc::new(sqlite_store(dir.path()).with_quota(quota)),
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for round in 0..200 {
        let store = stores[round % 2].clone();
        tasks.spawn(async move {
            store.increment("t", "n", 1).await.unwrap();
            store.set("t", &format!("k{round}"), b"v".to_vec()).await
        });
    }
    let results = tasks.join_all().await;
    // "n" takes one of the 50 places.
    assert_eq!(results.iter().filter(|result| result.is_ok()).count(), 49);
    for result in results.iter().filter_map(|result| result.as_ref().err()) {
        assert!(
            matches!(result, KvError::Quota(message) if message.contains("50 keys")),
            "{result:?}"
        );
    }
    assert_eq!(
        stores[1].get("t", "n").await.unwrap(),
        Some(b"200".to_vec())
    );
    assert_usage_is_exact(dir.path());
}

#[tokio::test]
async fn a_sqlite_write_that_fails_half_way_leaves_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let database = Database::open(dir.path()).unwrap();
    let store = KeyValueStore::sqlite(database.clone());
    store.set("t", "a", b"kept".to_vec()).await.unwrap();
    // Fail each write at its last statement, the usage's, after the entry was written:
    // where a process killed mid-write would stop.
    database
        .lock()
        .execute_batch(
            "CREATE TEMP TRIGGER fail_insert BEFORE INSERT ON kv_usage
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;
             CREATE TEMP TRIGGER fail_update BEFORE UPDATE ON kv_usage
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;
             CREATE TEMP TRIGGER fail_delete BEFORE DELETE ON kv_usage
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
        )
        .unwrap();
    for result in [
        store.set("t", "b", b"lost".to_vec()).await,
        store.increment("t", "n", 1).await.map(drop),
        store.delete("t", "a").await,
    ] {
        assert!(
            matches!(&result, Err(KvError::Store(message)) if message.contains("injected failure")),
            "{result:?}"
        );
    }
    database
        .lock()
        .execute_batch(
            "DROP TRIGGER fail_insert; DROP TRIGGER fail_update; DROP TRIGGER fail_delete;",
        )
        .unwrap();
    assert_eq!(store.get("t", "a").await.unwrap(), Some(b"kept".to_vec()));
    assert_eq!(store.get("t", "b").await.unwrap(), None);
    assert_eq!(store.get("t", "n").await.unwrap(), None);
    assert_usage_is_exact(dir.path());
}

// One tenant's large writes must not hold another tenant's reads: a read runs on a
// connection of its own and sees the last commit while a write is under way.
#[tokio::test]
async fn a_sqlite_read_does_not_wait_for_a_write_under_way() {
    let dir = tempfile::tempdir().unwrap();
    let database = Database::open(dir.path()).unwrap();
    let store = Arc::new(KeyValueStore::sqlite(database.clone()));
    store.set("t", "k", b"committed".to_vec()).await.unwrap();

    {
        // A write under way: the connection that writes is held, its transaction open.
        let mut writing = database.lock();
        let write = writing
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        write
            .execute("UPDATE kv_entries SET value = x'00' WHERE key = 'k'", [])
            .unwrap();

        // The read runs on a thread of its own: were it to wait for the write, it would
        // wait forever (this thread holds the write), and the test fail at the timeout.
        let (answer, read) = std::sync::mpsc::channel();
        let runtime = tokio::runtime::Handle::current();
        let reader = Arc::clone(&store);
        std::thread::spawn(move || answer.send(runtime.block_on(reader.get("t", "k"))));
        let value = read
            .recv_timeout(Duration::from_secs(10))
            .expect("the read waited for the write");
        assert_eq!(value.unwrap(), Some(b"committed".to_vec()));

        write.commit().unwrap();
    }

    assert_eq!(store.get("t", "k").await.unwrap(), Some(vec![0]));
}

// One tenant's queue of large writes does not hold another tenant's read: each
// tenant's commands go over a connection of their own, and Redis serves connections in
// turn. On one connection shared by both, the read's reply comes after every write sent
// before it (replies come in order), so all of them would be done first. The server is
// stopped while the commands are sent, so that all of them wait for it at once.
#[tokio::test]
async fn a_redis_read_does_not_wait_behind_another_tenants_writes() {
    const WRITES: usize = 48;
    let server = RedisServer::start();
    let store = Arc::new(redis_store(&server).await);
    store.set("victim", "k", b"v".to_vec()).await.unwrap();
    store
        .set("hog", "big", vec![1; MAX_VALUE_BYTES])
        .await
        .unwrap();
    server.pause();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut writes = tokio::task::JoinSet::new();
    for _ in 0..WRITES {
        let (store, done) = (store.clone(), done.clone());
        writes.spawn(async move {
            store
                .set("hog", "big", vec![2; MAX_VALUE_BYTES])
                .await
                .unwrap();
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let read = tokio::spawn({
        let store = store.clone();
        async move { store.get("victim", "k").await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.resume();
    assert_eq!(read.await.unwrap().unwrap(), Some(b"v".to_vec()));
    let after = done.load(std::sync::atomic::Ordering::SeqCst);
    writes.join_all().await;
    assert!(
        after < WRITES / 2,
        "the read waited for {after} of {WRITES} writes"
    );
}

// Each tenant's commands get a connection of their own, up to the store's limit
// (`--redis-tenant-connections`); past it, and with a limit of 0, they share one.
#[tokio::test]
async fn a_redis_store_opens_at_most_its_limit_of_tenant_connections() {
    let server = RedisServer::start();
    for (limit, own) in [(0, 0), (2, 2), (8, 4)] {
        let before = server.connected_clients();
        let store = redis_store(&server).await.with_tenant_connections(limit);
        for tenant in ["a", "b", "c", "d"] {
            store.set(tenant, "k", b"v".to_vec()).await.unwrap();
            assert_eq!(store.get(tenant, "k").await.unwrap(), Some(b"v".to_vec()));
        }
        // The store's shared connection, and each tenant's own.
        assert_eq!(
            server.connected_clients(),
            before + 1 + own,
            "limit {limit}"
        );
        drop(store);
        // Closed with the store (its connections' tasks end with their last handle).
        for _ in 0..100 {
            if server.connected_clients() == before {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}
