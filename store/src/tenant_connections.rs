//! A Redis connection per tenant, for the commands guests send (key-value calls,
//! messages).
//!
//! One multiplexed connection carries its commands in order, and Redis answers them in
//! order: on a connection shared by every tenant, one tenant's queue of 1 MiB writes
//! sits ahead of another tenant's `GET`, which waits for all of them. Redis serves its
//! clients in turn, a command or so each per pass of its event loop (it reads one large
//! argument at a time), so on connections of their own each tenant's commands wait
//! behind its own, and behind at most a command of each other tenant. (Measured with
//! `bench/noisy-neighbour.sh`'s `ATTACK=kv-writes STORE=redis`, together with the
//! key-value set that keeps its value out of Lua, `kv.rs`: another tenant's reads under
//! such writes went from 0.02 of their throughput alone to 0.29-0.68 in most rounds.)
//!
//! A tenant's connection is made at its first command and closed once it has sent none
//! for [`IDLE`], so a process whose tenants are idle holds no connection for them. At
//! most a limit ([`DEFAULT_TENANT_CONNECTIONS`] unless the operator sets another) are
//! open at once: tenants past it share one connection, as
//! every tenant did before, rather than hold Redis's connections (which every process
//! and tenant shares) without bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use redis::RedisError;
use redis::aio::ConnectionManager;
use tokio::sync::OnceCell;

use crate::redis_connection::{ConnectError, manage};

/// How long a tenant's connection stays open without a command.
pub(crate) const IDLE: Duration = Duration::from_secs(60);

/// Most tenant connections open at once (in one process) by default: each process
/// opens up to this many for key-value commands and as many for messages, and Redis's
/// `maxclients` (10,000 by default) is shared by every process and tenant.
pub const DEFAULT_TENANT_CONNECTIONS: usize = 256;

/// Connections to one Redis server: one per tenant that sent a command lately, and one
/// shared (for tenants past the limit, and for the platform's own commands).
#[derive(Debug, Clone)]
pub(crate) struct TenantConnections {
    client: redis::Client,
    shared: ConnectionManager,
    tenants: Arc<Mutex<HashMap<String, Lane>>>,
    max: usize,
}

/// One tenant's connection: made by the first command that needs it (the others wait
/// for that one), or not yet if making it failed (the next command tries again).
#[derive(Debug)]
struct Lane {
    connection: Arc<OnceCell<ConnectionManager>>,
    last_used: Instant,
}

impl TenantConnections {
    /// Connections to the server at `url`, the shared one made (and checked with
    /// `PING`) now. Idle tenants' connections are closed by a task of the current
    /// runtime, which ends when the last clone of this is dropped.
    ///
    /// # Errors
    /// When the URL does not parse or the server cannot be reached.
    pub(crate) async fn connect(url: &str) -> Result<Self, ConnectError> {
        let client = redis::Client::open(url).map_err(ConnectError::Url)?;
        let shared = manage(client.clone())
            .await
            .map_err(ConnectError::Unreachable)?;
        Ok(Self::new(client, shared))
    }

    /// Connections to `client`'s server besides `shared`, closed when idle as
    /// [`Self::connect`] says.
    pub(crate) fn new(client: redis::Client, shared: ConnectionManager) -> Self {
        Self::with_limits(client, shared, DEFAULT_TENANT_CONNECTIONS, IDLE)
    }

    /// The same connections, with at most `max` tenants' open at once (0: every tenant
    /// shares the one connection). Set before the first command.
    #[must_use]
    pub(crate) fn with_max(mut self, max: usize) -> Self {
        self.max = max;
        self
    }

    /// Most tenants' connections open at once.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    fn with_limits(
        client: redis::Client,
        shared: ConnectionManager,
        max: usize,
        idle: Duration,
    ) -> Self {
        let tenants = Arc::default();
        tokio::spawn(close_idle(Arc::downgrade(&tenants), idle));
        Self {
            client,
            shared,
            tenants,
            max,
        }
    }

    /// The connection shared by everything without one of its own.
    pub(crate) fn shared(&self) -> &ConnectionManager {
        &self.shared
    }

    /// `tenant`'s connection, made now if it has none (or the shared one, when
    /// as many other tenants as the limit allows have theirs).
    ///
    /// # Errors
    /// When the tenant's connection could not be made (the server cannot be reached).
    pub(crate) async fn of(&self, tenant: &str) -> Result<ConnectionManager, RedisError> {
        let connection = {
            let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            if let Some(lane) = tenants.get_mut(tenant) {
                lane.last_used = now;
                lane.connection.clone()
            } else if tenants.len() >= self.max {
                return Ok(self.shared.clone());
            } else {
                let connection = Arc::new(OnceCell::new());
                let lane = Lane {
                    connection: connection.clone(),
                    last_used: now,
                };
                tenants.insert(tenant.to_owned(), lane);
                connection
            }
        };
        connection
            .get_or_try_init(|| manage(self.client.clone()))
            .await
            .cloned()
    }

    /// How many tenants have a connection of their own.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.tenants.lock().unwrap().len()
    }
}

/// Every `idle / 2`, drops the connections of tenants that sent no command for `idle`
/// (a command under way holds a clone, so it finishes first), until `tenants` is gone.
async fn close_idle(tenants: Weak<Mutex<HashMap<String, Lane>>>, idle: Duration) {
    let mut ticks = tokio::time::interval(idle / 2);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(tenants) = tenants.upgrade() else {
            return;
        };
        let now = Instant::now();
        tenants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, lane| now.duration_since(lane.last_used) < idle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faas_testing::RedisServer;

    async fn connections(server: &RedisServer, max: usize, idle: Duration) -> TenantConnections {
        let client = redis::Client::open(server.url()).unwrap();
        let shared = manage(client.clone()).await.unwrap();
        TenantConnections::with_limits(client, shared, max, idle)
    }

    #[tokio::test]
    async fn each_tenant_gets_a_connection_of_its_own_up_to_the_limit() {
        let server = RedisServer::start();
        let connections = connections(&server, 2, Duration::from_secs(60)).await;
        // The shared connection, and the one that asks.
        assert_eq!(server.connected_clients(), 2);
        for tenant in ["a", "b", "a", "c", "d"] {
            let mut connection = connections.of(tenant).await.unwrap();
            redis::cmd("PING")
                .query_async::<()>(&mut connection)
                .await
                .unwrap();
        }
        // a and b have their own; c and d came past the limit and share.
        assert_eq!(connections.open(), 2);
        assert_eq!(server.connected_clients(), 4);
    }

    #[tokio::test]
    async fn an_idle_tenants_connection_is_closed_and_made_again_when_needed() {
        let server = RedisServer::start();
        let connections = connections(&server, 8, Duration::from_millis(200)).await;
        connections.of("a").await.unwrap();
        assert_eq!(server.connected_clients(), 3);
        let mut closed = false;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if connections.open() == 0 && server.connected_clients() == 2 {
                closed = true;
                break;
            }
        }
        assert!(closed, "a's connection is still open after 5 s idle");
        let mut again = connections.of("a").await.unwrap();
        redis::cmd("PING")
            .query_async::<()>(&mut again)
            .await
            .unwrap();
        assert_eq!(server.connected_clients(), 3);
    }
}
