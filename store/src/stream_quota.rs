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
//! The count is kept in Redis by one Lua script that checks, trims, appends and counts
//! in one atomic step, so appends from any number of workers and gateways cannot
//! overshoot: per tenant a sorted set of its streams by the bytes of their entries
//! (`faas:stream-sizes:<tenant>`), and a hash of its totals (`faas:stream-usage:<tenant>`:
//! `bytes` in all, and `entries`, the part trimming can free). Entries appended without
//! the script (by producers outside the platform, which hold Redis credentials and are
//! trusted) are not counted; trimming them credits back no more than their stream was
//! counted for. A stream deleted outside the platform is credited back when the script
//! next meets it.
//!
//! The log streams of a tenant's workflows (`crate::logs`) are counted by the same
//! script, apart ([`Counted::Logs`]), against a quota of their own.

use std::sync::LazyLock;

use redis::aio::ConnectionManager;
use redis::{RedisError, Script, ScriptInvocation};

use crate::redis_connection::Run;

/// Default [`StreamQuota::max_len`]: entries each stream keeps.
pub const DEFAULT_STREAM_MAX_LEN: u64 = 10_000;
/// Default [`StreamQuota::max_bytes`]: 64 MiB of stream entries per tenant, as much as
/// its key-value quota (`kv::DEFAULT_MAX_BYTES`): 64 entries of the largest size a guest
/// may append, or thousands of small ones.
pub const DEFAULT_STREAM_MAX_BYTES: u64 = 64 << 20;
/// What an entry counts for beyond its field names and values: its id and Redis's
/// bookkeeping (about 5 bytes per entry on Redis 7.0, whose entries share the field
/// names of the first; rounded up, as names may differ).
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
}

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
    let invocation = invocation(Counted::Messages, quota, tenant, key, fields);
    let answer: Answer = invocation.run(connection).await?;
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

/// The script's answer: `("ok", id, bytes)` or `("quota", bytes held, bytes)`.
pub type Answer = (String, String, u64);

/// The new entry's id in `answer`, or `None` if the quota refused it.
pub fn appended(answer: &Answer) -> Option<&str> {
    (answer.0 == "ok").then_some(answer.1.as_str())
}

/// The invocation of the append script that appends `fields` to stream `key` of
/// `tenant`, counted in `counted` against `quota`: what [`append`] sends, and what the
/// log writer pipelines many of (after [`load_into`]).
pub fn invocation(
    counted: Counted,
    quota: StreamQuota,
    tenant: &str,
    key: &str,
    fields: &[(&str, &[u8])],
) -> ScriptInvocation<'static> {
    let mut invocation = APPEND_SCRIPT.prepare_invoke();
    invocation
        .key(key)
        .key(counted.sizes_key(tenant))
        .key(counted.usage_key(tenant))
        .arg(quota.max_len)
        .arg(quota.max_bytes)
        .arg(ENTRY_OVERHEAD)
        .arg(STREAM_OVERHEAD);
    for (field, value) in fields {
        invocation.arg(*field).arg(*value);
    }
    invocation
}

/// Loads the append script first in `pipeline`, whose invocations (`EVALSHA`) would
/// otherwise fail on a server that does not know it yet: a pipeline cannot load it on
/// `NOSCRIPT` and send them again, as one invocation does.
pub fn load_into(pipeline: &mut redis::Pipeline) {
    pipeline.load_script(&APPEND_SCRIPT).ignore();
}

/// The append. `KEYS[1]` is the stream, `KEYS[2]` the tenant's sorted set of streams,
/// `KEYS[3]` its usage hash; `ARGV[1]` and `ARGV[2]` are the quota's `max_len` and
/// `max_bytes` (0 for none), `ARGV[3]` and `ARGV[4]` the overheads, and the rest the
/// entry's fields and values. Answers `{'ok', id, bytes}` or
/// `{'quota', bytes held, bytes}`.
///
/// It trims a stream by reading its oldest entries a few at a time (for bytes one, then
/// twice as many each round up to 64, since an entry can be a mebibyte) and deleting
/// those it must. Each trim goes further than the append needs, so the appends after
/// it need none: a stream at its length loses 1/64 of `max_len` more (up to 64 entries,
/// none under 64), and a tenant at its bytes up to 64 entries and 1/64 of `max_bytes`
/// more. A trim reads and deletes in a few commands what an append at the limit would
/// otherwise read and delete one by one (in one measurement with `redis-benchmark` on
/// Redis 7.0 and 200-byte entries, appends at a stream's length went from 52-56k a
/// second to 71-79k). The script costs Redis three to four times what a plain `XADD`
/// does (`bench/stream-append.sh`).
///
/// The streams it trims for bytes are other keys than those it declares, which
/// standalone Redis allows (Redis Cluster, which would not, is not supported).
static APPEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local max_len = tonumber(ARGV[1])
local max_bytes = tonumber(ARGV[2])
local entry_overhead = tonumber(ARGV[3])
local stream_overhead = tonumber(ARGV[4])
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
  return nil
end
-- Deletes the oldest entries of `key`, counted for `score`, while `more(len)` holds
-- (asked once per entry, and called only when the first must go), credits what they
-- were counted for (no more than `score`), and keeps the new score. Reads `count`
-- entries first, then twice as many each round, up to 64.
local function trim(key, score, more, count)
  local len = redis.call('XLEN', key)
  local trimming = true
  while trimming and len > 0 do
    local oldest = redis.call('XRANGE', key, '-', '+', 'COUNT', count)
    if #oldest == 0 then break end
    local ids = {}
    for _, entry in ipairs(oldest) do
      trimming = more(len)
      if not trimming then break end
      local freed = math.min(size_of(entry[2], 1), score)
      score = score - freed
      total = total - freed
      entries = entries - freed
      len = len - 1
      ids[#ids + 1] = entry[1]
    end
    if #ids > 0 then redis.call('XDEL', key, unpack(ids)) end
    count = math.min(count * 2, 64)
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
local size = size_of(ARGV, 5)
local own = counted(KEYS[1])
local new = own == nil
local charge = size
if new then charge = size + stream_overhead end
if max_bytes > 0 and total - entries + charge > max_bytes then
  save()
  return {'quota', tostring(total), charge}
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
      return {'quota', tostring(total), charge}
    end
    if counted(largest[1]) then
      local trimmed = trim(largest[1], score, more, 1)
      if largest[1] == KEYS[1] then own = trimmed end
    end
  end
end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 5))
if new then total = total + stream_overhead end
total = total + size
entries = entries + size
redis.call('ZADD', KEYS[2], (own or 0) + size, KEYS[1])
save()
return {'ok', id, charge}
"#,
    )
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
}
