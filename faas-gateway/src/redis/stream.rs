//! Stream triggers: a consumer group reads the stream; an entry is acknowledged only
//! after its run succeeded. Entries left pending (a failed run, or a consumer that
//! died) are claimed again once idle for `reclaim_idle_ms`; an entry delivered
//! `max_deliveries` times without success goes to the dead-letter stream with the
//! error, and is acknowledged there. So no entry is lost, and none loops forever.

use super::RedisBroker;
use crate::invoke::run_message;
use crate::server::App;
use faas_worker::TriggerMessage;
use faas_worker::remote::EventFailure;
use faas_workflow::StreamTrigger;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use redis::streams::{
    StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamPendingCountReply,
    StreamReadOptions, StreamReadReply,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// How long one XREADGROUP waits for new entries before checking for reclaimable ones.
const BLOCK: Duration = Duration::from_millis(500);

/// Consumes the `index`-th stream trigger of `workflow` until aborted, riding out
/// Redis restarts.
pub(super) async fn consume(app: Arc<App>, broker: RedisBroker, workflow: String, index: usize) {
    let Some(trigger) = app
        .registry
        .get(&workflow)
        .and_then(|deployment| deployment.workflow.stream_triggers.get(index).cloned())
    else {
        return;
    };
    let mut connection = broker.connection.clone();
    let mut backoff = Duration::from_millis(100);
    let mut group_ready = false;
    loop {
        let result = async {
            if !group_ready {
                create_group(&mut connection, &trigger).await?;
                group_ready = true;
                tracing::info!(
                    workflow,
                    stream = trigger.stream,
                    group = trigger.group,
                    "consuming"
                );
            }
            round(&app, &broker, &mut connection, &workflow, &trigger).await
        }
        .await;
        match result {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(err) => {
                tracing::warn!(
                    stream = trigger.stream,
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

/// Creates the consumer group (and the stream) if missing, reading from the start so
/// entries appended before the first deploy are not skipped.
async fn create_group(
    connection: &mut ConnectionManager,
    trigger: &StreamTrigger,
) -> redis::RedisResult<()> {
    match connection
        .xgroup_create_mkstream::<_, _, _, ()>(&trigger.stream, &trigger.group, "0")
        .await
    {
        Err(err) if err.code() == Some("BUSYGROUP") => Ok(()),
        other => other,
    }
}

/// One batch: reclaimed idle entries first, else new ones; processed concurrently.
async fn round(
    app: &Arc<App>,
    broker: &RedisBroker,
    connection: &mut ConnectionManager,
    workflow: &str,
    trigger: &StreamTrigger,
) -> redis::RedisResult<()> {
    // Entries taken while no worker can run them would only fail and wait for a
    // reclaim: leave them in the stream until a replica is ready.
    if app
        .registry
        .get(workflow)
        .is_none_or(|deployment| deployment.replicas.is_empty())
    {
        tokio::time::sleep(BLOCK).await;
        return Ok(());
    }
    let claimed: StreamAutoClaimReply = connection
        .xautoclaim_options(
            &trigger.stream,
            &trigger.group,
            &broker.consumer,
            trigger.reclaim_idle_ms,
            "0-0",
            StreamAutoClaimOptions::default().count(trigger.batch as usize),
        )
        .await?;
    let mut entries = claimed.claimed;
    if entries.is_empty() {
        let options = StreamReadOptions::default()
            .group(&trigger.group, &broker.consumer)
            .count(trigger.batch as usize)
            .block(BLOCK.as_millis() as usize);
        let reply: Option<StreamReadReply> = connection
            .xread_options(&[&trigger.stream], &[">"], &options)
            .await?;
        entries = reply
            .map(|reply| reply.keys.into_iter().flat_map(|key| key.ids).collect())
            .unwrap_or_default();
    }
    let mut tasks = JoinSet::new();
    for entry in entries {
        let (app, connection) = (app.clone(), connection.clone());
        let (workflow, trigger) = (workflow.to_owned(), trigger.clone());
        tasks.spawn(async move { process(&app, connection, &workflow, &trigger, entry).await });
    }
    let mut first_error = None;
    let mut unavailable = false;
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Err(err)) => {
                first_error.get_or_insert(err);
            }
            Ok(Ok(Settled::Unavailable)) => unavailable = true,
            _ => {}
        }
    }
    if unavailable {
        // The worker went away: give the scheduler time to place the workflow again
        // rather than failing entry after entry.
        tokio::time::sleep(BLOCK).await;
    }
    first_error.map_or(Ok(()), Err)
}

/// How an entry was settled.
enum Settled {
    /// Acknowledged, after success or in the dead-letter stream.
    Done,
    /// Left pending: the run failed; it is tried again once reclaimed.
    Pending,
    /// Left pending because no worker could take it (no step ran).
    Unavailable,
}

/// Runs the workflow on one entry and settles it: acknowledge on success, leave it
/// pending for a retry, or dead-letter it after too many deliveries.
async fn process(
    app: &Arc<App>,
    mut connection: ConnectionManager,
    workflow: &str,
    trigger: &StreamTrigger,
    entry: StreamId,
) -> redis::RedisResult<Settled> {
    let pending: StreamPendingCountReply = connection
        .xpending_count(&trigger.stream, &trigger.group, &entry.id, &entry.id, 1)
        .await?;
    let delivery_count = pending
        .ids
        .first()
        .map_or(1, |pending| pending.times_delivered.max(1) as u32);
    let payload: Option<Vec<u8>> = entry.get("payload");
    let result = match payload.clone() {
        None => Err(EventFailure {
            kind: "bad_message".to_owned(),
            status: 400,
            message: "the entry has no `payload` field".to_owned(),
            function: None,
        }),
        Some(payload) => {
            let message = TriggerMessage {
                source: trigger.stream.clone(),
                id: entry.id.clone(),
                delivery_count,
            };
            run_message(app, workflow, payload, message).await
        }
    };
    match result {
        Ok(()) => {
            let _: i64 = connection
                .xack(&trigger.stream, &trigger.group, &[&entry.id])
                .await?;
            Ok(Settled::Done)
        }
        Err(error) if error.is_unavailable() => {
            tracing::info!(
                workflow,
                stream = trigger.stream,
                id = entry.id,
                "no worker took the entry; it stays pending: {error}"
            );
            Ok(Settled::Unavailable)
        }
        Err(error) if delivery_count >= trigger.max_deliveries || payload.is_none() => {
            tracing::warn!(
                workflow,
                stream = trigger.stream,
                id = entry.id,
                delivery_count,
                "dead-lettering to `{}`: {error}",
                trigger.dead_letter
            );
            let fields: [(&str, Vec<u8>); 5] = [
                ("payload", payload.unwrap_or_default()),
                ("error", error.message.into_bytes()),
                ("source_id", entry.id.clone().into_bytes()),
                ("deliveries", delivery_count.to_string().into_bytes()),
                ("workflow", workflow.as_bytes().to_vec()),
            ];
            let _: String = connection.xadd(&trigger.dead_letter, "*", &fields).await?;
            let _: i64 = connection
                .xack(&trigger.stream, &trigger.group, &[&entry.id])
                .await?;
            Ok(Settled::Done)
        }
        Err(error) => {
            tracing::info!(
                workflow,
                stream = trigger.stream,
                id = entry.id,
                delivery_count,
                "run failed; the entry stays pending for a retry: {error}"
            );
            Ok(Settled::Pending)
        }
    }
}
