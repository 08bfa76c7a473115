//! Pub/sub triggers: every message on the channel starts one run in the whole cluster,
//! however many gateways follow the workflow.
//!
//! Each gateway keeps a consumer task per channel trigger, but only the one holding the
//! trigger's lease (`faas:lease:channel:<workflow>:t:<tenant>:<channel>`, see
//! `lease.rs`) subscribes; the others try to take the lease every second. The holder
//! renews it every second for three; it stops subscribing, and runs no message it
//! received, once its own view of the lease ends (a renewal refused, failed, or late),
//! which is before Redis lets anyone else take it over.
//!
//! So the guarantee is: **at most one run per published message in the cluster**, and
//! exactly one for every message published while a gateway holds the lease and is
//! subscribed. Pub/sub itself is at-most-once (as in Spin): a message published while
//! no gateway is subscribed is gone, which happens during a lease takeover (up to about
//! four seconds after the holder died, or while a redeployed workflow's new task takes
//! the lease over from the old one) and while Redis is unreachable. A run that fails is
//! not retried. Two runs of one message would need a holder whose process stalls for
//! longer than the lease (three seconds) between the check and the run's start, with
//! Redis's clock running that much faster than the gateway's. Use a stream trigger when
//! messages must not be lost.
//!
//! Messages arrive as fast as they are published, whatever the runs keep up with (the
//! Redis client reads them into a queue without bound), so the subscription is read on
//! at once: a message waits here for one of the channel's runs in flight, and it and
//! its run hold its bytes against its tenant's share of the body budget
//! (`body_budget.rs`). A message that does not fit is dropped, and the tenant's logs
//! say how many were (at most a line a second), so a tenant's guests publishing faster
//! than its runs take their messages cannot fill the gateway's memory. So are the
//! messages still waiting for a run when the lease ends: running them then could run
//! them twice.

use super::RedisBroker;
use super::lease::{Lease, RENEW_EVERY};
use crate::body_budget::{Claim, Holder, MESSAGE_OVERHEAD, OverBudget};
use crate::invoke::{log_dropped_message, log_dropped_messages, message_runtime, run_message};
use crate::server::App;
use faas_invoke::TriggerMessage;
use futures_util::StreamExt;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Runs started from one channel at once, at most; more messages wait for one.
const MAX_RUNS_IN_FLIGHT: usize = 256;

/// One channel trigger of one workflow.
struct Trigger {
    workflow: String,
    /// The workflow's tenant, who holds its messages.
    tenant: String,
    /// The channel as the workflow names it (what the run's message says).
    channel: String,
    /// Its Redis key, in the tenant's namespace.
    key: String,
}

/// Follows `channel` of `tenant` for `workflow` until aborted: subscribes while this
/// gateway holds the trigger's lease, contends for it otherwise, and rides out Redis
/// going away.
pub(super) async fn consume(
    app: Arc<App>,
    broker: RedisBroker,
    workflow: String,
    tenant: String,
    channel: String,
) {
    let key = super::namespaced(&tenant, &channel);
    let mut lease = Lease::new(
        format!("faas:lease:channel:{workflow}:{key}"),
        broker.consumer(),
        broker.connection(),
    );
    let trigger = Trigger {
        workflow,
        tenant,
        channel,
        key,
    };
    let in_flight = Arc::new(Semaphore::new(MAX_RUNS_IN_FLIGHT));
    let mut dropped = Dropped::default();
    let mut backoff = Duration::from_millis(100);
    loop {
        let result = match lease.take_or_renew().await {
            Ok(Some(until)) => {
                let served = serve(
                    &app,
                    &broker,
                    &mut lease,
                    until,
                    &trigger,
                    &in_flight,
                    &mut dropped,
                )
                .await;
                // What was dropped since the last report, before the lease went.
                dropped.report(&app, &trigger);
                served
            }
            Ok(None) => Ok(()),
            Err(err) => Err(err),
        };
        match result {
            Ok(()) => {
                backoff = Duration::from_millis(100);
                tokio::time::sleep(RENEW_EVERY).await;
            }
            Err(err) => {
                tracing::warn!(
                    channel = trigger.key,
                    "subscription failed, retrying in {backoff:?}: {err}"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Subscribes and starts a run per message while the lease, held until `until`, is
/// renewed; returns when it is lost (or the subscription ends). Messages dropped (for
/// want of budget, or still waiting for a run when it returns) are counted in
/// `dropped`, and reported every second.
async fn serve(
    app: &Arc<App>,
    broker: &RedisBroker,
    lease: &mut Lease,
    mut until: Instant,
    trigger: &Trigger,
    in_flight: &Arc<Semaphore>,
    dropped: &mut Dropped,
) -> redis::RedisResult<()> {
    let mut pubsub = broker.client().get_async_pubsub().await?;
    pubsub.subscribe(&trigger.key).await?;
    tracing::info!(
        workflow = trigger.workflow,
        channel = trigger.key,
        "subscribed"
    );
    let mut messages = pubsub.on_message();
    let mut waiting: VecDeque<(Vec<u8>, Claim)> = VecDeque::new();
    let mut renew = tokio::time::interval_at(Instant::now() + RENEW_EVERY, RENEW_EVERY);
    let served: redis::RedisResult<()> = async {
        loop {
            tokio::select! {
                _ = renew.tick() => {
                    dropped.report(app, trigger);
                    match lease.take_or_renew().await? {
                        Some(renewed) => until = renewed,
                        None => {
                            tracing::info!(channel = trigger.key, "another gateway took the lease over");
                            return Ok(());
                        }
                    }
                }
                () = tokio::time::sleep_until(until) => {
                    tracing::warn!(channel = trigger.key, "the lease ran out before it was renewed");
                    return Ok(());
                }
                permit = in_flight.clone().acquire_owned(), if !waiting.is_empty() => {
                    // Waiting for a permit may have outlasted the lease: then another
                    // gateway may be running the channel's messages already.
                    if Instant::now() >= until {
                        return Ok(());
                    }
                    let (payload, claim) = waiting.pop_front().expect("a message waits");
                    start_run(app, trigger, payload, claim, permit.expect("never closed"));
                }
                message = messages.next() => {
                    let Some(message) = message else {
                        tracing::warn!(channel = trigger.key, "subscription ended");
                        return Ok(());
                    };
                    let payload: Vec<u8> = message.get_payload()?;
                    let mut claim = app.messages.claim(Holder::Tenant(trigger.tenant.clone()));
                    if let Err(over) = claim.grow_to(payload.len() as u64 + MESSAGE_OVERHEAD) {
                        dropped.note(over);
                        continue;
                    }
                    match in_flight.clone().try_acquire_owned() {
                        Ok(permit) if waiting.is_empty() && Instant::now() < until => {
                            start_run(app, trigger, payload, claim, permit);
                        }
                        _ => waiting.push_back((payload, claim)),
                    }
                }
            }
        }
    }
    .await;
    // However it ended, the lease may be another gateway's by now, and that one may be
    // running the channel's messages: those still waiting here are not run, but said.
    dropped.lease_ended(waiting.len());
    served
}

/// Starts the run of a message's `payload`, holding `permit` and the message's `claim`
/// until it ends.
fn start_run(
    app: &Arc<App>,
    trigger: &Trigger,
    payload: Vec<u8>,
    claim: Claim,
    permit: OwnedSemaphorePermit,
) {
    let app = app.clone();
    let (tenant, workflow) = (trigger.tenant.clone(), trigger.workflow.clone());
    let channel = trigger.channel.clone();
    message_runtime(&app, &workflow).spawn(async move {
        let message = TriggerMessage {
            source: channel.clone(),
            id: String::new(),
            delivery_count: 1,
        };
        if let Err(err) = run_message(&app, &tenant, &workflow, payload, message, None).await {
            let message = faas_invoke::log_excerpt(&err.failure.message);
            tracing::warn!(
                workflow,
                channel,
                kind = err.failure.kind.as_str(),
                detail = ?message,
                "run from pub/sub message failed"
            );
            // A run that started was reported by its worker; this one
            // never reached one, and the message is gone.
            if err.uncounted && err.failure.is_unavailable() {
                log_dropped_message(&app, (&tenant, &workflow), &channel, &err.failure);
            }
        }
        drop((permit, claim));
    });
}

/// The messages of a channel dropped since the tenant's logs last said so: for want
/// of budget (and why the last one was), and because the lease ended while they waited
/// for a run.
#[derive(Default)]
struct Dropped {
    count: u64,
    why: Option<OverBudget>,
    lease_ended: u64,
}

impl Dropped {
    fn note(&mut self, over: OverBudget) {
        self.count += 1;
        self.why = Some(over);
    }

    /// Counts `count` messages that waited for a run when the lease ended.
    fn lease_ended(&mut self, count: usize) {
        self.lease_ended += count as u64;
    }

    /// Tells the tenant, in its workflow's logs, how many were dropped and why.
    fn report(&mut self, app: &App, trigger: &Trigger) {
        let owner = (trigger.tenant.as_str(), trigger.workflow.as_str());
        let lease_ended = std::mem::take(&mut self.lease_ended);
        if lease_ended > 0 {
            let why = "this gateway's lease on the channel ended before their runs \
                       started, and a message runs at most once (another gateway may follow \
                       the channel now)";
            tracing::warn!(
                workflow = trigger.workflow,
                channel = trigger.key,
                count = lease_ended,
                "pub/sub messages dropped: {why}"
            );
            log_dropped_messages(app, owner, &trigger.channel, lease_ended, why);
        }
        let Some(why) = self.why.take() else {
            return;
        };
        let why = match why {
            OverBudget::Share { limit } => format!(
                "the gateway held {} MiB of this tenant's messages, waiting for their \
                 runs or in them, its share (--tenant-message-budget-mb)",
                limit >> 20
            ),
            OverBudget::Total { limit } => format!(
                "the gateway held {} MiB of all tenants' messages, its budget \
                 (--message-budget-mb)",
                limit >> 20
            ),
        };
        let count = std::mem::take(&mut self.count);
        tracing::warn!(
            workflow = trigger.workflow,
            channel = trigger.key,
            count,
            "pub/sub messages dropped: {why}"
        );
        log_dropped_messages(app, owner, &trigger.channel, count, &why);
    }
}
