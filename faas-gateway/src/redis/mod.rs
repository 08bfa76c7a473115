//! Redis triggers: the workflows' pub/sub and stream triggers, consumed through the
//! [`RedisBroker`] (`faas_store::broker`, which also publishes and appends for
//! functions and keeps every name in its tenant's namespace).
//!
//! - [`supervise`] follows the registry and keeps one consumer task per trigger:
//!   `channel.rs` for pub/sub (at-most-once, run by one gateway of the cluster at a
//!   time), `stream.rs` for streams with consumer groups (at-least-once: acknowledge
//!   only after the run succeeded, reclaim what a dead consumer left pending,
//!   dead-letter what keeps failing).

mod channel;
mod lease;
mod stream;

use crate::server::App;
pub(crate) use faas_store::broker::{RedisBroker, namespaced};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// What a trigger task consumes: the key that identifies it, so the supervisor can
/// tell which tasks to keep, start or stop.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Consumer {
    Channel {
        workflow: String,
        revision: u64,
        tenant: String,
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
                    tenant: workflow.tenant.clone(),
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
                    workflow,
                    tenant,
                    channel,
                    ..
                } => tokio::spawn(channel::consume(app, broker, workflow, tenant, channel)),
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
