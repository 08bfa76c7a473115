//! Accepting connections (HTTP/1.1 and HTTP/2 on one port), dispatching requests, and
//! shutting down gracefully.

use crate::activator::Activator;
use crate::auth::{Caller, authenticate};
use crate::body_budget::BodyBudget;
use crate::config::GatewayConfig;
use crate::deploy_admission::DeployAdmission;
use crate::metrics::Metrics;
use crate::redis::RedisBroker;
use crate::registry::Registry;
use crate::response::{self, Body};
use crate::{admin, invoke};
use faas_connections::{Activity, Admission, TooManyRequests, drive};
use http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// Largest request head (request line plus headers) accepted over HTTP/1.1.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// What every request handler shares.
pub(crate) struct App {
    pub config: GatewayConfig,
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    /// The metrics text as last rendered, shared by the scrapes that come meanwhile.
    pub exposition: crate::metrics::Exposition,
    pub shutting_down: AtomicBool,
    /// Set once the initial workflows are deployed; `/readyz` answers 503 before.
    pub ready: AtomicBool,
    /// Holds events for workflows with no ready replica (services mode only: in
    /// embedded mode every deployment has its replicas in this process).
    pub activator: Option<Activator>,
    /// Where `faas logs` reads its workflows' lines (memory in embedded mode, Redis in
    /// services mode), and where the gateway writes its own lines about events no
    /// worker took.
    pub logs: Option<crate::logs::LogStore>,
    /// The deploys each tenant has in the gateway (`max_deploys_per_tenant`).
    pub deploys: DeployAdmission,
    /// The request bodies the gateway holds, by client (`body_budget`).
    pub bodies: Arc<BodyBudget>,
    /// The pub/sub messages and stream entries the gateway holds, by tenant
    /// (`message_budget`).
    pub messages: Arc<BodyBudget>,
    /// The deploy uploads the gateway holds, by tenant (`deploy_admission`).
    pub(crate) uploads: Arc<crate::deploy_admission::UploadBudget>,
    /// The log follow streams each tenant has open, one unit each
    /// (`max_log_follows_per_tenant`).
    pub follows: Arc<faas_budget::Budget<String>>,
    /// The log bytes each tenant may still read (`max_log_read_bytes_per_sec`); `None`
    /// for no limit.
    pub(crate) log_reads: Option<Arc<crate::log_read_rate::LogReadRate>>,
    /// The requests to each tenant's routes in flight, one unit each
    /// (`max_requests_per_tenant`).
    pub(crate) tenant_requests: Arc<faas_budget::Budget<String>>,
}

/// A gateway, configured but not yet listening.
pub struct Gateway {
    app: Arc<App>,
    broker: Option<RedisBroker>,
}

impl Gateway {
    /// A gateway serving the workflows of `registry`.
    pub fn new(config: GatewayConfig, registry: Arc<Registry>) -> Self {
        let activator = registry
            .services()
            .map(|backend| Activator::new(backend.activator_config(), backend.shared().clone()));
        Self {
            app: Arc::new(App {
                deploys: DeployAdmission::new(config.max_deploys_per_tenant),
                bodies: Arc::new(BodyBudget::new(config.body_budget)),
                messages: Arc::new(BodyBudget::new(config.message_budget)),
                uploads: crate::deploy_admission::upload_budget(config.max_deploy_bytes),
                follows: per_tenant(config.max_log_follows_per_tenant),
                tenant_requests: per_tenant(config.max_requests_per_tenant),
                log_reads: crate::log_read_rate::LogReadRate::new(
                    config.max_log_read_bytes_per_sec,
                )
                .map(Arc::new),
                config,
                registry,
                metrics: Arc::new(Metrics::new()),
                exposition: crate::metrics::Exposition::default(),
                shutting_down: AtomicBool::new(false),
                ready: AtomicBool::new(false),
                activator,
                logs: None,
            }),
            broker: None,
        }
    }

    /// Consumes the deployed workflows' Redis triggers through `broker`.
    pub fn with_broker(mut self, broker: RedisBroker) -> Self {
        self.broker = Some(broker);
        self
    }

    /// Serves guests' log lines (`faas logs`) from `logs`, where the workers write them.
    ///
    /// # Panics
    /// If called after the gateway was shared (it never is before `start`).
    pub fn with_logs(mut self, logs: crate::logs::LogStore) -> Self {
        Arc::get_mut(&mut self.app)
            .expect("the gateway's state is not shared before it starts")
            .logs = Some(logs);
        self
    }

    /// Serves `collector`'s series on `/metrics` too: the in-process workers' (embedded
    /// mode), which the gateway cannot count itself.
    ///
    /// # Panics
    /// If called after the gateway was shared (it never is before `start`).
    pub fn with_metrics(
        mut self,
        collector: Box<dyn prometheus_client::collector::Collector>,
    ) -> Self {
        let app = Arc::get_mut(&mut self.app);
        let app = app.expect("the gateway's state is not shared before it starts");
        Arc::get_mut(&mut app.metrics)
            .expect("the metrics are not shared before the gateway starts")
            .add_worker(collector);
        self
    }

    /// Binds the listening socket and starts serving in the background.
    ///
    /// # Errors
    /// If the address cannot be bound.
    pub async fn start(self) -> std::io::Result<RunningGateway> {
        let listener = TcpListener::bind(self.app.config.listen).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let app = self.app.clone();
        let task = tokio::spawn(accept_loop(app, listener, stopped));
        // Trigger consumers and, in services mode, the follower of the shared state.
        let mut background = Vec::new();
        // The tenants' quotas this process enforces outside its workers, read from the
        // tenant store by one follower: stream quotas for guests' appends (this
        // process's workers share the broker) and dead letters, log quotas for the
        // buffers or streams its lines go to.
        if let Some(tenants) = self.app.registry.tenants().cloned() {
            let broker = self.broker.clone();
            let logs = self.app.logs.clone();
            background.push(tokio::spawn(async move {
                tenants
                    .follow(faas_store::tenants::QUOTA_SYNC_INTERVAL, |all| {
                        if let Some(broker) = &broker {
                            broker.apply_tenant_quotas(all);
                        }
                        if let Some(logs) = &logs {
                            logs.apply_tenant_quotas(all);
                        }
                    })
                    .await;
            }));
        }
        if let Some(broker) = self.broker {
            background.push(tokio::spawn(crate::redis::sweep_groups(
                self.app.clone(),
                broker.clone(),
            )));
            background.push(tokio::spawn(crate::redis::supervise(
                self.app.clone(),
                broker,
            )));
        }
        if self.app.registry.services().is_some() {
            background.push(tokio::spawn(crate::services::follow(
                self.app.registry.clone(),
            )));
            background.push(tokio::spawn(crate::activator::flush_activity(
                self.app.clone(),
            )));
        }
        tracing::info!(%addr, "gateway listening");
        Ok(RunningGateway {
            addr,
            app: self.app,
            stop,
            task,
            background,
        })
    }
}

/// A gateway that is serving; dropping it does not stop it, [`Self::shutdown`] does.
pub struct RunningGateway {
    addr: SocketAddr,
    app: Arc<App>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    background: Vec<JoinHandle<()>>,
}

impl RunningGateway {
    /// The address it listens on (useful when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The registry of deployed workflows.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.app.registry
    }

    /// Marks the gateway ready: `/readyz` answers 200 from now on.
    pub fn set_ready(&self) {
        self.app.ready.store(true, Ordering::Relaxed);
    }

    /// Stops accepting connections, lets requests in flight finish (up to the
    /// configured grace period), then returns.
    pub async fn shutdown(self) {
        self.app.shutting_down.store(true, Ordering::Relaxed);
        // Stop taking messages first; unacknowledged stream entries stay pending and
        // are reclaimed by whoever consumes next.
        for task in self.background {
            task.abort();
        }
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn accept_loop(app: Arc<App>, listener: TcpListener, stopped: watch::Receiver<bool>) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(app.config.read_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEAD_BYTES as u32);
    let admission = Admission::new(app.config.connections);
    let mut connections = JoinSet::new();
    let mut stopping = stopped.clone();
    loop {
        let (stream, slot) = tokio::select! {
            accepted = admission.accept(&listener, |_| app.metrics.connection_refused()) => accepted,
            // Reap finished connections so the set holds only live ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            _ = stopping.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let client = slot.client();
        let requests = slot.requests(app.config.requests);
        let timeouts = app.config.connections.timeouts();
        let activity = Activity::for_timeouts(timeouts);
        let service = {
            let (app, activity) = (app.clone(), activity.clone());
            service_fn(move |request| {
                let (app, busy) = (app.clone(), activity.busy());
                // The probes are answered at once and hold nothing; refused at the
                // gateway's limit, a flood would get it restarted by its liveness probe.
                let probe = matches!(request.uri().path(), "/healthz" | "/readyz");
                let in_flight = (!probe).then(|| requests.begin()).transpose();
                async move {
                    let (response, in_flight) = match in_flight {
                        Ok(in_flight) => (dispatch(&app, client, request).await, in_flight),
                        Err(refusal) => {
                            app.metrics.request_refused();
                            (too_many_requests(&refusal), None)
                        }
                    };
                    Ok::<_, Infallible>(response.map(|body| busy.track_with(body, in_flight)))
                }
            })
        };
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let mut stop = stopped.clone();
        connections.spawn(async move {
            let _slot = slot;
            let stop = async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            };
            drive(connection, &activity, timeouts, stop).await;
        });
    }
    drop(listener);
    tracing::info!("gateway stopping; waiting for requests in flight");
    let drained = async { while connections.join_next().await.is_some() {} };
    tokio::select! {
        () = drained => tracing::info!("gateway stopped"),
        () = tokio::time::sleep(app.config.shutdown_grace) => {
            tracing::warn!("grace period over; dropping remaining connections");
            connections.shutdown().await;
        }
    }
}

/// `GET /metrics`: every series for the operator (the admin token), a tenant's own
/// workflows' series for that tenant's token, nothing without one. The series name
/// every tenant's workflows, functions and streams, and count their traffic, so on the
/// public port they are no one else's to read.
async fn metrics(app: &App, headers: &http::HeaderMap) -> Response<Body> {
    let caller = match authenticate(headers, &app.config.token, app.registry.tenants()).await {
        Ok(Some(caller)) => caller,
        Ok(None) => return admin::unauthorized(),
        Err(err) => return admin::tenant_error(err),
    };
    // Counted at the scrape: workflows arrive by deploy, by restore at start-up and, in
    // services mode, from other gateways' deploys.
    app.metrics.set_workflows(app.registry.list().len());
    app.metrics.set_instances(app.registry.active_instances());
    let (metrics, registry) = (app.metrics.clone(), app.registry.clone());
    let tenant = match &caller {
        Caller::Admin => None,
        Caller::Tenant(tenant) => Some(tenant.as_str()),
    };
    let rendered = app.exposition.text(
        move || metrics.encode(|tenant, workflow| registry.get_of(tenant, workflow).is_some()),
        tenant,
    );
    let Some(text) = rendered.await else {
        return response::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "metrics",
            "rendering the metrics failed",
        );
    };
    let body = bytes::Bytes::from_owner(crate::metrics::Text(text));
    Response::builder()
        .header(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
        .body(response::full(body))
        .expect("static response parts are valid")
}

/// The answer to a request refused by the limits on requests in flight: 429 when its
/// client has its share, 503 when the gateway has its most, both with `Retry-After`.
/// A budget of `limit` units per tenant (0: no limit), for things counted one by one.
fn per_tenant(limit: usize) -> Arc<faas_budget::Budget<String>> {
    Arc::new(faas_budget::Budget::new(faas_budget::BudgetLimits {
        total: u64::MAX,
        per_holder: match limit {
            0 => u64::MAX,
            limit => limit as u64,
        },
    }))
}

fn too_many_requests(refusal: &TooManyRequests) -> Response<Body> {
    let (status, flag) = match refusal {
        TooManyRequests::Client { .. } => {
            (StatusCode::TOO_MANY_REQUESTS, "--max-requests-per-client")
        }
        TooManyRequests::Total { .. } => (StatusCode::SERVICE_UNAVAILABLE, "--max-requests"),
    };
    response::refused(
        status,
        "requests_in_flight",
        format!("{refusal} ({flag}); try again shortly"),
    )
}

async fn dispatch(app: &App, client: IpAddr, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path();
    match path {
        "/healthz" => response::text(StatusCode::OK, "ok\n"),
        "/readyz" if app.shutting_down.load(Ordering::Relaxed) => {
            response::text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
        }
        "/readyz" if !app.ready.load(Ordering::Relaxed) => {
            response::text(StatusCode::SERVICE_UNAVAILABLE, "starting\n")
        }
        "/readyz" => response::text(StatusCode::OK, "ready\n"),
        "/metrics" => metrics(app, request.headers()).await,
        _ if path.starts_with(admin::PREFIX) || path == admin::PREFIX.trim_end_matches('/') => {
            admin::handle(app, request).await
        }
        _ => invoke::invoke(app, client, request).await,
    }
}
