//! The Redis message broker: what functions' outbound messages go through (it is the
//! worker's [`Publisher`]), and the connection the gateway's trigger consumers share.
//!
//! **Namespaces.** Every channel and stream a workflow or a guest names is its
//! tenant's: `orders` of tenant `shop` is the Redis key `t:shop:orders`
//! ([`namespaced`]). Tenant names are DNS labels (no `:`), so no two tenants' names
//! meet, and no guest reaches the platform's own `faas:*` keys. Streams appended to
//! are kept within the tenant's stream quota or the broker's default: entries per
//! stream, and bytes of all the tenant's streams ([`crate::stream_quota`]).
//!
//! It lives with the store's other Redis backends so that a worker process, which
//! publishes through it, does not link the gateway.

use crate::Tenant;
use crate::redis_connection::{Run, manage, redact_url};
use crate::stream_quota::{self, AppendError, StreamQuota};
use crate::tenant_connections::TenantConnections;
use faas_invoke::{BoxFuture, PublishError, Publisher};
use redis::aio::ConnectionManager;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

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

/// Connections to Redis for functions' messages (a connection per tenant, so one
/// tenant's large messages never sit ahead of another's: [`TenantConnections`]) and a
/// shared one for short trigger commands (never a blocking read: each stream consumer
/// has its own connection).
#[derive(Clone)]
pub struct RedisBroker {
    client: redis::Client,
    connections: TenantConnections,
    /// Names this process in stream groups and channel leases.
    consumer: String,
    /// What the streams of a tenant without quotas of its own may hold.
    stream_quota: StreamQuota,
    /// The tenants whose quotas set their own stream limits; shared by every clone, so
    /// the gateway's and the workers' copies in one process agree.
    tenant_stream_quotas: Arc<RwLock<HashMap<String, StreamQuota>>>,
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
            connections: TenantConnections::new(client.clone(), connection),
            client,
            consumer: format!("faas-{}-{:08x}", std::process::id(), rand::random::<u32>()),
            stream_quota: StreamQuota::default(),
            tenant_stream_quotas: Arc::default(),
        })
    }

    /// This broker over connections of its own: the same settings, consumer name and
    /// tenants' quotas (shared with this one as with any clone), but sockets driven by
    /// tasks of the runtime this is called on, or of the one its tenants' first
    /// messages are sent from (after a reconnection, of the runtime of the call that
    /// found the connection lost). A worker connects its guests' publisher this way on
    /// its guest threads.
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
            connections: TenantConnections::new(self.client.clone(), connection)
                .with_max(self.connections.max()),
            ..self.clone()
        })
    }

    /// The client, for connections of their own (pub/sub, blocking stream reads).
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// The shared connection, for short commands.
    pub fn connection(&self) -> ConnectionManager {
        self.connections.shared().clone()
    }

    /// `tenant`'s connection; failing to make it fails `operation` on `name`.
    async fn tenant_connection(
        &self,
        tenant: &str,
        operation: &'static str,
        name: &str,
    ) -> Result<ConnectionManager, PublishError> {
        self.connections
            .of(tenant)
            .await
            .map_err(|err| PublishError::Broker {
                operation,
                name: name.to_owned(),
                reason: err.to_string(),
            })
    }

    /// The name of this process in stream groups and channel leases.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Keeps the streams appended to (by guests, and by dead-lettering) of every tenant
    /// without quotas of its own within `quota`.
    #[must_use]
    pub fn with_stream_quota(mut self, quota: StreamQuota) -> Self {
        self.stream_quota = quota;
        self
    }

    /// The same broker with at most `max` tenants' connections open at once (see
    /// [`crate::DEFAULT_TENANT_CONNECTIONS`]; 0: every tenant's messages share one
    /// connection), in this copy and those [`Self::with_own_connection`] makes of it.
    #[must_use]
    pub fn with_tenant_connections(mut self, max: usize) -> Self {
        self.connections = self.connections.with_max(max);
        self
    }

    /// Takes each tenant's `stream_max_len` and `stream_max_bytes` quotas from
    /// `tenants`, the whole list as the tenant store has it (a tenant missing, or a
    /// limit it does not set, gets the broker's default).
    pub fn apply_tenant_quotas(&self, tenants: &[Tenant]) {
        let own = tenants
            .iter()
            .filter(|tenant| {
                tenant.quotas.stream_max_len.is_some() || tenant.quotas.stream_max_bytes.is_some()
            })
            .map(|tenant| {
                let quota = StreamQuota {
                    max_len: tenant
                        .quotas
                        .stream_max_len
                        .unwrap_or(self.stream_quota.max_len),
                    max_bytes: tenant
                        .quotas
                        .stream_max_bytes
                        .unwrap_or(self.stream_quota.max_bytes),
                };
                (tenant.name.clone(), quota)
            })
            .collect();
        *self
            .tenant_stream_quotas
            .write()
            .unwrap_or_else(|p| p.into_inner()) = own;
    }

    /// What `tenant`'s streams may hold.
    fn stream_quota_of(&self, tenant: &str) -> StreamQuota {
        self.tenant_stream_quotas
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant)
            .copied()
            .unwrap_or(self.stream_quota)
    }

    /// Appends `fields` to stream `stream` of `tenant` within the tenant's stream quota
    /// ([`crate::stream_quota`]), and returns the entry's id.
    ///
    /// # Errors
    /// [`AppendError::Quota`] when no trimming makes room; [`AppendError::Redis`] for
    /// Redis's own errors.
    pub async fn append_within_quota(
        &self,
        tenant: &str,
        stream: &str,
        fields: &[(&str, &[u8])],
    ) -> Result<String, AppendError> {
        stream_quota::append(
            &self.connections.of(tenant).await?,
            self.stream_quota_of(tenant),
            tenant,
            stream,
            &namespaced(tenant, stream),
            fields,
        )
        .await
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
            let connection = self
                .tenant_connection(tenant, "publishing to", channel)
                .await?;
            // Sent again if the connection had dropped (a restarted Redis): a guest's
            // message is not lost to the first command that finds it gone.
            redis::cmd("PUBLISH")
                .arg(&key)
                .arg(payload)
                .run::<i64>(&connection)
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
            let connection = self
                .tenant_connection(tenant, "publishing to", channel)
                .await?;
            // One pipeline: every PUBLISH is written before the first reply is read.
            let mut pipeline = redis::pipe();
            for payload in payloads {
                pipeline.publish(&key, payload.as_slice()).ignore();
            }
            pipeline
                .run::<()>(&connection)
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
            // The entry carries the appender's trace, which its consumer continues.
            let traceparent = faas_invoke::trace::traceparent(&tracing::Span::current());
            let mut fields: Vec<(&str, &[u8])> = vec![("payload", payload)];
            if let Some(traceparent) = &traceparent {
                fields.push((faas_invoke::trace::TRACEPARENT, traceparent.as_bytes()));
            }
            self.append_within_quota(tenant, stream, &fields)
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

    // The guests' publisher is a copy made with its own connection: it keeps the
    // broker's limit on tenants' connections.
    #[tokio::test]
    async fn a_copy_with_its_own_connection_keeps_the_limit_of_tenant_connections() {
        let server = RedisServer::start();
        let broker = RedisBroker::connect(&server.url())
            .await
            .unwrap()
            .with_tenant_connections(1);
        let publisher = broker.with_own_connection().await.unwrap();
        let before = server.connected_clients();
        for tenant in ["a", "b", "c"] {
            publisher.publish(tenant, "news", b"hello").await.unwrap();
        }
        // One tenant's own connection; the other two share the copy's.
        assert_eq!(server.connected_clients(), before + 1);
    }

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
        assert!((99..=100).contains(&small), "kept {small}");
        assert_eq!(other, 1_000);
    }

    // A tenant's queue of large messages does not hold another tenant's message: each
    // tenant's go over a connection of their own (on one shared connection, replies
    // come in order, so every message sent before it would be done first). The server
    // is stopped while they are sent, so that all of them wait for it at once.
    #[tokio::test]
    async fn a_message_does_not_wait_behind_another_tenants_large_ones() {
        const MESSAGES: usize = 48;
        let server = RedisServer::start();
        let broker = Arc::new(RedisBroker::connect(&server.url()).await.unwrap());
        broker.publish("victim", "c", b"warm").await.unwrap();
        broker.publish("hog", "c", b"warm").await.unwrap();
        server.pause();
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut messages = tokio::task::JoinSet::new();
        for _ in 0..MESSAGES {
            let (broker, done) = (broker.clone(), done.clone());
            messages.spawn(async move {
                let payload = vec![0; faas_invoke::MAX_MESSAGE_BYTES];
                broker.publish("hog", "c", &payload).await.unwrap();
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        let sleep = || tokio::time::sleep(std::time::Duration::from_millis(100));
        sleep().await;
        let small = tokio::spawn({
            let broker = broker.clone();
            async move { broker.publish("victim", "c", b"small").await }
        });
        sleep().await;
        server.resume();
        small.await.unwrap().unwrap();
        let after = done.load(std::sync::atomic::Ordering::SeqCst);
        messages.join_all().await;
        assert!(
            after < MESSAGES / 2,
            "the message waited for {after} of {MESSAGES} large ones"
        );
    }
}
