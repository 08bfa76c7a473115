//! What a tenant's guests leave at rest, removed with the tenant: its key-value
//! entries and, with Redis, its channels' and streams' keys (`t:<tenant>:*`) and the
//! counts the stream quotas keep of them (its streams' lists of entry sizes too). Without this a tenant created again under a
//! removed tenant's name (perhaps for someone else) would read the removed one's data.

use crate::broker::namespaced;
use crate::kv::{KeyValueStore, KvError};
use crate::redis_connection::{glob_escape, unlink_matching};
use crate::stream_quota::Counted;
use redis::aio::ConnectionManager;
use std::sync::Arc;

/// What [`TenantData::forget`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Forgotten {
    /// Key-value entries.
    pub kv_entries: u64,
    /// Redis keys of its channels and streams (the counts' keys aside).
    pub stream_keys: u64,
}

/// Why a tenant's data could not all be removed.
#[derive(Debug, thiserror::Error)]
pub enum ForgetError {
    /// The key-value store failed.
    #[error("removing its key-value entries: {0}")]
    KeyValue(#[from] KvError),
    /// Redis failed while removing its streams.
    #[error("removing its streams from Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// Where tenants' data is kept.
#[derive(Clone)]
pub struct TenantData {
    key_value: Arc<KeyValueStore>,
    /// The Redis of the tenants' channels and streams, where there is one.
    streams: Option<ConnectionManager>,
}

impl TenantData {
    /// Tenants' data in `key_value` and, where there is one, the Redis of `streams`.
    pub fn new(key_value: Arc<KeyValueStore>, streams: Option<ConnectionManager>) -> Self {
        Self { key_value, streams }
    }

    /// Removes all of `tenant`'s data. Run once nothing of the tenant's runs (it has no
    /// workflows): what is written meanwhile may be left.
    ///
    /// # Errors
    /// [`ForgetError`]; what was removed stays removed, and running it again removes
    /// the rest.
    pub async fn forget(&self, tenant: &str) -> Result<Forgotten, ForgetError> {
        let kv_entries = self.key_value.forget_tenant(tenant).await?;
        let mut stream_keys = 0;
        if let Some(connection) = &self.streams {
            let mut connection = connection.clone();
            let streams = glob_escape(&namespaced(tenant, ""));
            stream_keys = unlink_matching(&mut connection, &format!("{streams}*")).await?;
            // The lists of its streams' entry sizes.
            let entries = glob_escape(&Counted::Messages.entries_key(&namespaced(tenant, "")));
            unlink_matching(&mut connection, &format!("{entries}*")).await?;
            // Its log streams (each workflow's went with it, but for lines its last
            // instances wrote after), and theirs.
            let logs = crate::logs::log_prefix(tenant);
            for prefix in [logs.clone(), Counted::Logs.entries_key(&logs)] {
                let pattern = format!("{}*", glob_escape(&prefix));
                unlink_matching(&mut connection, &pattern).await?;
            }
            let counts: Vec<String> = [Counted::Messages, Counted::Logs]
                .into_iter()
                .flat_map(|counted| [counted.sizes_key(tenant), counted.usage_key(tenant)])
                .collect();
            redis::cmd("DEL")
                .arg(counts)
                .query_async::<u64>(&mut connection)
                .await?;
        }
        Ok(Forgotten {
            kv_entries,
            stream_keys,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_connection::manage;
    use crate::stream_quota::{StreamQuota, append};
    use faas_testing::RedisServer;
    use redis::AsyncCommands;

    /// Writes a key-value entry, a stream entry and a log stream's count for `tenant`.
    async fn write_for(tenant: &str, key_value: &KeyValueStore, connection: &ConnectionManager) {
        key_value.set(tenant, "k", b"v".to_vec()).await.unwrap();
        key_value.set(tenant, "*", b"v".to_vec()).await.unwrap();
        let stream = namespaced(tenant, "orders");
        let fields: &[(&str, &[u8])] = &[("payload", b"x")];
        append(
            connection,
            StreamQuota::default(),
            tenant,
            "orders",
            &stream,
            fields,
        )
        .await
        .unwrap();
        let mut connection = connection.clone();
        let _: () = connection
            .hset(Counted::Logs.usage_key(tenant), "bytes", 10)
            .await
            .unwrap();
        // Where a destroyed consumer group of its stopped (`stream_groups`).
        let _: () = connection
            .set(format!("{stream} gone g"), "1-0")
            .await
            .unwrap();
        // A log stream and its list of entry sizes.
        let log = crate::logs::log_key(tenant, "wf");
        let _: String = connection.xadd(&log, "*", &[("line", "{}")]).await.unwrap();
        let _: u64 = connection
            .rpush(Counted::Logs.entries_key(&log), 2)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_tenants_entries_streams_and_counts_go_and_anothers_stay() {
        let server = RedisServer::start();
        let connection = manage(redis::Client::open(server.url()).unwrap())
            .await
            .unwrap();
        let key_value = Arc::new(KeyValueStore::redis(&server.url()).await.unwrap());
        // `gone-a` would match a pattern made from `gone` without its `:`.
        for tenant in ["gone", "gone-a", "kept"] {
            write_for(tenant, &key_value, &connection).await;
        }
        let data = TenantData::new(key_value.clone(), Some(connection.clone()));
        let forgotten = data.forget("gone").await.unwrap();
        assert_eq!(
            forgotten,
            Forgotten {
                kv_entries: 2,
                stream_keys: 2
            }
        );
        let mut keys: Vec<String> = connection.clone().keys("*").await.unwrap();
        keys.sort();
        assert!(
            keys.iter()
                .all(|key| !key.contains(":gone:") && !key.ends_with(":gone")),
            "{keys:?}"
        );
        for tenant in ["gone-a", "kept"] {
            assert_eq!(
                key_value.get(tenant, "k").await.unwrap(),
                Some(b"v".to_vec())
            );
            let stream = namespaced(tenant, "orders");
            assert!(keys.contains(&format!("{stream} gone g")), "{keys:?}");
            assert!(keys.contains(&stream), "{keys:?}");
            assert!(
                keys.contains(&Counted::Messages.usage_key(tenant)),
                "{keys:?}"
            );
            assert!(keys.contains(&Counted::Logs.usage_key(tenant)), "{keys:?}");
            let log = crate::logs::log_key(tenant, "wf");
            assert!(keys.contains(&Counted::Logs.entries_key(&log)), "{keys:?}");
            assert!(keys.contains(&log), "{keys:?}");
        }
        assert_eq!(key_value.get("gone", "k").await.unwrap(), None);
        // Again: nothing left to remove.
        assert_eq!(data.forget("gone").await.unwrap(), Forgotten::default());
    }

    #[tokio::test]
    async fn the_state_database_forgets_a_tenants_entries_and_usage() {
        let dir = tempfile::tempdir().unwrap();
        // One key per tenant, so a usage left behind would refuse the next one.
        let key_value = KeyValueStore::sqlite(crate::Database::open(dir.path()).unwrap())
            .with_quota(crate::KvQuota {
                max_keys: 1,
                max_bytes: u64::MAX,
            });
        for tenant in ["gone", "kept"] {
            key_value.set(tenant, "k", b"v".to_vec()).await.unwrap();
        }
        let data = TenantData::new(Arc::new(key_value), None);
        assert_eq!(data.forget("gone").await.unwrap().kv_entries, 1);
        let key_value = &data.key_value;
        assert_eq!(key_value.get("gone", "k").await.unwrap(), None);
        assert_eq!(
            key_value.get("kept", "k").await.unwrap(),
            Some(b"v".to_vec())
        );
        // Its usage went too: a tenant of the name starts at none.
        key_value.set("gone", "other", b"v".to_vec()).await.unwrap();
    }
}
