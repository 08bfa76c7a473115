//! Stream triggers: a consumer group reads the stream; an entry is acknowledged only
//! after its run succeeded. Entries left pending (a failed run, or a consumer that
//! died) are claimed again once idle for `reclaim_idle_ms`; an entry delivered
//! `max_deliveries` times without success goes to the dead-letter stream with the
//! error, and is acknowledged there. So no entry is lost, and none loops forever.
//! When the dead-letter stream has no room for it (its tenant's stream quota), it
//! stays pending, and once claimed again it is only offered to the dead-letter stream
//! again, not run: a run that fails every time would otherwise run at every reclaim
//! for as long as the quota stays full.
//!
//! The stream, the dead-letter stream and the group live in the workflow's tenant's
//! namespace (`t:<tenant>:<stream>`); the default group is the workflow's name, so two
//! workflows on one stream each see every entry.
//!
//! Each consumer reads on its own connection, whose response timeout outlasts the
//! blocking read, so neither waits behind the other's commands or guests' messages.
//!
//! **A run that found no capacity is not a delivery.** Redis counts a delivery each
//! time an entry is read or claimed. When no worker took the run (no replica), or the
//! entry step was refused an instance (`overloaded`) before any step succeeded, or any
//! step was refused one for want of the worker's slots, which every tenant shares (so
//! a later step of a workflow whose first ran too: those run again), the entry's
//! count is put back (`XCLAIM ... RETRYCOUNT <count - 1>`) and its idle time set so
//! that it is claimed again after [`NOT_STARTED_RETRY`] rather than `reclaim_idle_ms`.
//! So only runs that ran count towards `max_deliveries`, and a noisy neighbour cannot
//! push another tenant's entries to the dead-letter stream: they wait, pending, for
//! capacity. A later step refused for its own tenant's quota counts: that load is the
//! tenant's own.
//!
//! **What a batch holds is the tenant's.** A guest can append entries of up to
//! [`faas_invoke::MAX_MESSAGE_BYTES`], and a batch (up to 1,024 entries) is read and
//! run at once, so one tenant's consumers could hold gigabytes of the gateway every
//! tenant shares. So before it reads, a consumer reserves room for that many entries
//! of that size in its tenant's share of the message budget (`body_budget.rs`) and
//! reads only as many as fit, none while the share is held: the entries wait in Redis.
//! The reservation shrinks to what was read and is held until the batch's runs end.
//! Only the read that waits for new entries reserves nothing (so idle consumers do not
//! hold the share): it takes one entry, and puts it back, pending and uncounted, if
//! the share has no room for it once read.

use super::{RedisBroker, namespaced};
use crate::body_budget::{Holder, MESSAGE_OVERHEAD};
use crate::invoke::{MessageFailure, run_message};
use crate::metrics::WorkflowMetrics;
use crate::server::App;
use faas_invoke::TriggerMessage;
use faas_invoke::{EventFailure, FailureKind};
use faas_store::stream_groups::{self, StreamGroup};
use faas_store::stream_quota::AppendError;
use faas_workflow::StreamTrigger;
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::streams::{
    StreamAutoClaimOptions, StreamAutoClaimReply, StreamClaimOptions, StreamId,
    StreamInfoGroupsReply, StreamPendingCountReply, StreamReadOptions, StreamReadReply,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// How long one XREADGROUP waits for new entries before checking for reclaimable ones.
const BLOCK: Duration = Duration::from_millis(500);
/// How long the consumer's connection waits for any reply: well past [`BLOCK`], so a
/// blocking read that found nothing is never mistaken for a dead connection.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How soon an entry whose run never started is tried again.
const NOT_STARTED_RETRY: Duration = Duration::from_secs(1);
/// How often a consumer samples its group's lag for `faas_stream_lag_entries`.
const LAG_EVERY: Duration = Duration::from_secs(1);
/// How long a consumer waits before it looks again while its tenant's entries in flight
/// hold all of its share of the body budget.
const SHARE_HELD_WAIT: Duration = Duration::from_millis(50);

/// One stream trigger of a workflow, with its Redis keys.
struct Consumer {
    workflow: String,
    /// The workflow's tenant, whose quota trims the dead-letter stream.
    tenant: String,
    trigger: StreamTrigger,
    /// `trigger.stream` in the tenant's namespace.
    stream: String,
    /// `trigger.dead_letter` in the tenant's namespace.
    dead_letter: String,
    /// The workflow's series: dead letters and lag, labelled with `trigger.stream`.
    metrics: Arc<WorkflowMetrics>,
}

/// Consumes the `index`-th stream trigger of `workflow` until aborted, riding out
/// Redis restarts.
pub(super) async fn consume(app: Arc<App>, broker: RedisBroker, workflow: String, index: usize) {
    let Some(consumer) = app.registry.get(&workflow).and_then(|deployment| {
        let trigger = deployment.workflow.stream_triggers.get(index)?.clone();
        let tenant = &deployment.workflow.tenant;
        Some(Consumer {
            stream: namespaced(tenant, &trigger.stream),
            dead_letter: namespaced(tenant, &trigger.dead_letter),
            metrics: app.metrics.workflow(tenant, &workflow),
            tenant: tenant.clone(),
            workflow: workflow.clone(),
            trigger,
        })
    }) else {
        return;
    };
    let consumer = Arc::new(consumer);
    let mut connection = None;
    let mut backoff = Duration::from_millis(100);
    let mut group_ready = false;
    let renew_every = app
        .config
        .stream_group_idle
        .map_or(stream_groups::RENEW_EVERY, |idle| {
            (idle / 4).min(stream_groups::RENEW_EVERY)
        });
    let mut renew_due = Instant::now();
    let mut lag_due = Instant::now();
    loop {
        let result = async {
            let connection = match &mut connection {
                Some(connection) => connection,
                None => connection.insert(connect(&broker).await?),
            };
            if !group_ready || Instant::now() >= renew_due {
                create_group(connection, &consumer, app.config.stream_group_idle).await?;
                renew_due = Instant::now() + renew_every;
            }
            if !group_ready {
                group_ready = true;
                tracing::info!(
                    workflow,
                    stream = consumer.stream,
                    group = consumer.trigger.group,
                    "consuming"
                );
            }
            if Instant::now() >= lag_due {
                lag_due = Instant::now() + LAG_EVERY;
                let (pending, unread) = backlog(connection, &consumer).await?;
                let lag = pending.saturating_add(unread.unwrap_or(0));
                consumer
                    .metrics
                    .set_stream_lag(&consumer.trigger.stream, lag as u64);
            }
            round(&app, &broker, connection, &consumer).await
        }
        .await;
        match result {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(err) => {
                tracing::warn!(
                    stream = consumer.stream,
                    "stream consumer error, retrying in {backoff:?}: {err}"
                );
                // A restarted Redis without persistence has lost the group too.
                group_ready = false;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// A connection of this consumer's own, for its blocking reads and its acknowledgements.
async fn connect(broker: &RedisBroker) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new().set_response_timeout(Some(RESPONSE_TIMEOUT));
    broker
        .client()
        .get_connection_manager_with_config(config)
        .await
}

/// Creates the consumer group (and the stream) if missing, reading from the start so
/// entries appended before the first deploy are not skipped, and renews its stamp so
/// the sweep keeps it (`faas_store::stream_groups`).
async fn create_group(
    connection: &mut ConnectionManager,
    consumer: &Consumer,
    idle: Option<Duration>,
) -> redis::RedisResult<()> {
    let group = StreamGroup {
        stream: consumer.stream.clone(),
        group: consumer.trigger.group.clone(),
    };
    stream_groups::create(connection, &group, idle).await
}

/// The trigger's group's entries still to run: delivered and not acknowledged, and
/// not yet delivered (`None` when Redis cannot tell, as after entries were deleted).
async fn backlog(
    connection: &mut ConnectionManager,
    consumer: &Consumer,
) -> redis::RedisResult<(usize, Option<usize>)> {
    let groups: StreamInfoGroupsReply = connection.xinfo_groups(&consumer.stream).await?;
    Ok(groups
        .groups
        .iter()
        .find(|group| group.name == consumer.trigger.group)
        .map_or((0, Some(0)), |group| (group.pending, group.lag)))
}

/// Whether the trigger's group has entries to run. A lag Redis cannot tell counts as a
/// backlog.
async fn has_backlog(
    connection: &mut ConnectionManager,
    consumer: &Consumer,
) -> redis::RedisResult<bool> {
    let (pending, unread) = backlog(connection, consumer).await?;
    Ok(pending > 0 || unread.is_none_or(|unread| unread > 0))
}

/// One batch: reclaimed idle entries first, else new ones; processed concurrently.
async fn round(
    app: &Arc<App>,
    broker: &RedisBroker,
    connection: &mut ConnectionManager,
    consumer: &Arc<Consumer>,
) -> redis::RedisResult<()> {
    let trigger = &consumer.trigger;
    // Entries taken while no worker can run them would only fail and wait for a
    // reclaim: leave them in the stream until a replica is ready. When some wait, the
    // activator asks for a worker (its workers may be scaled to zero).
    if app
        .registry
        .get(&consumer.workflow)
        .is_none_or(|deployment| deployment.replicas.is_empty())
    {
        if let Some(activator) = &app.activator
            && has_backlog(connection, consumer).await?
        {
            activator.signal_demand(&consumer.workflow);
        }
        tokio::time::sleep(BLOCK).await;
        return Ok(());
    }
    let entry_room = faas_invoke::MAX_MESSAGE_BYTES as u64 + MESSAGE_OVERHEAD;
    let mut held = app.messages.claim(Holder::Tenant(consumer.tenant.clone()));
    let room = held.grow_by_units(entry_room, u64::from(trigger.batch)) as usize;
    if room == 0 {
        tokio::time::sleep(SHARE_HELD_WAIT).await;
        return Ok(());
    }
    let claimed: StreamAutoClaimReply = connection
        .xautoclaim_options(
            &consumer.stream,
            &trigger.group,
            broker.consumer(),
            trigger.reclaim_idle_ms,
            "0-0",
            StreamAutoClaimOptions::default().count(room),
        )
        .await?;
    let mut entries = claimed.claimed;
    // An entry XAUTOCLAIM took may have been delivered any number of times (Redis has
    // the count); one XREADGROUP's `>` hands out is delivered for the first time.
    let delivered = if entries.is_empty() {
        Delivered::First
    } else {
        Delivered::Claimed
    };
    if entries.is_empty() {
        entries = read_new(connection, broker, consumer, room, None).await?;
    }
    if entries.is_empty() {
        held.shrink_to(0);
        entries = read_new(connection, broker, consumer, 1, Some(BLOCK)).await?;
    }
    // What was read, rather than the room for it. The blocking read's entry was read
    // with no room held: if its tenant's share has none for it now (a tenant has up to
    // 64 consumers), it goes back, pending and uncounted, until there is.
    let bytes: u64 = entries
        .iter()
        .map(|entry| entry_bytes(entry) + MESSAGE_OVERHEAD)
        .sum();
    if held.grow_to(bytes).is_err() && matches!(delivered, Delivered::First) {
        for entry in &entries {
            uncount(connection, broker, consumer, &entry.id, 1).await?;
        }
        tokio::time::sleep(SHARE_HELD_WAIT).await;
        return Ok(());
    }
    held.shrink_to(bytes);
    let mut tasks = JoinSet::new();
    for entry in entries {
        let (app, broker) = (app.clone(), broker.clone());
        let (connection, consumer) = (connection.clone(), consumer.clone());
        tasks.spawn(async move {
            process(&app, &broker, connection, &consumer, entry, delivered).await
        });
    }
    let mut first_error = None;
    let mut unavailable = false;
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Err(err)) => {
                first_error.get_or_insert(err);
            }
            Ok(Ok(Settled::Uncounted)) => unavailable = true,
            _ => {}
        }
    }
    drop(held);
    if unavailable {
        // No worker could run the entries: give the scheduler time to place the
        // workflow again, or the worker time to free slots, rather than failing entry
        // after entry.
        tokio::time::sleep(BLOCK).await;
    }
    first_error.map_or(Ok(()), Err)
}

/// Reads up to `count` new entries for `consumer`, waiting up to `block` for one.
async fn read_new(
    connection: &mut ConnectionManager,
    broker: &RedisBroker,
    consumer: &Consumer,
    count: usize,
    block: Option<Duration>,
) -> redis::RedisResult<Vec<StreamId>> {
    let mut options = StreamReadOptions::default()
        .group(&consumer.trigger.group, broker.consumer())
        .count(count);
    if let Some(block) = block {
        options = options.block(block.as_millis() as usize);
    }
    let reply: Option<StreamReadReply> = connection
        .xread_options(&[&consumer.stream], &[">"], &options)
        .await?;
    Ok(reply
        .map(|reply| reply.keys.into_iter().flat_map(|key| key.ids).collect())
        .unwrap_or_default())
}

/// The bytes of `entry`'s fields and values, as read.
fn entry_bytes(entry: &StreamId) -> u64 {
    let value_bytes = |value: &redis::Value| match value {
        redis::Value::BulkString(bytes) => bytes.len(),
        redis::Value::SimpleString(text) => text.len(),
        _ => 0,
    };
    entry
        .map
        .iter()
        .map(|(field, value)| (field.len() + value_bytes(value)) as u64)
        .sum()
}

/// How an entry was settled.
enum Settled {
    /// Acknowledged, after success or in the dead-letter stream.
    Done,
    /// Left pending: the run failed; it is tried again once reclaimed.
    Pending,
    /// Left pending, its delivery not counted: the run found no capacity (no worker,
    /// or no instance slot; [`MessageFailure::uncounted`]).
    Uncounted,
}

/// How an entry came to this consumer, which says whether its delivery count must be
/// asked of Redis.
#[derive(Clone, Copy)]
enum Delivered {
    /// Read as new (`XREADGROUP ... >`): this is its first delivery.
    First,
    /// Claimed while pending (`XAUTOCLAIM`): delivered before, as often as Redis says.
    Claimed,
}

/// Runs the workflow on one entry and settles it: acknowledge on success, put it back
/// uncounted if the run never started, leave it pending for a retry, or dead-letter it
/// after too many deliveries.
async fn process(
    app: &Arc<App>,
    broker: &RedisBroker,
    mut connection: ConnectionManager,
    consumer: &Consumer,
    entry: StreamId,
    delivered: Delivered,
) -> redis::RedisResult<Settled> {
    let (workflow, trigger) = (consumer.workflow.as_str(), &consumer.trigger);
    // A new entry's count is known: asking would cost a round trip to Redis per entry.
    let delivery_count = match delivered {
        Delivered::First => 1,
        Delivered::Claimed => {
            let pending: StreamPendingCountReply = connection
                .xpending_count(&consumer.stream, &trigger.group, &entry.id, &entry.id, 1)
                .await?;
            pending
                .ids
                .first()
                .map_or(1, |pending| pending.times_delivered.max(1) as u32)
        }
    };
    let payload: Option<Vec<u8>> = entry.get("payload");
    let result = match payload.clone() {
        // Past its last delivery: it ran that many times without success, and was left
        // pending (the dead-letter stream had no room, or the gateway stopped).
        Some(_) if delivery_count > trigger.max_deliveries => Err(MessageFailure {
            failure: EventFailure::new(
                FailureKind::StepFailed,
                500,
                format!(
                    "delivered {} times without success (not run again; the dead-letter \
                     stream had no room for it then)",
                    trigger.max_deliveries
                ),
            ),
            uncounted: false,
        }),
        None => Err(MessageFailure {
            failure: EventFailure::new(
                FailureKind::BadMessage,
                400,
                "the entry has no `payload` field",
            ),
            uncounted: false,
        }),
        Some(payload) => {
            let message = TriggerMessage {
                source: trigger.stream.clone(),
                id: entry.id.clone(),
                delivery_count,
            };
            let traceparent: Option<String> = entry.get(faas_invoke::trace::TRACEPARENT);
            let tenant = &consumer.tenant;
            run_message(
                app,
                tenant,
                workflow,
                payload,
                message,
                traceparent.as_deref(),
            )
            .await
        }
    };
    let error = match result {
        Ok(()) => {
            let _: i64 = connection
                .xack(&consumer.stream, &trigger.group, &[&entry.id])
                .await?;
            return Ok(Settled::Done);
        }
        Err(MessageFailure {
            failure,
            uncounted: true,
        }) => {
            tracing::info!(
                workflow,
                stream = consumer.stream,
                id = entry.id,
                detail = ?faas_invoke::log_excerpt(&failure.message),
                "the run found no capacity; the entry stays pending, uncounted"
            );
            uncount(&mut connection, broker, consumer, &entry.id, delivery_count).await?;
            return Ok(Settled::Uncounted);
        }
        Err(MessageFailure { failure, .. }) => failure,
    };
    if delivery_count < trigger.max_deliveries && payload.is_some() {
        tracing::info!(
            workflow,
            stream = consumer.stream,
            id = entry.id,
            delivery_count,
            detail = ?faas_invoke::log_excerpt(&error.message),
            "run failed; the entry stays pending for a retry"
        );
        return Ok(Settled::Pending);
    }
    tracing::warn!(
        workflow,
        stream = consumer.stream,
        id = entry.id,
        delivery_count,
        detail = ?faas_invoke::log_excerpt(&error.message),
        "dead-lettering to `{}`",
        consumer.dead_letter
    );
    // Runs, not claims: an entry claimed again only to be offered here ran no more.
    let deliveries = delivery_count.min(trigger.max_deliveries).to_string();
    let payload = payload.unwrap_or_default();
    let fields: [(&str, &[u8]); 5] = [
        ("payload", &payload),
        ("error", error.message.as_bytes()),
        ("source_id", entry.id.as_bytes()),
        ("deliveries", deliveries.as_bytes()),
        ("workflow", workflow.as_bytes()),
    ];
    match broker
        .append_within_quota(&consumer.tenant, &trigger.dead_letter, &fields)
        .await
    {
        Ok(_) => {}
        Err(AppendError::Redis(err)) => return Err(err),
        Err(quota @ AppendError::Quota { .. }) => {
            // Not acknowledged, so not lost: it is reclaimed, run and offered to the
            // dead-letter stream again, which may have room by then.
            tracing::warn!(
                workflow,
                stream = consumer.stream,
                id = entry.id,
                "the entry stays pending: {quota}"
            );
            return Ok(Settled::Pending);
        }
    }
    let _: i64 = connection
        .xack(&consumer.stream, &trigger.group, &[&entry.id])
        .await?;
    consumer.metrics.dead_lettered(&trigger.stream);
    Ok(Settled::Done)
}

/// Takes back the delivery that reading entry `id` counted, and makes the entry
/// claimable again after [`NOT_STARTED_RETRY`] (its idle time is set to that much less
/// than `reclaim_idle_ms`).
async fn uncount(
    connection: &mut ConnectionManager,
    broker: &RedisBroker,
    consumer: &Consumer,
    id: &str,
    delivery_count: u32,
) -> redis::RedisResult<()> {
    let idle = consumer
        .trigger
        .reclaim_idle()
        .saturating_sub(NOT_STARTED_RETRY);
    let options = StreamClaimOptions::default()
        .idle(idle.as_millis() as usize)
        .retry(delivery_count.saturating_sub(1) as usize)
        .with_justid();
    let _: redis::Value = connection
        .xclaim_options(
            &consumer.stream,
            &consumer.trigger.group,
            broker.consumer(),
            0,
            &[id],
            options,
        )
        .await?;
    Ok(())
}
