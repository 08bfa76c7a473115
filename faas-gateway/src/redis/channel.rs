//! Pub/sub triggers: every message on the channel starts a run (at-most-once, as in
//! Spin: a message published while nobody listens is gone).

use super::RedisBroker;
use crate::invoke::run_message;
use crate::server::App;
use faas_worker::TriggerMessage;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Runs started from one channel at once, at most; the subscription waits beyond that.
const MAX_RUNS_IN_FLIGHT: usize = 256;

/// Subscribes to `channel` for `workflow` until aborted, reconnecting with backoff
/// when Redis goes away.
pub(super) async fn consume(app: Arc<App>, broker: RedisBroker, workflow: String, channel: String) {
    let in_flight = Arc::new(Semaphore::new(MAX_RUNS_IN_FLIGHT));
    let mut backoff = Duration::from_millis(100);
    loop {
        match subscribe(&app, &broker, &workflow, &channel, &in_flight, &mut backoff).await {
            Ok(()) => tracing::warn!(channel, "subscription ended; resubscribing"),
            Err(err) => tracing::warn!(
                channel,
                "subscription failed, retrying in {backoff:?}: {err}"
            ),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

async fn subscribe(
    app: &Arc<App>,
    broker: &RedisBroker,
    workflow: &str,
    channel: &str,
    in_flight: &Arc<Semaphore>,
    backoff: &mut Duration,
) -> redis::RedisResult<()> {
    let mut pubsub = broker.client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    tracing::info!(workflow, channel, "subscribed");
    *backoff = Duration::from_millis(100);
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        let payload: Vec<u8> = message.get_payload()?;
        let permit = in_flight
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        let (app, workflow, channel) = (app.clone(), workflow.to_owned(), channel.to_owned());
        tokio::spawn(async move {
            let message = TriggerMessage {
                source: channel.clone(),
                id: String::new(),
                delivery_count: 1,
            };
            if let Err(err) = run_message(&app, &workflow, payload, message).await {
                tracing::warn!(workflow, channel, "run from pub/sub message failed: {err}");
            }
            drop(permit);
        });
    }
    Ok(())
}
