//! Redis: the message broker behind pub/sub and stream triggers and behind functions'
//! outbound messages.
//!
//! - [`RedisBroker`] publishes and appends for functions (it is the worker's
//!   `Publisher`).
//! - [`supervise`] follows the registry and keeps one consumer task per trigger:
//!   `channel.rs` for pub/sub (at-most-once, as in Spin), `stream.rs` for streams with
//!   consumer groups (at-least-once: acknowledge only after the run succeeded, reclaim
//!   what a dead consumer left pending, dead-letter what keeps failing).

mod channel;
mod stream;

use crate::server::App;
use faas_worker::Publisher;
use faas_worker::messaging::BoxFuture;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// Why the broker could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("Redis at {url}: {source}")]
pub struct BrokerError {
    url: String,
    source: redis::RedisError,
}

/// A connection to Redis shared by triggers and functions.
#[derive(Clone)]
pub struct RedisBroker {
    client: redis::Client,
    connection: ConnectionManager,
    /// Names this process's consumers in stream groups.
    consumer: String,
}

impl RedisBroker {
    /// Connects to `url` (and checks the server answers).
    ///
    /// # Errors
    /// [`BrokerError`] naming the URL.
    pub async fn connect(url: &str) -> Result<Self, BrokerError> {
        let error = |source| BrokerError {
            url: url.to_owned(),
            source,
        };
        let client = redis::Client::open(url).map_err(error)?;
        let mut connection = client.get_connection_manager().await.map_err(error)?;
        let _: String = redis::cmd("PING")
            .query_async(&mut connection)
            .await
            .map_err(error)?;
        Ok(Self {
            client,
            connection,
            consumer: format!("faas-{}-{:08x}", std::process::id(), rand::random::<u32>()),
        })
    }
}

impl Publisher for RedisBroker {
    fn publish<'a>(
        &'a self,
        channel: &'a str,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let mut connection = self.connection.clone();
            connection
                .publish::<_, _, i64>(channel, payload)
                .await
                .map(|_| ())
                .map_err(|err| format!("publishing to `{channel}`: {err}"))
        })
    }

    fn append<'a>(
        &'a self,
        stream: &'a str,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let mut connection = self.connection.clone();
            connection
                .xadd::<_, _, _, _, String>(stream, "*", &[("payload", payload)])
                .await
                .map_err(|err| format!("appending to `{stream}`: {err}"))
        })
    }
}

/// What a trigger task consumes: the key that identifies it, so the supervisor can
/// tell which tasks to keep, start or stop.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Consumer {
    Channel {
        workflow: String,
        revision: u64,
        channel: String,
    },
    Stream {
        workflow: String,
        revision: u64,
        trigger: usize,
    },
}

/// Keeps one consumer task per Redis trigger of the deployed workflows, starting and
/// stopping them as workflows are deployed and removed. Runs until the gateway stops.
pub(crate) async fn supervise(app: Arc<App>, broker: RedisBroker) {
    let mut changes = app.registry.changes();
    let mut tasks: BTreeMap<Consumer, JoinHandle<()>> = BTreeMap::new();
    loop {
        let mut wanted = BTreeMap::new();
        for deployment in app.registry.list() {
            let workflow = &deployment.workflow;
            for trigger in &workflow.redis_triggers {
                let key = Consumer::Channel {
                    workflow: workflow.name.clone(),
                    revision: deployment.revision,
                    channel: trigger.channel.clone(),
                };
                wanted.insert(key, ());
            }
            for index in 0..workflow.stream_triggers.len() {
                let key = Consumer::Stream {
                    workflow: workflow.name.clone(),
                    revision: deployment.revision,
                    trigger: index,
                };
                wanted.insert(key, ());
            }
        }
        tasks.retain(|key, task| {
            let keep = wanted.contains_key(key);
            if !keep {
                task.abort();
            }
            keep
        });
        for key in wanted.into_keys() {
            if tasks.contains_key(&key) {
                continue;
            }
            let (app, broker) = (app.clone(), broker.clone());
            let task = match key.clone() {
                Consumer::Channel {
                    workflow, channel, ..
                } => tokio::spawn(channel::consume(app, broker, workflow, channel)),
                Consumer::Stream {
                    workflow, trigger, ..
                } => tokio::spawn(stream::consume(app, broker, workflow, trigger)),
            };
            tasks.insert(key, task);
        }
        if changes.changed().await.is_err() {
            break;
        }
    }
    for task in tasks.into_values() {
        task.abort();
    }
}
