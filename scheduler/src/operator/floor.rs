//! The revision floor ([`Context::revision_floor`]): the revisions the operator hands
//! out stay above every revision handed out before, even after Redis lost its counter
//! and its records.
//!
//! Each Workflow's status keeps the revision that served it (in etcd, which outlives
//! Redis). A reconcile raises the floor to its own Workflow's revision, but reconciles
//! run side by side: without more, the first Workflow deployed after a loss would only
//! be above the revisions of the Workflows checked so far, and could be given a number
//! another Workflow held before. So before its first reconcile the operator reads every
//! Workflow's status once ([`raise_from_every_status`]).

use super::Context;
use faas_kube::Workflow;
use kube::api::{Api, ListParams};
use std::sync::atomic::Ordering;

/// The highest revision a Workflow's status may raise the floor to. Whoever may write
/// a status could raise the counter that far, so only within a bound no deploys reach,
/// far below where Redis's `INCR` would overflow.
const MAX_REPORTED_REVISION: u64 = u32::MAX as u64;
/// Workflows read per list call at start.
const PAGE: u32 = 500;

/// The revision `workflow`'s status reports, if it is within the bound.
pub(crate) fn reported(workflow: &Workflow) -> Option<u64> {
    workflow
        .status
        .as_ref()
        .and_then(|status| status.revision)
        .filter(|revision| *revision <= MAX_REPORTED_REVISION)
}

/// Raises the floor to at least `revision`.
pub(crate) fn raise(context: &Context, revision: u64) {
    context
        .revision_floor
        .fetch_max(revision, Ordering::Relaxed);
}

/// Raises the floor to the highest revision any Workflow's status reports, in every
/// namespace; retries until the API server answers, since no Workflow may be deployed
/// before.
pub(crate) async fn raise_from_every_status(context: &Context) {
    let api: Api<Workflow> = Api::all(context.client.clone());
    let highest = super::retry::until_ok("reading the Workflows' revisions", || {
        highest_reported(&api)
    })
    .await;
    raise(context, highest);
    tracing::info!(floor = highest, "revision floor read from every Workflow");
}

/// The highest revision reported by the Workflows `api` lists, page by page (a page's
/// continue token that expired fails the whole read, which is then made again).
async fn highest_reported(api: &Api<Workflow>) -> Result<u64, kube::Error> {
    let mut params = ListParams::default().limit(PAGE);
    let mut highest = 0;
    loop {
        let page = api.list(&params).await?;
        highest = page
            .items
            .iter()
            .filter_map(reported)
            .fold(highest, u64::max);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(highest),
        }
    }
}
