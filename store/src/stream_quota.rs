//! What a tenant's streams may hold in Redis, and the append that keeps them to it.
//!
//! A stream entry stays in Redis after its consumers acknowledge it, until the stream
//! is trimmed. Trimming by entry count alone (`MAXLEN`) bounds a stream, not a tenant:
//! a guest may append entries of up to 1 MiB to as many stream names of its own as it
//! likes, so one tenant could fill the Redis that every tenant's triggers, key-value
//! data and logs live in. So each tenant has two limits ([`StreamQuota`]):
//! - `max_len`: each of its streams keeps at most that many entries (the oldest go; a
//!   stream at it is trimmed 1/64 below, up to 64 entries, so it holds between that
//!   and `max_len`);
//! - `max_bytes`: its streams together hold at most that many bytes, counted as each
//!   entry's field names and values plus [`ENTRY_OVERHEAD`], plus [`STREAM_OVERHEAD`]
//!   for each stream. An append that would go over first trims the oldest entries of
//!   the tenant's largest stream (by the bytes of its entries), then of the next
//!   largest, until the entry fits. So a stream that stopped growing cannot lock the
//!   tenant's other streams out, and the streams that hold the most give first. Only
//!   when trimming every entry would not make room (an entry larger than the quota, or
//!   thousands of streams whose own overhead fills it) is the append refused
//!   ([`AppendError::Quota`]), and then nothing is trimmed.
//!
//! The count is kept in Redis by a Lua script that checks, trims, appends and counts
//! in one atomic step (for a large entry, a transaction that appends it outside the
//! script: [`STAGE_FROM_BYTES`]), so appends from any number of workers and gateways
//! cannot overshoot: per tenant a sorted set of its streams by the bytes of their
//! entries (`faas:stream-sizes:<tenant>`), a hash of its totals
//! (`faas:stream-usage:<tenant>`: `bytes` in all, and `entries`, the part trimming can
//! free), and per stream a list of its entries' sizes (`faas:stream-entries:<stream>`),
//! so that trimming need not read them. Entries appended without the script (by
//! producers outside the platform, which hold Redis credentials and are trusted) are
//! not counted; trimming them credits back no more than their stream was counted for. A stream deleted outside the platform is credited back when the script
//! next meets it.
//!
//! The log streams of a tenant's workflows (`crate::logs`) are counted by the same
//! script, apart ([`Counted::Logs`]), against a quota of their own.

use std::sync::LazyLock;

use redis::aio::ConnectionManager;
use redis::{ErrorKind, RedisError, RedisResult, Script, ScriptInvocation, ServerErrorKind};

use crate::redis_connection::Run;

/// Default [`StreamQuota::max_len`]: entries each stream keeps.
pub const DEFAULT_STREAM_MAX_LEN: u64 = 10_000;
/// Default [`StreamQuota::max_bytes`]: 64 MiB of stream entries per tenant, as much as
/// its key-value quota (`kv::DEFAULT_MAX_BYTES`): 64 entries of the largest size a guest
/// may append, or thousands of small ones.
pub const DEFAULT_STREAM_MAX_BYTES: u64 = 64 << 20;
/// What an entry counts for beyond its field names and values: its id and Redis's
/// bookkeeping (about 5 bytes per entry on Redis 7.0, whose entries share the field
/// names of the first), and its size in its stream's list of sizes (a few bytes more);
/// rounded up, as names may differ.
pub const ENTRY_OVERHEAD: u64 = 16;
/// What a stream counts for beyond its entries: Redis 7.0 takes about 4.4 KB for a
/// stream key with a few entries (its first node is allocated at 4 KiB).
pub const STREAM_OVERHEAD: u64 = 4_608;

/// What one tenant's streams may hold; 0 means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamQuota {
    /// Entries each stream keeps, the oldest trimmed first.
    pub max_len: u64,
    /// Bytes all the tenant's streams hold together (see the module's documentation for
    /// how they are counted).
    pub max_bytes: u64,
}

impl Default for StreamQuota {
    fn default() -> Self {
        Self {
            max_len: DEFAULT_STREAM_MAX_LEN,
            max_bytes: DEFAULT_STREAM_MAX_BYTES,
        }
    }
}

/// Why an entry was not appended.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// Trimming every entry of the tenant's streams would not make room for this one.
    #[error(
        "stream quota exceeded: the streams of tenant `{tenant}` may hold at most \
         {max_bytes} bytes (the stream-max-bytes quota), and even with all their entries \
         trimmed there is no room for this entry to `{stream}` ({bytes} bytes as counted; \
         each stream also counts {STREAM_OVERHEAD} bytes while it exists, and they hold \
         {held} now); an operator can raise the quota \
         (`faas tenant set {tenant} --stream-max-bytes N`)"
    )]
    Quota {
        /// Whose streams.
        tenant: String,
        /// The stream appended to, as the tenant names it.
        stream: String,
        /// What the tenant's streams hold, as counted.
        held: u64,
        /// The entry's count, its overhead included.
        bytes: u64,
        /// The quota.
        max_bytes: u64,
    },
    /// Redis refused or could not be reached.
    #[error(transparent)]
    Redis(#[from] RedisError),
}

/// Which of a tenant's counts an append goes to. Its guests' message streams and its
/// workflows' log streams (`crate::logs`) are counted apart, each against its own
/// quota, so a tenant's logs never trim its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Streams guests append to, and their dead-letter streams.
    Messages,
    /// The log streams of the tenant's workflows.
    Logs,
}

impl Counted {
    /// The start of this count's keys, outside the `t:` namespace guests name.
    fn prefix(self) -> &'static str {
        match self {
            Self::Messages => "faas:stream-",
            Self::Logs => "faas:log-",
        }
    }

    /// The Redis key of `tenant`'s sorted set of streams by the bytes of their entries.
    /// Tenant names are DNS labels (no `:`), so no two tenants' keys meet.
    pub fn sizes_key(self, tenant: &str) -> String {
        format!("{}sizes:{tenant}", self.prefix())
    }

    /// The Redis key of `tenant`'s usage hash (`bytes`, `entries`).
    pub fn usage_key(self, tenant: &str) -> String {
        format!("{}usage:{tenant}", self.prefix())
    }

    /// The Redis key of the list of the sizes of stream `key`'s newest entries (see
    /// `append_prelude!`); for all of them, this with `key` empty.
    pub fn entries_key(self, key: &str) -> String {
        format!("{}entries:{key}", self.prefix())
    }

    /// The Redis key a large entry's stream is moved to while the entry is appended
    /// ([`staged_append`]); no key is ever left there.
    fn staging_key(self, tenant: &str) -> String {
        format!("{}staging:{tenant}", self.prefix())
    }
}

/// Entries at least this large (their field names and values together) are appended
/// by [`staged_append`], below it by [`APPEND_SCRIPT`] with the entry in its arguments.
/// Redis copies a script's arguments into Lua, which costs it about 2 ms per MiB
/// (`bench/noisy-neighbour.sh` with `ATTACK=stream-appends` prints the scripts' cost per
/// call), time in which it serves no other client. A small entry costs little to copy,
/// and one script is fewer commands than the transaction's three (staging every entry
/// made 200-byte appends no faster in `bench/stream-append.sh`).
pub const STAGE_FROM_BYTES: usize = 4 << 10;

/// Appends `fields` to `key`, stream `stream` of `tenant`, trimmed to `quota` (see the
/// module's documentation), and returns the new entry's id.
///
/// Sent again if the connection had dropped: a guest's message may then be appended
/// twice, as messages are delivered at least once.
///
/// # Errors
/// [`AppendError::Quota`] when no trimming makes room; [`AppendError::Redis`] for
/// Redis's own errors.
pub async fn append(
    connection: &ConnectionManager,
    quota: StreamQuota,
    tenant: &str,
    stream: &str,
    key: &str,
    fields: &[(&str, &[u8])],
) -> Result<String, AppendError> {
    let bytes = fields
        .iter()
        .map(|(field, value)| field.len() + value.len())
        .sum::<usize>();
    let answer = if bytes < STAGE_FROM_BYTES {
        let invocation = invocation(Counted::Messages, quota, tenant, key, fields);
        invocation.run(connection).await?
    } else {
        let transaction = staged_append(Counted::Messages, quota, tenant, key, fields, bytes);
        run_staged(connection, &transaction).await?
    };
    appended(&answer)
        .map(str::to_owned)
        .ok_or_else(|| AppendError::Quota {
            tenant: tenant.to_owned(),
            stream: stream.to_owned(),
            held: answer.1.parse().unwrap_or_default(),
            bytes: answer.2,
            max_bytes: quota.max_bytes,
        })
}

/// Runs `transaction`, a [`staged_append`], and answers as the append script does: with
/// the id its `XADD` gave when the quota let the entry in.
async fn run_staged(
    connection: &ConnectionManager,
    transaction: &redis::Pipeline,
) -> Result<Answer, RedisError> {
    let replies = match transaction.run::<StagedReplies>(connection).await? {
        // The server does not know the script (it restarted, or its scripts were
        // flushed): nothing ran but an `XADD` and a `RENAME` of a staging key that did
        // not exist, so the transaction can run again once it is loaded.
        (Err(err), ..) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            STAGE_SCRIPT.load_async(&mut connection.clone()).await?;
            transaction.run(connection).await?
        }
        replies => replies,
    };
    let (answer, id, _) = replies;
    let mut answer = answer?;
    // Refused, there was no staging key: the `XADD` added nothing, the `RENAME` failed.
    if appended(&answer).is_some() {
        answer.1 = id?.ok_or_else(|| {
            RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "the staged XADD found no stream to append to",
            ))
        })?;
    }
    Ok(answer)
}

/// The script's answer: `("ok", id, bytes)` or `("quota", bytes held, bytes)`. The
/// staging script answers `("ok", "", bytes)`: the id comes from the `XADD` after it.
pub type Answer = (String, String, u64);

/// A staged append's replies, one per command of [`staged_append`]'s transaction.
type StagedReplies = (
    RedisResult<Answer>,
    RedisResult<Option<String>>,
    RedisResult<redis::Value>,
);

/// The new entry's id in `answer`, or `None` if the quota refused it.
pub fn appended(answer: &Answer) -> Option<&str> {
    (answer.0 == "ok").then_some(answer.1.as_str())
}

/// The keys every append script takes, in order: the stream, the tenant's sorted set
/// of streams, its usage hash, and the stream's list of entry sizes.
fn script_keys(counted: Counted, tenant: &str, key: &str) -> [String; 4] {
    [
        key.to_owned(),
        counted.sizes_key(tenant),
        counted.usage_key(tenant),
        counted.entries_key(key),
    ]
}

/// The arguments every append script starts with, in order: `quota`'s limits, the
/// overheads, and the start of the keys of streams' lists of entry sizes.
fn script_args(counted: Counted, quota: StreamQuota) -> [String; 5] {
    [
        quota.max_len.to_string(),
        quota.max_bytes.to_string(),
        ENTRY_OVERHEAD.to_string(),
        STREAM_OVERHEAD.to_string(),
        counted.entries_key(""),
    ]
}

/// The invocation of the append script that appends `fields` to stream `key` of
/// `tenant`, counted in `counted` against `quota`: what [`append`] sends for a small
/// entry, and what the log writer pipelines many of (after [`load_into`]).
pub fn invocation(
    counted: Counted,
    quota: StreamQuota,
    tenant: &str,
    key: &str,
    fields: &[(&str, &[u8])],
) -> ScriptInvocation<'static> {
    let mut invocation = APPEND_SCRIPT.prepare_invoke();
    for script_key in script_keys(counted, tenant, key) {
        invocation.key(script_key);
    }
    for arg in script_args(counted, quota) {
        invocation.arg(arg);
    }
    for (field, value) in fields {
        invocation.arg(*field).arg(*value);
    }
    invocation
}

/// The append of a large entry, as one transaction (`MULTI` ... `EXEC`) that keeps the
/// entry out of Lua: [`STAGE_SCRIPT`] (by its hash) checks the quota, trims, counts
/// `bytes` (the entry's field names and values), and moves the stream (or a new empty
/// one) to the tenant's staging key; a plain `XADD ... NOMKSTREAM` appends the entry
/// there, and `RENAME` moves the stream back. When the quota refuses the entry (or the
/// server does not know the script) there is no staging key: the `XADD` adds nothing and
/// the `RENAME` fails. Nothing runs between the three, so no client ever sees the
/// stream away, and at most one staging key exists at any moment.
fn staged_append(
    counted: Counted,
    quota: StreamQuota,
    tenant: &str,
    key: &str,
    fields: &[(&str, &[u8])],
    bytes: usize,
) -> redis::Pipeline {
    let staging = counted.staging_key(tenant);
    let mut transaction = redis::pipe();
    transaction.atomic().ignore_errors();
    let keys = script_keys(counted, tenant, key);
    transaction
        .cmd("EVALSHA")
        .arg(STAGE_SCRIPT.get_hash())
        .arg(keys.len() + 1)
        .arg(&keys)
        .arg(&staging)
        .arg(&script_args(counted, quota))
        .arg(bytes);
    let add = transaction
        .cmd("XADD")
        .arg(&staging)
        .arg("NOMKSTREAM")
        .arg("*");
    for (field, value) in fields {
        add.arg(*field).arg(*value);
    }
    transaction.cmd("RENAME").arg(&staging).arg(key);
    transaction
}

/// Loads the append script first in `pipeline`, whose invocations (`EVALSHA`) would
/// otherwise fail on a server that does not know it yet: a pipeline cannot load it on
/// `NOSCRIPT` and send them again, as one invocation does.
pub fn load_into(pipeline: &mut redis::Pipeline) {
    pipeline.load_script(&APPEND_SCRIPT).ignore();
}

/// What both append scripts start with: the count, the quota's check and the trimming
/// that makes room. `KEYS[1]` is the stream, `KEYS[2]` the tenant's sorted set of
/// streams, `KEYS[3]` its usage hash, `KEYS[4]` the stream's list of entry sizes;
/// `ARGV[1]` and `ARGV[2]` are the quota's `max_len` and `max_bytes` (0 for none),
/// `ARGV[3]` and `ARGV[4]` the overheads, `ARGV[5]` the start of the keys of streams'
/// lists of entry sizes. A script then sets `size` (what the entry counts for) and calls
/// `admit(size)`, which answers what the entry is charged, or `nil` and the refusal to
/// return; it appends, and calls `record(size)`.
///
/// Each stream has a list of the sizes of its newest entries, oldest first, one per
/// entry the scripts appended, so that trimming frees and credits entries without
/// reading them: Redis copies what a script reads into Lua, about 2 ms per MiB. Entries
/// older than the list's (appended outside the platform, or before the list existed)
/// are read as before. An entry deleted outside the platform puts the list out of step
/// with its stream; trimming still credits no more than the stream was counted for.
///
/// It trims a stream a few entries at a time (for bytes one, then twice as many each
/// round up to 64). Each trim goes further than the append needs, so the appends after
/// it need none: a stream at its length loses 1/64 of `max_len` more (up to 64 entries,
/// none under 64), and a tenant at its bytes up to 64 entries and 1/64 of `max_bytes`
/// more. A trim deletes in a few commands what an append at the limit would otherwise
/// delete one by one (in one measurement with `redis-benchmark` on Redis 7.0 and
/// 200-byte entries, appends at a stream's length went from 52-56k a second to
/// 71-79k).
///
/// The streams it trims for bytes are other keys than those it declares, which
/// standalone Redis allows (Redis Cluster, which would not, is not supported).
macro_rules! append_prelude {
    () => {
        r#"
local max_len = tonumber(ARGV[1])
local max_bytes = tonumber(ARGV[2])
local entry_overhead = tonumber(ARGV[3])
local stream_overhead = tonumber(ARGV[4])
local entries_prefix = ARGV[5]
local usage = redis.call('HMGET', KEYS[3], 'bytes', 'entries')
local total = tonumber(usage[1] or '0')
local entries = tonumber(usage[2] or '0')
local function size_of(fields, first)
  local size = entry_overhead
  for i = first, #fields do size = size + string.len(fields[i]) end
  return size
end
-- The bytes `key`'s entries are counted for, or nil for a stream not counted. One
-- deleted outside the platform is credited back, its overhead too, and forgotten.
local function counted(key)
  local score = redis.call('ZSCORE', KEYS[2], key)
  if not score then return nil end
  score = tonumber(score)
  if redis.call('EXISTS', key) == 1 then return score end
  total = total - score - stream_overhead
  entries = entries - score
  redis.call('ZREM', KEYS[2], key)
  redis.call('DEL', entries_prefix .. key)
  return nil
end
-- Deletes the oldest entries of `key`, counted for `score`, while `more(len)` holds
-- (asked once per entry, and called only when the first must go), credits what they
-- were counted for (no more than `score`), and keeps the new score. Entries older than
-- its list of sizes are read, `count` first, then twice as many each round, up to 64;
-- the rest are credited from the list and trimmed unread.
local function trim(key, score, more, count)
  local list = entries_prefix .. key
  local len = redis.call('XLEN', key)
  local listed = redis.call('LLEN', list)
  if listed > len then
    -- Entries were deleted outside the platform: the list keeps the newest sizes.
    redis.call('LTRIM', list, listed - len, -1)
    listed = len
  end
  local unlisted = len - listed
  local trimming = true
  local function credit(size)
    local freed = math.min(size, score)
    score = score - freed
    total = total - freed
    entries = entries - freed
    len = len - 1
  end
  while trimming and unlisted > 0 do
    local oldest = redis.call('XRANGE', key, '-', '+', 'COUNT', math.min(count, unlisted))
    if #oldest == 0 then break end
    local ids = {}
    for _, entry in ipairs(oldest) do
      trimming = more(len)
      if not trimming then break end
      credit(size_of(entry[2], 1))
      unlisted = unlisted - 1
      ids[#ids + 1] = entry[1]
    end
    if #ids > 0 then redis.call('XDEL', key, unpack(ids)) end
    count = math.min(count * 2, 64)
  end
  while trimming and len > 0 do
    local sizes = redis.call('LRANGE', list, 0, 127)
    if #sizes == 0 then break end
    local gone = 0
    for _, size in ipairs(sizes) do
      trimming = more(len)
      if not trimming then break end
      credit(tonumber(size))
      gone = gone + 1
    end
    if gone > 0 then
      redis.call('LTRIM', list, gone, -1)
      redis.call('XTRIM', key, 'MAXLEN', '=', len)
    end
  end
  if len == 0 and score > 0 then
    -- Emptied, though counted for more (entries deleted outside the platform).
    total = total - score
    entries = entries - score
    score = 0
  end
  redis.call('ZADD', KEYS[2], score, key)
  return score
end
local function save()
  total = math.max(total, 0)
  entries = math.max(entries, 0)
  redis.call('HSET', KEYS[3], 'bytes', total, 'entries', entries)
end
local own = counted(KEYS[1])
local new = own == nil
-- What an entry of `size` is charged once room is made for it by trimming, or nil and
-- the refusal when no trimming would make room.
local function admit(size)
  local charge = size
  if new then charge = size + stream_overhead end
  if max_bytes > 0 and total - entries + charge > max_bytes then
    save()
    return nil, {'quota', tostring(total), charge}
  end
  if max_len > 0 and redis.call('XLEN', KEYS[1]) >= max_len then
    local keep = max_len - 1 - math.min(64, math.floor(max_len / 64))
    own = trim(KEYS[1], own or 0, function(len) return len > keep end, max_len - keep)
  end
  if max_bytes > 0 and total + charge > max_bytes then
    -- Up to 64 entries and 1/64 of the quota more than this entry needs go too, so the
    -- appends after it need no trimming.
    local target = max_bytes - math.floor(max_bytes / 64)
    local extra = 0
    local function more()
      if total + charge > max_bytes then return true end
      if total + charge <= target or extra >= 64 then return false end
      extra = extra + 1
      return true
    end
    while total + charge > max_bytes do
      local largest = redis.call('ZREVRANGE', KEYS[2], 0, 0, 'WITHSCORES')
      local score = tonumber(largest[2] or '0')
      if score <= 0 then
        -- Nothing left to trim, though the totals said there was: they had drifted
        -- (e.g. a counting key deleted by hand). Refuse rather than loop.
        save()
        return nil, {'quota', tostring(total), charge}
      end
      if counted(largest[1]) then
        local trimmed = trim(largest[1], score, more, 1)
        if largest[1] == KEYS[1] then own = trimmed end
      end
    end
  end
  return charge
end
-- Counts the entry of `size` just appended (or about to be, in the transaction).
local function record(size)
  if new then
    total = total + stream_overhead
    -- Sizes of a stream no longer counted (its count deleted by hand) describe nothing.
    redis.call('DEL', KEYS[4])
  end
  redis.call('RPUSH', KEYS[4], size)
  total = total + size
  entries = entries + size
  redis.call('ZADD', KEYS[2], (own or 0) + size, KEYS[1])
  save()
end
"#
    };
}

/// The append with the entry in its arguments: the keys and first arguments of
/// [`append_prelude!`], then the entry's fields and values. Answers `{'ok', id, bytes}`
/// or `{'quota', bytes held, bytes}`. It costs Redis three to four times what a plain
/// `XADD` does on small entries (`bench/stream-append.sh`).
static APPEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        append_prelude!(),
        r#"
local size = size_of(ARGV, 6)
local charge, refusal = admit(size)
if not charge then return refusal end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 6))
record(size)
return {'ok', id, charge}
"#
    ))
});

/// The first step of [`staged_append`]'s transaction: the keys and first arguments of
/// [`append_prelude!`], `KEYS[5]` the tenant's staging key and `ARGV[6]` the bytes of
/// the entry's field names and values. Once room is made, moves the stream to the
/// staging key (or makes an empty one there, for a new stream) for the `XADD` after it.
/// Answers `{'ok', '', bytes}` or `{'quota', bytes held, bytes}`.
static STAGE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        append_prelude!(),
        r#"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'stream' then
  save()
  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is not a stream')
end
local size = entry_overhead + tonumber(ARGV[6])
local charge, refusal = admit(size)
if not charge then return refusal end
-- Trimming empties a stream but never deletes it: `kind` still holds.
if kind == 'stream' then
  redis.call('RENAME', KEYS[1], KEYS[5])
else
  redis.call('XGROUP', 'CREATE', KEYS[5], 'faas-new', '$', 'MKSTREAM')
  redis.call('XGROUP', 'DESTROY', KEYS[5], 'faas-new')
end
record(size)
return {'ok', '', charge}
"#
    ))
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_connection::manage;
    use faas_testing::RedisServer;
    use redis::AsyncCommands;

    /// 64 KiB, no length limit.
    const SMALL: StreamQuota = StreamQuota {
        max_len: 0,
        max_bytes: 64 << 10,
    };

    /// What one entry of `payload_len` bytes counts for.
    const fn counted_for(payload_len: u64) -> u64 {
        ENTRY_OVERHEAD + "payload".len() as u64 + payload_len
    }

    /// A connection to `server`.
    async fn connect(server: &RedisServer) -> ConnectionManager {
        manage(redis::Client::open(server.url()).unwrap())
            .await
            .unwrap()
    }

    /// Appends a payload of `len` bytes to stream `stream` of `tenant` under `quota`.
    async fn append_bytes(
        connection: &ConnectionManager,
        quota: StreamQuota,
        tenant: &str,
        stream: &str,
        len: usize,
    ) -> Result<String, AppendError> {
        let key = crate::broker::namespaced(tenant, stream);
        let payload = vec![b'x'; len];
        append(
            connection,
            quota,
            tenant,
            stream,
            &key,
            &[("payload", &payload)],
        )
        .await
    }

    /// The ids of `tenant`'s stream `stream`, oldest first.
    async fn ids(connection: &ConnectionManager, tenant: &str, stream: &str) -> Vec<String> {
        let key = crate::broker::namespaced(tenant, stream);
        let reply: redis::streams::StreamRangeReply =
            connection.clone().xrange_all(&key).await.unwrap();
        reply.ids.into_iter().map(|entry| entry.id).collect()
    }

    /// What the entries of `tenant`'s `streams` are counted for, recounted from them,
    /// plus each stream's overhead.
    async fn recounted(connection: &ConnectionManager, tenant: &str, streams: &[&str]) -> u64 {
        let mut bytes = 0;
        for stream in streams {
            let key = crate::broker::namespaced(tenant, stream);
            let reply: redis::streams::StreamRangeReply =
                connection.clone().xrange_all(&key).await.unwrap();
            bytes += STREAM_OVERHEAD;
            for entry in reply.ids {
                let payload: Vec<u8> = entry.get("payload").unwrap();
                bytes += counted_for(payload.len() as u64);
            }
        }
        bytes
    }

    /// The tenant's count of its streams' bytes.
    async fn held(connection: &ConnectionManager, tenant: &str) -> u64 {
        let bytes: Option<u64> = connection
            .clone()
            .hget(Counted::Messages.usage_key(tenant), "bytes")
            .await
            .unwrap();
        bytes.unwrap_or(0)
    }

    #[tokio::test]
    async fn a_stream_over_its_tenants_bytes_keeps_its_newest_entries_that_fit() {
        let server = RedisServer::start();
        let connection = connect(&server).await;
        let mut appended = Vec::new();
        for _ in 0..500 {
            appended.push(
                append_bytes(&connection, SMALL, "small", "s", 1_000)
                    .await
                    .unwrap(),
            );
        }
        // As many as fit, less those a trim takes beyond its need: 1/64 of the quota.
        let fit = ((SMALL.max_bytes - STREAM_OVERHEAD) / counted_for(1_000)) as usize;
        let beyond = (SMALL.max_bytes / 64).div_ceil(counted_for(1_000)) as usize;
        let kept = ids(&connection, "small", "s").await;
        assert!(
            (fit - beyond..=fit).contains(&kept.len()),
            "{} kept of {fit}",
            kept.len()
        );
        assert_eq!(kept, appended[500 - kept.len()..], "the newest are kept");
        let held = held(&connection, "small").await;
        assert_eq!(held, recounted(&connection, "small", &["s"]).await);
        assert!(held <= SMALL.max_bytes, "{held}");
    }

    #[tokio::test]
    async fn an_append_trims_the_largest_stream_first_so_none_is_locked_out() {
        let server = RedisServer::start();
        let connection = connect(&server).await;
        for _ in 0..50 {
            append_bytes(&connection, SMALL, "t", "big", 1_000)
                .await
                .unwrap();
        }
        let small = append_bytes(&connection, SMALL, "t", "small", 100)
            .await
            .unwrap();
        let big = ids(&connection, "t", "big").await;
        // A new stream, whose entry the quota has no room for: `big` gives.
        append_bytes(&connection, SMALL, "t", "new", 8_000)
            .await
            .unwrap();
        let after = ids(&connection, "t", "big").await;
        assert!(
            after.len() < big.len() && !after.is_empty(),
            "{}",
            after.len()
        );
        assert_eq!(after, big[big.len() - after.len()..], "the oldest went");
        assert_eq!(ids(&connection, "t", "small").await, [small]);
        let held = held(&connection, "t").await;
        assert_eq!(
            held,
            recounted(&connection, "t", &["big", "small", "new"]).await
        );
        assert!(held <= SMALL.max_bytes, "{held}");
        // Another tenant's streams are counted apart.
        append_bytes(&connection, SMALL, "other", "big", 60_000)
            .await
            .unwrap();
        assert_eq!(ids(&connection, "t", "small").await.len(), 1);
    }

    #[tokio::test]
    async fn an_append_no_trimming_makes_room_for_is_refused_and_trims_nothing() {
        let server = RedisServer::start();
        let connection = connect(&server).await;
        // Larger than the quota itself.
        let refused = append_bytes(&connection, SMALL, "mallory", "s", 70_000)
            .await
            .unwrap_err();
        let message = refused.to_string();
        for part in ["`mallory`", "`s`", "stream-max-bytes", "faas tenant set"] {
            assert!(message.contains(part), "{message}");
        }
        // Streams whose overheads fill it: thirteen of them leave no room for a
        // fourteenth, and none of their entries is trimmed trying.
        let names: Vec<String> = (0..13).map(|index| format!("s{index}")).collect();
        for name in &names {
            append_bytes(&connection, SMALL, "mallory", name, 10)
                .await
                .unwrap();
        }
        let refused = append_bytes(&connection, SMALL, "mallory", "one-more", 2_000).await;
        assert!(
            matches!(refused, Err(AppendError::Quota { .. })),
            "{refused:?}"
        );
        for name in &names {
            assert_eq!(ids(&connection, "mallory", name).await.len(), 1, "{name}");
        }
    }

    #[tokio::test]
    async fn a_stream_keeps_its_length_and_one_deleted_outside_is_credited_back() {
        let server = RedisServer::start();
        let connection = connect(&server).await;
        let quota = StreamQuota {
            max_len: 10,
            ..SMALL
        };
        for _ in 0..25 {
            append_bytes(&connection, quota, "t", "s", 4_000)
                .await
                .unwrap();
        }
        assert_eq!(ids(&connection, "t", "s").await.len(), 10);
        assert_eq!(
            held(&connection, "t").await,
            recounted(&connection, "t", &["s"]).await
        );
        // An operator deletes it; the tenant gets its bytes back, overhead too.
        let _: () = connection.clone().del("t:t:s").await.unwrap();
        // Trimming meets it, and gives back its entries and its overhead.
        append_bytes(&connection, quota, "t", "other", 55_000)
            .await
            .unwrap();
        assert_eq!(
            held(&connection, "t").await,
            recounted(&connection, "t", &["other"]).await
        );
    }

    /// Redis's calls of `command` (those inside scripts too) since its stats were reset.
    async fn calls(connection: &ConnectionManager, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut connection.clone())
            .await
            .unwrap();
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |count| count.parse().unwrap())
    }

    /// The keys of the tenants' staging keys left in Redis (there should be none).
    async fn staging_keys(connection: &ConnectionManager) -> Vec<String> {
        connection.clone().keys("*staging*").await.unwrap()
    }

    // Redis copies what a script is given or reads into Lua, about 2 ms per MiB of its
    // one thread: a large entry is appended by a plain `XADD`, and trimming credits the
    // entries it deletes from their list of sizes without reading them.
    #[tokio::test]
    async fn a_large_entry_never_passes_through_lua_and_trimming_reads_no_entry() {
        let server = RedisServer::start();
        let connection = connect(&server).await;
        let mut config = connection.clone();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(0)
            .arg("slowlog-max-len")
            .arg(1_000)
            .query_async(&mut config)
            .await
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut config)
            .await
            .unwrap();
        let mut appended = Vec::new();
        for _ in 0..40 {
            appended.push(
                append_bytes(&connection, SMALL, "big", "s", 8_000)
                    .await
                    .unwrap(),
            );
        }
        assert!(
            calls(&connection, "xtrim").await > 0,
            "the stream was trimmed"
        );
        assert_eq!(calls(&connection, "xrange").await, 0, "no entry was read");
        let kept = ids(&connection, "big", "s").await;
        assert!((5..=7).contains(&kept.len()), "{} kept", kept.len());
        assert_eq!(kept, appended[40 - kept.len()..], "the newest are kept");
        let held = held(&connection, "big").await;
        assert_eq!(held, recounted(&connection, "big", &["s"]).await);
        assert!(held <= SMALL.max_bytes, "{held}");
        // The slow log lists every command (those scripts call too) with its arguments,
        // those longer than 128 bytes cut short with "... (N more bytes)".
        let log: Vec<(u64, u64, u64, Vec<String>)> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(1_000)
            .query_async(&mut config)
            .await
            .map(|entries: Vec<redis::Value>| {
                entries
                    .into_iter()
                    .map(|entry| {
                        let redis::Value::Array(fields) = entry else {
                            panic!("{entry:?}")
                        };
                        let fields: Vec<redis::Value> = fields.into_iter().take(4).collect();
                        redis::from_redis_value(redis::Value::Array(fields)).unwrap()
                    })
                    .collect()
            })
            .unwrap();
        let carried = |name: &str| {
            log.iter()
                .filter(|(.., args)| args[0].eq_ignore_ascii_case(name))
                .filter(|(.., args)| args.iter().any(|arg| arg.contains("more bytes")))
                .count()
        };
        // 41 with the first transaction's, sent before the script was loaded.
        assert!(carried("XADD") >= 40, "{} entries in XADD", carried("XADD"));
        assert_eq!(carried("EVALSHA"), 0, "entries in a script's arguments");
        assert!(staging_keys(&connection).await.is_empty());
    }

    #[tokio::test]
    async fn a_refused_large_entry_adds_nothing_and_a_forgotten_script_is_loaded_again() {
        let server = RedisServer::start();
        let connection = connect(&server).await;
        // Larger than the quota: refused, on a new stream and on one that exists.
        let refused = append_bytes(&connection, SMALL, "t", "s", 70_000).await;
        assert!(
            matches!(refused, Err(AppendError::Quota { .. })),
            "{refused:?}"
        );
        let exists: bool = connection.clone().exists("t:t:s").await.unwrap();
        assert!(!exists, "no stream was made");
        let first = append_bytes(&connection, SMALL, "t", "s", 8_000)
            .await
            .unwrap();
        let refused = append_bytes(&connection, SMALL, "t", "s", 70_000).await;
        assert!(
            matches!(refused, Err(AppendError::Quota { .. })),
            "{refused:?}"
        );
        assert_eq!(
            ids(&connection, "t", "s").await,
            std::slice::from_ref(&first)
        );
        assert!(staging_keys(&connection).await.is_empty());
        // A server that forgot its scripts (restarted, or flushed them).
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut connection.clone())
            .await
            .unwrap();
        let second = append_bytes(&connection, SMALL, "t", "s", 8_000)
            .await
            .unwrap();
        assert_eq!(ids(&connection, "t", "s").await, [first, second]);
        assert!(staging_keys(&connection).await.is_empty());
        assert_eq!(
            held(&connection, "t").await,
            recounted(&connection, "t", &["s"]).await
        );
    }

    // A staged append moves the stream away and back inside one transaction: a consumer
    // waiting on it gets the entry, and its group stays.
    #[tokio::test]
    async fn a_consumer_waiting_on_a_stream_gets_a_large_entry_and_keeps_its_group() {
        let server = RedisServer::start();
        let connection = connect(&server).await;
        let key = crate::broker::namespaced("t", "s");
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&key)
            .arg("readers")
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut connection.clone())
            .await
            .unwrap();
        let reader = {
            let mut reader = connect(&server).await;
            let key = key.clone();
            tokio::spawn(async move {
                let options = redis::streams::StreamReadOptions::default()
                    .group("readers", "one")
                    .block(10_000);
                let reply: redis::streams::StreamReadReply = reader
                    .xread_options(&[&key], &[">"], &options)
                    .await
                    .unwrap();
                reply
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let id = append_bytes(&connection, SMALL, "t", "s", 8_000)
            .await
            .unwrap();
        let reply = tokio::time::timeout(std::time::Duration::from_secs(5), reader)
            .await
            .expect("the waiting consumer got the entry")
            .unwrap();
        let entry = &reply.keys[0].ids[0];
        assert_eq!(entry.id, id);
        let payload: Vec<u8> = entry.get("payload").unwrap();
        assert_eq!(payload, vec![b'x'; 8_000]);
        let groups: redis::streams::StreamInfoGroupsReply =
            connection.clone().xinfo_groups(&key).await.unwrap();
        assert_eq!(groups.groups.len(), 1);
        assert_eq!(groups.groups[0].last_delivered_id, id);
    }

    // Streams from before the lists of sizes (or with entries appended outside the
    // platform) have entries older than their list: trimming reads those.
    #[tokio::test]
    async fn entries_older_than_the_list_of_sizes_are_read_when_trimmed() {
        let server = RedisServer::start();
        let connection = connect(&server).await;
        for _ in 0..5 {
            append_bytes(&connection, SMALL, "t", "s", 5_000)
                .await
                .unwrap();
        }
        let list = Counted::Messages.entries_key(&crate::broker::namespaced("t", "s"));
        let _: () = connection.clone().del(&list).await.unwrap();
        for _ in 0..30 {
            append_bytes(&connection, SMALL, "t", "s", 6_000)
                .await
                .unwrap();
        }
        let kept = ids(&connection, "t", "s").await;
        let listed: u64 = connection.clone().llen(&list).await.unwrap();
        assert_eq!(listed, kept.len() as u64, "every entry left is listed");
        assert_eq!(
            held(&connection, "t").await,
            recounted(&connection, "t", &["s"]).await
        );
    }
}
