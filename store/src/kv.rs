//! The key-value store behind the `key-value` host interface.
//!
//! Keys are namespaced by tenant inside the store, so a function can only ever name
//! its own tenant's keys: isolation does not depend on guests behaving.
//!
//! Three backends share one contract (limits, errors, integer rules), so a function
//! cannot tell which one it runs against:
//! - [`KeyValueStore::sqlite`]: the state database in the data dir ([`Database`]), the
//!   default of `faas up`, so data outlives restarts and `kill -9`.
//! - [`KeyValueStore::redis`]: a Redis server, so state outlives the process and is
//!   shared by every process pointed at the same server.
//! - [`KeyValueStore::memory`]: a map in this process, for tests and benchmarks.
//!
//! Every tenant has a quota at rest ([`KvQuota`]): a number of keys and a number of
//! bytes (keys plus values). A write that would take the tenant over either fails with
//! [`KvError::Quota`]; writes that shrink or keep the usage (overwrites with shorter
//! values, deletes) always pass, so a tenant over its quota (e.g. after the quota was
//! lowered) can always clean up. Every backend counts the same way, in the same atomic
//! step as the write: under the map's lock, in one SQLite transaction that also writes
//! the tenant's usage row, or in a Lua script that keeps the tenant's usage hash in
//! Redis, so concurrent writers from any number of processes cannot overshoot.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, RwLock};

use redis::aio::ConnectionManager;
use redis::{ErrorKind, RedisError, Script, ScriptInvocation, ServerErrorKind};

use crate::Database;
use crate::redis_connection::{self, Run, redact_url};
use crate::tenant_connections::TenantConnections;

mod sqlite;
mod turns;

pub(crate) use sqlite::SCHEMA;

/// Longest key a function may use, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value a function may store, in bytes.
pub const MAX_VALUE_BYTES: usize = 1 << 20;

/// Default [`KvQuota::max_keys`]: 10,000 keys per tenant. Enough for a tenant's
/// counters, sessions and small documents; it also bounds what the bytes quota does not
/// count, the store's own overhead per key (about 100 bytes in either backend), to about
/// 1 MiB per tenant.
pub const DEFAULT_MAX_KEYS: u64 = 10_000;
/// Default [`KvQuota::max_bytes`]: 64 MiB of keys and values per tenant: what one
/// tenant can make the data dir (or Redis's memory) hold, so 16 tenants at their quota
/// make 1 GiB. It is 64 values of the largest size ([`MAX_VALUE_BYTES`]).
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// Prefix of every key the Redis backend writes, so the platform's keys can share a
/// server (or a database) with other data and be found with `SCAN MATCH faas:kv:*`.
const REDIS_KEY_PREFIX: &str = "faas:kv:";
/// Prefix of each tenant's usage hash in Redis (fields `keys` and `bytes`), outside
/// [`REDIS_KEY_PREFIX`] so a scan of the values never meets it.
const REDIS_USAGE_PREFIX: &str = "faas:kv-usage:";
/// Prefix of each tenant's staging key in Redis, where a value being set waits for
/// the quota's check inside the transaction that sets it ([`staged_set`]); outside
/// [`REDIS_KEY_PREFIX`] too.
const REDIS_STAGING_PREFIX: &str = "faas:kv-staging:";

/// What one tenant may keep in the store. A limit of `u64::MAX` means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvQuota {
    /// How many keys a tenant may have.
    pub max_keys: u64,
    /// How many bytes of keys plus values a tenant may have (each key counted in UTF-8
    /// bytes, each value in bytes; not the store's own overhead).
    pub max_bytes: u64,
}

impl Default for KvQuota {
    fn default() -> Self {
        Self {
            max_keys: DEFAULT_MAX_KEYS,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

impl KvQuota {
    /// A quota of `max_keys` keys and `max_bytes` bytes per tenant; 0 means no limit.
    pub fn new(max_keys: u64, max_bytes: u64) -> Self {
        let limit = |max: u64| if max == 0 { u64::MAX } else { max };
        Self {
            max_keys: limit(max_keys),
            max_bytes: limit(max_bytes),
        }
    }

    /// No limit at all.
    pub fn unlimited() -> Self {
        Self::new(0, 0)
    }

    /// Whether a write may go from `before` (the tenant's usage) to `after`: a limit
    /// only stops growth, so a write that does not add keys or bytes always passes.
    fn check(&self, tenant: &str, before: Usage, after: Usage) -> Result<(), KvError> {
        if after.keys > before.keys && after.keys > self.max_keys {
            return Err(self.exceeded(tenant, Exceeded::Keys));
        }
        if after.bytes > before.bytes && after.bytes > self.max_bytes {
            return Err(self.exceeded(tenant, Exceeded::Bytes));
        }
        Ok(())
    }

    /// The error for a write refused by the `which` limit: it names the quota, the
    /// tenant and the limit, and says how to get under it.
    fn exceeded(&self, tenant: &str, which: Exceeded) -> KvError {
        KvError::Quota(match which {
            Exceeded::Keys => format!(
                "key-value quota exceeded: tenant `{tenant}` may keep at most {} keys \
                 (the kv-max-keys quota); delete keys to store new ones, or have an \
                 operator raise it (`faas tenant set {tenant} --kv-max-keys N`)",
                self.max_keys
            ),
            Exceeded::Bytes => format!(
                "key-value quota exceeded: tenant `{tenant}` may keep at most {} bytes of \
                 keys and values (the kv-max-bytes quota); delete keys or store smaller \
                 values, or have an operator raise it (`faas tenant set {tenant} \
                 --kv-max-bytes N`)",
                self.max_bytes
            ),
        })
    }
}

/// Which limit of a [`KvQuota`] a write would exceed.
#[derive(Debug, Clone, Copy)]
enum Exceeded {
    Keys,
    Bytes,
}

/// What a tenant keeps in the store, as its quota counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Usage {
    keys: u64,
    bytes: u64,
}

/// Why a key-value operation failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvError {
    /// The key or value exceeds [`MAX_KEY_BYTES`] / [`MAX_VALUE_BYTES`].
    #[error("{0}")]
    TooLarge(String),
    /// The write would take the tenant over its [`KvQuota`]; the text names the quota,
    /// the tenant and the limit. (The WIT interface has no case of its own for it:
    /// guests see it as `too-large`, the tenant's data being too large.)
    #[error("{0}")]
    Quota(String),
    /// The stored value is not what the operation needs (e.g. not an integer), or the
    /// backend failed (e.g. Redis is unreachable).
    #[error("{0}")]
    Store(String),
}

/// One tenant's entries in the in-memory backend, with their size in bytes (keys plus
/// values) kept up to date by every write.
#[derive(Debug, Default)]
struct TenantEntries {
    entries: HashMap<String, Vec<u8>>,
    bytes: u64,
}

impl TenantEntries {
    fn usage(&self) -> Usage {
        Usage {
            keys: self.entries.len() as u64,
            bytes: self.bytes,
        }
    }

    /// Stores `value` under `key` if the quota allows it.
    fn put(
        &mut self,
        quota: &KvQuota,
        tenant: &str,
        key: &str,
        value: Vec<u8>,
    ) -> Result<(), KvError> {
        let before = self.usage();
        let old = self.entries.get(key).map(|old| entry_bytes(key, old));
        let new = entry_bytes(key, &value);
        let after = Usage {
            keys: before.keys + u64::from(old.is_none()),
            bytes: before.bytes - old.unwrap_or(0) + new,
        };
        quota.check(tenant, before, after)?;
        self.entries.insert(key.to_owned(), value);
        self.bytes = after.bytes;
        Ok(())
    }

    fn remove(&mut self, key: &str) {
        if let Some(old) = self.entries.remove(key) {
            self.bytes -= entry_bytes(key, &old);
        }
    }
}

/// The bytes one entry counts for in a quota.
fn entry_bytes(key: &str, value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

/// The entries of the in-memory backend, by tenant. A tenant with no keys has no entry.
type MemoryMap = HashMap<String, TenantEntries>;

/// Where a [`KeyValueStore`] keeps its entries.
#[derive(Debug)]
enum Backend {
    /// A map in this process; gone when the process exits.
    Memory(Mutex<MemoryMap>),
    /// The state database: kept in the data dir across restarts.
    Sqlite(sqlite::SqliteBackend),
    /// A Redis server, over a connection per tenant ([`TenantConnections`]), so one
    /// tenant's commands never queue behind another's. Each connection multiplexes its
    /// tenant's operations and reconnects by itself when it drops, so a Redis restart
    /// costs failed operations while it is down, never a restart of this process.
    Redis(TenantConnections),
}

/// A key-value backend. SQLite in the data dir is the embedded default; Redis keeps
/// state outside the process; in-memory is for tests. All behave the same: same
/// limits, same quota, same errors, same integer rules.
#[derive(Debug)]
pub struct KeyValueStore {
    backend: Backend,
    /// The quota of every tenant without one of its own.
    quota: KvQuota,
    /// The tenants the operator gave a quota of their own.
    overrides: RwLock<HashMap<String, KvQuota>>,
}

impl Default for KeyValueStore {
    fn default() -> Self {
        Self::memory()
    }
}

impl KeyValueStore {
    /// An empty in-memory store with the default quota.
    pub fn memory() -> Self {
        Self {
            backend: Backend::Memory(Mutex::default()),
            quota: KvQuota::default(),
            overrides: RwLock::default(),
        }
    }

    /// A store in the state database `database` (its `kv_entries` and `kv_usage`
    /// tables) with the default quota. Several stores, or several processes, on the
    /// same file see the same entries.
    pub fn sqlite(database: Database) -> Self {
        Self {
            backend: Backend::Sqlite(sqlite::SqliteBackend::new(database)),
            quota: KvQuota::default(),
            overrides: RwLock::default(),
        }
    }

    /// The same store with `quota` for every tenant instead of the default.
    #[must_use]
    pub fn with_quota(mut self, quota: KvQuota) -> Self {
        self.quota = quota;
        self
    }

    /// The same store with at most `max` tenants' Redis connections open at once (see
    /// [`crate::DEFAULT_TENANT_CONNECTIONS`]; 0: every tenant's commands share one
    /// connection). Other backends have no connections to limit.
    #[must_use]
    pub fn with_tenant_connections(mut self, max: usize) -> Self {
        if let Backend::Redis(connections) = self.backend {
            self.backend = Backend::Redis(connections.with_max(max));
        }
        self
    }

    /// The quota every tenant without one of its own has.
    pub fn quota(&self) -> KvQuota {
        self.quota
    }

    /// Gives `tenant` its own limits (`None` keeps the default of that limit; 0 means
    /// no limit), or, with both `None`, back the default quota. Every write from then
    /// on is checked against it; keys already over a lowered quota stay (see the
    /// module's documentation).
    pub fn set_tenant_quota(&self, tenant: &str, max_keys: Option<u64>, max_bytes: Option<u64>) {
        let mut overrides = self.overrides.write().unwrap_or_else(|p| p.into_inner());
        if max_keys.is_none() && max_bytes.is_none() {
            overrides.remove(tenant);
            return;
        }
        let limit = |max: u64| if max == 0 { u64::MAX } else { max };
        let quota = KvQuota {
            max_keys: max_keys.map_or(self.quota.max_keys, limit),
            max_bytes: max_bytes.map_or(self.quota.max_bytes, limit),
        };
        overrides.insert(tenant.to_owned(), quota);
    }

    /// The quota `tenant`'s writes are checked against: its own, or the default.
    pub fn quota_of(&self, tenant: &str) -> KvQuota {
        self.overrides
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant)
            .copied()
            .unwrap_or(self.quota)
    }

    /// A store in the Redis server at `url` (`redis://[user[:password]@]host[:port][/db]`)
    /// with the default quota, connected and checked with `PING` before it is returned.
    ///
    /// # Errors
    /// [`KvError::Store`] naming the URL (credentials hidden) when the URL is invalid
    /// or the server cannot be reached or does not answer.
    pub async fn redis(url: &str) -> Result<Self, KvError> {
        let connections = TenantConnections::connect(url)
            .await
            .map_err(|err| KvError::Store(format!("Redis at {}: {err}", redact_url(url))))?;
        Ok(Self {
            backend: Backend::Redis(connections),
            quota: KvQuota::default(),
            overrides: RwLock::default(),
        })
    }

    /// The value of `key` in `tenant`'s namespace.
    pub async fn get(&self, tenant: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        check_key(key)?;
        match &self.backend {
            Backend::Memory(map) => Ok(lock(map)
                .get(tenant)
                .and_then(|entries| entries.entries.get(key))
                .cloned()),
            Backend::Sqlite(sqlite) => sqlite.reads().get(tenant, key),
            Backend::Redis(connections) => redis::cmd("GET")
                .arg(redis_key(tenant, key))
                .run(&tenant_connection(connections, tenant, "GET").await?)
                .await
                .map_err(|err| redis_failed("GET", &err)),
        }
    }

    /// Stores `value` under `key` in `tenant`'s namespace.
    ///
    /// # Errors
    /// [`KvError::TooLarge`] for a key or value over its limit, [`KvError::Quota`] when
    /// the write would take the tenant over its quota (nothing is written then).
    pub async fn set(&self, tenant: &str, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        check_key(key)?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(KvError::TooLarge(format!(
                "value of {} bytes exceeds the limit of {MAX_VALUE_BYTES}",
                value.len()
            )));
        }
        let quota = self.quota_of(tenant);
        match &self.backend {
            Backend::Memory(map) => lock(map)
                .entry(tenant.to_owned())
                .or_default()
                .put(&quota, tenant, key, value),
            Backend::Sqlite(sqlite) => {
                let key = key.to_owned();
                sqlite
                    .write(tenant, move |entries, tenant| {
                        entries.set(&quota, tenant, &key, &value)
                    })
                    .await
            }
            Backend::Redis(connections) => {
                let connection = tenant_connection(connections, tenant, "SET").await?;
                let transaction = staged_set(&quota, tenant, key, &value);
                let (status,): (String,) = match transaction.run(&connection).await {
                    // The server does not know the script (it restarted, or its scripts
                    // were flushed): the transaction's SET ran and the script did not,
                    // so the staging key holds the value until the second run takes it.
                    Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        SET_SCRIPT
                            .load_async(&mut connection.clone())
                            .await
                            .map_err(|err| redis_failed("SET", &err))?;
                        transaction.run(&connection).await
                    }
                    result => result,
                }
                .map_err(|err| redis_failed("SET", &err))?;
                quota_status(&quota, tenant, &status)
            }
        }
    }

    /// Removes `key` from `tenant`'s namespace; removing a missing key succeeds.
    pub async fn delete(&self, tenant: &str, key: &str) -> Result<(), KvError> {
        check_key(key)?;
        match &self.backend {
            Backend::Memory(map) => {
                let mut map = lock(map);
                if let Some(entries) = map.get_mut(tenant) {
                    entries.remove(key);
                    if entries.entries.is_empty() {
                        map.remove(tenant);
                    }
                }
                Ok(())
            }
            Backend::Sqlite(sqlite) => {
                let key = key.to_owned();
                sqlite
                    .write(tenant, move |entries, tenant| entries.delete(tenant, &key))
                    .await
            }
            Backend::Redis(connections) => script(&DELETE_SCRIPT, &self.quota, tenant, key)
                .run::<String>(&tenant_connection(connections, tenant, "DEL").await?)
                .await
                .map(drop)
                .map_err(|err| redis_failed("DEL", &err)),
        }
    }

    /// Removes every entry of `tenant`'s, and its usage, and returns how many entries
    /// there were: for a removed tenant, so that a tenant created again under its name
    /// starts empty. Run once nothing of the tenant's runs (it has no workflows).
    ///
    /// # Errors
    /// [`KvError::Store`] when the backend fails; what was removed stays removed, and
    /// running it again removes the rest.
    pub async fn forget_tenant(&self, tenant: &str) -> Result<u64, KvError> {
        match &self.backend {
            Backend::Memory(map) => Ok(lock(map)
                .remove(tenant)
                .map_or(0, |entries| entries.entries.len() as u64)),
            Backend::Sqlite(sqlite) => {
                sqlite
                    .write(tenant, |entries, tenant| entries.forget_tenant(tenant))
                    .await
            }
            // The platform's command, on the shared connection.
            Backend::Redis(connections) => {
                let mut manager = connections.shared().clone();
                let prefix = redis_key(tenant, "");
                let pattern = format!("{}*", redis_connection::glob_escape(&prefix));
                let removed = redis_connection::unlink_matching(&mut manager, &pattern)
                    .await
                    .map_err(|err| redis_failed("SCAN and UNLINK", &err))?;
                redis::cmd("DEL")
                    .arg(redis_usage_key(tenant))
                    .arg(redis_staging_key(tenant))
                    .query_async::<u64>(&mut manager)
                    .await
                    .map_err(|err| redis_failed("DEL", &err))?;
                Ok(removed)
            }
        }
    }

    /// Adds `delta` to the decimal integer under `key` and returns the result. A
    /// missing key counts as 0.
    ///
    /// # Errors
    /// [`KvError::Store`] when the value is not the canonical decimal spelling of an
    /// `i64` (`42`, `-7`; not `+7`, `007`, `-0` or empty, exactly as Redis's `INCRBY`
    /// decides) or the result would overflow `i64`. [`KvError::Quota`] when the new
    /// key, or the longer value, would take the tenant over its quota (the value is
    /// left as it was).
    pub async fn increment(&self, tenant: &str, key: &str, delta: i64) -> Result<i64, KvError> {
        check_key(key)?;
        let quota = self.quota_of(tenant);
        match &self.backend {
            Backend::Memory(map) => {
                let mut map = lock(map);
                let entries = map.entry(tenant.to_owned()).or_default();
                let current = match entries.entries.get(key) {
                    None => 0,
                    Some(value) => parse_counter(value).ok_or_else(|| not_an_integer(key))?,
                };
                let result = current
                    .checked_add(delta)
                    .ok_or_else(|| would_overflow(key))
                    .and_then(|next| {
                        entries.put(&quota, tenant, key, next.to_string().into_bytes())?;
                        Ok(next)
                    });
                if entries.entries.is_empty() {
                    // A refused first increment must not leave an empty tenant behind.
                    map.remove(tenant);
                }
                result
            }
            Backend::Sqlite(sqlite) => {
                let key = key.to_owned();
                sqlite
                    .write(tenant, move |entries, tenant| {
                        entries.increment(&quota, tenant, &key, delta)
                    })
                    .await
            }
            // The script runs INCRBY, atomic on the server, so concurrent increments from
            // any number of processes never lose an update; it then checks the quota and
            // puts the old value back if the new one does not fit. It is not sent again
            // on a dropped connection (see `Run`): it may have run.
            Backend::Redis(connections) => {
                let (status, value): (String, String) =
                    script(&INCREMENT_SCRIPT, &quota, tenant, key)
                        .arg(delta)
                        .invoke_async(&mut tenant_connection(connections, tenant, "INCRBY").await?)
                        .await
                        .map_err(|err| increment_failed(key, &err))?;
                quota_status(&quota, tenant, &status)?;
                value.parse().map_err(|_| not_an_integer(key))
            }
        }
    }
}

/// `tenant`'s connection from `connections`; failing to make it fails `command`.
async fn tenant_connection(
    connections: &TenantConnections,
    tenant: &str,
    command: &str,
) -> Result<ConnectionManager, KvError> {
    connections
        .of(tenant)
        .await
        .map_err(|err| redis_failed(command, &err))
}

/// An invocation of `script` for `key` in `tenant`'s namespace, checked against
/// `quota`. Every script takes the same keys (the value's key, the tenant's usage hash)
/// and first arguments (the key's length in bytes, the quota's two limits); the caller
/// adds the rest.
///
/// Sent as `EVALSHA`, by the script's hash: Redis then neither receives nor hashes the
/// script's text (a kibibyte and a half) on every call. A server that does not know the
/// script (after a restart) answers `NOSCRIPT`, and the invocation loads it and sends
/// it again: a script that was not found did not run.
fn script<'a>(
    script: &'a Script,
    quota: &KvQuota,
    tenant: &str,
    key: &str,
) -> ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    invocation
        .key(redis_key(tenant, key))
        .key(redis_usage_key(tenant))
        .arg(key.len())
        .arg(quota.max_keys.to_string())
        .arg(quota.max_bytes.to_string());
    invocation
}

/// `set` of `value` under `key` as one transaction (`MULTI` ... `EXEC`): a plain `SET`
/// of the tenant's staging key, then [`SET_SCRIPT`] (by its hash), which checks the
/// quota and renames the staging key over `key`, or deletes it. Atomic like the other
/// scripts, but the value never passes through Lua: Redis keeps a large argument as it
/// read it, where the script's `ARGV` would copy it into Lua and out again: about
/// 2.4 ms of Redis's one thread per 1 MiB value against about 40 µs this way
/// (`bench/noisy-neighbour.sh` with `STORE=redis` prints both), time in which Redis
/// serves no other client.
fn staged_set(quota: &KvQuota, tenant: &str, key: &str, value: &[u8]) -> redis::Pipeline {
    let staging = redis_staging_key(tenant);
    let mut transaction = redis::pipe();
    transaction
        .atomic()
        .set(&staging, value)
        .ignore()
        // The keys and first arguments `script` gives, and the staging key.
        .cmd("EVALSHA")
        .arg(SET_SCRIPT.get_hash())
        .arg(3)
        .arg(redis_key(tenant, key))
        .arg(redis_usage_key(tenant))
        .arg(staging)
        .arg(key.len())
        .arg(quota.max_keys.to_string())
        .arg(quota.max_bytes.to_string());
    transaction
}

/// A script's status: `ok`, or the limit of `quota` (`keys` or `bytes`) that refused it.
fn quota_status(quota: &KvQuota, tenant: &str, status: &str) -> Result<(), KvError> {
    match status {
        "ok" => Ok(()),
        "keys" => Err(quota.exceeded(tenant, Exceeded::Keys)),
        "bytes" => Err(quota.exceeded(tenant, Exceeded::Bytes)),
        other => Err(KvError::Store(format!(
            "key-value store: unexpected answer `{other}` from Redis"
        ))),
    }
}

/// The Lua helpers every script starts with. `KEYS[1]` is the value's key, `KEYS[2]`
/// the tenant's usage hash; `ARGV[1]` is the key's length in bytes, `ARGV[2]` and
/// `ARGV[3]` the quota's key and byte limits.
///
/// Scripts run atomically in Redis, so the check and the write (and the usage they
/// change) are one step whatever other clients do. Numbers are Lua doubles, exact far
/// beyond any byte count a server holds. Usage can only be wrong for values written
/// without these scripts (e.g. by a platform version without quotas): they were never
/// counted, so they are not credited back below zero either.
macro_rules! lua_prelude {
    () => {
        r#"
local klen = tonumber(ARGV[1])
local max_keys = tonumber(ARGV[2])
local max_bytes = tonumber(ARGV[3])
local usage = redis.call('HMGET', KEYS[2], 'keys', 'bytes')
local keys = tonumber(usage[1] or '0')
local bytes = tonumber(usage[2] or '0')
-- Sets the usage to keys + dkeys, bytes + dbytes; an empty tenant has no hash.
local function account(dkeys, dbytes)
  if dkeys == 0 and dbytes == 0 then return end
  local k = math.max(keys + dkeys, 0)
  local b = math.max(bytes + dbytes, 0)
  if k == 0 then
    redis.call('DEL', KEYS[2])
  else
    redis.call('HSET', KEYS[2], 'keys', k, 'bytes', b)
  end
end
-- The status of a write from (keys, bytes) by (dkeys, dbytes): limits stop growth only.
local function refused(dkeys, dbytes)
  if dkeys > 0 and keys + dkeys > max_keys then return 'keys' end
  if dbytes > 0 and bytes + dbytes > max_bytes then return 'bytes' end
  return nil
end
-- The bytes the current value of KEYS[1] counts for, and whether there is one.
local function current()
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0, false end
  return klen + redis.call('STRLEN', KEYS[1]), true
end
"#
    };
}

/// `set` ([`staged_set`]): `KEYS[3]` is the staging key holding the value. Answers
/// `ok`, `keys` or `bytes`; the staging key is gone either way.
static SET_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua_prelude!(),
        r#"
local old, existed = current()
local dkeys = existed and 0 or 1
local dbytes = klen + redis.call('STRLEN', KEYS[3]) - old
local refusal = refused(dkeys, dbytes)
if refusal then
  redis.call('DEL', KEYS[3])
  return refusal
end
redis.call('RENAME', KEYS[3], KEYS[1])
account(dkeys, dbytes)
return 'ok'
"#
    ))
});

/// `delete`. Answers `ok`.
static DELETE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua_prelude!(),
        r#"
local old, existed = current()
if existed then
  redis.call('DEL', KEYS[1])
  account(-1, -old)
end
return 'ok'
"#
    ))
});

/// `increment`: `ARGV[4]` is the delta. Answers `{status, new value}`; INCRBY's own
/// errors (not an integer, overflow) come back as Redis errors, before anything changed.
///
/// It reads the old value's length, never the value: Redis copies what a script reads
/// into Lua (about 2 ms per MiB), and a tenant could otherwise have every increment of
/// a 1 MiB value that is no integer read it. Once `INCRBY` has taken the old value it
/// was an integer, so the new one is short, and `DECRBY` gives the old one back exactly
/// (Redis takes only an integer's canonical spelling).
static INCREMENT_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        lua_prelude!(),
        r#"
local old, existed = current()
local result = redis.pcall('INCRBY', KEYS[1], ARGV[4])
if type(result) == 'table' and result.err then return result end
local value = redis.call('GET', KEYS[1])
local dkeys = existed and 0 or 1
local dbytes = klen + string.len(value) - old
local refusal = refused(dkeys, dbytes)
if refusal then
  if existed then redis.call('DECRBY', KEYS[1], ARGV[4]) else redis.call('DEL', KEYS[1]) end
  return {refusal, ''}
end
account(dkeys, dbytes)
return {'ok', value}
"#
    ))
});

/// Locks the in-memory map.
fn lock(map: &Mutex<MemoryMap>) -> std::sync::MutexGuard<'_, MemoryMap> {
    // A panic while holding the lock cannot leave a half-written entry (each
    // operation ends in one map call), so a poisoned lock is still consistent.
    map.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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

/// The Redis key of `tenant`'s usage hash: `faas:kv-usage:{tenant length}:{tenant}`
/// (the length prefix for the same reason as in [`redis_key`]).
fn redis_usage_key(tenant: &str) -> String {
    format!("{REDIS_USAGE_PREFIX}{}:{tenant}", tenant.len())
}

/// The Redis key a value being set by `tenant` waits in ([`staged_set`]):
/// `faas:kv-staging:{tenant length}:{tenant}`.
fn redis_staging_key(tenant: &str) -> String {
    format!("{REDIS_STAGING_PREFIX}{}:{tenant}", tenant.len())
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
