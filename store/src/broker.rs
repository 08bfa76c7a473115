//! The Redis message broker: what functions' outbound messages go through (it is the
//! worker's [`Publisher`]), and the connection the gateway's trigger consumers share.
//!
//! **Namespaces.** Every channel and stream a workflow or a guest names is its
//! tenant's: `orders` of tenant `shop` is the Redis key `t:shop:orders`
//! ([`namespaced`]). Tenant names are DNS labels (no `:`), so no two tenants' names
//! meet, and no guest reaches the platform's own `faas:*` keys. Streams appended to
//! are trimmed (`XADD MAXLEN ~`) to the tenant's `stream_max_len` quota or the
//! broker's default.
//!
//! It lives with the store's other Redis backends so that a worker process, which
//! publishes through it, does not link the gateway.

use crate::Tenant;
use crate::redis_connection::{Run, manage, redact_url};
use faas_invoke::{BoxFuture, PublishError, Publisher};
use redis::aio::ConnectionManager;
use redis::streams::StreamMaxlen;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// How many entries a stream keeps by default when appended to by a guest or a
/// dead-letter move (`XADD ... MAXLEN ~ N`).
pub const DEFAULT_STREAM_MAX_LEN: usize = 10_000;

/// The Redis key of channel or stream `name` of `tenant`.
pub fn namespaced(tenant: &str, name: &str) -> String {
    format!("t:{tenant}:{name}")
}

/// Why the broker could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("Redis at {url}: {source}")]
pub struct BrokerError {
    /// Where, without the credentials a Redis URL may carry.
    url: String,
    source: redis::RedisError,
}

/// A connection to Redis shared by functions' messages and short trigger commands
/// (never a blocking read: each stream consumer has its own connection).
#[derive(Clone)]
pub struct RedisBroker {
    client: redis::Client,
    connection: ConnectionManager,
    /// Names this process in stream groups and channel leases.
    consumer: String,
    /// Most entries kept by the streams this broker appends to; 0 for no limit.
    stream_max_len: usize,
    /// The tenants whose quota sets their own `stream_max_len`; shared by every clone,
    /// so the gateway's and the workers' copies in one process agree.
    tenant_stream_max_len: Arc<RwLock<HashMap<String, usize>>>,
}

impl RedisBroker {
    /// Connects to `url` (and checks the server answers).
    ///
    /// # Errors
    /// [`BrokerError`] naming the URL.
    pub async fn connect(url: &str) -> Result<Self, BrokerError> {
        let error = |source| BrokerError {
            url: redact_url(url),
            source,
        };
        let client = redis::Client::open(url).map_err(error)?;
        let connection = manage(client.clone()).await.map_err(error)?;
        Ok(Self {
            client,
            connection,
            consumer: format!("faas-{}-{:08x}", std::process::id(), rand::random::<u32>()),
            stream_max_len: DEFAULT_STREAM_MAX_LEN,
            tenant_stream_max_len: Arc::default(),
        })
    }

    /// This broker over a connection of its own: the same settings, consumer name and
    /// tenants' quotas (shared with this one as with any clone), but a socket driven
    /// by a task of the runtime this is called on (after a reconnection, of the runtime
    /// of the call that found the connection lost). A worker connects its guests'
    /// publisher this way on its guest threads.
    ///
    /// # Errors
    /// [`BrokerError`] naming the server when it cannot be reached.
    pub async fn with_own_connection(&self) -> Result<Self, BrokerError> {
        let connection = manage(self.client.clone())
            .await
            .map_err(|source| BrokerError {
                url: self.client.get_connection_info().addr().to_string(),
                source,
            })?;
        Ok(Self {
            connection,
            ..self.clone()
        })
    }

    /// The client, for connections of their own (pub/sub, blocking stream reads).
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// The shared connection, for short commands.
    pub fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// The name of this process in stream groups and channel leases.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Trims every stream appended to (by guests, and by dead-lettering) to about
    /// `max_len` entries; 0 keeps them whole.
    pub fn with_stream_max_len(mut self, max_len: usize) -> Self {
        self.stream_max_len = max_len;
        self
    }

    /// Takes each tenant's `stream_max_len` quota from `tenants`, the whole list as the
    /// tenant store has it (a tenant missing, or without one, gets the default).
    pub fn apply_tenant_quotas(&self, tenants: &[Tenant]) {
        let own = tenants
            .iter()
            .filter_map(|tenant| {
                let max_len = tenant.quotas.stream_max_len?;
                Some((
                    tenant.name.clone(),
                    usize::try_from(max_len).unwrap_or(usize::MAX),
                ))
            })
            .collect();
        *self
            .tenant_stream_max_len
            .write()
            .unwrap_or_else(|p| p.into_inner()) = own;
    }

    /// About how many entries `tenant`'s streams keep; 0 for no limit.
    fn stream_max_len_of(&self, tenant: &str) -> usize {
        self.tenant_stream_max_len
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant)
            .copied()
            .unwrap_or(self.stream_max_len)
    }

    /// `XADD key MAXLEN ~ <stream max len of tenant> * fields...` on `connection`.
    ///
    /// # Errors
    /// Redis's error.
    pub async fn append_trimmed(
        &self,
        connection: &mut ConnectionManager,
        tenant: &str,
        key: &str,
        fields: &[(&str, &[u8])],
    ) -> redis::RedisResult<String> {
        self.append_command(tenant, key, fields)
            .query_async(connection)
            .await
    }

    /// The `XADD` of [`Self::append_trimmed`].
    fn append_command(&self, tenant: &str, key: &str, fields: &[(&str, &[u8])]) -> redis::Cmd {
        let mut command = redis::cmd("XADD");
        command.arg(key);
        let max_len = self.stream_max_len_of(tenant);
        if max_len > 0 {
            command.arg(StreamMaxlen::Approx(max_len));
        }
        command.arg("*").arg(fields);
        command
    }
}

impl Publisher for RedisBroker {
    fn publish<'a>(
        &'a self,
        tenant: &'a str,
        channel: &'a str,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move {
            let key = namespaced(tenant, channel);
            // Sent again if the connection had dropped (a restarted Redis): a guest's
            // message is not lost to the first command that finds it gone.
            redis::cmd("PUBLISH")
                .arg(&key)
                .arg(payload)
                .run::<i64>(&self.connection)
                .await
                .map(|_| ())
                .map_err(|err| PublishError::Broker {
                    operation: "publishing to",
                    name: channel.to_owned(),
                    reason: err.to_string(),
                })
        })
    }

    fn publish_all<'a>(
        &'a self,
        tenant: &'a str,
        channel: &'a str,
        payloads: &'a [Vec<u8>],
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move {
            if payloads.is_empty() {
                // An empty pipeline would wait for no reply from Redis; nothing to send.
                return Ok(());
            }
            let key = namespaced(tenant, channel);
            // One pipeline: every PUBLISH is written before the first reply is read.
            let mut pipeline = redis::pipe();
            for payload in payloads {
                pipeline.publish(&key, payload.as_slice()).ignore();
            }
            pipeline
                .run::<()>(&self.connection)
                .await
                .map_err(|err| PublishError::Broker {
                    operation: "publishing to",
                    name: channel.to_owned(),
                    reason: err.to_string(),
                })
        })
    }

    fn append<'a>(
        &'a self,
        tenant: &'a str,
        stream: &'a str,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<String, PublishError>> {
        Box::pin(async move {
            let key = namespaced(tenant, stream);
            // The entry carries the appender's trace, which its consumer continues.
            let traceparent = faas_invoke::trace::traceparent(&tracing::Span::current());
            let mut fields: Vec<(&str, &[u8])> = vec![("payload", payload)];
            if let Some(traceparent) = &traceparent {
                fields.push((faas_invoke::trace::TRACEPARENT, traceparent.as_bytes()));
            }
            self.append_command(tenant, &key, &fields)
                .run::<String>(&self.connection)
                .await
                .map_err(|err| PublishError::Broker {
                    operation: "appending to",
                    name: stream.to_owned(),
                    reason: err.to_string(),
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenants::Quotas;
    use faas_testing::RedisServer;
    use redis::AsyncCommands;

    #[tokio::test]
    async fn an_unreachable_broker_is_named_without_its_credentials() {
        let err = RedisBroker::connect("redis://faas:hunter2@127.0.0.1:1/0")
            .await
            .err()
            .expect("nothing listens on port 1");
        let message = err.to_string();
        assert!(message.contains("127.0.0.1:1"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }

    // A guest's message to a Redis that went away fails with an error it can act on,
    // well within its event's deadline (the kv store's settings: a few quick
    // reconnects), not after the crate's default rounds of backoff (about 11 s), and the
    // next message after Redis is back goes through on the same broker.
    #[tokio::test]
    async fn a_message_to_a_redis_gone_away_fails_soon_and_goes_through_once_it_is_back() {
        let mut server = RedisServer::start();
        let broker = RedisBroker::connect(&server.url()).await.unwrap();
        broker.publish("t", "c", b"before").await.unwrap();
        // The server goes away (and stays away until restarted below).
        let mut admin = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _ = redis::cmd("SHUTDOWN")
            .arg("NOSAVE")
            .query_async::<()>(&mut admin)
            .await;
        let started = std::time::Instant::now();
        match broker.publish("t", "c", b"during").await {
            Err(PublishError::Broker { name, .. }) => assert_eq!(name, "c"),
            other => panic!("expected a broker error, got {other:?}"),
        }
        let waited = started.elapsed();
        assert!(
            waited < std::time::Duration::from_secs(3),
            "failed after {waited:?}"
        );
        let server = tokio::task::spawn_blocking(move || {
            server.restart();
            server
        })
        .await
        .unwrap();
        broker.publish("t", "c", b"after").await.unwrap();
        drop(server);
    }

    // A worker's guests publish through their own connection; the tenants' quotas the
    // process applies to its broker must hold there too.
    #[tokio::test]
    async fn a_broker_on_its_own_connection_keeps_the_tenants_quotas() {
        let server = RedisServer::start();
        let broker = RedisBroker::connect(&server.url()).await.unwrap();
        let own = broker.with_own_connection().await.unwrap();
        let quotas = Quotas {
            stream_max_len: Some(100),
            ..Quotas::default()
        };
        broker.apply_tenant_quotas(&[Tenant {
            name: "small".to_owned(),
            created_at: 0,
            quotas,
        }]);
        for tenant in ["small", "other"] {
            for _ in 0..1_000 {
                own.append(tenant, "s", b"x").await.unwrap();
            }
        }
        let mut connection = broker.connection();
        let small: usize = connection.xlen("t:small:s").await.unwrap();
        let other: usize = connection.xlen("t:other:s").await.unwrap();
        // `MAXLEN ~` trims whole nodes (100 entries by default).
        assert!((100..=200).contains(&small), "kept {small}");
        assert_eq!(other, 1_000);
    }
}
