//! The admin API under `/admin/v1`, behind the bearer token:
//!
//! | method | path | does |
//! |---|---|---|
//! | POST | `/admin/v1/workflows` | deploy a [`DeployBody`]; answers [`DeployResponse`] |
//! | GET | `/admin/v1/workflows` | list: [`ListResponse`] |
//! | GET | `/admin/v1/workflows/{name}` | one workflow's [`WorkflowStatus`] |
//! | DELETE | `/admin/v1/workflows/{name}` | remove it |
//! | GET | `/admin/v1/workflows/{name}/runs` | its recent runs: [`RunsResponse`] |
//! | GET | `/admin/v1/workers` | workers and their workflows: [`WorkersResponse`] |
//! | DELETE | `/admin/v1/workers/{id}` | take a worker out; its workflows move |
//!
//! Errors are `{"error": {"kind", "message", ...}}`; a manifest error adds `file`,
//! `line`, `column` and `field`.

use crate::auth::is_authorized;
use crate::registry::{DeployError, DeployOutcome, DeployRequest, Deployment};
use crate::response::{self, Body};
use crate::server::App;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use faas_scheduler::WorkerId;
use faas_worker::{LoadError, RunRecord};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::UNIX_EPOCH;

/// The path prefix of the admin API.
pub const PREFIX: &str = "/admin/v1/";

/// A deploy upload.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployBody {
    /// The manifest's file name, for error messages.
    pub file_name: String,
    /// The workflow.toml text.
    pub manifest: String,
    /// Base64 component bytes by function name.
    pub components: BTreeMap<String, String>,
    /// The text of every Karmem `.km` file the manifest names, by file name as written
    /// in it (`blob.km`); the interfaces' memories are resolved from them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub schemas: BTreeMap<String, String>,
}

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
pub use faas_cluster::FunctionSummary as FunctionStatus;

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
    if !is_authorized(request.headers(), &app.config.token) {
        let mut response = response::error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the admin API needs `Authorization: Bearer <token>` (see `faas up` output)",
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        return response;
    }
    let path = request.uri().path().trim_end_matches('/').to_owned();
    let rest = path.strip_prefix(PREFIX).unwrap_or_default();
    let segments: Vec<&str> = rest.split('/').collect();
    match (request.method().clone(), segments.as_slice()) {
        (Method::POST, ["workflows"]) => deploy(app, request).await,
        (Method::GET, ["workflows"]) => {
            let workflows = app
                .registry
                .list()
                .iter()
                .map(|d| d.as_ref().into())
                .collect();
            response::json(StatusCode::OK, &ListResponse { workflows })
        }
        (Method::GET, ["workflows", name]) => match app.registry.get(name) {
            Some(deployment) => {
                response::json(StatusCode::OK, &WorkflowStatus::from(deployment.as_ref()))
            }
            None => not_found(name),
        },
        (Method::DELETE, ["workflows", name]) => match app.registry.remove(name).await {
            Ok(Some(removed)) => {
                app.metrics.set_workflows(app.registry.list().len());
                tracing::info!(workflow = *name, tenant = %removed.key.tenant, "workflow removed");
                response::json(
                    StatusCode::OK,
                    &serde_json::json!({"status": "deleted", "name": name}),
                )
            }
            Ok(None) => not_found(name),
            Err(err) => deploy_error(err),
        },
        (Method::GET, ["workflows", name, "runs"]) => match app.registry.get(name) {
            Some(_) => response::json(
                StatusCode::OK,
                &RunsResponse {
                    runs: app.registry.runs(name),
                },
            ),
            None => not_found(name),
        },
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
                    app.metrics.set_workflows(app.registry.list().len());
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
            _,
            ["workflows"]
            | ["workflows", _]
            | ["workflows", _, "runs"]
            | ["workers"]
            | ["workers", _],
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

fn not_found(name: &str) -> Response<Body> {
    response::error(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no workflow `{name}` is deployed"),
    )
}

async fn deploy(app: &App, request: Request<Incoming>) -> Response<Body> {
    let limit = app.config.max_deploy_bytes;
    let body = match Limited::new(request.into_body(), limit).collect().await {
        Ok(body) => body.to_bytes(),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => {
            return response::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("deploy upload exceeds the limit of {limit} bytes"),
            );
        }
        Err(err) => {
            return response::error(StatusCode::BAD_REQUEST, "bad_body", err.to_string());
        }
    };
    let upload: DeployBody = match serde_json::from_slice(&body) {
        Ok(upload) => upload,
        Err(err) => {
            return response::error(
                StatusCode::BAD_REQUEST,
                "bad_upload",
                format!("deploy body is not a valid upload: {err}"),
            );
        }
    };
    let mut components = BTreeMap::new();
    for (name, encoded) in upload.components {
        match BASE64.decode(encoded.as_bytes()) {
            Ok(bytes) => components.insert(name, bytes),
            Err(err) => {
                return response::error(
                    StatusCode::BAD_REQUEST,
                    "bad_upload",
                    format!("component of function `{name}` is not valid base64: {err}"),
                );
            }
        };
    }
    let request = DeployRequest {
        file_name: upload.file_name,
        manifest: upload.manifest,
        components,
        schemas: upload.schemas,
    };
    match app.registry.deploy(request).await {
        Ok(outcome) => {
            let (status, deployment) = match outcome {
                DeployOutcome::Deployed(deployment) => ("deployed", deployment),
                DeployOutcome::Unchanged(deployment) => ("unchanged", deployment),
            };
            app.metrics.set_workflows(app.registry.list().len());
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
            StatusCode::BAD_REQUEST,
            "manifest",
            message,
            ManifestDetails {
                file: manifest.file(),
                line: manifest.line(),
                column: manifest.column(),
                field: manifest.field().to_owned(),
            },
        ),
        DeployError::Load(LoadError::Cache { .. }) => {
            response::error(StatusCode::INTERNAL_SERVER_ERROR, "cache", message)
        }
        DeployError::Load(_) => response::error(StatusCode::BAD_REQUEST, "component", message),
        DeployError::Conflict(_) => response::error(StatusCode::CONFLICT, "conflict", message),
        DeployError::Unsupported(_) => {
            response::error(StatusCode::BAD_REQUEST, "unsupported", message)
        }
        DeployError::Placement(_) => {
            response::error(StatusCode::SERVICE_UNAVAILABLE, "placement", message)
        }
        DeployError::RemoteLoad { .. } => {
            response::error(StatusCode::BAD_REQUEST, "component", message)
        }
        DeployError::Cluster(_) => {
            response::error(StatusCode::SERVICE_UNAVAILABLE, "cluster", message)
        }
    }
}
