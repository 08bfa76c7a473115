//! The key-value store behind the `key-value` host interface.
//!
//! Keys are namespaced by tenant inside the store, so a function can only ever name
//! its own tenant's keys: isolation does not depend on guests behaving.
//!
//! Two backends share one contract (limits, errors, integer rules), so a function
//! cannot tell which one it runs against:
//! - [`KeyValueStore::Memory`]: a map in this process, for `faas up` and tests.
//! - [`KeyValueStore::Redis`]: a Redis server, so state outlives the process and is
//!   shared by every process pointed at the same server.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// Longest key a function may use, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value a function may store, in bytes.
pub const MAX_VALUE_BYTES: usize = 1 << 20;

/// Prefix of every key the Redis backend writes, so the platform's keys can share a
/// server (or a database) with other data and be found with `SCAN MATCH faas:kv:*`.
const REDIS_KEY_PREFIX: &str = "faas:kv:";

/// Why a key-value operation failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvError {
    /// The key or value exceeds [`MAX_KEY_BYTES`] / [`MAX_VALUE_BYTES`].
    #[error("{0}")]
    TooLarge(String),
    /// The stored value is not what the operation needs (e.g. not an integer), or the
    /// backend failed (e.g. Redis is unreachable).
    #[error("{0}")]
    Store(String),
}

/// The entries of the in-memory backend, keyed by (tenant, key).
type MemoryMap = HashMap<(String, String), Vec<u8>>;

/// A key-value backend. In-memory is the embedded default; Redis keeps state outside
/// the process. Both behave the same: same limits, same errors, same integer rules.
#[derive(Debug)]
pub enum KeyValueStore {
    /// A map in this process; gone when the process exits.
    Memory(Mutex<MemoryMap>),
    /// A Redis server. The manager multiplexes every operation over one connection
    /// and reconnects by itself when the connection drops, so a Redis restart costs
    /// failed operations while it is down, never a restart of this process.
    Redis(ConnectionManager),
}

impl Default for KeyValueStore {
    fn default() -> Self {
        Self::memory()
    }
}

impl KeyValueStore {
    /// An empty in-memory store.
    pub fn memory() -> Self {
        Self::Memory(Mutex::default())
    }

    /// A store in the Redis server at `url` (`redis://[user[:password]@]host[:port][/db]`),
    /// connected and checked with `PING` before it is returned.
    ///
    /// # Errors
    /// [`KvError::Store`] naming the URL (credentials hidden) when the URL is invalid
    /// or the server cannot be reached or does not answer.
    pub async fn redis(url: &str) -> Result<Self, KvError> {
        let shown = redact_url(url);
        let client = redis::Client::open(url)
            .map_err(|err| KvError::Store(format!("invalid Redis URL {shown}: {err}")))?;
        let config = ConnectionManagerConfig::new()
            // A few quick reconnect attempts, then fail the operation: a function
            // waiting on a dead Redis should get an error well within its deadline
            // rather than hang. The next operation starts a new round of attempts.
            .set_number_of_retries(3)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500))
            .set_connection_timeout(Some(Duration::from_secs(2)))
            // Values reach 1 MiB; the crate's default of 500 ms is tight for that
            // over a real network.
            .set_response_timeout(Some(Duration::from_secs(5)));
        let mut manager = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|err| KvError::Store(format!("connecting to Redis at {shown}: {err}")))?;
        redis::cmd("PING")
            .query_async::<()>(&mut manager)
            .await
            .map_err(|err| {
                KvError::Store(format!("Redis at {shown} did not answer PING: {err}"))
            })?;
        Ok(Self::Redis(manager))
    }

    /// The value of `key` in `tenant`'s namespace.
    pub async fn get(&self, tenant: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        check_key(key)?;
        match self {
            Self::Memory(map) => Ok(lock(map).get(&namespaced(tenant, key)).cloned()),
            Self::Redis(manager) => redis::cmd("GET")
                .arg(redis_key(tenant, key))
                .query_async(&mut manager.clone())
                .await
                .map_err(|err| redis_failed("GET", &err)),
        }
    }

    /// Stores `value` under `key` in `tenant`'s namespace.
    pub async fn set(&self, tenant: &str, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        check_key(key)?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(KvError::TooLarge(format!(
                "value of {} bytes exceeds the limit of {MAX_VALUE_BYTES}",
                value.len()
            )));
        }
        match self {
            Self::Memory(map) => {
                lock(map).insert(namespaced(tenant, key), value);
                Ok(())
            }
            Self::Redis(manager) => redis::cmd("SET")
                .arg(redis_key(tenant, key))
                .arg(value)
                .query_async::<()>(&mut manager.clone())
                .await
                .map_err(|err| redis_failed("SET", &err)),
        }
    }

    /// Removes `key` from `tenant`'s namespace; removing a missing key succeeds.
    pub async fn delete(&self, tenant: &str, key: &str) -> Result<(), KvError> {
        check_key(key)?;
        match self {
            Self::Memory(map) => {
                lock(map).remove(&namespaced(tenant, key));
                Ok(())
            }
            // DEL answers how many keys it removed; 0 for a missing key is not an error.
            Self::Redis(manager) => redis::cmd("DEL")
                .arg(redis_key(tenant, key))
                .query_async::<()>(&mut manager.clone())
                .await
                .map_err(|err| redis_failed("DEL", &err)),
        }
    }

    /// Adds `delta` to the decimal integer under `key` and returns the result. A
    /// missing key counts as 0.
    ///
    /// # Errors
    /// [`KvError::Store`] when the value is not the canonical decimal spelling of an
    /// `i64` (`42`, `-7`; not `+7`, `007`, `-0` or empty, exactly as Redis's `INCRBY`
    /// decides) or the result would overflow `i64`.
    pub async fn increment(&self, tenant: &str, key: &str, delta: i64) -> Result<i64, KvError> {
        check_key(key)?;
        match self {
            Self::Memory(map) => {
                let entry = namespaced(tenant, key);
                let mut map = lock(map);
                let current = match map.get(&entry) {
                    None => 0,
                    Some(value) => parse_counter(value).ok_or_else(|| not_an_integer(key))?,
                };
                let next = current
                    .checked_add(delta)
                    .ok_or_else(|| would_overflow(key))?;
                map.insert(entry, next.to_string().into_bytes());
                Ok(next)
            }
            // INCRBY is atomic on the server, so concurrent increments from any number
            // of processes never lose an update.
            Self::Redis(manager) => redis::cmd("INCRBY")
                .arg(redis_key(tenant, key))
                .arg(delta)
                .query_async(&mut manager.clone())
                .await
                .map_err(|err| increment_failed(key, &err)),
        }
    }
}

/// Locks the in-memory map.
fn lock(map: &Mutex<MemoryMap>) -> std::sync::MutexGuard<'_, MemoryMap> {
    // A panic while holding the lock cannot leave a half-written entry (each
    // operation ends in one map call), so a poisoned lock is still consistent.
    map.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn namespaced(tenant: &str, key: &str) -> (String, String) {
    (tenant.to_owned(), key.to_owned())
}

/// The Redis key of `key` in `tenant`'s namespace:
/// `faas:kv:{tenant length in bytes}:{tenant}:{key}`.
///
/// The length prefix is what makes the encoding injective: the decimal length ends at
/// the first `:` after the prefix and says exactly where the tenant ends, so the
/// tenant and key can be read back unambiguously whatever bytes they contain. Without
/// it, `faas:kv:{tenant}:{key}` would give tenant `a:b` with key `c` and tenant `a`
/// with key `b:c` the same Redis key, letting one tenant read another's value.
fn redis_key(tenant: &str, key: &str) -> String {
    format!("{REDIS_KEY_PREFIX}{}:{tenant}:{key}", tenant.len())
}

/// Parses a stored counter: only the canonical decimal spelling of an `i64` (`0`,
/// `42`, `-7`; not `+7`, `007`, `-0`, ` 7` or the empty string).
///
/// This is exactly what Redis's `INCRBY` accepts, so the in-memory backend refuses the
/// same values as the Redis one.
fn parse_counter(value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(value).ok()?;
    let number: i64 = text.parse().ok()?;
    // Rust's parser also takes a leading `+`, leading zeros and `-0`; Redis does not.
    (number.to_string() == text).then_some(number)
}

fn not_an_integer(key: &str) -> KvError {
    KvError::Store(format!("value of `{key}` is not an integer"))
}

fn would_overflow(key: &str) -> KvError {
    KvError::Store(format!("`{key}` would overflow"))
}

/// A failed Redis command as a store error naming the command.
fn redis_failed(command: &str, err: &RedisError) -> KvError {
    KvError::Store(format!("key-value store: Redis {command} failed: {err}"))
}

/// A failed INCRBY, with the in-memory backend's messages for the two refusals a
/// function can cause (so functions see the same error whichever backend runs).
fn increment_failed(key: &str, err: &RedisError) -> KvError {
    if err.kind() == ErrorKind::Server(ServerErrorKind::ResponseError) {
        // Redis 7: "ERR increment or decrement would overflow" and
        // "ERR value is not an integer or out of range".
        let detail = err.detail().unwrap_or_default();
        if detail.contains("overflow") {
            return would_overflow(key);
        }
        if detail.contains("not an integer") {
            return not_an_integer(key);
        }
    }
    redis_failed("INCRBY", err)
}

/// `url` for messages: user information and query (where Redis URLs carry
/// passwords) are replaced by `***`, so connection errors can be logged safely.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL we could parse for credentials; show nothing rather than a secret.
        return "<unparseable Redis URL>".to_owned();
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, _)) => (rest, "?***"),
        None => (rest, ""),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = match authority.rsplit_once('@') {
        Some((_, host)) => format!("***@{host}"),
        None => authority.to_owned(),
    };
    format!("{scheme}://{host}{path}{query}")
}

fn check_key(key: &str) -> Result<(), KvError> {
    if key.len() > MAX_KEY_BYTES {
        return Err(KvError::TooLarge(format!(
            "key of {} bytes exceeds the limit of {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tenants_never_see_each_others_keys() {
        let store = KeyValueStore::memory();
        store.set("a", "k", b"from a".to_vec()).await.unwrap();
        assert_eq!(store.get("b", "k").await.unwrap(), None);
        assert_eq!(store.get("a", "k").await.unwrap(), Some(b"from a".to_vec()));
    }

    #[tokio::test]
    async fn increment_counts_from_zero_and_rejects_non_integers() {
        let store = KeyValueStore::memory();
        assert_eq!(store.increment("t", "n", 2).await.unwrap(), 2);
        assert_eq!(store.increment("t", "n", 3).await.unwrap(), 5);
        store.set("t", "s", b"text".to_vec()).await.unwrap();
        assert!(matches!(
            store.increment("t", "s", 1).await,
            Err(KvError::Store(_))
        ));
    }

    #[test]
    fn redis_keys_cannot_collide_across_tenants() {
        // Without the length prefix these pairs would share a Redis key.
        assert_ne!(redis_key("a:b", "c"), redis_key("a", "b:c"));
        assert_ne!(redis_key("1:a", "b"), redis_key("1", "a:b"));
        assert_ne!(redis_key("", "3:abc:"), redis_key("abc", ""));
        assert_eq!(redis_key("acme", "hits"), "faas:kv:4:acme:hits");
    }

    #[test]
    fn counters_must_be_canonical_decimal_like_redis_wants() {
        for good in [
            "0",
            "42",
            "-7",
            "9223372036854775807",
            "-9223372036854775808",
        ] {
            assert_eq!(parse_counter(good.as_bytes()), good.parse().ok(), "{good}");
        }
        for bad in [
            "",
            "+7",
            "007",
            "-0",
            " 7",
            "7 ",
            "1.5",
            "x",
            "9223372036854775808",
        ] {
            assert_eq!(parse_counter(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(parse_counter(&[0xff, b'1']), None);
    }

    #[tokio::test]
    async fn an_empty_value_is_not_a_counter() {
        // An empty value is a value, not a missing key: Redis refuses to increment it.
        let store = KeyValueStore::memory();
        store.set("t", "e", Vec::new()).await.unwrap();
        assert_eq!(store.increment("t", "e", 1).await, Err(not_an_integer("e")));
        assert_eq!(store.get("t", "e").await.unwrap(), Some(Vec::new()));
    }

    #[test]
    fn redis_urls_are_shown_without_credentials() {
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("redis://user:secret@db.example:6380/2"),
            "redis://***@db.example:6380/2"
        );
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?pass=secret"),
            "redis+unix:///run/redis.sock?***"
        );
        assert!(!redact_url("secret").contains("secret"));
    }

    #[tokio::test]
    async fn oversized_keys_and_values_are_refused() {
        let store = KeyValueStore::memory();
        let long_key = "k".repeat(MAX_KEY_BYTES + 1);
        assert!(matches!(
            store.get("t", &long_key).await,
            Err(KvError::TooLarge(_))
        ));
        let big = vec![0; MAX_VALUE_BYTES + 1];
        assert!(matches!(
            store.set("t", "k", big).await,
            Err(KvError::TooLarge(_))
        ));
    }
}
