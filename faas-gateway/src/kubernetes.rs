//! Kubernetes mode (`faas gateway --kubernetes`): where a deploy goes when the
//! `Workflow` resource (`faas.dev/v1alpha1`, crate `faas-kube`) is the source of truth.
//!
//! The gateway validates a deploy as in services mode and stores its components in
//! Redis, content-addressed; then, instead of staging a deployment record, it
//! server-side applies the Workflow in the namespace named after its tenant (field
//! manager [`FIELD_MANAGER`]) and waits until the operator has observed that
//! generation. Only the operator writes deployment records, which every gateway then
//! follows as in services mode. The deploy does not wait for workers: they may be
//! scaled to zero, and the activator holds events until one has loaded the workflow.

use crate::declared::DeclaredWorkflows;
use faas_kube::status::DEGRADED;
use faas_kube::{Workflow as Resource, WorkflowSpec, WorkflowStatus};
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The field manager of the gateway's server-side applies.
pub const FIELD_MANAGER: &str = "faas-gateway";
/// The label a tenant's namespace carries (its value: the tenant's name).
pub const TENANT_LABEL: &str = "faas.dev/tenant";
/// The ResourceQuota in each tenant's namespace that bounds how many Workflow
/// resources it holds (the platform owns it: a quota change rewrites it).
pub const WORKFLOW_QUOTA: &str = "faas-workflows";
/// The resource count a [`WORKFLOW_QUOTA`] limits.
const WORKFLOW_COUNT: &str = "count/workflows.faas.dev";
/// How often a deploy or removal reads the resource while it waits for the operator.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Why a deploy or removal through the Kubernetes API failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The tenant's namespace does not exist, so its workflows have nowhere to live.
    #[error(
        "tenant `{tenant}` has no namespace `{tenant}` in the cluster: create the tenant \
         with `faas tenant create {tenant}` through a gateway in Kubernetes mode, or \
         `kubectl create namespace {tenant}`"
    )]
    NoNamespace {
        /// The tenant (and the namespace's name).
        tenant: String,
    },
    /// The operator observed the new spec and marked it `Degraded`; the live version,
    /// if any, keeps serving.
    #[error("workflow `{name}` is degraded ({reason}): {message}")]
    Degraded {
        /// The workflow.
        name: String,
        /// The condition's reason (one word).
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// The operator did not act on the resource in time.
    #[error(
        "the operator did not {what} workflow `{namespace}/{name}` within {}s; is `faas \
         operator` running?",
        timeout.as_secs()
    )]
    Timeout {
        /// What it was waited for to do (`observe`, `remove`).
        what: &'static str,
        /// The namespace.
        namespace: String,
        /// The workflow.
        name: String,
        /// How long the gateway waited.
        timeout: Duration,
    },
    /// The tenant's namespace holds as many Workflows as its quota allows (the
    /// ResourceQuota [`WORKFLOW_QUOTA`]).
    #[error("tenant `{tenant}`'s namespace holds all the Workflows its quota allows: {message}")]
    Quota {
        /// The tenant (and the namespace's name).
        tenant: String,
        /// The API server's own words.
        message: String,
    },
    /// The quota controller did not count a new [`WORKFLOW_QUOTA`] in time; until it
    /// does, the API server refuses every Workflow in that namespace.
    #[error(
        "the ResourceQuota `{WORKFLOW_QUOTA}` in namespace `{tenant}` was not counted within \
         {}s (is kube-controller-manager running?); set the tenant's quota again to retry",
        timeout.as_secs()
    )]
    QuotaNotCounted {
        /// The tenant (and the namespace's name).
        tenant: String,
        /// How long the gateway waited.
        timeout: Duration,
    },
    /// The gateway has not listed the cluster's Workflows (to check a deploy's name
    /// and routes against them) since it started.
    #[error(
        "the gateway could not list the cluster's Workflow resources within {}s (its log \
         says why); try again",
        timeout.as_secs()
    )]
    NotListed {
        /// How long the deploy waited.
        timeout: Duration,
    },
    /// The manifest could not be written as a Workflow spec.
    #[error("the manifest does not fit a Workflow resource: {0}")]
    Spec(#[from] faas_kube::convert::ManifestToSpecError),
    /// The API server refused or could not be reached (RBAC, network).
    #[error("Kubernetes API: {}", describe(.0))]
    Api(#[from] kube::Error),
}

/// An API error in one line: the server's own message and code rather than the whole
/// status object.
fn describe(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => format!(
            "{} (HTTP {} {})",
            status.message, status.code, status.reason
        ),
        err => err.to_string(),
    }
}

/// What the operator reported once it observed an applied spec.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    /// Whether the apply changed the spec (the resource's generation rose, or it is new).
    pub changed: bool,
    /// The platform revision of the deployment, as the status gives it.
    pub revision: Option<u64>,
}

/// The Workflow resources of a cluster, as the gateway reads and writes them.
#[derive(Clone)]
pub struct WorkflowResources {
    client: kube::Client,
    timeout: Duration,
    /// What every Workflow claims, followed by a watch.
    declared: Arc<DeclaredWorkflows>,
}

impl std::fmt::Debug for WorkflowResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowResources")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl WorkflowResources {
    /// Resources reached through `client`; a deploy or removal waits at most `timeout`
    /// for the operator. Starts watching the cluster's Workflows, so it must be called
    /// inside a Tokio runtime.
    pub fn new(client: kube::Client, timeout: Duration) -> Self {
        Self {
            declared: Arc::new(DeclaredWorkflows::follow(client.clone())),
            client,
            timeout,
        }
    }

    /// Resources of the cluster this process runs in (its pod's service account), or
    /// else of the one `KUBECONFIG` (or `~/.kube/config`) names, as kubectl finds it.
    ///
    /// # Errors
    /// [`KubeError::Api`] when neither is there or the configuration is unusable.
    pub async fn from_environment(timeout: Duration) -> Result<Self, KubeError> {
        Ok(Self::new(kube::Client::try_default().await?, timeout))
    }

    fn api(&self, namespace: &str) -> Api<Resource> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Server-side applies workflow `name` with `spec` in `namespace` and waits until
    /// the operator has observed it.
    ///
    /// # Errors
    /// [`KubeError::NoNamespace`], [`KubeError::Degraded`] (the spec's problem, as the
    /// operator reports it), [`KubeError::Timeout`], [`KubeError::Api`].
    pub(crate) async fn apply(
        &self,
        namespace: &str,
        name: &str,
        spec: WorkflowSpec,
    ) -> Result<Observed, KubeError> {
        let api = self.api(namespace);
        let before = api.get_opt(name).await?.and_then(|r| r.metadata.generation);
        let mut resource = Resource::new(name, spec);
        resource.metadata.namespace = Some(namespace.to_owned());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let applied = api
            .patch(name, &params, &Patch::Apply(&resource))
            .await
            .map_err(|err| match err {
                // The only thing missing on a create-or-update is the namespace.
                err if is_not_found(&err) => KubeError::NoNamespace {
                    tenant: namespace.to_owned(),
                },
                kube::Error::Api(status)
                    if status.code == 403 && status.message.contains("exceeded quota") =>
                {
                    KubeError::Quota {
                        tenant: namespace.to_owned(),
                        message: status.message,
                    }
                }
                err => err.into(),
            })?;
        let generation = applied.metadata.generation.unwrap_or_default();
        let status = self.observed(&api, namespace, name, generation).await?;
        if let Some(degraded) = status
            .condition(DEGRADED)
            .filter(|condition| condition.status == "True")
        {
            return Err(KubeError::Degraded {
                name: name.to_owned(),
                reason: degraded.reason.clone(),
                message: degraded.message.clone(),
            });
        }
        Ok(Observed {
            changed: before != Some(generation),
            revision: status.revision,
        })
    }

    /// Waits until the operator's `observedGeneration` of `name` reaches `generation`.
    async fn observed(
        &self,
        api: &Api<Resource>,
        namespace: &str,
        name: &str,
        generation: i64,
    ) -> Result<WorkflowStatus, KubeError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let status = api.get_opt(name).await?.and_then(|r| r.status);
            if let Some(status) = status
                && status
                    .observed_generation
                    .is_some_and(|observed| observed >= generation)
            {
                return Ok(status);
            }
            self.pause_until(deadline, "observe", namespace, name)
                .await?;
        }
    }

    /// Sleeps a poll interval, or fails with [`KubeError::Timeout`] past `deadline`.
    async fn pause_until(
        &self,
        deadline: tokio::time::Instant,
        what: &'static str,
        namespace: &str,
        name: &str,
    ) -> Result<(), KubeError> {
        if tokio::time::Instant::now() >= deadline {
            return Err(KubeError::Timeout {
                what,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                timeout: self.timeout,
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
        Ok(())
    }

    /// Deletes workflow `name` in `namespace` and waits until it is gone (the
    /// operator's finalizer removes the deployment first). Returns whether it existed.
    ///
    /// # Errors
    /// [`KubeError::Timeout`] if it is still there after the timeout (it stays marked
    /// for deletion), [`KubeError::Api`].
    pub(crate) async fn delete(&self, namespace: &str, name: &str) -> Result<bool, KubeError> {
        let api = self.api(namespace);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(err) if is_not_found(&err) => return Ok(false),
            Err(err) => return Err(err.into()),
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        while api.get_opt(name).await?.is_some() {
            self.pause_until(deadline, "remove", namespace, name)
                .await?;
        }
        Ok(true)
    }

    /// Whether Workflow `name` exists in `namespace`.
    ///
    /// # Errors
    /// [`KubeError::Api`].
    pub(crate) async fn exists(&self, namespace: &str, name: &str) -> Result<bool, KubeError> {
        Ok(self.api(namespace).get_metadata_opt(name).await?.is_some())
    }

    /// What each Workflow in the cluster that the operator has not refused claims: its
    /// name, tenant and HTTP routes (nothing else of its spec), as the watch last saw
    /// them.
    ///
    /// # Errors
    /// [`KubeError::NotListed`] if the watch has not listed them all once within the
    /// deploy timeout.
    pub(crate) async fn claims(&self) -> Result<Vec<Arc<faas_workflow::Workflow>>, KubeError> {
        self.declared
            .claims(self.timeout)
            .await
            .ok_or(KubeError::NotListed {
                timeout: self.timeout,
            })
    }

    /// The Workflow resources in `namespace`, or in every namespace when `None`.
    ///
    /// # Errors
    /// [`KubeError::Api`].
    pub(crate) async fn list(&self, namespace: Option<&str>) -> Result<Vec<Resource>, KubeError> {
        let api = match namespace {
            Some(namespace) => self.api(namespace),
            None => Api::all(self.client.clone()),
        };
        Ok(api.list(&ListParams::default()).await?.items)
    }

    /// Creates tenant `tenant`'s namespace, labelled [`TENANT_LABEL`], unless it
    /// exists. Returns whether it was created.
    ///
    /// # Errors
    /// [`KubeError::Api`].
    pub(crate) async fn ensure_namespace(&self, tenant: &str) -> Result<bool, KubeError> {
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(tenant.to_owned()),
                labels: Some(BTreeMap::from([(
                    TENANT_LABEL.to_owned(),
                    tenant.to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        // Create, not get-then-create: it needs no read permission on namespaces and
        // no window in between.
        match Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(err) => Err(err.into()),
        }
    }

    /// Bounds the Workflow resources tenant `tenant`'s namespace may hold to `max` (its
    /// `max_workflows` quota) with the ResourceQuota [`WORKFLOW_QUOTA`]; `0` removes the
    /// bound.
    ///
    /// The operator refuses a Workflow past the quota, but it still caches and
    /// reconciles every resource: without this bound, a tenant allowed to `kubectl
    /// apply` in its namespace could create them by the thousand, and the operator,
    /// which serves every tenant, would spend its memory and time on them. The API
    /// server refuses a create past the quota before anything is stored.
    ///
    /// # Errors
    /// [`KubeError::NoNamespace`], [`KubeError::Api`].
    pub(crate) async fn limit_workflows(&self, tenant: &str, max: u64) -> Result<(), KubeError> {
        let api = Api::<ResourceQuota>::namespaced(self.client.clone(), tenant);
        let result = if max == 0 {
            match api.delete(WORKFLOW_QUOTA, &DeleteParams::default()).await {
                Err(err) if is_not_found(&err) => Ok(()),
                result => result.map(drop),
            }
        } else {
            let quota = serde_json::json!({
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {
                    "name": WORKFLOW_QUOTA,
                    "labels": { TENANT_LABEL: tenant },
                },
                "spec": { "hard": { WORKFLOW_COUNT: max.to_string() } },
            });
            let params = PatchParams::apply(FIELD_MANAGER).force();
            api.patch(WORKFLOW_QUOTA, &params, &Patch::Apply(&quota))
                .await
                .map(drop)
        };
        result.map_err(|err| match err {
            err if is_not_found(&err) => KubeError::NoNamespace {
                tenant: tenant.to_owned(),
            },
            err => err.into(),
        })?;
        if max > 0 {
            self.wait_counted(&api, tenant).await?;
        }
        Ok(())
    }

    /// Waits until the quota controller has counted the Workflows in `tenant`'s
    /// namespace into [`WORKFLOW_QUOTA`]: until then the API server refuses every
    /// Workflow there ("status unknown for quota"), so a tenant's first deploy right
    /// after `faas tenant create` would fail.
    async fn wait_counted(&self, api: &Api<ResourceQuota>, tenant: &str) -> Result<(), KubeError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let counted = api
                .get_opt(WORKFLOW_QUOTA)
                .await?
                .and_then(|quota| quota.status?.used)
                .is_some_and(|used| used.contains_key(WORKFLOW_COUNT));
            if counted {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(KubeError::QuotaNotCounted {
                    tenant: tenant.to_owned(),
                    timeout: self.timeout,
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}
