//! The admin API under `/admin/v1`, behind a bearer token: the admin token (the
//! operator, who may do everything) or a tenant token (who acts on its own tenant
//! only; "own" below):
//!
//! | method | path | does | who |
//! |---|---|---|---|
//! | POST | `/admin/v1/workflows` | deploy an upload (below); answers [`DeployResponse`] | own tenant |
//! | GET | `/admin/v1/workflows` | list: [`ListResponse`] | own workflows |
//! | GET | `/admin/v1/workflows/{name}` | one workflow's [`WorkflowStatus`] | own |
//! | DELETE | `/admin/v1/workflows/{name}` | remove it | own |
//! | GET | `/admin/v1/workflows/{name}/runs` | its recent runs: [`RunsResponse`] | own |
//! | GET | `/admin/v1/workflows/{name}/logs[?function=&run=&since_ms=&follow=1]` | its guests' log lines: [`LogsResponse`], or with `follow=1` NDJSON lines (a [`faas_invoke::LogLine`] each, `{"missed": N}` when the reader fell behind, an empty line as a heartbeat) until the client goes, or what let it in no longer holds (its token revoked, its tenant or the workflow removed) | own |
//! | GET | `/admin/v1/workers` | workers and their workflows: [`WorkersResponse`] | admin |
//! | DELETE | `/admin/v1/workers/{id}` | take a worker out; its workflows move | admin |
//! | POST | `/admin/v1/tenants` | create a [`CreateTenantBody`] (name, optional [`Quotas`]); answers a [`Tenant`] | admin |
//! | GET | `/admin/v1/tenants` | list: [`TenantsResponse`] | admin |
//! | PATCH | `/admin/v1/tenants/{name}` | change its quotas ([`QuotaChanges`]); answers the [`Tenant`] | admin |
//! | DELETE | `/admin/v1/tenants/{name}` | remove it, revoking its tokens | admin |
//! | POST | `/admin/v1/tokens` | create a [`CreateTokenBody`]; answers [`IssuedToken`] | own tenant |
//! | GET | `/admin/v1/tokens[?tenant=NAME]` | list: [`TokensResponse`] | own tenant |
//! | DELETE | `/admin/v1/tokens/{id}` | revoke it | own tenant |
//!
//! A deploy upload is `multipart/form-data`: a part [`HEAD_PART`] first, a
//! [`DeployHead`] as JSON (the manifest, its schemas, each component's size), then a part
//! [`COMPONENT_PART`] per function, its file name the function's name and its content
//! the component as it is. The gateway reads each component straight into the buffer it
//! keeps, so a deploy holds one copy of its upload, not the three of base64 in JSON.
//!
//! Another tenant's workflows and tokens are invisible to a tenant token (404, as if
//! they did not exist, so their names do not leak); what only the operator may do is
//! 403. Errors are `{"error": {"kind", "message", ...}}`; a manifest error adds `file`,
//! `line`, `column` and `field`. A deploy over the tenant's workflow quota is 403 with
//! kind `quota`, its message naming the quota and how an operator raises it. A tenant
//! holding `max_deploys_per_tenant` deploys already (in progress or waiting) gets 429
//! with kind `too_many_deploys` and `Retry-After` for one more, before its upload is
//! read ([`crate::deploy_admission`]). A deploy whose functions did not load is 400
//! `component` (the component is wrong), 422 `compile_limit` (compiling it went past a
//! worker's `--compile-timeout-secs` or `--compile-memory-mb`), or 500 `cache` or
//! `engine` (the worker's own failure), from the gateway's process or a worker's alike.
//!
//! In Kubernetes mode (`faas gateway --kubernetes`, [`crate::kubernetes`]) a deploy
//! applies a Workflow resource and a removal deletes it; their own errors are kinds
//! `no_namespace` (409), `degraded` (with the operator's `reason`: 422 for a spec it
//! refused, 409 or 403 for a name, route or quota lost to another deploy, 503 else),
//! `operator_timeout` (504) and `kubernetes` (503).

use crate::auth::{self, Caller, TenantCredential, authenticate};
use crate::deploy_admission;
use crate::kubernetes::KubeError;
use crate::logs::FollowAccess;
pub use crate::logs::{LogQuery, LogsResponse};
use crate::registry::{DeployError, DeployOutcome, Deployment, Registry, no_tenant_store};
use crate::response::{self, Body};
use crate::server::App;
use crate::upload;
pub use crate::upload::{COMPONENT_PART, DeployHead, HEAD_PART, MAX_MANIFEST_BYTES};
use faas_invoke::{LoadErrorKind, RunRecord};
use faas_kube::status::reason;
use faas_scheduler::WorkerId;
pub use faas_store::{IssuedToken, QuotaChanges, Quotas, Tenant, TokenInfo};
use faas_store::{TenantError, TenantStore};
use faas_workflow::ManifestError;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

/// The path prefix of the admin API.
pub const PREFIX: &str = "/admin/v1/";

/// The answer to a deploy.
#[derive(Debug, Serialize, Deserialize)]
pub struct DeployResponse {
    /// `deployed` or `unchanged`.
    pub status: String,
    /// The workflow as it now runs.
    pub workflow: WorkflowStatus,
}

/// The answer to a list.
#[derive(Debug, Serialize, Deserialize)]
pub struct ListResponse {
    /// Every deployed workflow, by name.
    pub workflows: Vec<WorkflowStatus>,
}

/// The answer to a runs query.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunsResponse {
    /// Recent runs, newest first.
    pub runs: Vec<RunRecord>,
}

/// The answer to a workers query.
#[derive(Debug, Serialize, Deserialize)]
pub struct WorkersResponse {
    /// Every worker, by id.
    pub workers: Vec<WorkerStatus>,
}

/// One worker and what runs on it.
#[derive(Debug, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// Its id.
    pub id: String,
    /// The workflows it holds a replica of.
    pub workflows: Vec<String>,
}

/// A tenant to create.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantBody {
    /// Its name, as manifests write it.
    pub name: String,
    /// Its own limits; those left out are the platform's defaults.
    #[serde(default, skip_serializing_if = "Quotas::is_default")]
    pub quotas: Quotas,
}

/// The answer to a tenants query.
#[derive(Debug, Serialize, Deserialize)]
pub struct TenantsResponse {
    /// Every tenant, by name.
    pub tenants: Vec<Tenant>,
}

/// A token to create.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenBody {
    /// The tenant it acts for.
    pub tenant: String,
    /// What it is for (shown in lists).
    #[serde(default)]
    pub label: String,
}

/// The answer to a tokens query.
#[derive(Debug, Serialize, Deserialize)]
pub struct TokensResponse {
    /// The tokens, oldest first, without their secrets.
    pub tokens: Vec<TokenInfo>,
}

/// The largest tenant or token request body.
const MAX_SMALL_BODY: usize = 64 << 10;

/// A deployed workflow as the API shows it.
#[derive(Debug, Serialize, Deserialize)]
pub struct WorkflowStatus {
    /// The workflow's name.
    pub name: String,
    /// Its tenant.
    pub tenant: String,
    /// Deploy counter; grows with each change.
    pub revision: u64,
    /// Hash of manifest and components.
    pub digest: String,
    /// The workers its replicas are placed on.
    pub workers: Vec<String>,
    /// Unix time of the deploy, in seconds.
    pub deployed_at: u64,
    /// `ready`: every function compiled and linked.
    pub state: String,
    /// Its HTTP routes.
    pub routes: Vec<RouteStatus>,
    /// Its functions.
    pub functions: Vec<FunctionStatus>,
}

/// One HTTP route of a workflow.
#[derive(Debug, Serialize, Deserialize)]
pub struct RouteStatus {
    /// The route pattern.
    pub route: String,
    /// The function it invokes.
    pub function: String,
}

/// One function of a workflow: its component digest and effective limits.
pub use faas_invoke::FunctionSummary as FunctionStatus;

impl From<&Deployment> for WorkflowStatus {
    fn from(deployment: &Deployment) -> Self {
        Self {
            name: deployment.workflow.name.clone(),
            tenant: deployment.key.tenant.clone(),
            revision: deployment.revision,
            digest: deployment.digest.clone(),
            workers: deployment.workers().map(ToString::to_string).collect(),
            deployed_at: deployment
                .deployed_at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
            // In services mode a workflow whose workers were lost stays routed with no
            // replica until its new placement has loaded.
            state: if deployment.replicas.is_empty() {
                "unavailable"
            } else {
                "ready"
            }
            .to_owned(),
            routes: deployment
                .workflow
                .http_triggers
                .iter()
                .map(|trigger| RouteStatus {
                    route: trigger.route.to_string(),
                    function: trigger.target.to_string(),
                })
                .collect(),
            functions: deployment.functions.clone(),
        }
    }
}

/// Serves an admin request.
pub(crate) async fn handle(app: &App, request: Request<Incoming>) -> Response<Body> {
    let caller =
        match authenticate(request.headers(), &app.config.token, app.registry.tenants()).await {
            Ok(Some(caller)) => caller,
            Ok(None) => return unauthorized(),
            Err(err) => return tenant_error(err),
        };
    let path = request.uri().path().trim_end_matches('/').to_owned();
    let rest = path.strip_prefix(PREFIX).unwrap_or_default();
    let segments: Vec<&str> = rest.split('/').collect();
    match (request.method().clone(), segments.as_slice()) {
        (Method::POST, ["workflows"]) => deploy(app, request, &caller).await,
        (Method::GET, ["workflows"]) => {
            let workflows = app
                .registry
                .list()
                .iter()
                .filter(|d| caller.may_act_for(&d.key.tenant))
                .map(|d| d.as_ref().into())
                .collect();
            response::json(StatusCode::OK, &ListResponse { workflows })
        }
        (Method::GET, ["workflows", name]) => match visible(app, &caller, name) {
            Some(deployment) => {
                response::json(StatusCode::OK, &WorkflowStatus::from(deployment.as_ref()))
            }
            None => not_found(name),
        },
        (Method::DELETE, ["workflows", name]) => {
            // Counted with the tenant's deploys: in Kubernetes mode a removal waits for
            // the operator (up to the deploy timeout), asking the API server as it
            // waits.
            let _ticket = match app.deploys.admit(&caller) {
                Ok(ticket) => ticket,
                Err(refusal) => return too_many_deploys(app, &refusal),
            };
            remove_workflow(app, &caller, name).await
        }
        (Method::GET, ["workflows", name, "runs"]) => match visible(app, &caller, name) {
            Some(deployment) => response::json(
                StatusCode::OK,
                &RunsResponse {
                    runs: app.registry.runs(&deployment.key),
                },
            ),
            None => not_found(name),
        },
        (Method::GET, ["workflows", name, "logs"]) => match visible(app, &caller, name) {
            Some(deployment) => {
                let tenant = &deployment.key.tenant;
                let credential = TenantCredential::presented(request.headers(), &caller);
                logs(app, name, tenant, credential, request.uri().query()).await
            }
            None => not_found(name),
        },
        (_, ["workers" | "tenants", ..]) if !caller.is_admin() => forbidden(format!(
            "{path} is the operator's: it needs the admin token, not a tenant token"
        )),
        (Method::GET, ["workers"]) => {
            let workers = app
                .registry
                .workers()
                .into_iter()
                .map(|(id, workflows)| WorkerStatus {
                    id: id.to_string(),
                    workflows,
                })
                .collect();
            response::json(StatusCode::OK, &WorkersResponse { workers })
        }
        (Method::DELETE, ["workers", id]) => {
            match app
                .registry
                .remove_worker(&WorkerId((*id).to_owned()))
                .await
            {
                Ok(unplaced) => {
                    tracing::info!(worker = *id, ?unplaced, "worker removed");
                    response::json(
                        StatusCode::OK,
                        &serde_json::json!({"status": "removed", "id": id, "unplaced": unplaced}),
                    )
                }
                Err(_) => response::error(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("no worker `{id}`"),
                ),
            }
        }
        (
            Method::POST | Method::GET | Method::PATCH | Method::DELETE,
            ["tenants" | "tokens", ..],
        ) if app.registry.tenants().is_none() => deploy_error(no_tenant_store()),
        (Method::POST, ["tenants"]) => create_tenant(app, request).await,
        (Method::GET, ["tenants"]) => match tenant_store(app).tenants().await {
            Ok(tenants) => response::json(StatusCode::OK, &TenantsResponse { tenants }),
            Err(err) => tenant_error(err),
        },
        (Method::PATCH, ["tenants", name]) => set_quotas(app, name, request).await,
        (Method::DELETE, ["tenants", name]) => remove_tenant(app, name).await,
        (Method::POST, ["tokens"]) => create_token(app, request, &caller).await,
        (Method::GET, ["tokens"]) => list_tokens(app, request.uri().query(), &caller).await,
        (Method::DELETE, ["tokens", id]) => revoke_token(app, id, &caller).await,
        (
            _,
            ["workflows"]
            | ["workflows", _]
            | ["workflows", _, "runs" | "logs"]
            | ["workers"]
            | ["workers", _]
            | ["tenants"]
            | ["tenants", _]
            | ["tokens"]
            | ["tokens", _],
        ) => response::error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{} is not allowed on {path}", request.method()),
        ),
        _ => response::error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no admin endpoint {path}"),
        ),
    }
}

/// A workflow's log lines, or a follow stream of them. Asked for with a tenant's token
/// (`credential`; `None` for the admin token), either counts against the tenant's log
/// requests open at once (`--max-log-follows-per-tenant`) until it is sent or closed: a
/// read is up to [`faas_store::logs::MAX_READ_BYTES`] of lines, parsed and held as JSON.
/// What the store read for it is charged to the tenant's rate of log bytes read
/// (`--max-log-read-mib-per-sec-per-tenant`, [`crate::log_read_rate`]).
/// A follow ends once what let it in no longer holds ([`FollowGrant`]).
async fn logs(
    app: &App,
    name: &str,
    tenant: &str,
    credential: Option<TenantCredential>,
    query: Option<&str>,
) -> Response<Body> {
    let (query, follow) = match crate::logs::parse_query(query) {
        Ok(parsed) => parsed,
        Err(message) => return response::error(StatusCode::BAD_REQUEST, "bad_request", message),
    };
    let mut held = None;
    let mut admitted = None;
    if credential.is_some() {
        let mut claim = app.follows.claim(tenant.to_owned());
        if claim.grow_to(1).is_err() {
            return response::refused(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_follows",
                format!(
                    "tenant `{tenant}` has {} log reads and follow streams open, the most \
                     one tenant may (the gateway's --max-log-follows-per-tenant); close \
                     one first",
                    app.config.max_log_follows_per_tenant
                ),
            );
        }
        held = Some(claim);
        let most = faas_store::logs::MAX_READ_BYTES;
        match app
            .log_reads
            .as_ref()
            .map(|rate| (rate, rate.admit(tenant, most)))
        {
            None => {}
            Some((rate, Ok(read))) => admitted = Some((rate.clone(), read)),
            Some((_, Err(wait))) => {
                let mut refused = response::refused(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_log_reads",
                    format!(
                        "tenant `{tenant}` read more log lines than it may per second (the \
                         gateway's --max-log-read-mib-per-sec-per-tenant); read again in {} \
                         ms",
                        wait.as_millis()
                    ),
                );
                refused.headers_mut().insert(
                    header::RETRY_AFTER,
                    header::HeaderValue::from(wait.as_secs() + 1),
                );
                return refused;
            }
        }
    }
    let Some(store) = &app.logs else {
        return response::error(
            StatusCode::NOT_IMPLEMENTED,
            "no_logs",
            "this gateway keeps no function logs",
        );
    };
    // A tenant's read (admitted above); the operator's is not charged.
    let stream = match store.read(tenant, name, query, follow, admitted).await {
        Ok(crate::logs::ReadOutcome::Lines(read)) => {
            return response::json_holding(StatusCode::OK, &read, held);
        }
        Ok(crate::logs::ReadOutcome::Follow(stream)) => stream,
        Err(err) => {
            return response::error(StatusCode::SERVICE_UNAVAILABLE, "logs", err.to_string());
        }
    };
    let grant = FollowGrant {
        registry: app.registry.clone(),
        deployments: app.registry.changes(),
        workflow: name.to_owned(),
        tenant: tenant.to_owned(),
        credential,
    };
    let stream = crate::logs::while_allowed(stream, grant, crate::logs::FOLLOW_RECHECK);
    // The follow counts until its stream is dropped (its client went, or it ended).
    let body =
        http_body_util::StreamBody::new(futures_util::StreamExt::map(stream, move |chunk| {
            let _held = &held;
            Ok(hyper::body::Frame::data(chunk))
        }));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body.boxed_unsync())
        .expect("static response parts are valid")
}

/// What a log follow was let in by, asked again while it lasts: the workflow still its
/// tenant's, and the tenant token it was opened with still live (which holds only while
/// the tenant exists), or, opened with the admin token, the tenant still there. The
/// request checked these once, and a follow lasts as long as its client stays: a
/// revoked or leaked token would read on, and in services mode, where a follow reads
/// its workflow's stream by name, a follow of a removed tenant would read the lines of
/// the next tenant of that name.
struct FollowGrant {
    registry: Arc<Registry>,
    /// Moves with every change to the deployments: one made here, or, in services
    /// mode, another gateway's as this one learns of it.
    deployments: tokio::sync::watch::Receiver<u64>,
    workflow: String,
    tenant: String,
    /// The tenant token it was opened with; `None` for the admin token.
    credential: Option<TenantCredential>,
}

impl FollowAccess for FollowGrant {
    fn generation(&self) -> u64 {
        // Both only grow, so their sum moves whenever either does.
        auth::access_generation().wrapping_add(*self.deployments.borrow())
    }

    async fn allowed(&self) -> bool {
        let (workflow, tenant) = (self.workflow.as_str(), self.tenant.as_str());
        let still_theirs = self.registry.get_of(tenant, workflow).is_some();
        if !still_theirs {
            tracing::info!(workflow, tenant, "log follow ended: the workflow went");
            return false;
        }
        let live = match (&self.credential, self.registry.tenants()) {
            (Some(credential), Some(tenants)) => credential.is_live(tenants).await,
            (None, Some(tenants)) => tenants.tenant(tenant).await.map(|found| found.is_some()),
            // No tenant store: the admin token is the only credential, and there are no
            // tenants to remove.
            (credential, None) => Ok(credential.is_none()),
        };
        match live {
            Ok(true) => true,
            Ok(false) => {
                let reason = match &self.credential {
                    Some(credential) => format!(
                        "the token of tenant `{}` was revoked, or its tenant removed",
                        credential.tenant()
                    ),
                    None => "its tenant was removed".to_owned(),
                };
                tracing::info!(workflow, tenant, "log follow ended: {reason}");
                false
            }
            // Not known to be allowed is not allowed: the reader may follow again.
            Err(err) => {
                tracing::warn!(
                    workflow,
                    tenant,
                    "log follow ended: checking its token: {err}"
                );
                false
            }
        }
    }
}

/// Runs `change`, which may take access back (a token revocation, a tenant removal),
/// and then, whatever it answered (a removal can fail after its tokens were revoked),
/// has the log follows of this process ask again before their next line.
async fn removing_access<T>(change: impl std::future::Future<Output = T>) -> T {
    let answer = change.await;
    auth::access_taken_back();
    answer
}

/// The answer to a request without a credential the admin API (or `/metrics`) knows.
pub(crate) fn unauthorized() -> Response<Body> {
    let mut response = response::error(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "this needs `Authorization: Bearer <token>`: the admin token or a live tenant \
         token (see `faas up` output)",
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

fn forbidden(message: impl Into<String>) -> Response<Body> {
    response::error(StatusCode::FORBIDDEN, "forbidden", message)
}

/// The deployment `name` if `caller` may see it: another tenant's workflow is as
/// good as absent.
fn visible(app: &App, caller: &Caller, name: &str) -> Option<std::sync::Arc<Deployment>> {
    app.registry
        .get(name)
        .filter(|deployment| caller.may_act_for(&deployment.key.tenant))
}

/// The tenant store; the routes that use it are only reached when there is one.
fn tenant_store(app: &App) -> &TenantStore {
    app.registry
        .tenants()
        .expect("tenant routes are only reached with a tenant store")
}

/// Reads a JSON body of at most `limit` bytes, or the error response to send.
async fn read_json<T: DeserializeOwned>(
    request: Request<Incoming>,
    limit: usize,
    what: &str,
) -> Result<T, Response<Body>> {
    let body = match Limited::new(request.into_body(), limit).collect().await {
        Ok(body) => body.to_bytes(),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => {
            return Err(response::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("{what} exceeds the limit of {limit} bytes"),
            ));
        }
        Err(err) => {
            return Err(response::error(
                StatusCode::BAD_REQUEST,
                "bad_body",
                err.to_string(),
            ));
        }
    };
    serde_json::from_slice(&body).map_err(|err| {
        response::error(
            StatusCode::BAD_REQUEST,
            "bad_upload",
            format!("{what} is not valid: {err}"),
        )
    })
}

async fn create_tenant(app: &App, request: Request<Incoming>) -> Response<Body> {
    let body: CreateTenantBody = match read_json(request, MAX_SMALL_BODY, "tenant body").await {
        Ok(body) => body,
        Err(response) => return response,
    };
    match app.registry.create_tenant(&body.name, body.quotas).await {
        Ok(tenant) => {
            tracing::info!(tenant = %tenant.name, quotas = ?tenant.quotas, "tenant created");
            response::json(StatusCode::CREATED, &tenant)
        }
        Err(err) => deploy_error(err),
    }
}

async fn set_quotas(app: &App, name: &str, request: Request<Incoming>) -> Response<Body> {
    let changes: QuotaChanges = match read_json(request, MAX_SMALL_BODY, "quota changes").await {
        Ok(changes) => changes,
        Err(response) => return response,
    };
    match app.registry.set_tenant_quotas(name, &changes).await {
        Ok(tenant) => {
            tracing::info!(tenant = %tenant.name, quotas = ?tenant.quotas, "tenant quotas set");
            response::json(StatusCode::OK, &tenant)
        }
        Err(err) => deploy_error(err),
    }
}

async fn remove_tenant(app: &App, name: &str) -> Response<Body> {
    match removing_access(app.registry.remove_tenant(name)).await {
        Ok(removed) => {
            let (revoked, forgotten) = (removed.revoked, removed.forgotten);
            tracing::info!(
                tenant = name,
                revoked,
                kv_entries = forgotten.kv_entries,
                stream_keys = forgotten.stream_keys,
                "tenant removed"
            );
            let mut answer = serde_json::json!({
                "status": "deleted",
                "name": name,
                "revoked_tokens": revoked,
                "removed_kv_entries": forgotten.kv_entries,
                "removed_stream_keys": forgotten.stream_keys,
            });
            if app.registry.has_tenant_namespaces() {
                // It may hold more than workflows; deleting it is the cluster admin's
                // decision.
                answer["note"] = format!(
                    "namespace `{name}` is left in place; delete it with `kubectl delete \
                     namespace {name}`"
                )
                .into();
            }
            response::json(StatusCode::OK, &answer)
        }
        Err(err) => deploy_error(err),
    }
}

async fn create_token(app: &App, request: Request<Incoming>, caller: &Caller) -> Response<Body> {
    let body: CreateTokenBody = match read_json(request, MAX_SMALL_BODY, "token body").await {
        Ok(body) => body,
        Err(response) => return response,
    };
    if !caller.may_act_for(&body.tenant) {
        return forbidden("a tenant token creates tokens for its own tenant only");
    }
    match app.registry.create_token(&body.tenant, &body.label).await {
        Ok(issued) => {
            tracing::info!(tenant = %body.tenant, token = %issued.token.id, "token created");
            response::json(StatusCode::CREATED, &issued)
        }
        Err(err) => deploy_error(err),
    }
}

async fn list_tokens(app: &App, query: Option<&str>, caller: &Caller) -> Response<Body> {
    let asked = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("tenant="));
    let tenant = match (caller, asked) {
        (_, Some(asked)) if !caller.may_act_for(asked) => {
            return forbidden("a tenant token lists its own tenant's tokens only");
        }
        (_, Some(asked)) => Some(asked),
        (Caller::Tenant(own), None) => Some(own.as_str()),
        (Caller::Admin, None) => None,
    };
    match tenant_store(app).tokens(tenant).await {
        Ok(tokens) => response::json(StatusCode::OK, &TokensResponse { tokens }),
        Err(err) => tenant_error(err),
    }
}

async fn revoke_token(app: &App, id: &str, caller: &Caller) -> Response<Body> {
    // Another tenant's token is as good as absent.
    match tenant_store(app).token(id).await {
        Ok(Some(token)) if caller.may_act_for(&token.tenant) => {}
        Ok(_) => return tenant_error(TenantError::NoSuchToken(id.to_owned())),
        Err(err) => return tenant_error(err),
    }
    match removing_access(app.registry.revoke_token(id)).await {
        Ok(token) => {
            tracing::info!(tenant = %token.tenant, token = %token.id, "token revoked");
            response::json(
                StatusCode::OK,
                &serde_json::json!({"status": "revoked", "token": token}),
            )
        }
        Err(err) => deploy_error(err),
    }
}

/// The answer to a tenant-store error.
pub(crate) fn tenant_error(err: TenantError) -> Response<Body> {
    let (status, kind) = match &err {
        TenantError::InvalidName(_) | TenantError::InvalidLabel | TenantError::InvalidQuota(_) => {
            (StatusCode::BAD_REQUEST, "bad_request")
        }
        TenantError::TenantExists(_) => (StatusCode::CONFLICT, "conflict"),
        TenantError::Leaving(_) => (StatusCode::CONFLICT, "tenant_leaving"),
        TenantError::NoSuchTenant(_) => (StatusCode::NOT_FOUND, "no_such_tenant"),
        TenantError::NoSuchToken(_) => (StatusCode::NOT_FOUND, "not_found"),
        TenantError::HasWorkflows { .. } => (StatusCode::CONFLICT, "has_workflows"),
        TenantError::TooManyTokens(_) => (StatusCode::FORBIDDEN, "quota"),
        TenantError::Store(_) | TenantError::Redis(_) | TenantError::Malformed { .. } => {
            tracing::error!("tenant store: {err}");
            (StatusCode::SERVICE_UNAVAILABLE, "tenant_store")
        }
        TenantError::WrongBackend(_) => {
            tracing::error!("tenant store: {err}");
            (StatusCode::INTERNAL_SERVER_ERROR, "tenant_store")
        }
    };
    response::error(status, kind, err.to_string())
}

fn not_found(name: &str) -> Response<Body> {
    response::error(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no workflow `{name}` is deployed"),
    )
}

/// Removes workflow `name` for `caller`, and its logs.
async fn remove_workflow(app: &App, caller: &Caller, name: &str) -> Response<Body> {
    match app.registry.remove(name, caller).await {
        Ok(Some(tenant)) => {
            if let Some(logs) = &app.logs {
                logs.remove(&tenant, name).await;
            }
            tracing::info!(workflow = name, %tenant, "workflow removed");
            response::json(
                StatusCode::OK,
                &serde_json::json!({"status": "deleted", "name": name}),
            )
        }
        Ok(None) => not_found(name),
        Err(err) => deploy_error(err),
    }
}

/// The answer to a change refused because its tenant has its limit of deploys (and
/// removals) in the gateway already.
fn too_many_deploys(app: &App, refusal: &deploy_admission::TooManyDeploys) -> Response<Body> {
    app.metrics.deploy_refused();
    let mut response = response::error(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_deploys",
        refusal.to_string(),
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        header::HeaderValue::from(deploy_admission::RETRY_AFTER_SECS),
    );
    response
}

async fn deploy(app: &App, request: Request<Incoming>, caller: &Caller) -> Response<Body> {
    // Admitted before the upload is read: a refused deploy holds no memory.
    let ticket = match app.deploys.admit(caller) {
        Ok(ticket) => ticket,
        Err(refusal) => return too_many_deploys(app, &refusal),
    };
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let credential = TenantCredential::presented(request.headers(), caller);
    let mut body = request.into_body().into_data_stream();
    let limit = app.config.max_deploy_bytes as u64;
    // Held until this function returns: through the upload, the turn and the deploy.
    let mut held = app.uploads.claim(deploy_admission::upload_holder(caller));
    let reading = upload::read(content_type.as_deref(), &mut body, limit, &mut held);
    let deadline = upload::upload_deadline(limit);
    let read = tokio::time::timeout(deadline, reading)
        .await
        .unwrap_or(Err(upload::UploadError::TooSlow(deadline.as_secs())));
    let request = match read {
        Ok(request) => request,
        Err(err) => {
            // The tenant's place is free while the rest is read and dropped.
            drop((ticket, held));
            upload::drain(&mut body, limit).await;
            let mut response = response::error(err.status(), err.kind(), err.to_string());
            if let upload::UploadError::Budget(_) = err {
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    header::HeaderValue::from(deploy_admission::RETRY_AFTER_SECS),
                );
            }
            return response;
        }
    };
    let _turn = ticket.turn().await;
    match app
        .registry
        .deploy_as(request, caller, credential.as_ref())
        .await
    {
        Ok(outcome) => {
            let (status, deployment) = match outcome {
                DeployOutcome::Deployed(deployment) => ("deployed", deployment),
                DeployOutcome::Unchanged(deployment) => ("unchanged", deployment),
            };
            tracing::info!(
                workflow = %deployment.workflow.name,
                tenant = %deployment.key.tenant,
                revision = deployment.revision,
                status,
                "deploy"
            );
            response::json(
                StatusCode::OK,
                &DeployResponse {
                    status: status.to_owned(),
                    workflow: deployment.as_ref().into(),
                },
            )
        }
        Err(err) => deploy_error(err),
    }
}

#[derive(Serialize)]
struct ManifestDetails {
    file: String,
    line: usize,
    column: usize,
    field: String,
}

fn deploy_error(err: DeployError) -> Response<Body> {
    let message = err.to_string();
    match err {
        DeployError::Manifest(manifest) => response::error_with(
            // Naming another tenant is a matter of permission, not of syntax.
            if matches!(manifest, ManifestError::TenantMismatch(_)) {
                StatusCode::FORBIDDEN
            } else {
                StatusCode::BAD_REQUEST
            },
            "manifest",
            message,
            ManifestDetails {
                file: manifest.file(),
                line: manifest.line(),
                column: manifest.column(),
                field: manifest.field().to_owned(),
            },
        ),
        DeployError::Load(err) => load_error(err.kind(), message),
        DeployError::Conflict(_) => response::error(StatusCode::CONFLICT, "conflict", message),
        DeployError::Forbidden(_) => forbidden(message),
        DeployError::Quota(_) => response::error(StatusCode::FORBIDDEN, "quota", message),
        DeployError::Tenant(err) => tenant_error(err),
        DeployError::Unsupported(_) => {
            response::error(StatusCode::BAD_REQUEST, "unsupported", message)
        }
        DeployError::Placement(_) => {
            response::error(StatusCode::SERVICE_UNAVAILABLE, "placement", message)
        }
        DeployError::RemoteLoad { kind, .. } => load_error(kind, message),
        DeployError::SharedState(_) => {
            response::error(StatusCode::SERVICE_UNAVAILABLE, "shared_state", message)
        }
        DeployError::Store(_) => {
            response::error(StatusCode::INTERNAL_SERVER_ERROR, "store", message)
        }
        DeployError::TenantData { .. } => {
            response::error(StatusCode::SERVICE_UNAVAILABLE, "store", message)
        }
        DeployError::Kubernetes(err) => kubernetes_error(err, message),
        DeployError::Interrupted(_) => {
            response::error(StatusCode::SERVICE_UNAVAILABLE, "interrupted", message)
        }
        DeployError::CheckFailed(_) => {
            response::error(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
        }
    }
}

/// A deploy whose functions did not load, in the gateway's process or a worker's.
fn load_error(kind: LoadErrorKind, message: String) -> Response<Body> {
    let status = match kind {
        LoadErrorKind::Component => StatusCode::BAD_REQUEST,
        // A valid component, more than this worker is set to compile.
        LoadErrorKind::CompileLimit => StatusCode::UNPROCESSABLE_ENTITY,
        LoadErrorKind::Cache | LoadErrorKind::Engine => StatusCode::INTERNAL_SERVER_ERROR,
    };
    response::error(status, kind.as_str(), message)
}

#[derive(Serialize)]
struct DegradedDetails {
    reason: String,
}

/// The status of a deploy the operator marked `Degraded` with reason `why` (the
/// operator's condition reasons): the spec's problems are the deployer's to fix (4xx,
/// as the gateway's own checks answer them; the operator finds one only when another
/// deploy slipped in between), the rest the platform's (503).
fn degraded_status(why: &str) -> StatusCode {
    match why {
        reason::INVALID_SPEC | reason::INVALID_COMPONENT | reason::DIGEST_MISMATCH => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        reason::NAME_CONFLICT | reason::ROUTE_CONFLICT => StatusCode::CONFLICT,
        reason::QUOTA => StatusCode::FORBIDDEN,
        reason::UNKNOWN_TENANT => StatusCode::NOT_FOUND,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The answer to a failed deploy or removal in Kubernetes mode.
fn kubernetes_error(err: KubeError, message: String) -> Response<Body> {
    match err {
        KubeError::NoNamespace { .. } => {
            response::error(StatusCode::CONFLICT, "no_namespace", message)
        }
        KubeError::Degraded { reason, .. } => response::error_with(
            degraded_status(&reason),
            "degraded",
            message,
            DegradedDetails { reason },
        ),
        KubeError::Spec(_) => response::error(StatusCode::BAD_REQUEST, "unsupported", message),
        KubeError::Quota { .. } => response::error(StatusCode::FORBIDDEN, "quota", message),
        KubeError::Timeout { .. } | KubeError::QuotaNotCounted { .. } => {
            response::error(StatusCode::GATEWAY_TIMEOUT, "operator_timeout", message)
        }
        KubeError::NotListed { .. } => {
            response::error(StatusCode::SERVICE_UNAVAILABLE, "kubernetes", message)
        }
        KubeError::Api(_) => {
            tracing::error!("{message}");
            response::error(StatusCode::SERVICE_UNAVAILABLE, "kubernetes", message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deploy_check_that_failed_unexpectedly_is_the_gateways_error_not_a_busy_one() {
        let failed = deploy_error(DeployError::CheckFailed("task panicked".into()));
        assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let stopping = deploy_error(DeployError::Interrupted("task cancelled".into()));
        assert_eq!(stopping.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
