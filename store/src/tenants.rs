//! Tenants and their API tokens.
//!
//! A tenant is a name that workflows, routes and keys belong to; an operator creates
//! it. A token lets a client act for one tenant. Its secret (`faas_sk_` and 64 hex
//! digits, 32 random bytes) is shown once, when it is created: only its SHA-256 is
//! stored, so a copy of the database or of Redis gives no credential. The secret is
//! 256 random bits, so an unsalted hash is as good as any key-derivation function
//! against guessing, and lets authentication be one indexed look-up.
//!
//! Two backends with the same behaviour: the state database ([`Database`], embedded
//! mode: survives restarts) and Redis (services mode: every gateway sees the same
//! tenants), where they live in three hashes and a set per tenant:
//! - `faas:tenants`: tenant name to its JSON [`Tenant`];
//! - `faas:tokens`: token id to its JSON record (the [`TokenInfo`] and the secret's hash);
//! - `faas:token-hashes`: the secret's hash to the token id;
//! - `faas:tenant-tokens:<tenant>`: the ids of the tenant's tokens, so that listing or
//!   counting one tenant's tokens costs what that tenant holds, not what every tenant
//!   of the platform does.
//!
//! A token authenticates only while its tenant exists, so a token created while its
//! tenant was being removed never acts for a tenant that is gone.
//!
//! Each tenant carries its [`Quotas`], set by the operator: every limit left unset is
//! the platform's default (the `faas up` / `faas worker` flags). The gateway enforces
//! the workflow count; workers and brokers read the others with [`TenantStore::follow`]
//! (or have them applied at once in embedded mode).

use crate::db::{Database, StoreError};
use crate::redis_connection::{ConnectError, Run};
use faas_workflow::is_valid_name;
use redis::aio::ConnectionManager;
use rusqlite::OptionalExtension;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The tables of this module, created when missing.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tenants (
    name TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    quotas TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    label TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    secret_sha256 TEXT NOT NULL UNIQUE
);
CREATE INDEX IF NOT EXISTS tokens_by_tenant ON tokens (tenant);
CREATE TABLE IF NOT EXISTS leaving_tenants (
    name TEXT PRIMARY KEY
);
";

/// What every token secret starts with, so that a leaked one is recognisable (secret
/// scanners, logs) and never mistaken for a token id.
pub const SECRET_PREFIX: &str = "faas_sk_";

/// What every token id starts with.
pub const TOKEN_ID_PREFIX: &str = "tok_";

/// The longest token label, in characters.
pub const MAX_LABEL_CHARS: usize = 100;

/// The most tokens one tenant may hold at once: plenty for a team's people, machines
/// and rotations, and few enough that a tenant's token creates in a loop cannot grow
/// the state database or Redis without bound.
pub const MAX_TOKENS_PER_TENANT: usize = 100;

/// How often the processes that enforce quotas (workers, brokers) re-read the tenants'
/// quotas with [`TenantStore::follow`] in services mode: how long an operator's change
/// takes to reach them.
pub const QUOTA_SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// The Redis hash of tenants (field: the tenant's name). Writers of records that belong
/// to a tenant check it in the same step as their write, so that nothing of a tenant
/// lands after its removal (`faas_shared_state`'s promotion of a deployment).
pub const TENANTS_KEY: &str = "faas:tenants";
/// Redis hash: token id -> the token's record (JSON naming its `tenant`).
pub const TOKENS_KEY: &str = "faas:tokens";
/// Redis hash: token secret's hash ([`secret_hash`]) -> token id, for every live token.
/// A change a token authorised checks, in the same step, that its hash is still here
/// (revoking a token or removing its tenant takes it out).
pub const HASHES_KEY: &str = "faas:token-hashes";
/// What the Redis set of one tenant's token ids is named, followed by the tenant's
/// name (a valid name: no separator or pattern character). The scripts that create,
/// revoke and write back tokens keep it in the same step as the token's record.
const TENANT_TOKENS_PREFIX: &str = "faas:tenant-tokens:";
/// The Redis set of removed tenants whose data is still being removed
/// ([`TenantStore::remove_tenant`], [`TenantStore::release_name`]).
const LEAVING_KEY: &str = "faas:tenants-leaving";
/// A counter that every script writing the hashes of [`COPIED_KEYS`] increments in the
/// same step, so that a gateway keeping a copy of them ([`TenantStore::copy`]) reads
/// them again only when they changed, not every tenant's tokens every second.
const VERSION_KEY: &str = "faas:tenants-version";

/// The hashes [`TenantStore::copy`] keeps a copy of, tenants first.
const COPIED_KEYS: [&str; 3] = [TENANTS_KEY, TOKENS_KEY, HASHES_KEY];

/// The tenant and token records of Redis, as [`TenantStore::copy`] read them.
#[derive(Debug, Clone, Default)]
pub struct TenantsCopy {
    /// The fields of each of [`COPIED_KEYS`], in that order.
    hashes: Vec<Vec<(String, String)>>,
    /// [`VERSION_KEY`] as it was before they were read (0 when missing): the copy
    /// holds every change up to it.
    version: u64,
    /// When it was read.
    read_at: Option<std::time::Instant>,
}

impl TenantsCopy {
    /// The [`TenantStore::version`] it holds every change up to.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// How long ago it was read.
    pub fn age(&self) -> std::time::Duration {
        self.read_at
            .map_or(std::time::Duration::MAX, |at| at.elapsed())
    }

    /// How many tenants it holds.
    pub fn tenants(&self) -> usize {
        self.hashes.first().map_or(0, Vec::len)
    }
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// Its name, as workflow manifests write it.
    pub name: String,
    /// Unix time of its creation, in seconds.
    pub created_at: u64,
    /// The limits the operator set for it; records written before quotas existed
    /// have none (every limit the platform's default).
    #[serde(default)]
    pub quotas: Quotas,
}

/// A tenant's own limits. `None` is the platform's default for that limit; 0 means no
/// limit, except for `max_instances`, which is at least 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// How many workflows it may have deployed (`--tenant-max-workflows`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_workflows: Option<u64>,
    /// How many instances it may run at once, per worker (`--max-instances-per-tenant`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
    /// How many key-value keys it may keep (`--kv-max-keys`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_max_keys: Option<u64>,
    /// How many bytes of key-value keys and values it may keep (`--kv-max-bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_max_bytes: Option<u64>,
    /// How many entries each of its streams keeps when appended to by a guest or a
    /// dead-letter move (`--stream-max-len`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_max_len: Option<u64>,
    /// How many bytes its streams hold in all (`--stream-max-bytes`; how they are
    /// counted: `crate::stream_quota`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_max_bytes: Option<u64>,
    /// How many MiB of guest memory its instances may hold at once, per worker: their
    /// linear memory, copied regions and host handles (`--tenant-guest-memory-mb`;
    /// 0 for no share of its own, only the worker's whole `--guest-memory-mb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_memory_mb: Option<u64>,
    /// How many MiB the components of its deployed workflows may take in all
    /// (`--tenant-code-max-mb`): every gateway keeps them in memory, and the state
    /// database or Redis at rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_max_mb: Option<u64>,
    /// How many bytes of log lines its workflows keep in all (`--log-max-bytes`): in
    /// the gateway's memory in embedded mode, in Redis in services mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_max_bytes: Option<u64>,
}

impl Quotas {
    /// Whether every limit is the platform's default.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Refuses a limit that cannot work.
    ///
    /// # Errors
    /// [`TenantError::InvalidQuota`] for `max_instances` = 0.
    pub fn check(&self) -> Result<(), TenantError> {
        if self.max_instances == Some(0) {
            return Err(TenantError::InvalidQuota(
                "max_instances must be at least 1: with 0 the tenant could run nothing \
                 (remove its workflows instead)"
                    .to_owned(),
            ));
        }
        Ok(())
    }
}

/// A change to a tenant's [`Quotas`], as `PATCH /admin/v1/tenants/{name}` takes it: a
/// field left out stays as it is, a number sets the limit, `null` gives it back the
/// platform's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaChanges {
    /// See [`Quotas::max_workflows`].
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_workflows: Option<Option<u64>>,
    /// See [`Quotas::max_instances`].
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_instances: Option<Option<u32>>,
    /// See [`Quotas::kv_max_keys`].
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub kv_max_keys: Option<Option<u64>>,
    /// See [`Quotas::kv_max_bytes`].
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub kv_max_bytes: Option<Option<u64>>,
    /// See [`Quotas::stream_max_len`].
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub stream_max_len: Option<Option<u64>>,
    /// See [`Quotas::stream_max_bytes`].
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub stream_max_bytes: Option<Option<u64>>,
    /// See [`Quotas::guest_memory_mb`].
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub guest_memory_mb: Option<Option<u64>>,
    /// See [`Quotas::code_max_mb`].
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub code_max_mb: Option<Option<u64>>,
    /// See [`Quotas::log_max_bytes`].
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub log_max_bytes: Option<Option<u64>>,
}

impl QuotaChanges {
    /// `quotas` with these changes made.
    pub fn applied_to(&self, mut quotas: Quotas) -> Quotas {
        fn change<T: Copy>(limit: &mut Option<T>, change: Option<Option<T>>) {
            if let Some(value) = change {
                *limit = value;
            }
        }
        change(&mut quotas.max_workflows, self.max_workflows);
        change(&mut quotas.max_instances, self.max_instances);
        change(&mut quotas.kv_max_keys, self.kv_max_keys);
        change(&mut quotas.kv_max_bytes, self.kv_max_bytes);
        change(&mut quotas.stream_max_len, self.stream_max_len);
        change(&mut quotas.stream_max_bytes, self.stream_max_bytes);
        change(&mut quotas.guest_memory_mb, self.guest_memory_mb);
        change(&mut quotas.code_max_mb, self.code_max_mb);
        change(&mut quotas.log_max_bytes, self.log_max_bytes);
        quotas
    }
}

/// A field that is present, even as `null`: `Some(None)`, told apart from a field left
/// out (`None`, by `#[serde(default)]`).
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// A token as it is listed: everything but the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// Its public id (`tok_...`), used to revoke it.
    pub id: String,
    /// The tenant it acts for.
    pub tenant: String,
    /// What the operator said it is for; may be empty.
    pub label: String,
    /// Unix time of its creation, in seconds.
    pub created_at: u64,
}

/// A token just created, with its secret: the only time the secret is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedToken {
    /// The token.
    pub token: TokenInfo,
    /// The bearer secret (`faas_sk_...`).
    pub secret: String,
}

/// A token as Redis keeps it.
#[derive(Debug, Serialize, Deserialize)]
struct TokenRecord {
    #[serde(flatten)]
    info: TokenInfo,
    secret_sha256: String,
}

/// Why a tenant or token operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    /// The name cannot be a tenant's.
    #[error(
        "invalid tenant name `{0}`: use 1 to 63 characters from a-z, 0-9 and `-`, \
         starting with a letter"
    )]
    InvalidName(String),
    /// A quota that cannot work.
    #[error("invalid quota: {0}")]
    InvalidQuota(String),
    /// The label is too long or has control characters.
    #[error("invalid token label: at most {MAX_LABEL_CHARS} characters, no control characters")]
    InvalidLabel,
    /// A tenant of that name exists already.
    #[error("tenant `{0}` already exists")]
    TenantExists(String),
    /// A tenant of that name was removed and its data is not all removed yet.
    #[error(
        "tenant `{0}` was removed but not all of its data yet; finish with `faas tenant rm \
         {0}`, then create it"
    )]
    Leaving(String),
    /// No tenant of that name.
    #[error("tenant `{0}` does not exist; an operator creates it with `faas tenant create {0}`")]
    NoSuchTenant(String),
    /// No token with that id.
    #[error("no token `{0}`")]
    NoSuchToken(String),
    /// The tenant holds as many tokens as a tenant may.
    #[error(
        "tenant `{0}` holds {MAX_TOKENS_PER_TENANT} tokens, the most a tenant may; revoke \
         one it no longer uses first (`faas token ls`, `faas token revoke <id>`)"
    )]
    TooManyTokens(String),
    /// The tenant still has deployed workflows.
    #[error(
        "tenant `{tenant}` still has deployed workflows: {}; remove them first (`faas rm <name>`)",
        workflows.join(", ")
    )]
    HasWorkflows {
        /// The tenant.
        tenant: String,
        /// Its deployed workflows.
        workflows: Vec<String>,
    },
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The operation needs the other backend.
    #[error("{0}")]
    WrongBackend(&'static str),
    /// Redis failed.
    #[error("tenants in Redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A record in Redis is not what this version writes.
    #[error("tenants in Redis: malformed record `{key}`: {message}")]
    Malformed {
        /// The field of the hash.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

/// Where the workflows that keep a tenant from being removed are found
/// ([`TenantStore::remove_tenant`]).
#[derive(Debug, Clone, Copy)]
pub enum TenantWorkflows<'a> {
    /// The tenant's deployed workflows as the caller found them: enough where no deploy
    /// can land between that look and the removal (one process, under its deploy lock).
    Listed(&'a [String]),
    /// A Redis hash of deployment records (field: the workflow's name, value: JSON with
    /// `workflow.tenant`), read in the same step as the removal: where several
    /// gateways deploy, one could otherwise make a workflow of the tenant live in
    /// between. (Its writer checks [`TENANTS_KEY`] in the same step as its write, so a
    /// deploy that comes after the removal fails.)
    InRedisHash(&'a str),
}

/// Where tenants and tokens are kept.
#[derive(Clone)]
enum Backend {
    Sqlite(Database),
    Redis(ConnectionManager),
}

/// Tenants and their tokens, in the state database or in Redis.
#[derive(Clone)]
pub struct TenantStore {
    backend: Backend,
}

/// Creates a tenant unless it exists (0) or its name is still leaving (-1); 1 when
/// created. KEYS: tenants, leaving, version. ARGV: tenant, record.
const CREATE_TENANT: &str = "
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return -1 end
local created = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
if created == 1 then redis.call('INCR', KEYS[3]) end
return created";

/// Creates a tenant's token in one step, refusing a tenant that does not exist (0) or
/// holds `ARGV[5]` tokens already (-1); 1 when created. Ids in the set whose record is
/// gone (revoked by a process from before the sets) are dropped first, so they do not
/// count. KEYS: tenants, tokens, hashes, the tenant's token set, version. ARGV: tenant,
/// id, record, hash, the most tokens.
const CREATE_TOKEN: &str = "
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
for _, id in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  if redis.call('HEXISTS', KEYS[2], id) == 0 then redis.call('SREM', KEYS[4], id) end
end
if redis.call('SCARD', KEYS[4]) >= tonumber(ARGV[5]) then return -1 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[2])
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('INCR', KEYS[5])
return 1";

/// Removes a tenant, revokes its tokens and marks its name leaving in one step, unless
/// KEYS[7] (if given), a hash of deployment records (JSON with `workflow.tenant`),
/// holds a workflow of the tenant. Returns `{revoked, {}}`, `{-1, {}}` when there is no
/// tenant, or `{-2, workflows}` when it has some. Every token record is read, not only
/// the tenant's set: an operator's removal is rare, and a token it missed would act for
/// a tenant created later under the same name. KEYS: tenants, tokens, hashes, the
/// tenant's token set, leaving, version[, deployments]. ARGV: tenant.
const REMOVE_TENANT: &str = "
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {-1, {}} end
if KEYS[7] then
  local owned = {}
  local records = redis.call('HGETALL', KEYS[7])
  for i = 1, #records, 2 do
    if cjson.decode(records[i + 1]).workflow.tenant == ARGV[1] then
      table.insert(owned, records[i])
    end
  end
  if #owned > 0 then return {-2, owned} end
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[4])
redis.call('SADD', KEYS[5], ARGV[1])
redis.call('INCR', KEYS[6])
local revoked = 0
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  local record = cjson.decode(all[i + 1])
  if record.tenant == ARGV[1] then
    redis.call('HDEL', KEYS[2], all[i])
    redis.call('HDEL', KEYS[3], record.secret_sha256)
    revoked = revoked + 1
  end
end
return {revoked, {}}";

/// Replaces a tenant's record if it is still `ARGV[2]`: 1 if replaced, 0 if it
/// changed meanwhile, -1 if it is gone. KEYS: tenants, version. ARGV: tenant, old,
/// new.
const REPLACE_TENANT: &str = "
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return -1 end
if current ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('INCR', KEYS[2])
return 1";

/// Revokes a token; returns its record, or nil. KEYS: tokens, hashes, version. ARGV:
/// id, the prefix of the tenants' token sets.
const REVOKE_TOKEN: &str = "
local record = redis.call('HGET', KEYS[1], ARGV[1])
if not record then return false end
local token = cjson.decode(record)
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], token.secret_sha256)
redis.call('SREM', ARGV[2] .. token.tenant, ARGV[1])
redis.call('INCR', KEYS[3])
return record";

/// The records of the tokens of the tenant whose token set is KEYS[2], in one step
/// (an id whose record is gone is left out). KEYS: tokens, the tenant's token set.
const TENANT_TOKENS: &str = "
local ids = redis.call('SMEMBERS', KEYS[2])
if #ids == 0 then return {} end
local records = {}
for _, record in ipairs(redis.call('HMGET', KEYS[1], unpack(ids))) do
  if record then table.insert(records, record) end
end
return records";

/// Writes tenant record ARGV[2] under name ARGV[1] unless one is there or the name is
/// leaving (removed while the write-back ran). KEYS: tenants, leaving, version.
const WRITE_BACK_TENANT: &str = "
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return 0 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('INCR', KEYS[3])
return 1";

/// Writes token record ARGV[2] under id ARGV[1] unless one is there or its tenant is
/// not (removed while the write-back ran: its tokens must not come back to act for a
/// tenant made later under the name), and puts it in its tenant's set in the same
/// step; 1 if written. KEYS: tokens, tenants, leaving, version. ARGV: id, record, the
/// prefix of the tenants' token sets.
const WRITE_BACK_TOKEN: &str = "
local tenant = cjson.decode(ARGV[2]).tenant
if redis.call('HEXISTS', KEYS[2], tenant) == 0 then return 0 end
if redis.call('SISMEMBER', KEYS[3], tenant) == 1 then return 0 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('SADD', ARGV[3] .. tenant, ARGV[1])
redis.call('INCR', KEYS[4])
return 1";

/// Writes the token id ARGV[2] under secret hash ARGV[1] unless one is there or that
/// token's record is not. KEYS: hashes, tokens, version.
const WRITE_BACK_HASH: &str = "
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 0 then return 0 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('INCR', KEYS[3])
return 1";

/// Puts every token in its tenant's set (a record that does not decode is left to the
/// reads that name it). Run at every connect: tokens a process from before the sets
/// created (during a rolling upgrade) are then indexed by the next process to start.
/// KEYS: tokens. ARGV: the prefix of the tenants' token sets.
const BUILD_TOKEN_SETS: &str = "
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ok, record = pcall(cjson.decode, all[i + 1])
  if ok and type(record) == 'table' and type(record.tenant) == 'string' then
    redis.call('SADD', ARGV[1] .. record.tenant, all[i])
  end
end
return 1";

/// The tenant of the token whose secret has this hash, while the tenant exists; else
/// nil. KEYS: tenants, tokens, hashes. ARGV: hash.
const AUTHENTICATE: &str = "
local id = redis.call('HGET', KEYS[3], ARGV[1])
if not id then return false end
local record = redis.call('HGET', KEYS[2], id)
if not record then return false end
local tenant = cjson.decode(record).tenant
if redis.call('HEXISTS', KEYS[1], tenant) == 0 then return false end
return tenant";

/// A connection to the tenant store's Redis at `url`, checked to answer.
async fn redis_connection(url: &str) -> Result<ConnectionManager, TenantError> {
    crate::redis_connection::connect(url)
        .await
        .map_err(|err| match err {
            ConnectError::Url(err) | ConnectError::Unreachable(err) => TenantError::Redis(err),
        })
}

impl TenantStore {
    /// Tenants and tokens in the state database (embedded mode).
    pub fn sqlite(database: Database) -> Self {
        add_quotas_column(&database);
        Self {
            backend: Backend::Sqlite(database),
        }
    }

    /// Tenants and tokens in Redis at `url` (services mode); checks that it answers.
    ///
    /// # Errors
    /// [`TenantError::Redis`] if the URL is invalid or the server does not answer.
    pub async fn redis(url: &str) -> Result<Self, TenantError> {
        let connection = redis_connection(url).await?;
        redis::cmd("EVAL")
            .arg(BUILD_TOKEN_SETS)
            .arg(1)
            .arg(TOKENS_KEY)
            .arg(TENANT_TOKENS_PREFIX)
            .run::<i64>(&connection)
            .await?;
        Ok(Self {
            backend: Backend::Redis(connection),
        })
    }

    /// Tenants in Redis at `url`, for a process that only reads them ([`Self::tenants`],
    /// [`Self::follow`]): a worker, whose Redis user may not read the tokens
    /// (`charts/faas/files/worker-redis-acl.txt`). Unlike [`Self::redis`] it indexes no
    /// token; checks that Redis answers.
    ///
    /// # Errors
    /// [`TenantError::Redis`] if the URL is invalid or the server does not answer.
    pub async fn redis_for_reading(url: &str) -> Result<Self, TenantError> {
        Ok(Self {
            backend: Backend::Redis(redis_connection(url).await?),
        })
    }

    /// Creates tenant `name` with the platform's default quotas.
    ///
    /// # Errors
    /// [`TenantError::InvalidName`], [`TenantError::TenantExists`], or the backend's.
    pub async fn create_tenant(&self, name: &str) -> Result<Tenant, TenantError> {
        self.create_tenant_with_quotas(name, Quotas::default())
            .await
    }

    /// Creates tenant `name` with `quotas`.
    ///
    /// # Errors
    /// [`TenantError::InvalidName`], [`TenantError::InvalidQuota`],
    /// [`TenantError::TenantExists`], or the backend's.
    pub async fn create_tenant_with_quotas(
        &self,
        name: &str,
        quotas: Quotas,
    ) -> Result<Tenant, TenantError> {
        if !is_valid_name(name) {
            return Err(TenantError::InvalidName(name.to_owned()));
        }
        quotas.check()?;
        let tenant = Tenant {
            name: name.to_owned(),
            created_at: now(),
            quotas,
        };
        // 1 created, 0 exists, -1 leaving: as `CREATE_TENANT` answers.
        let created: i64 = match &self.backend {
            Backend::Sqlite(db) => {
                let mut connection = db.lock();
                let doing = || StoreError::sql(format!("creating tenant {name}"));
                let transaction = connection.transaction().map_err(doing())?;
                if is_leaving_in(&transaction, name).map_err(doing())? {
                    -1
                } else {
                    let inserted = transaction
                        .execute(
                            "INSERT OR IGNORE INTO tenants (name, created_at, quotas) \
                             VALUES (?1, ?2, ?3)",
                            (
                                &tenant.name,
                                to_sql_time(tenant.created_at),
                                to_json(&tenant.quotas),
                            ),
                        )
                        .map_err(doing())?;
                    transaction.commit().map_err(doing())?;
                    i64::from(inserted == 1)
                }
            }
            Backend::Redis(connection) => {
                redis::cmd("EVAL")
                    .arg(CREATE_TENANT)
                    .arg(3)
                    .arg(TENANTS_KEY)
                    .arg(LEAVING_KEY)
                    .arg(VERSION_KEY)
                    .arg(name)
                    .arg(to_json(&tenant))
                    .run(connection)
                    .await?
            }
        };
        match created {
            1 => Ok(tenant),
            0 => Err(TenantError::TenantExists(name.to_owned())),
            _ => Err(TenantError::Leaving(name.to_owned())),
        }
    }

    /// Creates tenant `name` unless it exists; returns whether it created it.
    ///
    /// # Errors
    /// [`TenantError::InvalidName`], or the backend's.
    pub async fn ensure_tenant(&self, name: &str) -> Result<bool, TenantError> {
        match self.create_tenant(name).await {
            Ok(_) => Ok(true),
            Err(TenantError::TenantExists(_)) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Tenant `name`, if it exists.
    ///
    /// # Errors
    /// The backend's.
    pub async fn tenant(&self, name: &str) -> Result<Option<Tenant>, TenantError> {
        match &self.backend {
            Backend::Sqlite(db) => Ok(db
                .read(|connection| {
                    connection
                        .query_row(
                            "SELECT name, created_at, quotas FROM tenants WHERE name = ?1",
                            [name],
                            tenant_row,
                        )
                        .optional()
                })
                .map_err(StoreError::sql(format!("reading tenant {name}")))?),
            Backend::Redis(connection) => {
                let json: Option<String> = redis::cmd("HGET")
                    .arg(TENANTS_KEY)
                    .arg(name)
                    .run(connection)
                    .await?;
                json.map(|json| from_json(name, &json)).transpose()
            }
        }
    }

    /// Every tenant, by name.
    ///
    /// # Errors
    /// The backend's.
    pub async fn tenants(&self) -> Result<Vec<Tenant>, TenantError> {
        match &self.backend {
            Backend::Sqlite(db) => Ok(db.read(|connection| {
                let doing = || StoreError::sql("listing tenants");
                let mut statement = connection
                    .prepare("SELECT name, created_at, quotas FROM tenants ORDER BY name")
                    .map_err(doing())?;
                let rows = statement.query_map([], tenant_row).map_err(doing())?;
                rows.collect::<Result<_, _>>().map_err(doing())
            })?),
            Backend::Redis(_) => {
                let mut tenants: Vec<Tenant> = self.redis_records(TENANTS_KEY).await?;
                tenants.sort_by(|a, b| a.name.cmp(&b.name));
                Ok(tenants)
            }
        }
    }

    /// Makes `changes` to the quotas of tenant `name`; returns the tenant as it now is.
    ///
    /// # Errors
    /// [`TenantError::NoSuchTenant`], [`TenantError::InvalidQuota`], or the backend's.
    pub async fn update_quotas(
        &self,
        name: &str,
        changes: &QuotaChanges,
    ) -> Result<Tenant, TenantError> {
        match &self.backend {
            Backend::Sqlite(db) => {
                let mut connection = db.lock();
                let doing = || StoreError::sql(format!("changing the quotas of tenant {name}"));
                // Read and written in one transaction: two operators' changes to
                // different limits both stay.
                let transaction = connection.transaction().map_err(doing())?;
                let mut tenant = transaction
                    .query_row(
                        "SELECT name, created_at, quotas FROM tenants WHERE name = ?1",
                        [name],
                        tenant_row,
                    )
                    .optional()
                    .map_err(doing())?
                    .ok_or_else(|| TenantError::NoSuchTenant(name.to_owned()))?;
                tenant.quotas = changes.applied_to(tenant.quotas);
                tenant.quotas.check()?;
                transaction
                    .execute(
                        "UPDATE tenants SET quotas = ?2 WHERE name = ?1",
                        (name, to_json(&tenant.quotas)),
                    )
                    .map_err(doing())?;
                transaction.commit().map_err(doing())?;
                Ok(tenant)
            }
            Backend::Redis(connection) => {
                // Compare and set, again while another change slipped in between: the
                // record is JSON, changed here rather than in Lua (whose JSON numbers
                // are doubles).
                loop {
                    let json: Option<String> = redis::cmd("HGET")
                        .arg(TENANTS_KEY)
                        .arg(name)
                        .run(connection)
                        .await?;
                    let json = json.ok_or_else(|| TenantError::NoSuchTenant(name.to_owned()))?;
                    let mut tenant: Tenant = from_json(name, &json)?;
                    tenant.quotas = changes.applied_to(tenant.quotas);
                    tenant.quotas.check()?;
                    let swapped: i64 = redis::cmd("EVAL")
                        .arg(REPLACE_TENANT)
                        .arg(2)
                        .arg(TENANTS_KEY)
                        .arg(VERSION_KEY)
                        .arg(name)
                        .arg(&json)
                        .arg(to_json(&tenant))
                        .run(connection)
                        .await?;
                    match swapped {
                        1 => return Ok(tenant),
                        -1 => return Err(TenantError::NoSuchTenant(name.to_owned())),
                        _ => continue,
                    }
                }
            }
        }
    }

    /// Calls `apply` with every tenant now and then every `interval`, forever: how a
    /// process that enforces quotas (a worker, a broker) learns the operator's changes.
    /// A failed read is logged and retried at the next interval, keeping what was
    /// applied last.
    pub async fn follow(&self, interval: Duration, mut apply: impl FnMut(&[Tenant])) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match self.tenants().await {
                Ok(tenants) => apply(&tenants),
                Err(err) => tracing::warn!("reading the tenants' quotas, retrying: {err}"),
            }
        }
    }

    /// Removes tenant `name` and revokes its tokens, unless it has deployed workflows
    /// (`deployed` says where they are known). Returns how many tokens were revoked.
    ///
    /// Its name then stays *leaving*, not to be created again, until
    /// [`Self::release_name`]: its caller removes the tenant's data first, so that
    /// whoever gets the name next never reads it, even when that removal fails
    /// half-way (and is then run again) or a process stops in between.
    ///
    /// # Errors
    /// [`TenantError::HasWorkflows`], [`TenantError::NoSuchTenant`], or the backend's;
    /// [`TenantError::WrongBackend`] for [`TenantWorkflows::InRedisHash`] on a store in
    /// the state database.
    pub async fn remove_tenant(
        &self,
        name: &str,
        deployed: TenantWorkflows<'_>,
    ) -> Result<u64, TenantError> {
        let has_workflows = |workflows: Vec<String>| TenantError::HasWorkflows {
            tenant: name.to_owned(),
            workflows,
        };
        if let TenantWorkflows::Listed(listed) = deployed
            && !listed.is_empty()
        {
            return Err(has_workflows(listed.to_vec()));
        }
        let revoked = match &self.backend {
            Backend::Sqlite(db) => {
                if let TenantWorkflows::InRedisHash(_) = deployed {
                    return Err(TenantError::WrongBackend(
                        "a tenant store in the state database cannot read workflows in Redis",
                    ));
                }
                let mut connection = db.lock();
                let doing = || StoreError::sql(format!("removing tenant {name}"));
                let transaction = connection.transaction().map_err(doing())?;
                let removed = transaction
                    .execute("DELETE FROM tenants WHERE name = ?1", [name])
                    .map_err(doing())?;
                if removed == 0 {
                    return Err(TenantError::NoSuchTenant(name.to_owned()));
                }
                let revoked = transaction
                    .execute("DELETE FROM tokens WHERE tenant = ?1", [name])
                    .map_err(doing())?;
                transaction
                    .execute(
                        "INSERT OR IGNORE INTO leaving_tenants (name) VALUES (?1)",
                        [name],
                    )
                    .map_err(doing())?;
                transaction.commit().map_err(doing())?;
                revoked as i64
            }
            Backend::Redis(connection) => {
                let tenant_tokens = tenant_tokens_key(name);
                let mut keys = vec![
                    TENANTS_KEY,
                    TOKENS_KEY,
                    HASHES_KEY,
                    &tenant_tokens,
                    LEAVING_KEY,
                    VERSION_KEY,
                ];
                if let TenantWorkflows::InRedisHash(hash) = deployed {
                    keys.push(hash);
                }
                let (revoked, owned) = redis::cmd("EVAL")
                    .arg(REMOVE_TENANT)
                    .arg(keys.len())
                    .arg(keys)
                    .arg(name)
                    .run::<(i64, Vec<String>)>(connection)
                    .await?;
                if !owned.is_empty() {
                    return Err(has_workflows(owned));
                }
                revoked
            }
        };
        u64::try_from(revoked).map_err(|_| TenantError::NoSuchTenant(name.to_owned()))
    }

    /// Whether tenant `name` was removed and its name is not released yet
    /// ([`Self::remove_tenant`]).
    ///
    /// # Errors
    /// The backend's.
    pub async fn is_leaving(&self, name: &str) -> Result<bool, TenantError> {
        match &self.backend {
            Backend::Sqlite(db) => Ok(db
                .read(|connection| is_leaving_in(connection, name))
                .map_err(StoreError::sql(format!("reading tenant {name}")))?),
            Backend::Redis(connection) => Ok(redis::cmd("SISMEMBER")
                .arg(LEAVING_KEY)
                .arg(name)
                .run(connection)
                .await?),
        }
    }

    /// The removed tenants whose names are not released yet, by name: removals a
    /// store failure or a stopped process left half-way.
    ///
    /// # Errors
    /// The backend's.
    pub async fn leaving_tenants(&self) -> Result<Vec<String>, TenantError> {
        let mut names: Vec<String> = match &self.backend {
            Backend::Sqlite(db) => db.read(|connection| {
                let doing = || StoreError::sql("listing leaving tenants");
                let mut statement = connection
                    .prepare("SELECT name FROM leaving_tenants")
                    .map_err(doing())?;
                statement
                    .query_map([], |row| row.get(0))
                    .map_err(doing())?
                    .collect::<rusqlite::Result<_>>()
                    .map_err(doing())
            })?,
            Backend::Redis(connection) => {
                redis::cmd("SMEMBERS")
                    .arg(LEAVING_KEY)
                    .run(connection)
                    .await?
            }
        };
        names.sort();
        Ok(names)
    }

    /// Lets a removed tenant's name be created again, once its data is gone.
    ///
    /// # Errors
    /// The backend's.
    pub async fn release_name(&self, name: &str) -> Result<(), TenantError> {
        match &self.backend {
            Backend::Sqlite(db) => {
                db.lock()
                    .execute("DELETE FROM leaving_tenants WHERE name = ?1", [name])
                    .map_err(StoreError::sql(format!("releasing tenant name {name}")))?;
            }
            Backend::Redis(connection) => {
                redis::cmd("SREM")
                    .arg(LEAVING_KEY)
                    .arg(name)
                    .run::<()>(connection)
                    .await?;
            }
        }
        Ok(())
    }

    /// Creates a token for `tenant`; the returned secret is not kept anywhere.
    ///
    /// # Errors
    /// [`TenantError::NoSuchTenant`], [`TenantError::InvalidLabel`],
    /// [`TenantError::TooManyTokens`], or the backend's.
    pub async fn create_token(
        &self,
        tenant: &str,
        label: &str,
    ) -> Result<IssuedToken, TenantError> {
        if label.chars().count() > MAX_LABEL_CHARS || label.chars().any(char::is_control) {
            return Err(TenantError::InvalidLabel);
        }
        let secret = format!("{SECRET_PREFIX}{}", hex::encode(rand::random::<[u8; 32]>()));
        let info = TokenInfo {
            id: format!(
                "{TOKEN_ID_PREFIX}{}",
                hex::encode(rand::random::<[u8; 8]>())
            ),
            tenant: tenant.to_owned(),
            label: label.to_owned(),
            created_at: now(),
        };
        let hash = secret_hash(&secret);
        let created = match &self.backend {
            Backend::Sqlite(db) => {
                let mut connection = db.lock();
                let doing = || StoreError::sql(format!("creating a token for tenant {tenant}"));
                let transaction = connection.transaction().map_err(doing())?;
                let exists = transaction
                    .query_row(
                        "SELECT 1 FROM tenants WHERE name = ?1",
                        [tenant],
                        |_| Ok(()),
                    )
                    .optional()
                    .map_err(doing())?
                    .is_some();
                if !exists {
                    0
                } else {
                    let held: i64 = transaction
                        .query_row(
                            "SELECT COUNT(*) FROM tokens WHERE tenant = ?1",
                            [tenant],
                            |row| row.get(0),
                        )
                        .map_err(doing())?;
                    if held >= MAX_TOKENS_PER_TENANT as i64 {
                        -1
                    } else {
                        transaction
                            .execute(
                                "INSERT INTO tokens (id, tenant, label, created_at, secret_sha256) \
                                 VALUES (?1, ?2, ?3, ?4, ?5)",
                                (&info.id, tenant, label, to_sql_time(info.created_at), &hash),
                            )
                            .map_err(doing())?;
                        transaction.commit().map_err(doing())?;
                        1
                    }
                }
            }
            Backend::Redis(connection) => {
                let record = TokenRecord {
                    info: info.clone(),
                    secret_sha256: hash.clone(),
                };
                redis::cmd("EVAL")
                    .arg(CREATE_TOKEN)
                    .arg(5)
                    .arg(TENANTS_KEY)
                    .arg(TOKENS_KEY)
                    .arg(HASHES_KEY)
                    .arg(tenant_tokens_key(tenant))
                    .arg(VERSION_KEY)
                    .arg(tenant)
                    .arg(&info.id)
                    .arg(to_json(&record))
                    .arg(&hash)
                    .arg(MAX_TOKENS_PER_TENANT)
                    .run::<i64>(connection)
                    .await?
            }
        };
        match created {
            1 => Ok(IssuedToken {
                token: info,
                secret,
            }),
            -1 => Err(TenantError::TooManyTokens(tenant.to_owned())),
            _ => Err(TenantError::NoSuchTenant(tenant.to_owned())),
        }
    }

    /// The tokens of `tenant`, or of every tenant; oldest first.
    ///
    /// # Errors
    /// The backend's.
    pub async fn tokens(&self, tenant: Option<&str>) -> Result<Vec<TokenInfo>, TenantError> {
        let mut tokens = match &self.backend {
            Backend::Sqlite(db) => db.read(|connection| {
                let doing = || StoreError::sql("listing tokens");
                let mut statement = connection
                    .prepare(
                        "SELECT id, tenant, label, created_at FROM tokens \
                         WHERE ?1 IS NULL OR tenant = ?1",
                    )
                    .map_err(doing())?;
                let rows = statement.query_map([tenant], token_info).map_err(doing())?;
                rows.collect::<Result<Vec<_>, _>>().map_err(doing())
            })?,
            Backend::Redis(connection) => {
                let records = match tenant {
                    Some(tenant) => {
                        let records: Vec<String> = redis::cmd("EVAL")
                            .arg(TENANT_TOKENS)
                            .arg(2)
                            .arg(TOKENS_KEY)
                            .arg(tenant_tokens_key(tenant))
                            .run(connection)
                            .await?;
                        records
                            .iter()
                            .map(|json| from_json::<TokenRecord>(tenant, json))
                            .collect::<Result<Vec<_>, _>>()?
                    }
                    None => self.redis_records::<TokenRecord>(TOKENS_KEY).await?,
                };
                records
                    .into_iter()
                    .map(|record| record.info)
                    // A set names only its tenant's tokens; checked all the same.
                    .filter(|info| tenant.is_none_or(|tenant| info.tenant == tenant))
                    .collect()
            }
        };
        tokens.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(tokens)
    }

    /// The token with id `id`, if any.
    ///
    /// # Errors
    /// The backend's.
    pub async fn token(&self, id: &str) -> Result<Option<TokenInfo>, TenantError> {
        match &self.backend {
            Backend::Sqlite(db) => Ok(db
                .read(|connection| {
                    connection
                        .query_row(
                            "SELECT id, tenant, label, created_at FROM tokens WHERE id = ?1",
                            [id],
                            token_info,
                        )
                        .optional()
                })
                .map_err(StoreError::sql(format!("reading token {id}")))?),
            Backend::Redis(connection) => {
                let json: Option<String> = redis::cmd("HGET")
                    .arg(TOKENS_KEY)
                    .arg(id)
                    .run(connection)
                    .await?;
                Ok(json
                    .map(|json| from_json::<TokenRecord>(id, &json))
                    .transpose()?
                    .map(|record| record.info))
            }
        }
    }

    /// Revokes token `id`: its secret authenticates no more. Returns what it was.
    ///
    /// # Errors
    /// [`TenantError::NoSuchToken`], or the backend's.
    pub async fn revoke_token(&self, id: &str) -> Result<TokenInfo, TenantError> {
        let revoked = match &self.backend {
            Backend::Sqlite(db) => db
                .lock()
                .query_row(
                    "DELETE FROM tokens WHERE id = ?1 RETURNING id, tenant, label, created_at",
                    [id],
                    token_info,
                )
                .optional()
                .map_err(StoreError::sql(format!("revoking token {id}")))?,
            Backend::Redis(connection) => {
                let json: Option<String> = redis::cmd("EVAL")
                    .arg(REVOKE_TOKEN)
                    .arg(3)
                    .arg(TOKENS_KEY)
                    .arg(HASHES_KEY)
                    .arg(VERSION_KEY)
                    .arg(id)
                    .arg(TENANT_TOKENS_PREFIX)
                    .run(connection)
                    .await?;
                json.map(|json| from_json::<TokenRecord>(id, &json))
                    .transpose()?
                    .map(|record| record.info)
            }
        };
        revoked.ok_or_else(|| TenantError::NoSuchToken(id.to_owned()))
    }

    /// The tenant `secret` acts for: `None` unless it is a live token of an existing
    /// tenant.
    ///
    /// # Errors
    /// The backend's.
    pub async fn authenticate(&self, secret: &str) -> Result<Option<String>, TenantError> {
        // Not one of ours: no need to ask the backend.
        if !secret.starts_with(SECRET_PREFIX) {
            return Ok(None);
        }
        let hash = secret_hash(secret);
        match &self.backend {
            Backend::Sqlite(db) => Ok(db
                .read(|connection| {
                    connection
                        .query_row(
                            "SELECT tokens.tenant FROM tokens \
                             JOIN tenants ON tenants.name = tokens.tenant \
                             WHERE tokens.secret_sha256 = ?1",
                            [&hash],
                            |row| row.get(0),
                        )
                        .optional()
                })
                .map_err(StoreError::sql("authenticating a token"))?),
            Backend::Redis(connection) => Ok(redis::cmd("EVAL")
                .arg(AUTHENTICATE)
                .arg(3)
                .arg(TENANTS_KEY)
                .arg(TOKENS_KEY)
                .arg(HASHES_KEY)
                .arg(&hash)
                .run::<Option<String>>(connection)
                .await?),
        }
    }

    /// A copy of every tenant and token record (token secrets' hashes only, never
    /// secrets) as Redis holds them, for [`TenantStore::write_back`] should Redis lose
    /// them; `None` for the state database, which keeps its own.
    ///
    /// # Errors
    /// The backend's.
    pub async fn copy(&self) -> Result<Option<TenantsCopy>, TenantError> {
        let Backend::Redis(connection) = &self.backend else {
            return Ok(None);
        };
        // Read first: a change made while the hashes are read moves it past this, so
        // the next look sees it.
        let version = self.redis_version(connection).await?;
        let read_at = Some(std::time::Instant::now());
        let mut hashes = Vec::with_capacity(COPIED_KEYS.len());
        for key in COPIED_KEYS {
            let fields: Vec<(String, String)> =
                redis::cmd("HGETALL").arg(key).run(connection).await?;
            hashes.push(fields);
        }
        Ok(Some(TenantsCopy {
            hashes,
            version,
            read_at,
        }))
    }

    /// The version of the tenants and tokens in Redis (one `GET`; `None` for the state
    /// database): it moves with every change to them, so a [`TenantsCopy`] of the same
    /// [`TenantsCopy::version`] holds them as they are. Within one epoch of the shared
    /// state only: a Redis that lost its state counts again from 0, so the caller
    /// compares epochs too.
    ///
    /// # Errors
    /// The backend's.
    pub async fn version(&self) -> Result<Option<u64>, TenantError> {
        let Backend::Redis(connection) = &self.backend else {
            return Ok(None);
        };
        Ok(Some(self.redis_version(connection).await?))
    }

    /// [`VERSION_KEY`], 0 when missing.
    async fn redis_version(&self, connection: &ConnectionManager) -> Result<u64, TenantError> {
        let version: Option<u64> = redis::cmd("GET").arg(VERSION_KEY).run(connection).await?;
        Ok(version.unwrap_or(0))
    }

    /// Writes back the records of `copy` that Redis lacks (after it restarted empty),
    /// leaving every record it has alone: one written since the copy is newer. Tenants
    /// and tokens created or revoked after the copy was taken are not known to it; a
    /// tenant removed since (its name still leaving) is not written back, nor are its
    /// tokens.
    ///
    /// # Errors
    /// The backend's.
    pub async fn write_back(&self, copy: &TenantsCopy) -> Result<(), TenantError> {
        let Backend::Redis(connection) = &self.backend else {
            return Ok(());
        };
        for (key, fields) in COPIED_KEYS.iter().zip(&copy.hashes) {
            for (field, value) in fields {
                let mut write = redis::cmd("EVAL");
                match *key {
                    TENANTS_KEY => write
                        .arg(WRITE_BACK_TENANT)
                        .arg(3)
                        .arg(key)
                        .arg(LEAVING_KEY),
                    TOKENS_KEY => write
                        .arg(WRITE_BACK_TOKEN)
                        .arg(4)
                        .arg(key)
                        .arg(TENANTS_KEY)
                        .arg(LEAVING_KEY),
                    _ => write.arg(WRITE_BACK_HASH).arg(3).arg(key).arg(TOKENS_KEY),
                };
                write.arg(VERSION_KEY);
                write.arg(field).arg(value);
                if *key == TOKENS_KEY {
                    write.arg(TENANT_TOKENS_PREFIX);
                }
                write.run::<()>(connection).await?;
            }
        }
        Ok(())
    }

    /// Every value of the Redis hash `key`, decoded.
    async fn redis_records<T: for<'de> Deserialize<'de>>(
        &self,
        key: &str,
    ) -> Result<Vec<T>, TenantError> {
        let Backend::Redis(connection) = &self.backend else {
            return Ok(Vec::new());
        };
        let all: Vec<(String, String)> = redis::cmd("HGETALL").arg(key).run(connection).await?;
        all.iter()
            .map(|(field, json)| from_json(field, json))
            .collect()
    }
}

/// The Redis set of `tenant`'s token ids.
fn tenant_tokens_key(tenant: &str) -> String {
    format!("{TENANT_TOKENS_PREFIX}{tenant}")
}

/// The hex SHA-256 of a token secret: what is stored in its place (never the secret).
pub fn secret_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Adds the `quotas` column to a `tenants` table made before quotas existed (every
/// tenant then has the defaults). A failure is logged: reads then fail naming it.
fn add_quotas_column(database: &Database) {
    let connection = database.lock();
    let has_column = connection
        .query_row(
            "SELECT count(*) FROM pragma_table_info('tenants') WHERE name = 'quotas'",
            [],
            |row| row.get::<_, i64>(0),
        )
        .map(|count| count > 0);
    if let Ok(false) = has_column
        && let Err(err) = connection.execute(
            "ALTER TABLE tenants ADD COLUMN quotas TEXT NOT NULL DEFAULT '{}'",
            [],
        )
    {
        tracing::error!("adding the quotas column to the tenants table: {err}");
    }
}

/// Whether `name` is in the state database's leaving tenants.
fn is_leaving_in(connection: &rusqlite::Connection, name: &str) -> rusqlite::Result<bool> {
    connection.query_row(
        "SELECT count(*) > 0 FROM leaving_tenants WHERE name = ?1",
        [name],
        |row| row.get(0),
    )
}

/// A tenant from a row of `name, created_at, quotas`.
fn tenant_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Tenant> {
    let quotas: String = row.get(2)?;
    Ok(Tenant {
        name: row.get(0)?,
        created_at: from_sql_time(row.get(1)?),
        quotas: serde_json::from_str(&quotas).map_err(|err| {
            rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, err.into())
        })?,
    })
}

fn token_info(row: &rusqlite::Row<'_>) -> rusqlite::Result<TokenInfo> {
    Ok(TokenInfo {
        id: row.get(0)?,
        tenant: row.get(1)?,
        label: row.get(2)?,
        created_at: from_sql_time(row.get(3)?),
    })
}

/// SQLite integers are signed; Unix seconds fit either way.
fn to_sql_time(seconds: u64) -> i64 {
    i64::try_from(seconds).unwrap_or(i64::MAX)
}

fn from_sql_time(seconds: i64) -> u64 {
    u64::try_from(seconds).unwrap_or(0)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn from_json<T: for<'de> Deserialize<'de>>(key: &str, json: &str) -> Result<T, TenantError> {
    serde_json::from_str(json).map_err(|err| TenantError::Malformed {
        key: key.to_owned(),
        message: err.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use faas_testing::RedisServer;

    /// Runs `check` against both backends.
    async fn on_both<F, Fut>(check: F)
    where
        F: Fn(TenantStore) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        check(TenantStore::sqlite(Database::in_memory().unwrap())).await;
        let server = RedisServer::start();
        check(TenantStore::redis(&server.url()).await.unwrap()).await;
    }

    #[tokio::test]
    async fn tenants_are_created_once_and_listed_by_name() {
        on_both(|store| async move {
            store.create_tenant("zeta").await.unwrap();
            let alpha = store.create_tenant("alpha").await.unwrap();
            assert!(matches!(
                store.create_tenant("alpha").await,
                Err(TenantError::TenantExists(name)) if name == "alpha"
            ));
            assert!(!store.ensure_tenant("alpha").await.unwrap());
            assert!(store.ensure_tenant("beta").await.unwrap());
            let names: Vec<String> = store
                .tenants()
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.name)
                .collect();
            assert_eq!(names, ["alpha", "beta", "zeta"]);
            assert_eq!(store.tenant("alpha").await.unwrap(), Some(alpha));
            assert_eq!(store.tenant("nope").await.unwrap(), None);
            assert!(matches!(
                store.create_tenant("Bad_Name").await,
                Err(TenantError::InvalidName(_))
            ));
        })
        .await;
    }

    #[tokio::test]
    async fn a_token_authenticates_as_its_tenant_until_revoked() {
        on_both(|store| async move {
            store.create_tenant("victim").await.unwrap();
            store.create_tenant("mallory").await.unwrap();
            let issued = store.create_token("victim", "ci").await.unwrap();
            assert!(issued.secret.starts_with(SECRET_PREFIX));
            assert_eq!(issued.secret.len(), SECRET_PREFIX.len() + 64);
            assert!(issued.token.id.starts_with(TOKEN_ID_PREFIX));
            assert_eq!(issued.token.label, "ci");
            let other = store.create_token("mallory", "").await.unwrap();
            assert_ne!(issued.secret, other.secret);
            assert_eq!(
                store.authenticate(&issued.secret).await.unwrap().as_deref(),
                Some("victim")
            );
            assert_eq!(
                store.authenticate(&other.secret).await.unwrap().as_deref(),
                Some("mallory")
            );
            // Almost the secret is not the secret.
            let mut guess = issued.secret.clone();
            guess.pop();
            guess.push('x');
            assert_eq!(store.authenticate(&guess).await.unwrap(), None);
            assert_eq!(store.authenticate("admin-token").await.unwrap(), None);

            assert_eq!(
                store.tokens(Some("victim")).await.unwrap(),
                std::slice::from_ref(&issued.token)
            );
            assert_eq!(store.tokens(None).await.unwrap().len(), 2);
            assert_eq!(
                store.token(&issued.token.id).await.unwrap(),
                Some(issued.token.clone())
            );

            assert_eq!(
                store.revoke_token(&issued.token.id).await.unwrap(),
                issued.token
            );
            assert_eq!(store.authenticate(&issued.secret).await.unwrap(), None);
            assert!(matches!(
                store.revoke_token(&issued.token.id).await,
                Err(TenantError::NoSuchToken(_))
            ));
            assert_eq!(store.tokens(Some("victim")).await.unwrap(), []);
            // The other tenant's token is untouched.
            assert_eq!(
                store.authenticate(&other.secret).await.unwrap().as_deref(),
                Some("mallory")
            );
        })
        .await;
    }

    #[tokio::test]
    async fn a_tenant_store_in_the_state_database_cannot_read_workflows_in_redis() {
        let store = TenantStore::sqlite(Database::in_memory().unwrap());
        store.create_tenant("t").await.unwrap();
        let removal = TenantWorkflows::InRedisHash("faas:deployments");
        assert!(matches!(
            store.remove_tenant("t", removal).await,
            Err(TenantError::WrongBackend(_))
        ));
        assert!(store.tenant("t").await.unwrap().is_some(), "not removed");
    }

    #[tokio::test]
    async fn tokens_only_for_existing_tenants_and_labels_are_bounded() {
        on_both(|store| async move {
            let err = store.create_token("ghost", "").await.unwrap_err();
            assert_eq!(
                err.to_string(),
                "tenant `ghost` does not exist; an operator creates it with \
                 `faas tenant create ghost`"
            );
            store.create_tenant("t").await.unwrap();
            assert!(matches!(
                store
                    .create_token("t", &"x".repeat(MAX_LABEL_CHARS + 1))
                    .await,
                Err(TenantError::InvalidLabel)
            ));
            assert!(matches!(
                store.create_token("t", "a\nb").await,
                Err(TenantError::InvalidLabel)
            ));
            assert_eq!(store.tokens(None).await.unwrap(), []);
        })
        .await;
    }

    #[tokio::test]
    async fn a_tenant_holds_at_most_its_limit_of_tokens_and_a_revoke_makes_room() {
        on_both(|store| async move {
            store.create_tenant("mallory").await.unwrap();
            store.create_tenant("other").await.unwrap();
            let mut issued = Vec::new();
            for i in 0..MAX_TOKENS_PER_TENANT {
                let label = format!("{i}");
                issued.push(store.create_token("mallory", &label).await.unwrap());
            }
            let err = store.create_token("mallory", "one more").await.unwrap_err();
            assert!(matches!(&err, TenantError::TooManyTokens(t) if t == "mallory"));
            assert!(err.to_string().contains("faas token revoke"), "{err}");
            let held = store.tokens(Some("mallory")).await.unwrap();
            assert_eq!(held.len(), MAX_TOKENS_PER_TENANT);
            // Another tenant's tokens are its own count.
            store.create_token("other", "").await.unwrap();
            // A revoke makes room for one.
            store.revoke_token(&issued[0].token.id).await.unwrap();
            store.create_token("mallory", "again").await.unwrap();
            assert!(store.create_token("mallory", "past").await.is_err());
            // Removed and created again, the tenant starts from none.
            store
                .remove_tenant("mallory", TenantWorkflows::Listed(&[]))
                .await
                .unwrap();
            store.release_name("mallory").await.unwrap();
            store.create_tenant("mallory").await.unwrap();
            store.create_token("mallory", "fresh").await.unwrap();
        })
        .await;
    }

    /// The labels of `tenant`'s tokens, oldest first.
    async fn labels(store: &TenantStore, tenant: &str) -> Vec<String> {
        let tokens = store.tokens(Some(tenant)).await.unwrap();
        tokens.into_iter().map(|token| token.label).collect()
    }

    #[tokio::test]
    async fn a_tenants_token_set_is_rebuilt_after_redis_lost_it_and_still_bounds_its_tokens() {
        let server = RedisServer::start();
        let store = TenantStore::redis(&server.url()).await.unwrap();
        store.create_tenant("mallory").await.unwrap();
        store.create_tenant("victim").await.unwrap();
        store.create_token("victim", "kept").await.unwrap();
        for i in 0..MAX_TOKENS_PER_TENANT - 1 {
            let label = format!("{i}");
            store.create_token("mallory", &label).await.unwrap();
        }
        let client = redis::Client::open(server.url()).unwrap();
        let mut redis = client.get_multiplexed_async_connection().await.unwrap();
        // As a Redis written before the sets existed: they are built at connect.
        let sets = [tenant_tokens_key("mallory"), tenant_tokens_key("victim")];
        let _: () = redis::cmd("DEL")
            .arg(&sets)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(
            labels(&store, "victim").await.is_empty(),
            "the sets are gone"
        );
        let store = TenantStore::redis(&server.url()).await.unwrap();
        assert_eq!(labels(&store, "victim").await, ["kept"]);
        assert_eq!(
            labels(&store, "mallory").await.len(),
            MAX_TOKENS_PER_TENANT - 1
        );
        // As a Redis that lost everything, then had the copy written back.
        let copy = store.copy().await.unwrap().unwrap();
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut redis)
            .await
            .unwrap();
        store.write_back(&copy).await.unwrap();
        assert_eq!(labels(&store, "victim").await, ["kept"]);
        store.create_token("mallory", "last").await.unwrap();
        assert!(matches!(
            store.create_token("mallory", "past").await,
            Err(TenantError::TooManyTokens(_))
        ));
        // A revoke leaves the set too, and makes room.
        let first = &store.tokens(Some("mallory")).await.unwrap()[0];
        store.revoke_token(&first.id).await.unwrap();
        assert_eq!(
            labels(&store, "mallory").await.len(),
            MAX_TOKENS_PER_TENANT - 1
        );
        store.create_token("mallory", "again").await.unwrap();
        // A removed tenant's set goes with it, so a tenant made later under the name
        // starts with none.
        assert_eq!(
            store
                .remove_tenant("mallory", TenantWorkflows::Listed(&[]))
                .await
                .unwrap(),
            100
        );
        store.release_name("mallory").await.unwrap();
        store.create_tenant("mallory").await.unwrap();
        assert!(labels(&store, "mallory").await.is_empty());
        assert_eq!(labels(&store, "victim").await, ["kept"]);
    }

    #[tokio::test]
    async fn a_write_back_restores_neither_a_tenant_removed_since_nor_its_tokens() {
        let server = RedisServer::start();
        let store = TenantStore::redis(&server.url()).await.unwrap();
        store.create_tenant("mallory").await.unwrap();
        store.create_tenant("victim").await.unwrap();
        let removed = store.create_token("mallory", "").await.unwrap();
        let kept = store.create_token("victim", "").await.unwrap();
        let copy = store.copy().await.unwrap().unwrap();
        // Removed while a gateway writes back a copy taken before (Redis restarted
        // empty just then): what the removal deleted must stay deleted.
        store
            .remove_tenant("mallory", TenantWorkflows::Listed(&[]))
            .await
            .unwrap();
        store.write_back(&copy).await.unwrap();
        assert_eq!(store.tenant("mallory").await.unwrap(), None);
        assert_eq!(store.authenticate(&removed.secret).await.unwrap(), None);
        assert!(
            store
                .tokens(None)
                .await
                .unwrap()
                .iter()
                .all(|t| t.tenant != "mallory")
        );
        assert_eq!(
            store.authenticate(&kept.secret).await.unwrap().as_deref(),
            Some("victim")
        );
        // Nor once the name is made again.
        store.release_name("mallory").await.unwrap();
        store.create_tenant("mallory").await.unwrap();
        assert_eq!(store.authenticate(&removed.secret).await.unwrap(), None);
        assert!(labels(&store, "mallory").await.is_empty());
    }

    /// Every gateway keeps a copy of the tenants and tokens to write back, and read
    /// every token record once a second to keep it: work in proportion to the whole
    /// platform. Now a copy is read again only when the version moved, and every
    /// change moves it (and none moves it for nothing).
    #[tokio::test]
    async fn every_change_to_tenants_or_tokens_moves_the_version_a_copy_holds() {
        let server = RedisServer::start();
        let store = TenantStore::redis(&server.url()).await.unwrap();
        let held = |copy: &TenantsCopy| copy.version();
        let copy = store.copy().await.unwrap().unwrap();
        assert_eq!(store.version().await.unwrap(), Some(held(&copy)));
        let mut last = held(&copy);
        fn moved(last: &mut u64, what: &str, now: Option<u64>) {
            let now = now.unwrap();
            assert!(now > *last, "{what} left the version at {now}");
            *last = now;
        }
        store.create_tenant("victim").await.unwrap();
        moved(
            &mut last,
            "creating a tenant",
            store.version().await.unwrap(),
        );
        store.create_tenant("mallory").await.unwrap();
        moved(
            &mut last,
            "creating another",
            store.version().await.unwrap(),
        );
        let token = store.create_token("mallory", "").await.unwrap();
        moved(
            &mut last,
            "creating a token",
            store.version().await.unwrap(),
        );
        let changes = QuotaChanges {
            max_workflows: Some(Some(3)),
            ..QuotaChanges::default()
        };
        store.update_quotas("mallory", &changes).await.unwrap();
        moved(&mut last, "changing quotas", store.version().await.unwrap());
        let copy = store.copy().await.unwrap().unwrap();
        assert_eq!(held(&copy), last, "the copy holds every change so far");
        store.revoke_token(&token.token.id).await.unwrap();
        moved(
            &mut last,
            "revoking a token",
            store.version().await.unwrap(),
        );
        store
            .remove_tenant("mallory", TenantWorkflows::Listed(&[]))
            .await
            .unwrap();
        moved(
            &mut last,
            "removing a tenant",
            store.version().await.unwrap(),
        );

        // What is refused or changes nothing leaves it alone.
        assert!(store.create_tenant("victim").await.is_err());
        assert!(store.revoke_token(&token.token.id).await.is_err());
        assert!(store.create_token("nobody", "").await.is_err());
        assert_eq!(store.version().await.unwrap(), Some(last));

        // A write-back into a Redis that lost its state moves it with each record.
        let kept = store.create_token("victim", "kept").await.unwrap();
        let copy = store.copy().await.unwrap().unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let mut redis = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(store.version().await.unwrap(), Some(0));
        store.write_back(&copy).await.unwrap();
        // The tenant, its token and the token's hash.
        assert_eq!(store.version().await.unwrap(), Some(3));
        assert_eq!(
            store.authenticate(&kept.secret).await.unwrap().as_deref(),
            Some("victim")
        );
    }

    #[tokio::test]
    async fn an_id_left_in_a_set_by_an_older_process_neither_lists_nor_counts() {
        let server = RedisServer::start();
        let store = TenantStore::redis(&server.url()).await.unwrap();
        store.create_tenant("mallory").await.unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let mut redis = client.get_multiplexed_async_connection().await.unwrap();
        // As a revoke through a process from before the sets: records gone, ids left.
        for i in 0..MAX_TOKENS_PER_TENANT {
            let _: () = redis::cmd("SADD")
                .arg(tenant_tokens_key("mallory"))
                .arg(format!("tok_gone{i}"))
                .query_async(&mut redis)
                .await
                .unwrap();
        }
        assert!(labels(&store, "mallory").await.is_empty());
        store.create_token("mallory", "fresh").await.unwrap();
        assert_eq!(labels(&store, "mallory").await, ["fresh"]);
    }

    #[tokio::test]
    async fn removing_a_tenant_revokes_its_tokens_and_is_refused_while_it_has_workflows() {
        on_both(|store| async move {
            store.create_tenant("victim").await.unwrap();
            store.create_tenant("other").await.unwrap();
            let first = store.create_token("victim", "a").await.unwrap();
            store.create_token("victim", "b").await.unwrap();
            let kept = store.create_token("other", "").await.unwrap();

            let err = store
                .remove_tenant(
                    "victim",
                    TenantWorkflows::Listed(&["shop".to_owned(), "cart".to_owned()]),
                )
                .await
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                "tenant `victim` still has deployed workflows: shop, cart; remove them first \
                 (`faas rm <name>`)"
            );
            assert!(store.tenant("victim").await.unwrap().is_some());
            assert!(store.authenticate(&first.secret).await.unwrap().is_some());

            assert_eq!(
                store
                    .remove_tenant("victim", TenantWorkflows::Listed(&[]))
                    .await
                    .unwrap(),
                2
            );
            assert_eq!(store.tenant("victim").await.unwrap(), None);
            assert_eq!(store.authenticate(&first.secret).await.unwrap(), None);
            assert_eq!(store.tokens(Some("victim")).await.unwrap(), []);
            assert!(matches!(
                store
                    .remove_tenant("victim", TenantWorkflows::Listed(&[]))
                    .await,
                Err(TenantError::NoSuchTenant(_))
            ));
            // Recreating the name does not bring the old tokens back.
            store.release_name("victim").await.unwrap();
            store.create_tenant("victim").await.unwrap();
            assert_eq!(store.authenticate(&first.secret).await.unwrap(), None);
            assert_eq!(
                store.authenticate(&kept.secret).await.unwrap().as_deref(),
                Some("other")
            );
        })
        .await;
    }

    #[tokio::test]
    async fn a_removed_tenants_name_is_not_created_again_until_released() {
        on_both(|store| async move {
            store.create_tenant("victim").await.unwrap();
            store.create_tenant("other").await.unwrap();
            store
                .remove_tenant("victim", TenantWorkflows::Listed(&[]))
                .await
                .unwrap();
            assert!(store.is_leaving("victim").await.unwrap());
            assert!(!store.is_leaving("other").await.unwrap());
            let err = store.create_tenant("victim").await.unwrap_err();
            assert!(matches!(&err, TenantError::Leaving(name) if name == "victim"));
            assert_eq!(
                err.to_string(),
                "tenant `victim` was removed but not all of its data yet; finish with \
                 `faas tenant rm victim`, then create it"
            );
            assert!(store.ensure_tenant("victim").await.is_err());
            assert_eq!(store.tenant("victim").await.unwrap(), None);
            // Other names are created as before.
            store.create_tenant("third").await.unwrap();

            store.release_name("victim").await.unwrap();
            assert!(!store.is_leaving("victim").await.unwrap());
            assert!(store.leaving_tenants().await.unwrap().is_empty());
            store.create_tenant("victim").await.unwrap();
            // A removal refused for its workflows leaves the name as it was.
            assert!(
                store
                    .remove_tenant("victim", TenantWorkflows::Listed(&["shop".to_owned()]))
                    .await
                    .is_err()
            );
            assert!(!store.is_leaving("victim").await.unwrap());
        })
        .await;
    }

    #[tokio::test]
    async fn quotas_are_kept_changed_and_given_back_to_the_default() {
        on_both(|store| async move {
            let plain = store.create_tenant("plain").await.unwrap();
            assert!(plain.quotas.is_default());
            let quotas = Quotas {
                max_workflows: Some(3),
                kv_max_bytes: Some(1 << 40),
                ..Quotas::default()
            };
            let small = store
                .create_tenant_with_quotas("small", quotas)
                .await
                .unwrap();
            assert_eq!(small.quotas, quotas);
            assert_eq!(store.tenant("small").await.unwrap(), Some(small.clone()));

            // Left out: unchanged; a number: set; null: the default again.
            let changes: QuotaChanges = serde_json::from_str(
                r#"{"max_workflows": null, "max_instances": 2, "stream_max_len": 0,
                    "stream_max_bytes": 4096}"#,
            )
            .unwrap();
            let changed = store.update_quotas("small", &changes).await.unwrap();
            let expected = Quotas {
                max_instances: Some(2),
                kv_max_bytes: Some(1 << 40),
                stream_max_len: Some(0),
                stream_max_bytes: Some(4096),
                ..Quotas::default()
            };
            assert_eq!(changed.quotas, expected);
            assert_eq!(changed.created_at, small.created_at);
            let listed = store.tenants().await.unwrap();
            assert_eq!(listed[1].quotas, expected);
            assert!(listed[0].quotas.is_default());

            let zero = QuotaChanges {
                max_instances: Some(Some(0)),
                ..QuotaChanges::default()
            };
            assert!(matches!(
                store.update_quotas("small", &zero).await,
                Err(TenantError::InvalidQuota(_))
            ));
            assert_eq!(
                store.tenant("small").await.unwrap().unwrap().quotas,
                expected
            );
            assert!(matches!(
                store.update_quotas("ghost", &changes).await,
                Err(TenantError::NoSuchTenant(_))
            ));
            assert!(serde_json::from_str::<QuotaChanges>(r#"{"max_wrokflows": 1}"#).is_err());
        })
        .await;
    }

    #[tokio::test]
    async fn a_tenants_table_from_before_quotas_gets_the_column() {
        let database = Database::in_memory().unwrap();
        database
            .lock()
            .execute_batch(
                "DROP TABLE tenants;
                 CREATE TABLE tenants (name TEXT PRIMARY KEY, created_at INTEGER NOT NULL);
                 INSERT INTO tenants VALUES ('old', 1);",
            )
            .unwrap();
        let store = TenantStore::sqlite(database);
        let old = store.tenant("old").await.unwrap().unwrap();
        assert!(old.quotas.is_default());
        let changes = QuotaChanges {
            max_workflows: Some(Some(2)),
            ..QuotaChanges::default()
        };
        assert_eq!(
            store
                .update_quotas("old", &changes)
                .await
                .unwrap()
                .quotas
                .max_workflows,
            Some(2)
        );
    }

    #[tokio::test]
    async fn the_state_database_keeps_tenants_and_token_hashes_but_never_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let secret = {
            let store = TenantStore::sqlite(Database::open(dir.path()).unwrap());
            store.create_tenant("demo").await.unwrap();
            store.create_token("demo", "").await.unwrap().secret
        };
        let store = TenantStore::sqlite(Database::open(dir.path()).unwrap());
        assert_eq!(
            store.authenticate(&secret).await.unwrap().as_deref(),
            Some("demo")
        );
        let needle = secret.as_bytes();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            assert!(!bytes.windows(needle.len()).any(|window| window == needle));
        }
    }

    // Token checks (every admin call) and reads of tenants run on read-only
    // connections of their own: a write under way on the connection that writes (a
    // tenant's key-value write, say) does not hold them.
    #[tokio::test]
    async fn a_token_check_does_not_wait_for_a_write_under_way() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).unwrap();
        let store = std::sync::Arc::new(TenantStore::sqlite(database.clone()));
        store.create_tenant("demo").await.unwrap();
        let secret = store.create_token("demo", "").await.unwrap().secret;

        let mut writing = database.lock();
        let write = writing
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        // On a thread of its own: were the check to wait for the write, it would wait
        // forever (this thread holds the write), and the test fail at the timeout.
        let (answer, checked) = std::sync::mpsc::channel();
        let runtime = tokio::runtime::Handle::current();
        let reader = std::sync::Arc::clone(&store);
        std::thread::spawn(move || {
            answer.send(runtime.block_on(async {
                let tenant = reader.authenticate(&secret).await.unwrap();
                let tenants = reader.tenants().await.unwrap();
                (tenant, tenants.len())
            }))
        });
        let (tenant, tenants) = checked
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the token check waited for the write");
        assert_eq!(tenant.as_deref(), Some("demo"));
        assert_eq!(tenants, 1);
        write.commit().unwrap();
    }
}
