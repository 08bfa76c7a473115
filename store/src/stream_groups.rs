//! The consumer groups that stream triggers read through, and the removal of those no
//! trigger names any more.
//!
//! A stream trigger's group is made (with its stream, if missing) when a gateway first
//! consumes the trigger, and Redis keeps it until someone destroys it. A tenant that
//! redeploys with new group or stream names, or removes its workflows, would otherwise
//! leave a group (and an empty stream) behind each time: Redis memory that no quota
//! counts. Destroying a group at once, when its trigger goes, would race with a
//! gateway a sync behind that still consumes it: that gateway would make the group
//! again, reading from the start of the stream, and run every entry again.
//!
//! So every group a trigger makes is registered in `faas:stream-groups` (field
//! `<group> <stream key>`, as group names hold no whitespace; value: until when it is
//! kept, in milliseconds of Redis's clock), in the same script that makes it, and a
//! consumer makes its group again every [`RENEW_EVERY`] (or a quarter of its gateway's
//! idle time, if shorter) while it runs, which pushes that back by the idle time.
//! [`sweep`] destroys a registered group only when no deployed trigger names it, it is
//! past when it was kept until (no consumer has run for the idle time of the gateway
//! that last made it), and none of its consumers was delivered an entry within the
//! sweeping gateway's idle time (Redis 7.2 and later count any read; 7.0 only reads
//! that returned entries), all checked in the script that destroys it; an empty stream
//! left with no group goes with it. Times are Redis's, so gateways' clocks need not
//! agree.
//!
//! The script keeps where the group stopped (its last delivered id) for
//! [`TOMBSTONE_TTL`]: a trigger that names the group again within that time (a
//! workflow removed and deployed again) goes on from there, as it did when groups were
//! never destroyed; after it, the group is made anew and reads the stream from its
//! start, as a new deploy's group does. A group that never delivered an entry leaves
//! nothing (it would read from the start anyway), and the key is in its tenant's
//! namespace, so it goes with the tenant: a tenant redeploying with new group names
//! over and over left a key a group for a week, in Redis memory no quota counts, for
//! ever after its removal.

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;
use std::time::Duration;

/// The hash of the groups stream triggers made: `<group> <stream key>` -> until when it
/// is kept (unix milliseconds, Redis's clock).
pub const GROUPS_KEY: &str = "faas:stream-groups";

/// What the key keeping a destroyed group's last delivered id was named by earlier
/// versions, followed by its field in [`GROUPS_KEY`]: still read, and written beside
/// the new one, so that a gateway of an earlier version (in a rolling upgrade, or
/// after a rollback) does not make a group it destroyed anew from the stream's start.
/// Like the new key, only for groups that delivered entries. To go in a later release.
const OLD_TOMBSTONE_PREFIX: &str = "faas:stream-group-gone:";

/// How long a destroyed group's last delivered id is kept.
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Default of how long a group no trigger names, and no consumer reads, is kept.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);

/// How often a running consumer makes its group again ([`create`]), at most.
pub const RENEW_EVERY: Duration = Duration::from_secs(60);

/// A consumer group of a stream: the stream's Redis key (in its tenant's namespace)
/// and the group's name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StreamGroup {
    /// The stream's key, `t:<tenant>:<stream>`.
    pub stream: String,
    /// The consumer group's name.
    pub group: String,
}

impl StreamGroup {
    /// Its field in [`GROUPS_KEY`].
    fn field(&self) -> String {
        format!("{} {}", self.group, self.stream)
    }

    /// The key keeping where it stopped once destroyed: `<stream key> gone <group>`,
    /// in the stream's tenant's namespace, and no stream's key (names hold no
    /// whitespace).
    fn tombstone(&self) -> String {
        format!("{} gone {}", self.stream, self.group)
    }

    /// The key earlier versions kept it in.
    fn old_tombstone(&self) -> String {
        format!("{OLD_TOMBSTONE_PREFIX}{}", self.field())
    }

    /// The group a field of [`GROUPS_KEY`] names, if it is one.
    fn from_field(field: &str) -> Option<Self> {
        let (group, stream) = field.split_once(' ')?;
        Some(Self {
            stream: stream.to_owned(),
            group: group.to_owned(),
        })
    }
}

/// Lua: `now`, Redis's clock in milliseconds.
const NOW: &str = "local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
";

/// Makes group `ARGV[1]` of stream `KEYS[1]` (and the stream) unless it exists,
/// reading from where it stopped if it was destroyed lately (tombstone `KEYS[3]`, or
/// an earlier version's `KEYS[4]`), else from the start, and keeps its field `ARGV[2]`
/// of `KEYS[2]` until `ARGV[3]` ms from now, in one step: a sweep that sees it past its
/// time cannot run between the two.
static CREATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW}{}",
        r"
local from = redis.call('GET', KEYS[3]) or redis.call('GET', KEYS[4]) or '0'
local made = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], from, 'MKSTREAM')
if type(made) == 'table' and made.err and string.sub(made.err, 1, 9) ~= 'BUSYGROUP' then
  return made
end
redis.call('DEL', KEYS[3], KEYS[4])
redis.call('HSET', KEYS[2], ARGV[2], now + tonumber(ARGV[3]))
return 1
"
    ))
});

/// Destroys group `ARGV[1]` of stream `KEYS[1]` (field `ARGV[2]` of `KEYS[2]`) if it is
/// past when it was kept until and each of its consumers has been idle at least
/// `ARGV[3]` ms, keeping where it stopped in `KEYS[3]` (and, for gateways of earlier
/// versions during an upgrade or after a rollback, `KEYS[4]`) for `ARGV[4]` seconds if
/// it delivered anything; then
/// deletes the stream if it is left empty with no group. Forgets a field whose group
/// is gone already. Returns 1 if it destroyed the group, 0 if it kept it, -1 if it
/// only forgot the field.
static DESTROY_IF_IDLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW}{}",
        r"
local kept_until = tonumber(redis.call('HGET', KEYS[2], ARGV[2]))
if kept_until == nil or kept_until > now then return 0 end
local consumers = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if consumers.err then
  redis.call('HDEL', KEYS[2], ARGV[2])
  return -1
end
for _, consumer in ipairs(consumers) do
  for i = 1, #consumer, 2 do
    if consumer[i] == 'idle' and consumer[i + 1] < tonumber(ARGV[3]) then return 0 end
  end
end
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, last
  for i = 1, #group, 2 do
    if group[i] == 'name' then name = group[i + 1] end
    if group[i] == 'last-delivered-id' then last = group[i + 1] end
  end
  if name == ARGV[1] and last and last ~= '0-0' then
    redis.call('SET', KEYS[3], last, 'EX', ARGV[4])
    redis.call('SET', KEYS[4], last, 'EX', ARGV[4])
  end
end
redis.call('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[2])
if redis.call('XLEN', KEYS[1]) == 0 and #redis.call('XINFO', 'GROUPS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1])
end
return 1
"
    ))
});

/// Makes `group` of `stream` (and the stream) unless it exists, and registers it for
/// [`sweep`], kept for `idle` from now (`None`: for ever). Consumers call it when
/// they start and every [`RENEW_EVERY`] after (or a quarter of `idle`, if shorter).
///
/// # Errors
/// Redis's, as for `XGROUP CREATE` (`WRONGTYPE` when the key is not a stream).
pub async fn create(
    connection: &mut ConnectionManager,
    group: &StreamGroup,
    idle: Option<Duration>,
) -> RedisResult<()> {
    // Far enough for ever, near enough that Lua's numbers add it exactly.
    let kept_for = idle.map_or(1 << 50, millis);
    CREATE
        .key(&group.stream)
        .key(GROUPS_KEY)
        .key(group.tombstone())
        .key(group.old_tombstone())
        .arg(&group.group)
        .arg(group.field())
        .arg(kept_for)
        .invoke_async(connection)
        .await
}

/// Destroys the registered groups that no group of `named` (those of every deployed
/// stream trigger) is, that are past when they were kept until and whose consumers
/// have all been idle for `idle`, and returns them. A group whose stream or group is
/// gone is forgotten.
///
/// # Errors
/// Redis's; groups destroyed before the error stay destroyed.
pub async fn sweep(
    connection: &mut ConnectionManager,
    named: &BTreeSet<StreamGroup>,
    idle: Duration,
) -> RedisResult<Vec<StreamGroup>> {
    let registered: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(GROUPS_KEY)
        .query_async(connection)
        .await?;
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(connection).await?;
    let now = seconds * 1000 + micros / 1000;
    let mut destroyed = Vec::new();
    for (field, kept_until) in registered {
        let parsed = (StreamGroup::from_field(&field), kept_until.parse::<u64>());
        let (Some(group), Ok(kept_until)) = parsed else {
            // Not written by `create`: nothing to destroy.
            let _: i64 = redis::cmd("HDEL")
                .arg(GROUPS_KEY)
                .arg(&field)
                .query_async(connection)
                .await?;
            continue;
        };
        if kept_until > now || named.contains(&group) {
            continue;
        }
        let outcome: i64 = DESTROY_IF_IDLE
            .key(&group.stream)
            .key(GROUPS_KEY)
            .key(group.tombstone())
            .key(group.old_tombstone())
            .arg(&group.group)
            .arg(&field)
            .arg(millis(idle))
            .arg(TOMBSTONE_TTL.as_secs())
            .invoke_async(connection)
            .await?;
        if outcome == 1 {
            destroyed.push(group);
        }
    }
    Ok(destroyed)
}

/// `duration` in whole milliseconds.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_connection::manage;
    use faas_testing::RedisServer;
    use redis::AsyncCommands;
    use redis::streams::{StreamReadOptions, StreamReadReply};

    fn group(stream: &str, group: &str) -> StreamGroup {
        StreamGroup {
            stream: format!("t:shop:{stream}"),
            group: group.to_owned(),
        }
    }

    /// A connection to `server`.
    async fn connect(server: &RedisServer) -> ConnectionManager {
        manage(redis::Client::open(server.url()).unwrap())
            .await
            .unwrap()
    }

    /// Whether `group` exists on its stream.
    async fn exists(connection: &mut ConnectionManager, group: &StreamGroup) -> bool {
        let groups: redis::RedisResult<redis::streams::StreamInfoGroupsReply> =
            connection.xinfo_groups(&group.stream).await;
        groups.is_ok_and(|reply| reply.groups.iter().any(|g| g.name == group.group))
    }

    /// Reads the entries new to `group` as consumer `c`, as a trigger's consumer does,
    /// and returns their payloads.
    async fn read(connection: &mut ConnectionManager, group: &StreamGroup) -> Vec<String> {
        let options = StreamReadOptions::default().group(&group.group, "c");
        let reply: Option<StreamReadReply> = connection
            .xread_options(&[&group.stream], &[">"], &options)
            .await
            .unwrap();
        reply
            .into_iter()
            .flat_map(|reply| reply.keys)
            .flat_map(|key| key.ids)
            .map(|entry| entry.get::<String>("payload").unwrap())
            .collect()
    }

    #[tokio::test]
    async fn a_group_no_trigger_names_goes_once_idle_and_one_named_or_read_stays() {
        let redis = RedisServer::start();
        let mut connection = connect(&redis).await;
        let named = group("orders", "shop");
        let renewed = group("orders", "old-revision");
        let delivered_lately = group("orders", "lagging");
        let forgotten = group("renamed", "shop");
        let with_entries = group("events", "gone");
        let idle = Duration::from_millis(300);
        let _: String = connection
            .xadd(&with_entries.stream, "*", &[("payload", "kept")])
            .await
            .unwrap();
        let _: String = connection
            .xadd(&named.stream, "*", &[("payload", "one")])
            .await
            .unwrap();
        for made in [
            &named,
            &renewed,
            &delivered_lately,
            &forgotten,
            &with_entries,
        ] {
            create(&mut connection, made, Some(idle)).await.unwrap();
            // Made again (a second gateway, a restart): no error, nothing lost.
            create(&mut connection, made, Some(idle)).await.unwrap();
            assert!(exists(&mut connection, made).await);
        }
        let triggers = BTreeSet::from([named.clone()]);

        // Just made: a gateway may be about to read them.
        assert!(
            sweep(&mut connection, &triggers, idle)
                .await
                .unwrap()
                .is_empty()
        );

        tokio::time::sleep(idle + Duration::from_millis(100)).await;
        // A gateway a sync behind still consumes the old revision's group (and renews
        // it), and another was just delivered an entry.
        create(&mut connection, &renewed, Some(idle)).await.unwrap();
        read(&mut connection, &delivered_lately).await;
        let mut destroyed = sweep(&mut connection, &triggers, idle).await.unwrap();
        destroyed.sort();
        assert_eq!(destroyed, [with_entries.clone(), forgotten.clone()]);
        assert!(exists(&mut connection, &named).await);
        assert!(exists(&mut connection, &renewed).await);
        assert!(exists(&mut connection, &delivered_lately).await);
        assert!(!exists(&mut connection, &forgotten).await);
        // The stream made for the group went with it; one holding entries stayed.
        let kinds: (bool, i64) = redis::pipe()
            .exists(&forgotten.stream)
            .xlen(&with_entries.stream)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(kinds, (false, 1));
        let registered: BTreeMap<String, String> = connection.hgetall(GROUPS_KEY).await.unwrap();
        let mut fields: Vec<&str> = registered.keys().map(String::as_str).collect();
        fields.sort_unstable();
        assert_eq!(
            fields,
            [
                "lagging t:shop:orders",
                "old-revision t:shop:orders",
                "shop t:shop:orders"
            ]
        );

        // Named again by a later deploy: made anew.
        create(&mut connection, &forgotten, Some(idle))
            .await
            .unwrap();
        assert!(exists(&mut connection, &forgotten).await);
    }

    #[tokio::test]
    async fn a_group_named_again_after_it_was_destroyed_goes_on_from_where_it_stopped() {
        let redis = RedisServer::start();
        let mut connection = connect(&redis).await;
        let removed = group("orders", "shop");
        let idle = Duration::from_millis(200);
        create(&mut connection, &removed, Some(idle)).await.unwrap();
        let _: String = connection
            .xadd(&removed.stream, "*", &[("payload", "one")])
            .await
            .unwrap();
        assert_eq!(read(&mut connection, &removed).await, ["one"]);
        // The workflow is removed; the group goes once idle.
        tokio::time::sleep(idle + Duration::from_millis(100)).await;
        let destroyed = sweep(&mut connection, &BTreeSet::new(), idle)
            .await
            .unwrap();
        assert_eq!(destroyed, std::slice::from_ref(&removed));
        let _: String = connection
            .xadd(&removed.stream, "*", &[("payload", "two")])
            .await
            .unwrap();
        // Deployed again: the entry it ran before is not run again, the new one is.
        create(&mut connection, &removed, Some(idle)).await.unwrap();
        assert_eq!(read(&mut connection, &removed).await, ["two"]);
        let tombstone: bool = connection.exists(removed.tombstone()).await.unwrap();
        assert!(
            !tombstone,
            "the group's place is kept only while it is gone"
        );
    }

    /// A tenant redeploying with new group names, each destroyed once idle: a group
    /// that delivered nothing keeps no place, one that did keeps it in its tenant's
    /// namespace (removed with the tenant's streams), and a place an earlier version
    /// kept is still gone on from.
    #[tokio::test]
    async fn a_destroyed_groups_place_is_kept_only_if_it_read_and_with_its_tenant() {
        let redis = RedisServer::start();
        let mut connection = connect(&redis).await;
        let idle = Duration::from_millis(200);
        let (unread, read_once) = (group("orders", "fresh-1"), group("orders", "fresh-2"));
        for made in [&unread, &read_once] {
            create(&mut connection, made, Some(idle)).await.unwrap();
        }
        let _: String = connection
            .xadd(&read_once.stream, "*", &[("payload", "one")])
            .await
            .unwrap();
        assert_eq!(read(&mut connection, &read_once).await, ["one"]);
        tokio::time::sleep(idle + Duration::from_millis(100)).await;
        let destroyed = sweep(&mut connection, &BTreeSet::new(), idle)
            .await
            .unwrap();
        assert_eq!(destroyed.len(), 2);
        let mut kept: Vec<String> = connection.keys("*gone*").await.unwrap();
        kept.sort();
        // And where an earlier version looks, for one during an upgrade.
        assert_eq!(
            kept,
            [
                "faas:stream-group-gone:fresh-2 t:shop:orders",
                "t:shop:orders gone fresh-2"
            ]
        );

        // Where an earlier version kept a destroyed group's place.
        let upgraded = group("orders", "before-upgrade");
        let place: String = connection
            .xadd(&upgraded.stream, "*", &[("payload", "two")])
            .await
            .unwrap();
        let _: () = connection
            .set(upgraded.old_tombstone(), &place)
            .await
            .unwrap();
        let _: String = connection
            .xadd(&upgraded.stream, "*", &[("payload", "three")])
            .await
            .unwrap();
        create(&mut connection, &upgraded, Some(idle))
            .await
            .unwrap();
        assert_eq!(read(&mut connection, &upgraded).await, ["three"]);
        let left: bool = connection.exists(upgraded.old_tombstone()).await.unwrap();
        assert!(!left);
    }

    #[tokio::test]
    async fn a_registered_group_whose_stream_is_gone_is_forgotten_and_a_bad_field_dropped() {
        let redis = RedisServer::start();
        let mut connection = connect(&redis).await;
        let removed = group("orders", "shop");
        create(&mut connection, &removed, Some(Duration::from_millis(10)))
            .await
            .unwrap();
        // The tenant's removal deleted its streams; someone wrote a field by hand.
        let _: i64 = connection.del(&removed.stream).await.unwrap();
        let _: i64 = connection
            .hset(GROUPS_KEY, "no-space-here", "1")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let destroyed = sweep(&mut connection, &BTreeSet::new(), Duration::from_millis(10))
            .await
            .unwrap();
        assert!(destroyed.is_empty());
        let registered: i64 = connection.hlen(GROUPS_KEY).await.unwrap();
        assert_eq!(registered, 0);
        assert!(!exists(&mut connection, &removed).await);
    }
}
