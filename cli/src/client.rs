//! The admin API client the deploy, invoke, ls, status and rm commands share.

use anyhow::{Context, bail};
use faas_gateway::DeployRequest;
use faas_gateway::admin::{
    COMPONENT_PART, CreateTenantBody, CreateTokenBody, DeployHead, DeployResponse, HEAD_PART,
    IssuedToken, ListResponse, QuotaChanges, Quotas, RunsResponse, Tenant, TenantsResponse,
    TokenInfo, TokensResponse, WorkersResponse, WorkflowStatus,
};
use faas_gateway::admin::{LogQuery, LogsResponse};
use reqwest::multipart::{Form, Part};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where the platform is and how to authenticate.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// The gateway's URL.
    #[arg(long, env = "FAAS_URL", default_value = "http://127.0.0.1:3000")]
    pub url: String,
    /// The admin token or a tenant token (which acts on its own tenant only); defaults
    /// to the admin token `faas up` wrote into its data dir.
    #[arg(long, env = "FAAS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The data dir of a local `faas up`, where its token is read from.
    #[arg(long, env = "FAAS_DATA_DIR", default_value = ".faas")]
    pub data_dir: PathBuf,
}

/// A client of one gateway's admin API.
pub struct Client {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Client {
    /// A client for `server`, with the token from the flag, the environment or the
    /// local data dir.
    pub fn new(server: &ServerArgs) -> anyhow::Result<Self> {
        let token = match &server.token {
            Some(token) => token.clone(),
            None => {
                let path = server.data_dir.join("token");
                std::fs::read_to_string(&path)
                    .with_context(|| {
                        format!(
                            "no --token or FAAS_TOKEN given, and no token file at {} (start `faas up` there, or pass the token)",
                            path.display()
                        )
                    })?
                    .trim()
                    .to_owned()
            }
        };
        Ok(Self {
            http: reqwest::Client::new(),
            url: server.url.trim_end_matches('/').to_owned(),
            token,
        })
    }

    /// The gateway's base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn admin(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}/admin/v1/{path}", self.url))
            .bearer_auth(&self.token)
    }

    /// Uploads a workflow. While the gateway refuses it because the tenant's other
    /// deploys are in progress (429), or every tenant's uploads take what uploads may
    /// hold (503 with `Retry-After`), it waits as told and sends it again, for
    /// [`DEPLOY_PATIENCE`] at most.
    pub async fn deploy(&self, request: &DeployRequest) -> anyhow::Result<DeployResponse> {
        let head = serde_json::to_vec(&DeployHead::of(request)).context("encoding the upload")?;
        let head = bytes::Bytes::from(head);
        let started = Instant::now();
        let mut said = false;
        loop {
            let response = self
                .admin(Method::POST, "workflows")
                .multipart(upload_form(&head, request))
                .send()
                .await;
            let wait = match &response {
                Ok(refused)
                    if refused.status() == StatusCode::TOO_MANY_REQUESTS
                        || (refused.status() == StatusCode::SERVICE_UNAVAILABLE
                            && refused.headers().contains_key(reqwest::header::RETRY_AFTER)) =>
                {
                    Some(retry_after(refused))
                }
                _ => None,
            };
            match wait {
                Some(wait) if started.elapsed() + wait < DEPLOY_PATIENCE => {
                    if !said {
                        eprintln!(
                            "the gateway holds other deploys of this tenant (or of all \
                             tenants, as many as it may); sending this one again as they \
                             finish (for {} s at most)",
                            DEPLOY_PATIENCE.as_secs()
                        );
                        said = true;
                    }
                    tokio::time::sleep(wait).await;
                }
                _ => return decode(response, "deploying").await,
            }
        }
    }

    /// Lists deployed workflows.
    pub async fn list(&self) -> anyhow::Result<ListResponse> {
        decode(self.admin(Method::GET, "workflows").send().await, "listing").await
    }

    /// One workflow's status.
    pub async fn status(&self, name: &str) -> anyhow::Result<WorkflowStatus> {
        let response = self
            .admin(Method::GET, &format!("workflows/{name}"))
            .send()
            .await;
        decode(response, "reading status").await
    }

    /// A workflow's recent runs, newest first.
    pub async fn runs(&self, name: &str) -> anyhow::Result<RunsResponse> {
        let response = self
            .admin(Method::GET, &format!("workflows/{name}/runs"))
            .send()
            .await;
        decode(response, "reading runs").await
    }

    /// A workflow's guests' log lines that match `query`, oldest first.
    pub async fn logs(&self, name: &str, query: &LogQuery) -> anyhow::Result<LogsResponse> {
        let response = self.logs_request(name, query, false).send().await;
        decode(response, "reading logs").await
    }

    /// A follow stream of a workflow's log lines (NDJSON), its status checked.
    pub async fn follow_logs(&self, name: &str, query: &LogQuery) -> anyhow::Result<Response> {
        let response = self.logs_request(name, query, true).send().await;
        successful(response, "following logs").await
    }

    fn logs_request(&self, name: &str, query: &LogQuery, follow: bool) -> RequestBuilder {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        if let Some(function) = &query.function {
            pairs.push(("function", function.clone()));
        }
        if let Some(run) = &query.run {
            pairs.push(("run", run.clone()));
        }
        if let Some(since) = query.since_ms {
            pairs.push(("since_ms", since.to_string()));
        }
        if follow {
            pairs.push(("follow", "1".to_owned()));
        }
        self.admin(Method::GET, &format!("workflows/{name}/logs"))
            .query(&pairs)
    }

    /// The workers and what runs on them.
    pub async fn workers(&self) -> anyhow::Result<WorkersResponse> {
        decode(
            self.admin(Method::GET, "workers").send().await,
            "listing workers",
        )
        .await
    }

    /// Creates a tenant with its own `quotas` (admin token only).
    pub async fn create_tenant(&self, name: &str, quotas: Quotas) -> anyhow::Result<Tenant> {
        let body = CreateTenantBody {
            quotas,
            name: name.to_owned(),
        };
        let response = self.admin(Method::POST, "tenants").json(&body).send().await;
        decode(response, "creating the tenant").await
    }

    /// Changes a tenant's quotas (admin token only).
    pub async fn set_tenant_quotas(
        &self,
        name: &str,
        changes: &QuotaChanges,
    ) -> anyhow::Result<Tenant> {
        let response = self
            .admin(Method::PATCH, &format!("tenants/{name}"))
            .json(changes)
            .send()
            .await;
        decode(response, "changing the tenant's quotas").await
    }

    /// Lists the tenants (admin token only).
    pub async fn tenants(&self) -> anyhow::Result<TenantsResponse> {
        let response = self.admin(Method::GET, "tenants").send().await;
        decode(response, "listing tenants").await
    }

    /// Removes a tenant with no deployed workflows, revoking its tokens.
    pub async fn remove_tenant(&self, name: &str) -> anyhow::Result<serde_json::Value> {
        let response = self
            .admin(Method::DELETE, &format!("tenants/{name}"))
            .send()
            .await;
        decode(response, "removing the tenant").await
    }

    /// Creates a token for `tenant`; its secret is in the answer only.
    pub async fn create_token(&self, tenant: &str, label: &str) -> anyhow::Result<IssuedToken> {
        let body = CreateTokenBody {
            tenant: tenant.to_owned(),
            label: label.to_owned(),
        };
        let response = self.admin(Method::POST, "tokens").json(&body).send().await;
        decode(response, "creating the token").await
    }

    /// Lists the tokens of `tenant`, or all the caller may see.
    pub async fn tokens(&self, tenant: Option<&str>) -> anyhow::Result<TokensResponse> {
        let mut request = self.admin(Method::GET, "tokens");
        if let Some(tenant) = tenant {
            request = request.query(&[("tenant", tenant)]);
        }
        decode(request.send().await, "listing tokens").await
    }

    /// Revokes token `id`.
    pub async fn revoke_token(&self, id: &str) -> anyhow::Result<TokenInfo> {
        #[derive(serde::Deserialize)]
        struct Revoked {
            token: TokenInfo,
        }
        let response = self
            .admin(Method::DELETE, &format!("tokens/{id}"))
            .send()
            .await;
        let revoked: Revoked = decode(response, "revoking the token").await?;
        Ok(revoked.token)
    }

    /// Removes a workflow.
    pub async fn remove(&self, name: &str) -> anyhow::Result<()> {
        let response = self
            .admin(Method::DELETE, &format!("workflows/{name}"))
            .send()
            .await;
        decode::<serde_json::Value>(response, "removing")
            .await
            .map(|_| ())
    }
}

/// How long `faas deploy` keeps sending a deploy the gateway refused because the
/// tenant's other deploys were in progress: several large compiles' worth.
pub const DEPLOY_PATIENCE: Duration = Duration::from_secs(600);

/// A deploy upload of `request` (the wire format is in [`faas_gateway::admin`]): its
/// components are sent from the bytes already read, not copied.
fn upload_form(head: &bytes::Bytes, request: &DeployRequest) -> Form {
    let head = Part::stream_with_length(head.clone(), head.len() as u64);
    request.components.iter().fold(
        Form::new().part(HEAD_PART, head),
        |form, (function, component)| {
            let bytes = bytes::Bytes::from_owner(component.clone());
            let part =
                Part::stream_with_length(bytes, component.len() as u64).file_name(function.clone());
            form.part(COMPONENT_PART, part)
        },
    )
}

/// How long a 429 asks the client to wait (`Retry-After` in seconds, 1 to 30; 2 when
/// absent or not a number).
fn retry_after(response: &Response) -> Duration {
    let seconds = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .unwrap_or(2);
    Duration::from_secs(seconds.clamp(1, 30))
}

/// Turns an admin response into `T`, or into an error carrying the server's message.
async fn decode<T: serde::de::DeserializeOwned>(
    response: reqwest::Result<Response>,
    doing: &str,
) -> anyhow::Result<T> {
    let body = successful(response, doing)
        .await?
        .bytes()
        .await
        .context("reading the gateway's answer")?;
    serde_json::from_slice(&body)
        .with_context(|| format!("{doing}: unexpected answer from the gateway"))
}

/// The response if it succeeded, else an error with the gateway's message.
async fn successful(response: reqwest::Result<Response>, doing: &str) -> anyhow::Result<Response> {
    let response = response.with_context(|| format!("{doing}: the gateway is unreachable"))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response
        .bytes()
        .await
        .context("reading the gateway's answer")?;
    let message = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|value| value["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    if status == StatusCode::UNAUTHORIZED {
        bail!("{doing}: the gateway refused the token ({message})");
    }
    bail!("{doing}: {message} (HTTP {status})")
}
