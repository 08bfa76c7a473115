//! The activator (services mode): an event for a deployed workflow that has no ready
//! replica (its workers scaled to zero, or not loaded yet) is held instead of failed.
//! Each workflow holds at most `queue` events; one more is refused at once with 503
//! and `Retry-After`, and a held event that waits longer than `timeout` gets the same.
//! While events wait, the gateway signals demand for the workflow in the shared state
//! (`faas:demand`, at most once a second per workflow) so that whoever scales the
//! workers (the Kubernetes operator) brings one up. Waiters wake on the registry's
//! change notification, which the follower of the shared state sends when a replica
//! has loaded, and go on with the deployment as it then is.
//!
//! The activator also keeps when each workflow last had an event, in memory on the
//! request path; [`flush_activity`] writes them to `faas:activity` in one batch a
//! second, so no event waits on Redis for it.

use crate::metrics::WorkflowMetrics;
use crate::registry::Deployment;
use crate::response::{self, Body};
use crate::server::App;
use faas_invoke::EventFailure;
use faas_scheduler::WorkflowKey;
use faas_shared_state::SharedState;
use http::{HeaderValue, Response, StatusCode, header};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Default of how many events one workflow may hold (`--activator-queue`).
pub const DEFAULT_QUEUE: usize = 100;
/// Default of how long a held event waits for a replica (`--activator-timeout-ms`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often demand is signalled again while events wait: often enough that a
/// demand cleared too early (or lost with Redis) comes back soon, rarely enough that
/// a burst costs one write.
const DEMAND_EVERY: Duration = Duration::from_secs(1);
/// How often the last-event times are written to the shared state.
const ACTIVITY_EVERY: Duration = Duration::from_secs(1);
/// What a refused event's `Retry-After` says, in seconds: a worker starting from zero
/// takes a few seconds, and a full queue drains as soon as one is ready.
const RETRY_AFTER_SECS: u64 = 2;

/// How the activator holds events.
#[derive(Debug, Clone, Copy)]
pub struct ActivatorConfig {
    /// How many events one workflow may hold at once (default [`DEFAULT_QUEUE`]).
    pub queue: usize,
    /// How long a held event waits for a ready replica (default [`DEFAULT_TIMEOUT`]).
    pub timeout: Duration,
}

impl Default for ActivatorConfig {
    fn default() -> Self {
        Self {
            queue: DEFAULT_QUEUE,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// The events of one workflow waiting now.
#[derive(Default)]
struct Waiting {
    held: usize,
    /// When demand was last signalled for it.
    signalled: Option<Instant>,
}

/// Holds events for workflows with no ready replica, and keeps their activity.
pub(crate) struct Activator {
    config: ActivatorConfig,
    shared: SharedState,
    /// Workflow name -> unix ms of its last event, not yet written to Redis.
    last_events: Mutex<HashMap<String, u64>>,
    waiting: Mutex<HashMap<String, Waiting>>,
}

/// Why a held event was not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The workflow already holds as many events as it may.
    Full { queue: usize },
    /// No replica became ready in time.
    Timeout { waited: Duration },
    /// The workflow was removed while the event waited.
    Removed,
}

/// When a held event looks for a replica (see [`Activator::hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// At once, then after each change to the deployments.
    Now,
    /// The replicas found last could not be reached: after a change, or after this
    /// pause without one. A worker may come back under the same name (its
    /// registration lost with Redis, its pod restarted) and load the workflow again
    /// with nothing in the gateway's view changing, so waiting for a change alone
    /// could wait for ever.
    Again(Duration),
}

#[derive(Serialize)]
struct RefusalDetails<'a> {
    workflow: &'a str,
}

impl Refusal {
    pub(crate) fn message(self, workflow: &str) -> String {
        match self {
            Self::Full { queue } => format!(
                "workflow `{workflow}` has no replica ready and already holds {queue} events \
                 waiting for one; retry later"
            ),
            Self::Timeout { waited } => format!(
                "workflow `{workflow}` had no replica ready within {} ms (its worker is \
                 starting); retry later",
                waited.as_millis()
            ),
            Self::Removed => {
                format!("workflow `{workflow}` was removed while the event waited for a worker")
            }
        }
    }

    /// The HTTP response: 503 with `Retry-After` (404 when the workflow went away).
    pub(crate) fn response(self, workflow: &str) -> Response<Body> {
        let details = RefusalDetails { workflow };
        if self == Self::Removed {
            return response::error_with(
                StatusCode::NOT_FOUND,
                "no_route",
                self.message(workflow),
                details,
            );
        }
        let mut response = response::error_with(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            self.message(workflow),
            details,
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        response
    }

    /// The failure of a run started by a message (which nothing ran).
    pub(crate) fn failure(self, workflow: &str) -> EventFailure {
        EventFailure::unavailable(self.message(workflow))
    }
}

/// One held event's place in its workflow's queue; settles its outcome when dropped
/// (`cancelled` if the event stopped waiting without one: its client hung up).
struct Slot<'a> {
    activator: &'a Activator,
    app: &'a App,
    workflow: &'a str,
    /// The workflow's series, whose held-events gauge counts this one.
    metrics: Arc<WorkflowMetrics>,
    outcome: &'static str,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut waiting = self.activator.lock_waiting();
        if let Some(entry) = waiting.get_mut(self.workflow) {
            entry.held = entry.held.saturating_sub(1);
            // Kept while its last signal is recent, so a new wait soon after does not
            // signal again at once.
            if entry.held == 0
                && entry
                    .signalled
                    .is_none_or(|at| at.elapsed() >= DEMAND_EVERY)
            {
                waiting.remove(self.workflow);
            }
        }
        drop(waiting);
        self.metrics.held(-1);
        self.app.metrics.activator_outcome(self.outcome);
    }
}

impl Activator {
    /// An activator signalling demand and recording activity in `shared`.
    pub(crate) fn new(config: ActivatorConfig, shared: SharedState) -> Self {
        Self {
            config,
            shared,
            last_events: Mutex::default(),
            waiting: Mutex::default(),
        }
    }

    /// Notes that `workflow` had an event now (written out by [`flush_activity`]).
    pub(crate) fn note_event(&self, workflow: &str) {
        let now = unix_millis();
        let mut last_events = self.lock_last_events();
        match last_events.get_mut(workflow) {
            Some(at) => *at = now,
            None => {
                last_events.insert(workflow.to_owned(), now);
            }
        }
    }

    /// When a held event that starts waiting now stops waiting for good.
    pub(crate) fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.config.timeout
    }

    /// Waits until `resolve` (what the event would go to now) finds a deployment of
    /// the workflow `key` with a replica the event can go to (`usable`), holding the
    /// event in its queue meanwhile, and returns what it found. Any other deployment
    /// found counts as none: were its route or name another workflow's by then,
    /// perhaps another tenant's, the event (and its credentials) would go there. [`Look::Now`] looks at once and then
    /// after every change to the deployments; [`Look::Again`] (the replicas just found
    /// could not be reached) looks only after a change or the given pause, whichever
    /// comes first, and again after each such pause.
    ///
    /// # Errors
    /// [`Refusal`]: the queue is full, `deadline` passed, or `resolve` found nothing
    /// any more (the workflow was removed).
    pub(crate) async fn hold<T>(
        &self,
        app: &App,
        key: &WorkflowKey,
        look: Look,
        deadline: tokio::time::Instant,
        mut resolve: impl FnMut() -> Option<(Arc<Deployment>, T)>,
        usable: impl Fn(&Deployment) -> bool,
    ) -> Result<(Arc<Deployment>, T), Refusal> {
        let workflow = key.name.as_str();
        let mut resolve = move || resolve().filter(|(found, _)| found.key == *key);
        // Subscribed before looking, so a replica that loads in between still wakes us.
        let mut changes = app.registry.changes();
        let mut slot = match look {
            Look::Now => match resolve() {
                None => return Err(Refusal::Removed),
                Some(found) if usable(&found.0) => return Ok(found),
                Some(_) => self.enter(app, workflow)?,
            },
            Look::Again(_) => self.enter(app, workflow)?,
        };
        let mut recheck = match look {
            Look::Now => None,
            Look::Again(pause) => Some(tokio::time::interval_at(
                tokio::time::Instant::now() + pause,
                pause,
            )),
        };
        // Its first tick is at once: the wait's first demand.
        let mut demand = tokio::time::interval(DEMAND_EVERY);
        loop {
            tokio::select! {
                _ = demand.tick() => {
                    self.signal_demand(workflow);
                    continue;
                }
                changed = changes.changed() => {
                    if changed.is_err() {
                        slot.outcome = "removed";
                        return Err(Refusal::Removed);
                    }
                }
                () = next_recheck(&mut recheck) => {}
                () = tokio::time::sleep_until(deadline) => {
                    slot.outcome = "timeout";
                    return Err(Refusal::Timeout { waited: self.config.timeout });
                }
            }
            match resolve() {
                None => {
                    slot.outcome = "removed";
                    return Err(Refusal::Removed);
                }
                Some(found) if usable(&found.0) => {
                    slot.outcome = "forwarded";
                    return Ok(found);
                }
                Some(_) => {}
            }
        }
    }

    /// Takes a place in `workflow`'s queue.
    fn enter<'a>(&'a self, app: &'a App, workflow: &'a str) -> Result<Slot<'a>, Refusal> {
        let mut waiting = self.lock_waiting();
        let entry = waiting.entry(workflow.to_owned()).or_default();
        if entry.held >= self.config.queue {
            drop(waiting);
            app.metrics.activator_outcome("full");
            return Err(Refusal::Full {
                queue: self.config.queue,
            });
        }
        entry.held += 1;
        drop(waiting);
        let tenant = app
            .registry
            .get(workflow)
            .map(|deployment| deployment.workflow.tenant.clone())
            .unwrap_or_default();
        let metrics = app.metrics.workflow(&tenant, workflow);
        metrics.held(1);
        Ok(Slot {
            activator: self,
            app,
            workflow,
            metrics,
            outcome: "cancelled",
        })
    }

    /// Signals demand for `workflow` unless that was done less than a second ago; the
    /// write happens in the background, as the events wait anyway. Held events call it;
    /// so does a stream trigger whose entries wait in the stream.
    pub(crate) fn signal_demand(&self, workflow: &str) {
        {
            let mut waiting = self.lock_waiting();
            let entry = waiting.entry(workflow.to_owned()).or_default();
            if entry
                .signalled
                .is_some_and(|at| at.elapsed() < DEMAND_EVERY)
            {
                return;
            }
            entry.signalled = Some(Instant::now());
        }
        let (shared, workflow) = (self.shared.clone(), workflow.to_owned());
        tokio::spawn(async move {
            if let Err(err) = shared.signal_demand(&workflow).await {
                tracing::warn!(workflow, "signalling demand for a worker failed: {err}");
            }
        });
    }

    /// Forgets the workflows that hold no event and were not signalled within the
    /// last [`DEMAND_EVERY`]. A stream trigger signals demand without holding an
    /// event, so nothing else removes its entry, and every workflow name that ever
    /// waited would stay in the map.
    fn forget_idle(&self) {
        forget_idle(&mut self.lock_waiting());
    }

    fn lock_waiting(&self) -> MutexGuard<'_, HashMap<String, Waiting>> {
        // Every change is a counter step or a stamp: a poisoned map is still sound.
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_last_events(&self) -> MutexGuard<'_, HashMap<String, u64>> {
        self.last_events.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// See [`Activator::forget_idle`].
fn forget_idle(waiting: &mut HashMap<String, Waiting>) {
    waiting.retain(|_, entry| {
        entry.held > 0
            || entry
                .signalled
                .is_some_and(|at| at.elapsed() < DEMAND_EVERY)
    });
}

/// Writes the last-event times noted since the previous round to the shared state,
/// once a second, in one batch, until the task is dropped (and forgets the idle
/// entries of the waiting map on the way). A failed write is merged back to go with
/// the next one.
pub(crate) async fn flush_activity(app: Arc<App>) {
    let Some(activator) = app.activator.as_ref() else {
        return;
    };
    let mut ticker = tokio::time::interval(ACTIVITY_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        activator.forget_idle();
        let batch: BTreeMap<String, u64> = std::mem::take(&mut *activator.lock_last_events())
            .into_iter()
            .collect();
        if batch.is_empty() {
            continue;
        }
        if let Err(err) = activator.shared.record_activity(&batch).await {
            tracing::warn!("recording workflow activity failed, retrying: {err}");
            let mut last_events = activator.lock_last_events();
            for (workflow, at) in batch {
                let kept = last_events.entry(workflow).or_insert(at);
                *kept = (*kept).max(at);
            }
        }
    }
}

/// The next tick of `recheck`, or never without one.
async fn next_recheck(recheck: &mut Option<tokio::time::Interval>) {
    match recheck {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workflow_that_holds_nothing_and_was_not_signalled_lately_is_forgotten() {
        let long_ago = Instant::now().checked_sub(DEMAND_EVERY * 2).unwrap();
        let entry = |held, signalled| Waiting { held, signalled };
        let mut waiting = HashMap::from([
            // Signalled by a stream trigger of a workflow removed since.
            ("gone".to_owned(), entry(0, Some(long_ago))),
            ("never".to_owned(), entry(0, None)),
            ("holding".to_owned(), entry(2, Some(long_ago))),
            ("recent".to_owned(), entry(0, Some(Instant::now()))),
        ]);
        forget_idle(&mut waiting);
        let mut kept: Vec<&str> = waiting.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["holding", "recent"]);
    }
}
