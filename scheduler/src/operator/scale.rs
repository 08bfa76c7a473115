//! Scale to zero without KEDA: the worker Deployment goes to zero replicas when no
//! workflow had an event for a while and no event waits, and back to the configured
//! replicas when a gateway's activator signals demand (`faas:demand`).

use super::Context;
use faas_shared_state::SharedStateError;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

/// What the scaler remembers between ticks (unix milliseconds).
struct Scaler {
    /// When the operator started: nothing counts as idle before it.
    started: u64,
    /// When it last scaled the workers up (0: never).
    scaled_up: u64,
    /// When it last saw an event waiting (0: never). A held event is counted as
    /// activity only once it is served, which may be longer after it arrived than the
    /// idle window: without this the workers would go straight back to zero.
    demand_seen: u64,
    /// Whether the missing Deployment was reported already.
    reported_missing: bool,
}

#[derive(Debug, thiserror::Error)]
enum ScaleError {
    #[error("{0}")]
    Shared(#[from] SharedStateError),
    #[error("{0}")]
    Kube(#[from] kube::Error),
}

/// Scales the worker Deployment at every interval until the task is dropped.
pub(crate) async fn run(context: Arc<Context>) {
    let api: Api<Deployment> = Api::namespaced(context.client.clone(), &context.config.namespace);
    let mut scaler = Scaler {
        started: unix_millis(),
        scaled_up: 0,
        demand_seen: 0,
        reported_missing: false,
    };
    let mut ticker = tokio::time::interval(context.config.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(err) = scaler.tick(&context, &api).await {
            tracing::warn!("scaling the workers failed, retrying: {err}");
        }
    }
}

impl Scaler {
    async fn tick(&mut self, context: &Context, api: &Api<Deployment>) -> Result<(), ScaleError> {
        let config = &context.config;
        let name = &config.worker_deployment;
        let scale = match api.get_scale(name).await {
            Ok(scale) => scale,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                if !std::mem::replace(&mut self.reported_missing, true) {
                    tracing::warn!(deployment = %name, namespace = %config.namespace,
                        "the worker Deployment does not exist; not scaling");
                }
                return Ok(());
            }
            Err(err) => return Err(err.into()),
        };
        self.reported_missing = false;
        let current = scale
            .spec
            .as_ref()
            .and_then(|spec| spec.replicas)
            .unwrap_or(0);
        context
            .scaled_to_zero
            .store(current == 0, Ordering::Relaxed);
        context.metrics.worker_replicas(current);
        let demand = self.live_demand(context).await?;
        let newest_demand = demand.values().copied().max();
        if !demand.is_empty() {
            self.demand_seen = unix_millis();
        }
        let (target, why) = if current == 0 && newest_demand.is_some_and(|at| at > self.scaled_up) {
            let waiting: Vec<&str> = demand.keys().map(String::as_str).collect();
            tracing::info!(deployment = %name, replicas = config.worker_replicas,
                workflows = ?waiting, "demand: scaling the workers up");
            self.scaled_up = unix_millis();
            let why = format!(
                "scaled up to {} replica(s): events wait for workflow(s) {}",
                config.worker_replicas,
                waiting.join(", ")
            );
            (config.worker_replicas, why)
        } else if current > 0 && demand.is_empty() && self.idle(context).await? {
            tracing::info!(deployment = %name, "no events: scaling the workers to zero");
            let after = config.scale_to_zero_after.unwrap_or_default().as_secs();
            (0, format!("scaled to zero: no event for {after}s"))
        } else {
            return Ok(());
        };
        let patch = serde_json::json!({ "spec": { "replicas": target } });
        api.patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        context.scaled_to_zero.store(target == 0, Ordering::Relaxed);
        context.metrics.workers_scaled(current, target);
        context.events.workers_scaled(&scale, target, why).await;
        Ok(())
    }

    /// The demands signalled within the last [`demand_lifetime`], with when. Older
    /// ones are cleared: a held event signals again every second while it waits, and
    /// a deploy's signal has had that long to bring a worker, so an older one is for
    /// a Workflow that cannot be placed (more replicas than workers), that failed to
    /// load without saying so, or that is gone (signalled by a gateway a sync behind).
    /// Kept, it would hold the workers up for one tenant's Workflow forever.
    async fn live_demand(
        &self,
        context: &Context,
    ) -> Result<std::collections::BTreeMap<String, u64>, SharedStateError> {
        let mut demand = context.shared.demand().await?;
        let oldest_live =
            unix_millis().saturating_sub(demand_lifetime(&context.config).as_millis() as u64);
        let stale: Vec<(String, u64)> = demand.extract_if(.., |_, at| *at < oldest_live).collect();
        for (name, at) in stale {
            // Only up to the stamp read: a demand signalled since stays.
            if context.shared.clear_demand(&name, at).await? {
                tracing::info!(workflow = %name, "a demand no event renewed expired");
            }
        }
        Ok(demand)
    }

    /// Whether no workflow had an event for `--scale-to-zero-after` (counted from the
    /// operator's start, the last scale-up and the last demand seen too).
    async fn idle(&self, context: &Context) -> Result<bool, SharedStateError> {
        let Some(after) = context.config.scale_to_zero_after else {
            return Ok(false);
        };
        let last_event = context
            .shared
            .activity()
            .await?
            .into_values()
            .max()
            .unwrap_or(0);
        let since = last_event
            .max(self.started)
            .max(self.scaled_up)
            .max(self.demand_seen);
        Ok(unix_millis().saturating_sub(since) >= after.as_millis() as u64)
    }
}

/// How long a demand holds the workers up unless it is signalled again: the idle
/// window the workers are scaled to zero after, or five minutes if they never are.
fn demand_lifetime(config: &super::OperatorConfig) -> std::time::Duration {
    config
        .scale_to_zero_after
        .unwrap_or(std::time::Duration::from_secs(300))
}

fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}
