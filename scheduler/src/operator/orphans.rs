//! Deployment records that no Workflow resource backs any more. A Workflow is deleted
//! through the operator's finalizer, which removes its record; but whoever may edit the
//! Workflow (its tenant) can strip the finalizer, and the resource is then gone without
//! the operator's cleanup. Its record would stay live: served, holding its name, routes
//! and quota place, and outliving its tenant's removal (which counts resources). Every
//! [`SWEEP_ROUNDS`] intervals the operator removes such records, and forgets what it
//! kept for such Workflows (their state in its metrics, their retry counts).

use super::Context;
use super::reconcile::{self, ReconcileError};
use faas_kube::Workflow;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;
use std::sync::Arc;

/// How many operator intervals pass between sweeps: listing every Workflow costs the
/// API server more than a placement round costs Redis.
const SWEEP_ROUNDS: u32 = 30;

/// Removes orphaned records at every sweep until the task is dropped.
pub(crate) async fn sweep(context: Arc<Context>) {
    let mut ticker = tokio::time::interval(context.config.interval * SWEEP_ROUNDS);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(err) = sweep_once(&context).await {
            tracing::warn!("removing records of deleted Workflows failed, retrying: {err}");
        }
    }
}

async fn sweep_once(context: &Context) -> Result<(), ReconcileError> {
    // The records before the resources: a record read here was written for a Workflow
    // that existed before the list started, so one missing from the list is gone
    // (or gone and made again, and then its new record is left alone: only the
    // revision read is removed).
    let records = context.shared.deployments().await?;
    let api: Api<Workflow> = Api::all(context.client.clone());
    let declared: BTreeSet<(String, String)> = api
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|meta| (meta.namespace().unwrap_or_default(), meta.name_any()))
        .collect();
    context.forget_undeclared(|namespace, name| {
        declared.contains(&(namespace.to_owned(), name.to_owned()))
    });
    for (name, record) in records {
        let tenant = &record.workflow.tenant;
        if declared.contains(&(tenant.clone(), name.clone())) {
            continue;
        }
        // Asked again just before: one deleted and made again since the list, with
        // the same spec (and so the same record and revision), is not an orphan.
        let namespaced: Api<Workflow> = Api::namespaced(context.client.clone(), tenant);
        if namespaced.get_metadata_opt(&name).await?.is_some() {
            continue;
        }
        tracing::warn!(workflow = %name, %tenant,
            "its Workflow resource is gone without the operator's cleanup; removing it");
        reconcile::remove_record(context, &name, tenant, Some(record.revision)).await?;
    }
    Ok(())
}
