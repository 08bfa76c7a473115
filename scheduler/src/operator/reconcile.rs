//! Reconciling one Workflow: its finalizer, the checks the gateway makes on a deploy
//! (spec, tenant, quota, name, routes), its components, its deployment record and its
//! status. Idempotent: the same spec gives the same digest, and an unchanged digest
//! writes nothing.

use super::metrics::WorkflowState;
use super::{Context, components, floor, observe};
use faas_kube::status::WorkflowStatus;
use faas_kube::status::reason;
use faas_kube::{FINALIZER, Workflow};
use faas_shared_state::{DeploymentRecord, Removal, SharedStateError};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{self, Event};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How soon a Workflow that is not Ready yet is looked at again; for one refused by
/// the state of the platform (a quota, another tenant's name or route), the first
/// wait, doubled at each refusal in a row up to [`READY_REQUEUE`].
const NOT_READY_REQUEUE: Duration = Duration::from_secs(1);
/// How soon a settled Workflow (Ready, scaled to zero, or refused until its spec
/// changes) is looked at again; changes in Redis wake it sooner.
const READY_REQUEUE: Duration = Duration::from_secs(30);
/// How soon a Workflow whose component could not be fetched is looked at again: not
/// at once, since each try may download up to `--max-component-bytes` again (the URL
/// itself is fetched again only when its wait in `refetch` is over).
const FETCH_RETRY: Duration = Duration::from_secs(10);
/// The least time between two status writes of one Workflow that change its
/// conditions' messages only. Each write wakes the Workflow's reconcile at once, which
/// fetched a refused component's URL again: a URL answering differently every time
/// (other bytes, so another digest in the message; another error status) kept the
/// operator fetching it and writing the status without pause.
const MESSAGE_SPACING: Duration = Duration::from_secs(10);
/// The first retry after an error; it doubles with each failure in a row.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between retries after errors.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long the operator holds a workflow's lease while removing it.
const REMOVE_LEASE: Duration = Duration::from_secs(10);
/// The field manager of the status the operator writes.
const FIELD_MANAGER: &str = "faas-operator";

/// Why a reconcile failed; it is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReconcileError {
    /// Redis failed.
    #[error("shared state: {0}")]
    Shared(#[from] SharedStateError),
    /// The tenant store failed.
    #[error("tenant store: {0}")]
    Tenants(#[from] faas_store::TenantError),
    /// The API server refused a write (a conflict is retried).
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A gateway holds the workflow's lease in Redis.
    #[error("workflow `{0}` is being changed by another process; retrying")]
    Busy(String),
    /// A component fetched for the deploy was deleted before its record was written
    /// (another deploy replaced the last version naming it): fetched again on retry.
    #[error("component sha256:{0} was deleted while the workflow deployed; retrying")]
    ComponentGone(String),
}

/// A spec the operator will not deploy as it stands, with the condition reason and a
/// message naming the field or cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

impl Refusal {
    pub(crate) fn new(reason: &'static str, message: String) -> Self {
        Self { reason, message }
    }

    /// Whether only a change of the spec can lift it (nothing in Redis can).
    fn waits_for_spec(&self) -> bool {
        matches!(
            self.reason,
            reason::INVALID_SPEC | reason::DIGEST_MISMATCH | reason::INVALID_COMPONENT
        )
    }
}

/// What the operator made of a Workflow: the deployment record that serves it (the
/// one just written, or the previous one when the new spec is refused) and why a new
/// spec was refused.
pub(crate) struct Deployed {
    pub(crate) record: Option<DeploymentRecord>,
    pub(crate) refusal: Option<Refusal>,
}

/// Runs the Workflow controller (every namespace) until the task is dropped, once the
/// revision floor is read from every Workflow ([`floor`]) and the deployments'
/// components are recorded as their tenants' ([`record_components_tenants`]).
pub(crate) async fn run(context: Arc<Context>) {
    floor::raise_from_every_status(&context).await;
    record_components_tenants(&context).await;
    let api: Api<Workflow> = Api::all(context.client.clone());
    let wake = futures::stream::unfold(context.clone(), |context| async move {
        context.reconcile_all.notified().await;
        Some(((), context))
    });
    Controller::new(api, watcher::Config::default())
        .reconcile_all_on(wake)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!("reconcile: {err}");
            }
        })
        .await;
}

async fn reconcile(
    workflow: Arc<Workflow>,
    context: Arc<Context>,
) -> Result<Action, finalizer::Error<ReconcileError>> {
    let Some(namespace) = workflow.namespace() else {
        return Ok(Action::await_change());
    };
    let api: Api<Workflow> = Api::namespaced(context.client.clone(), &namespace);
    let key = object_key(&workflow);
    let started = Instant::now();
    let result = match finalizer::finalizer(&api, FINALIZER, workflow, |event| async {
        match event {
            Event::Apply(workflow) => apply(&api, &workflow, &context).await,
            Event::Cleanup(workflow) => cleanup(&workflow, &context).await,
        }
    })
    .await
    {
        // Gone meanwhile (a stale copy of a Workflow whose cleanup ran): nothing to do.
        Err(
            finalizer::Error::RemoveFinalizer(kube::Error::Api(status))
            | finalizer::Error::AddFinalizer(kube::Error::Api(status)),
        ) if status.code == 404 => Ok(Action::await_change()),
        result => result,
    };
    context
        .metrics
        .reconciled(result.is_ok(), started.elapsed());
    if result.is_ok() {
        context.failures().remove(&key);
    }
    result
}

/// Retries a failed reconcile with exponential backoff per Workflow.
fn error_policy(
    workflow: Arc<Workflow>,
    err: &finalizer::Error<ReconcileError>,
    context: Arc<Context>,
) -> Action {
    let key = object_key(&workflow);
    let count = count_in_a_row(&mut context.failures(), &key);
    let wait = doubling(FIRST_BACKOFF, count, MAX_BACKOFF);
    tracing::warn!(workflow = %key, "reconcile failed, retrying in {wait:?}: {err}");
    Action::requeue(wait)
}

/// Counts one more in a row for `key` in `counts`; returns the count.
fn count_in_a_row(counts: &mut std::collections::HashMap<String, u32>, key: &str) -> u32 {
    let count = counts.entry(key.to_owned()).or_insert(0);
    *count = count.saturating_add(1);
    *count
}

/// `first` for the first of `count` in a row, doubled for each further one, at most
/// `max`.
pub(super) fn doubling(first: Duration, count: u32, max: Duration) -> Duration {
    first
        .saturating_mul(1 << count.saturating_sub(1).min(10))
        .min(max)
}

fn object_key(workflow: &Workflow) -> String {
    format!(
        "{}/{}",
        workflow.namespace().unwrap_or_default(),
        workflow.name_any()
    )
}

/// Deploys `workflow` if it changed and writes its status.
async fn apply(
    api: &Api<Workflow>,
    workflow: &Workflow,
    context: &Context,
) -> Result<Action, ReconcileError> {
    let deployed = deploy(workflow, context).await?;
    let status = observe::status(context, workflow, &deployed).await?;
    context
        .metrics
        .workflow_state(&object_key(workflow), Some(WorkflowState::of(&status)));
    let load_failed = status
        .condition(faas_kube::status::DEGRADED)
        .is_some_and(|c| c.status == "True" && c.reason == reason::LOAD_FAILED);
    if status.replicas > 0 || load_failed {
        clear_demand(context, &workflow.name_any()).await?;
    }
    let key = object_key(workflow);
    if workflow.status.as_ref() != Some(&status) {
        let last = context.status_writes().get(&key).copied();
        if let (Some(old), Some(last)) = (workflow.status.as_ref(), last)
            && messages_only(old, &status)
            && last.elapsed() < MESSAGE_SPACING
        {
            return Ok(Action::requeue(MESSAGE_SPACING - last.elapsed()));
        }
        let patch = serde_json::json!({
            "apiVersion": Workflow::api_version(&()),
            "kind": Workflow::kind(&()),
            "status": status,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch_status(&workflow.name_any(), &params, &Patch::Apply(&patch))
            .await?;
        context.status_writes().insert(key.clone(), Instant::now());
        // Once written: a write that failed is retried, and says it then.
        context
            .events
            .status_changed(workflow, workflow.status.as_ref(), &status)
            .await;
    }
    // Changes in Redis wake every Workflow anyway (see `operator::place`): the short
    // requeue only backs that up while something is on its way.
    let settled = status.is(faas_kube::status::READY)
        || deployed
            .refusal
            .as_ref()
            .is_some_and(Refusal::waits_for_spec)
        || status
            .condition(faas_kube::status::PLACED)
            .is_some_and(|c| c.reason == reason::SCALED_TO_ZERO);
    let fetch_failed = deployed
        .refusal
        .as_ref()
        .is_some_and(|refusal| refusal.reason == reason::COMPONENT_FETCH_FAILED);
    // A refusal only a change elsewhere can lift (the tenant's other workflows, its
    // quotas, another tenant's name or route): each tenant may keep as many refused
    // Workflows as its namespace holds, so they back off, rather than have the
    // operator recheck them all every second. Removals and placements wake them all.
    let waiting = !settled && !fetch_failed && deployed.refusal.is_some();
    let requeue = if settled {
        READY_REQUEUE
    } else if fetch_failed {
        FETCH_RETRY
    } else if waiting {
        let count = count_in_a_row(&mut context.refusals(), &key);
        doubling(NOT_READY_REQUEUE, count, READY_REQUEUE)
    } else {
        NOT_READY_REQUEUE
    };
    if !waiting {
        context.refusals().remove(&key);
    }
    Ok(Action::requeue(requeue))
}

/// Whether `new` differs from `old` in its conditions' messages only.
fn messages_only(old: &WorkflowStatus, new: &WorkflowStatus) -> bool {
    let without_messages = |status: &WorkflowStatus| {
        let mut status = status.clone();
        for condition in &mut status.conditions {
            condition.message.clear();
        }
        status
    };
    without_messages(old) == without_messages(new)
}

/// A demand for `name` is satisfied once one of its replicas serves (or its workers
/// failed to load it: waiting longer would keep the workers up for nothing).
async fn clear_demand(context: &Context, name: &str) -> Result<(), SharedStateError> {
    if let Some(at) = context.shared.demand().await?.get(name) {
        context.shared.clear_demand(name, *at).await?;
    }
    Ok(())
}

/// Checks `workflow` as the gateway checks a deploy, fetches its components and writes
/// its deployment record when its digest changed.
///
/// Components are fetched outside the deploy lock: a slow or large download named by
/// one tenant's Workflow must not hold up every other tenant's deploys. So the checks
/// run twice: first to refuse a spec before fetching anything, then under the lock
/// against the deployments as they are by then (another deploy may have taken the name,
/// a route or the last place in the quota meanwhile).
async fn deploy(workflow: &Workflow, context: &Context) -> Result<Deployed, ReconcileError> {
    let mut created = Vec::new();
    let deployed = deploy_storing(workflow, context, &mut created).await;
    if !created.is_empty() && !matches!(deployed, Ok(Deployed { refusal: None, .. })) {
        // Under the lock: another Workflow's deploy checks that the components it
        // names are there under it, then writes its record.
        let _guard = context.deploy_lock.lock().await;
        let tenant = workflow.namespace().unwrap_or_default();
        forget_components(context, &tenant, &workflow.name_any(), &created).await;
    }
    deployed
}

/// [`deploy`], adding each component it stores that was not stored before to
/// `created`; deletes the components of the version it replaces that nothing else
/// names.
async fn deploy_storing(
    workflow: &Workflow,
    context: &Context,
    created: &mut Vec<(String, u64)>,
) -> Result<Deployed, ReconcileError> {
    let started = unix_millis();
    let (valid, mut room) = match check(workflow, context).await? {
        Checked::Settled(deployed) => return Ok(deployed),
        Checked::Changed { valid, room, .. } => (valid, room),
    };
    let tenant = &valid.workflow.tenant;
    // Checked before anything is fetched: what was fetched would only be deleted.
    let mut refusal =
        components::refused_lately(context, tenant, valid.components.values()).await?;
    for (function, source) in &valid.components {
        if refusal.is_some() {
            break;
        }
        refusal = components::ensure(context, tenant, function, source, &mut room, created)
            .await?
            .err();
    }
    if let Some(refusal) = refusal {
        return Ok(Deployed {
            record: ours(&context.shared.deployments().await?, workflow),
            refusal: Some(refusal),
        });
    }
    let _guard = context.deploy_lock.lock().await;
    let (valid, digest, previous) = match check(workflow, context).await? {
        Checked::Settled(deployed) => return Ok(deployed),
        Checked::Changed {
            valid,
            digest,
            previous,
            ..
        } => (valid, digest, previous),
    };
    let name = workflow.name_any();
    let tenant = workflow.namespace().unwrap_or_default();
    // Fetched outside the lock: a deploy that replaced the last version naming one
    // may have deleted it since (see `forget_components`), under this lock.
    for source in valid.components.values() {
        if !context
            .shared
            .has_component_of(&tenant, &source.sha256)
            .await?
        {
            return Err(ReconcileError::ComponentGone(source.sha256.clone()));
        }
    }
    let lowest = context.revision_floor.load(Ordering::Relaxed);
    context.shared.raise_revision(lowest).await?;
    let revision = context.shared.next_revision().await?;
    floor::raise(context, revision);
    let record = DeploymentRecord {
        workflow: valid.workflow,
        digest,
        revision,
        deployed_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs()),
        components: valid
            .components
            .iter()
            .map(|(function, source)| (function.clone(), source.sha256.clone()))
            .collect(),
    };
    if !context.shared.put_deployment_of_tenant(&record).await? {
        // The tenant was removed since `check`; the removal saw no deployment of it.
        return Ok(Deployed {
            record: None,
            refusal: Some(unknown_tenant(&tenant)),
        });
    }
    // A new revision wants a worker to load it, as a held event does: with the
    // workers scaled to zero they come back, so the deploy is seen Ready (or failing
    // to load) before they go idle again.
    context.shared.signal_demand(&name).await?;
    context.place_now.notify_one();
    tracing::info!(workflow = %name, tenant = %tenant, revision = record.revision, "deployed");
    // The version it replaced may have named components nothing names now; not those
    // stored again since this reconcile began (another deploy may be about to name
    // them).
    let replaced: Vec<(String, u64)> = previous
        .iter()
        .flat_map(|record| record.components.values())
        .map(|sha| (sha.clone(), started.saturating_sub(1)))
        .collect();
    forget_components(context, &tenant, &name, &replaced).await;
    Ok(Deployed {
        record: Some(record),
        refusal: None,
    })
}

/// What the checks of a deploy found.
enum Checked {
    /// Nothing to write: the spec is refused, or deployed as it stands.
    Settled(Deployed),
    /// A valid spec whose digest differs from what is deployed.
    Changed {
        valid: faas_kube::ValidWorkflow,
        digest: String,
        /// The deployment record it replaces, if any.
        previous: Option<Box<DeploymentRecord>>,
        /// What the tenant's code quota leaves for the components not stored yet
        /// (`None`: no quota).
        room: Option<CodeRoom>,
    },
}

/// What a tenant's code quota leaves for the components a Workflow names that are not
/// stored yet: they are fetched within it, so a Workflow past its quota is refused
/// before its components are downloaded, not after.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CodeRoom {
    /// Bytes left.
    pub(crate) left: u64,
    /// The quota, for the refusal's message.
    pub(crate) max_mb: u64,
}

/// Why a Workflow in namespace `tenant` is refused when no such tenant exists.
fn unknown_tenant(tenant: &str) -> Refusal {
    Refusal::new(
        reason::UNKNOWN_TENANT,
        format!(
            "metadata.namespace: `{tenant}` is not a tenant of the platform (create it with \
             `faas tenant create {tenant}`)"
        ),
    )
}

/// The deployment record of `workflow` (its name, in its tenant), if any.
fn ours(
    deployments: &std::collections::BTreeMap<String, DeploymentRecord>,
    workflow: &Workflow,
) -> Option<DeploymentRecord> {
    let tenant = workflow.namespace().unwrap_or_default();
    deployments
        .get(&workflow.name_any())
        .filter(|record| record.workflow.tenant == tenant)
        .cloned()
}

/// The checks the gateway makes on a deploy (spec, tenant, name, quota, routes),
/// against the deployments in Redis now, and whether the digest changed.
async fn check(workflow: &Workflow, context: &Context) -> Result<Checked, ReconcileError> {
    let name = workflow.name_any();
    let tenant = workflow.namespace().unwrap_or_default();
    let deployments = context.shared.deployments().await?;
    let newest = deployments.values().map(|record| record.revision).max();
    // The status too: it outlives both Redis and this process (in etcd).
    floor::raise(context, newest.max(floor::reported(workflow)).unwrap_or(0));
    let ours = ours(&deployments, workflow);
    let refuse = |reason, message| {
        Ok(Checked::Settled(Deployed {
            record: ours.clone(),
            refusal: Some(Refusal::new(reason, message)),
        }))
    };
    let valid = match faas_kube::validate(workflow) {
        Ok(valid) => valid,
        Err(err) => return refuse(reason::INVALID_SPEC, err.to_string()),
    };
    let Some(account) = context.tenants.tenant(&tenant).await? else {
        return Ok(Checked::Settled(Deployed {
            record: ours,
            refusal: Some(unknown_tenant(&tenant)),
        }));
    };
    if deployments
        .get(&name)
        .is_some_and(|record| record.workflow.tenant != tenant)
    {
        return refuse(
            reason::NAME_CONFLICT,
            format!(
                "metadata.name: workflow name `{name}` belongs to another tenant; choose \
                 another name"
            ),
        );
    }
    if ours.is_none() {
        let max = account
            .quotas
            .max_workflows
            .unwrap_or(context.config.tenant_max_workflows);
        let count = deployments
            .values()
            .filter(|record| record.workflow.tenant == tenant)
            .count() as u64;
        if max > 0 && count >= max {
            return refuse(
                reason::QUOTA,
                format!(
                    "tenant `{tenant}` has {count} workflows deployed, its quota \
                     (max_workflows = {max})"
                ),
            );
        }
    }
    if let Some(message) = faas_workflow::route_conflict(
        &valid.workflow,
        deployments.values().map(|record| &record.workflow),
    ) {
        return refuse(
            reason::ROUTE_CONFLICT,
            format!("spec.triggers.http: {message}"),
        );
    }
    if let Some(message) = faas_workflow::redis_consumers_over(
        &valid.workflow,
        deployments.values().map(|record| &record.workflow),
        context.config.max_redis_consumers_per_tenant,
    ) {
        return refuse(reason::QUOTA, format!("spec.triggers: {message}"));
    }
    let digest = digest(workflow);
    if let Some(record) = ours.as_ref().filter(|record| record.digest == digest) {
        return Ok(Checked::Settled(Deployed {
            record: Some(record.clone()),
            refusal: None,
        }));
    }
    // Only for a version to be written, as a gateway checks a deploy: a deployed one
    // stays. Before its components are fetched, those not stored yet count 0; under
    // the lock, after the fetch, all of them.
    let max_mb = account
        .quotas
        .code_max_mb
        .unwrap_or(context.config.tenant_code_max_mb);
    let mut room = None;
    if max_mb > 0 {
        // Each component once, however many workflows name it, as the gateways hold
        // and Redis stores it.
        let digests: BTreeSet<&String> = deployments
            .values()
            .filter(|record| record.workflow.tenant == tenant && record.workflow.name != name)
            .flat_map(|record| record.components.values())
            .chain(valid.components.values().map(|source| &source.sha256))
            .collect();
        let bytes = context.shared.components_bytes(digests).await?;
        if bytes > max_mb.saturating_mul(1 << 20) {
            return refuse(
                reason::QUOTA,
                format!(
                    "spec.functions: the components of tenant `{tenant}`'s workflows would \
                     take {:.1} MiB with this one, its quota (code_max_mb = {max_mb})",
                    bytes as f64 / f64::from(1 << 20)
                ),
            );
        }
        room = Some(CodeRoom {
            left: max_mb.saturating_mul(1 << 20) - bytes,
            max_mb,
        });
    }
    Ok(Checked::Changed {
        valid,
        digest,
        previous: ours.map(Box::new),
        room,
    })
}

/// Deletes at once the components of `candidates` (digest, latest stamp) that no
/// deployment names, as a gateway does after its deploys. Left to the collection after
/// `--component-ttl-s`, they let a tenant whose Workflows fetch components and are
/// then refused or replaced, over and over, fill the Redis every tenant shares with
/// bytes no quota counts. A failure is logged; the collection deletes them later.
async fn forget_components(
    context: &Context,
    tenant: &str,
    workflow: &str,
    candidates: &[(String, u64)],
) {
    match context.shared.forget_components(tenant, candidates).await {
        Ok(deleted) if !deleted.is_empty() => {
            tracing::debug!(workflow, ?deleted, "deleted components no deployment names");
        }
        Ok(_) => {}
        Err(err) => tracing::warn!(
            workflow,
            "deleting components no deployment names (the collection will): {err}"
        ),
    }
}

/// Now, in milliseconds since the Unix epoch: how component stamps are written.
fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// SHA-256 over what a deployment is made of: tenant, name and spec, components by
/// digest (where they are fetched from does not change what runs).
fn digest(workflow: &Workflow) -> String {
    let mut spec = workflow.spec.clone();
    for function in spec.functions.values_mut() {
        function.component.url = None;
    }
    let mut hasher = Sha256::new();
    hasher.update(workflow.namespace().unwrap_or_default().as_bytes());
    hasher.update([0]);
    hasher.update(workflow.name_any().as_bytes());
    hasher.update([0]);
    // The spec's maps are ordered, so equal specs serialize equally.
    hasher.update(serde_json::to_vec(&spec).unwrap_or_default());
    hex::encode(hasher.finalize())
}

/// Removes `workflow`'s deployment (with its placement) from Redis, so that the
/// finalizer can go.
async fn cleanup(workflow: &Workflow, context: &Context) -> Result<Action, ReconcileError> {
    context.metrics.workflow_state(&object_key(workflow), None);
    context.refusals().remove(&object_key(workflow));
    context.status_writes().remove(&object_key(workflow));
    let tenant = workflow.namespace().unwrap_or_default();
    remove_record(context, &workflow.name_any(), &tenant, None).await?;
    Ok(Action::await_change())
}

/// Removes the deployment record of workflow `name` if it is `tenant`'s (a name held
/// by another tenant's workflow is not this resource's to remove) and, if `revision`
/// is given, still at that revision.
pub(crate) async fn remove_record(
    context: &Context,
    name: &str,
    tenant: &str,
    revision: Option<u64>,
) -> Result<(), ReconcileError> {
    let _guard = context.deploy_lock.lock().await;
    let deployments = context.shared.deployments().await?;
    if deployments.get(name).is_none_or(|record| {
        record.workflow.tenant != tenant || revision.is_some_and(|r| r != record.revision)
    }) {
        return Ok(());
    }
    let holder = format!("faas-operator/{}", context.config.identity);
    if !context
        .shared
        .lock_workflow(name, &holder, REMOVE_LEASE)
        .await?
    {
        return Err(ReconcileError::Busy(name.to_owned()));
    }
    let removed = context
        .shared
        .remove_deployment(name, tenant, &holder)
        .await;
    context.shared.unlock_workflow(name, &holder).await?;
    match removed? {
        Removal::Removed => {}
        // Another tenant's since the read above: not this resource's to remove.
        Removal::OtherTenants => return Ok(()),
        Removal::LeaseLost => return Err(ReconcileError::Busy(name.to_owned())),
    }
    tracing::info!(workflow = %name, tenant = %tenant, "removed");
    // Nothing will serve its held events now: they fail at the gateway.
    clear_demand(context, name).await?;
    context.place_now.notify_one();
    // The name, routes and quota it held may be what a refused Workflow waits for.
    context.reconcile_all.notify_one();
    Ok(())
}

/// Records, before the first reconcile, that each deployment's tenant stored the
/// components it names ([`faas_shared_state::SharedState::record_deployed_components_tenants`]):
/// a tenant may name by digest alone only components it stored, and components stored
/// by an older version were stored without their tenant. Retried until Redis answers.
async fn record_components_tenants(context: &Context) {
    super::retry::until_ok("recording the deployments' components", || {
        context.shared.record_deployed_components_tenants()
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use faas_kube::WorkflowSpec;
    use kube::api::ObjectMeta;

    fn resource(namespace: &str, spec: &str) -> Workflow {
        Workflow {
            metadata: ObjectMeta {
                name: Some("hello".into()),
                namespace: Some(namespace.into()),
                ..ObjectMeta::default()
            },
            spec: serde_json::from_str::<WorkflowSpec>(spec).unwrap(),
            status: None,
        }
    }

    const SPEC: &str =
        r#"{"functions": {"hello": {"component": {"sha256": "ab", "url": "https://a/x.wasm"}}}}"#;

    #[test]
    fn waits_double_from_their_first_up_to_their_most() {
        let mut counts = std::collections::HashMap::new();
        let waits: Vec<Duration> = (0..8)
            .map(|_| {
                let count = count_in_a_row(&mut counts, "acme/hello");
                doubling(NOT_READY_REQUEUE, count, READY_REQUEUE)
            })
            .collect();
        let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(count_in_a_row(&mut counts, "acme/other"), 1, "per Workflow");
        assert_eq!(
            doubling(FIRST_BACKOFF, u32::MAX, MAX_BACKOFF),
            MAX_BACKOFF,
            "no overflow"
        );
    }

    #[test]
    fn the_digest_follows_what_runs_not_where_it_was_fetched_from() {
        let base = digest(&resource("acme", SPEC));
        assert_eq!(base, digest(&resource("acme", SPEC)), "stable");
        let moved = SPEC.replace("https://a/x.wasm", "https://b/y.wasm");
        assert_eq!(
            base,
            digest(&resource("acme", &moved)),
            "a new URL is the same deploy"
        );
        let other = SPEC.replace("\"ab\"", "\"cd\"");
        assert_ne!(base, digest(&resource("acme", &other)), "new bytes");
        assert_ne!(base, digest(&resource("beta", SPEC)), "another tenant");
    }
}
