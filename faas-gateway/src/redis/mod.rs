//! Redis triggers: the workflows' pub/sub and stream triggers, consumed through the
//! [`RedisBroker`] (`faas_store::broker`, which also publishes and appends for
//! functions and keeps every name in its tenant's namespace).
//!
//! - [`supervise`] follows the registry and keeps one consumer task per trigger:
//!   `channel.rs` for pub/sub (at-most-once, run by one gateway of the cluster at a
//!   time), `stream.rs` for streams with consumer groups (at-least-once: acknowledge
//!   only after the run succeeded, reclaim what a dead consumer left pending,
//!   dead-letter what keeps failing).
//! - [`sweep_groups`] destroys the consumer groups that no deployed trigger names any
//!   more once no consumer has read them for a while (`faas_store::stream_groups`).

mod channel;
mod lease;
mod stream;

use crate::server::App;
pub(crate) use faas_store::broker::{RedisBroker, namespaced};
use faas_store::stream_groups::{self, StreamGroup};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How often the gateway looks for consumer groups to destroy, at most.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

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

/// Destroys, every [`SWEEP_EVERY`] (or half the idle time, if shorter), the consumer
/// groups that no trigger of the deployed workflows names and that no consumer has
/// read for `stream_group_idle`. Every gateway sweeps: the script that destroys a
/// group checks it again, so two sweeps cost a second look, nothing more. Runs until
/// the gateway stops; does nothing when groups are kept for ever.
pub(crate) async fn sweep_groups(app: Arc<App>, broker: RedisBroker) {
    let Some(idle) = app.config.stream_group_idle else {
        return;
    };
    let every = (idle / 2).clamp(Duration::from_millis(100), SWEEP_EVERY);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut connection = broker.connection();
    loop {
        ticker.tick().await;
        // Only while the registry holds what is deployed: one that has not read the
        // shared state lately (just started, Redis unreachable, a write-back under way
        // elsewhere) would see every group as named by none.
        if let Some(backend) = app.registry.services()
            && !backend.in_sync()
        {
            tracing::debug!("not sweeping consumer groups: the deployments were not read lately");
            continue;
        }
        let named: BTreeSet<StreamGroup> = app
            .registry
            .list()
            .iter()
            .flat_map(|deployment| {
                let tenant = &deployment.workflow.tenant;
                deployment
                    .workflow
                    .stream_triggers
                    .iter()
                    .map(|trigger| StreamGroup {
                        stream: namespaced(tenant, &trigger.stream),
                        group: trigger.group.clone(),
                    })
            })
            .collect();
        match stream_groups::sweep(&mut connection, &named, idle).await {
            Ok(destroyed) => {
                for group in destroyed {
                    tracing::info!(
                        stream = group.stream,
                        group = group.group,
                        "destroyed a consumer group no trigger names"
                    );
                }
            }
            Err(err) => tracing::warn!("sweeping consumer groups failed, retrying: {err}"),
        }
    }
}
