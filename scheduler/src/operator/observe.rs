//! A Workflow's status from the shared state: where its deployment is placed, which
//! revision each of those workers loaded, and the conditions that follow.

use super::Context;
use super::reconcile::Deployed;
use faas_kube::status::reason;
use faas_kube::status::{DEGRADED, PLACED, READY};
use faas_kube::{Workflow, WorkflowStatus};
use faas_shared_state::{SharedState, SharedStateError};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

/// Everything a status is computed from besides the records: the live workers, the
/// placements and what each worker loaded. Equal fingerprints, equal statuses.
pub(crate) async fn fingerprint(shared: &SharedState) -> Result<String, SharedStateError> {
    let live = live_workers(shared).await?;
    let placements = shared.placements().await?;
    let mut loads = Vec::new();
    for worker in &live {
        loads.push(shared.load_statuses(worker).await?);
    }
    Ok(format!("{live:?}{placements:?}{loads:?}"))
}

/// The workers that are live (the Ready worker pods) and take work.
async fn live_workers(shared: &SharedState) -> Result<BTreeSet<String>, SharedStateError> {
    Ok(shared
        .workers()
        .await?
        .live
        .into_iter()
        .filter(|info| !info.draining)
        .map(|info| info.id)
        .collect())
}

/// The status of `workflow`, given what [`super::reconcile`] made of it.
pub(crate) async fn status(
    context: &Context,
    workflow: &Workflow,
    deployed: &Deployed,
) -> Result<WorkflowStatus, SharedStateError> {
    let name = workflow.name_any();
    let generation = workflow.metadata.generation;
    let mut status = workflow.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    status.revision = None;
    status.placement.clear();
    status.loaded.clear();
    status.replicas = 0;
    status.routes.clear();
    let refused = deployed
        .refusal
        .as_ref()
        .map(|refusal| (false, refusal.reason, refusal.message.clone()));
    let (placed, ready, load_failure) = match &deployed.record {
        None => {
            let verdict = refused.clone().unwrap_or((
                false,
                reason::NOT_DEPLOYED,
                "not deployed yet".to_owned(),
            ));
            (verdict.clone(), verdict, None)
        }
        Some(record) => {
            let revision = record.revision;
            let desired = record.workflow.settings.replicas.max(1) as i32;
            let live = live_workers(&context.shared).await?;
            let placement = context
                .shared
                .placements()
                .await?
                .remove(&name)
                .map(|placement| placement.workers)
                .unwrap_or_default();
            let mut load_failure = None;
            for worker in &placement {
                let Some(load) = context.shared.load_statuses(worker).await?.remove(&name) else {
                    continue;
                };
                status.loaded.insert(worker.clone(), load.revision);
                if load.is_ready(revision) && live.contains(worker) {
                    status.replicas += 1;
                } else if let Some(error) = load.error.filter(|_| load.revision == revision) {
                    load_failure = Some(format!(
                        "worker {worker} could not load revision {revision}: {error}"
                    ));
                }
            }
            status.revision = Some(revision);
            status.routes = record
                .workflow
                .http_triggers
                .iter()
                .map(|trigger| trigger.route.as_str().to_owned())
                .collect();
            let placed = if !placement.is_empty() {
                (
                    true,
                    "Placed",
                    format!("placed on {}", placement.join(", ")),
                )
            } else if live.is_empty() && context.scaled_to_zero.load(Ordering::Relaxed) {
                (
                    false,
                    reason::SCALED_TO_ZERO,
                    "the workers are scaled to zero; an event scales them up".to_owned(),
                )
            } else if live.is_empty() {
                (
                    false,
                    reason::NO_WORKERS,
                    "no worker is registered".to_owned(),
                )
            } else {
                (
                    false,
                    reason::NO_CAPACITY,
                    format!(
                        "no worker has room for {desired} replica(s) yet ({} live)",
                        live.len()
                    ),
                )
            };
            status.placement = placement;
            let serving = format!(
                "{} of {desired} replica(s) serve revision {revision}",
                status.replicas
            );
            let ready = if let Some((_, reason, message)) = &refused {
                (false, *reason, format!("{message} ({serving})"))
            } else if let Some(failure) = &load_failure {
                (false, reason::LOAD_FAILED, failure.clone())
            } else if status.replicas >= desired {
                (true, "Ready", serving)
            } else if !placed.0 {
                placed.clone()
            } else {
                (false, reason::LOADING, serving)
            };
            (placed, ready, load_failure)
        }
    };
    let degraded = match (&refused, load_failure) {
        (Some((_, reason, message)), _) => (true, *reason, message.clone()),
        (None, Some(failure)) => (true, reason::LOAD_FAILED, failure),
        (None, None) => (false, reason::AS_EXPECTED, "nothing is wrong".to_owned()),
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    for (kind, (is, reason, message)) in [(READY, ready), (PLACED, placed), (DEGRADED, degraded)] {
        status.set_condition(kind, is, reason, message, now.clone(), generation);
    }
    Ok(status)
}
