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
//! `<group> <stream key>`, as group names hold no whitespace; value: when it was last
//! made, in unix milliseconds), in the same script that makes it, and a consumer makes
//! its group again every [`RENEW_EVERY`] while it runs, which renews that stamp.
//! [`sweep`] destroys a registered group only when no deployed trigger names it, its
//! stamp is older than `idle` (no consumer has run for that long), and none of its
//! consumers was delivered an entry within `idle` (Redis 7.2 and later count any read;
//! 7.0 only reads that returned entries), all checked in the script that destroys it;
//! an empty stream left with no group goes with it. A trigger naming the group again
//! afterwards makes it anew, reading from the start of the stream, as a new deploy's
//! group does.

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The hash of the groups stream triggers made: `<group> <stream key>` -> unix ms.
pub const GROUPS_KEY: &str = "faas:stream-groups";

/// Default of how long a group no trigger names, and no consumer reads, is kept.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);

/// How often a running consumer makes its group again ([`create`]), renewing its
/// stamp: well within any `idle` worth setting.
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

    /// The group a field of [`GROUPS_KEY`] names, if it is one.
    fn from_field(field: &str) -> Option<Self> {
        let (group, stream) = field.split_once(' ')?;
        Some(Self {
            stream: stream.to_owned(),
            group: group.to_owned(),
        })
    }
}

/// Makes group `KEYS[1]`'s `ARGV[1]` (and the stream) reading from the start unless it
/// exists, and stamps its field `ARGV[2]` of `KEYS[2]` with `ARGV[3]`, in one step: a
/// sweep that sees the stamp old cannot run between the two.
static CREATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local made = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
if type(made) == 'table' and made.err and string.sub(made.err, 1, 9) ~= 'BUSYGROUP' then
  return made
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
",
    )
});

/// Destroys group `ARGV[1]` of stream `KEYS[1]` (field `ARGV[2]` of `KEYS[2]`) if it was
/// made no later than `ARGV[3]` and each of its consumers has been idle at least
/// `ARGV[4]` ms; then deletes the stream if it is left empty with no group. Forgets a
/// field whose group is gone already. Returns 1 if it destroyed the group, 0 if it kept
/// it, -1 if it only forgot the field.
static DESTROY_IF_IDLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local made = tonumber(redis.call('HGET', KEYS[2], ARGV[2]))
if made == nil or made > tonumber(ARGV[3]) then return 0 end
local consumers = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if consumers.err then
  redis.call('HDEL', KEYS[2], ARGV[2])
  return -1
end
for _, consumer in ipairs(consumers) do
  for i = 1, #consumer, 2 do
    if consumer[i] == 'idle' and consumer[i + 1] < tonumber(ARGV[4]) then return 0 end
  end
end
redis.call('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[2])
if redis.call('XLEN', KEYS[1]) == 0 and #redis.call('XINFO', 'GROUPS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1])
end
return 1
",
    )
});

/// Makes `group` of `stream` (and the stream) reading from its start, unless it
/// exists, and registers it for [`sweep`] (stamped now). Consumers call it when they
/// start and every [`RENEW_EVERY`] after.
///
/// # Errors
/// Redis's, as for `XGROUP CREATE` (`WRONGTYPE` when the key is not a stream).
pub async fn create(connection: &mut ConnectionManager, group: &StreamGroup) -> RedisResult<()> {
    CREATE
        .key(&group.stream)
        .key(GROUPS_KEY)
        .arg(&group.group)
        .arg(group.field())
        .arg(unix_millis())
        .invoke_async(connection)
        .await
}

/// Destroys the registered groups that no group of `named` (those of every deployed
/// stream trigger) is, that were last made more than `idle` ago and whose consumers
/// have all been idle that long, and returns them. A group whose stream or group is gone
/// is forgotten.
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
    let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    let made_by = unix_millis().saturating_sub(idle_ms);
    let mut destroyed = Vec::new();
    for (field, made) in registered {
        let (Some(group), Ok(made)) = (StreamGroup::from_field(&field), made.parse::<u64>()) else {
            // Not written by `create`: nothing to destroy.
            let _: i64 = redis::cmd("HDEL")
                .arg(GROUPS_KEY)
                .arg(&field)
                .query_async(connection)
                .await?;
            continue;
        };
        if made > made_by || named.contains(&group) {
            continue;
        }
        let outcome: i64 = DESTROY_IF_IDLE
            .key(&group.stream)
            .key(GROUPS_KEY)
            .arg(&group.group)
            .arg(&field)
            .arg(made_by)
            .arg(idle_ms)
            .invoke_async(connection)
            .await?;
        if outcome == 1 {
            destroyed.push(group);
        }
    }
    Ok(destroyed)
}

/// Now, in milliseconds since the Unix epoch.
fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
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

    /// Whether `group` exists on its stream.
    async fn exists(connection: &mut ConnectionManager, group: &StreamGroup) -> bool {
        let groups: redis::RedisResult<redis::streams::StreamInfoGroupsReply> =
            connection.xinfo_groups(&group.stream).await;
        groups.is_ok_and(|reply| reply.groups.iter().any(|g| g.name == group.group))
    }

    /// Reads an entry from `group` as consumer `c`, as a trigger's consumer does.
    async fn read(connection: &mut ConnectionManager, group: &StreamGroup) {
        let options = StreamReadOptions::default()
            .group(&group.group, "c")
            .count(1);
        let _: Option<StreamReadReply> = connection
            .xread_options(&[&group.stream], &[">"], &options)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_group_no_trigger_names_goes_once_idle_and_one_named_or_read_stays() {
        let redis = RedisServer::start();
        let mut connection = manage(redis::Client::open(redis.url()).unwrap())
            .await
            .unwrap();
        let named = group("orders", "shop");
        let renewed = group("orders", "old-revision");
        let delivered_lately = group("orders", "lagging");
        let forgotten = group("renamed", "shop");
        let with_entries = group("events", "gone");
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
            create(&mut connection, made).await.unwrap();
            // Made again (a second gateway, a restart): no error, nothing lost.
            create(&mut connection, made).await.unwrap();
            assert!(exists(&mut connection, made).await);
        }
        let triggers = BTreeSet::from([named.clone()]);
        let idle = Duration::from_millis(300);

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
        create(&mut connection, &renewed).await.unwrap();
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

        // Named again by a later deploy: made anew, from the start of the stream.
        create(&mut connection, &forgotten).await.unwrap();
        assert!(exists(&mut connection, &forgotten).await);
    }

    #[tokio::test]
    async fn a_registered_group_whose_stream_is_gone_is_forgotten_and_a_bad_field_dropped() {
        let redis = RedisServer::start();
        let mut connection = manage(redis::Client::open(redis.url()).unwrap())
            .await
            .unwrap();
        let removed = group("orders", "shop");
        create(&mut connection, &removed).await.unwrap();
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
