//! The gateway's settings, with safe defaults.

use crate::body_budget::{
    BodyBudgetLimits, DEFAULT_BODY_BUDGET_MB, DEFAULT_CLIENT_BODY_BUDGET_MB,
    DEFAULT_MESSAGE_BUDGET_MB, DEFAULT_TENANT_MESSAGE_BUDGET_MB,
};
use faas_connections::{ConnectionLimits, IPV6_CLIENT_SUBNET, RequestLimits};
use std::net::SocketAddr;
use std::time::Duration;

/// How the gateway listens and what it allows.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Address to listen on (default 127.0.0.1:3000).
    pub listen: SocketAddr,
    /// Bearer token the admin API requires.
    pub token: String,
    /// Largest request body an invocation may send (default 8 MiB); larger gets 413.
    pub max_body_bytes: usize,
    /// How much the request bodies the gateway holds may take, per client address and
    /// in all (defaults: [`DEFAULT_CLIENT_BODY_BUDGET_MB`], [`DEFAULT_BODY_BUDGET_MB`];
    /// see [`crate::body_budget`]).
    pub body_budget: BodyBudgetLimits,
    /// How much the pub/sub messages and stream entries the gateway holds may take, per
    /// tenant and in all (defaults: [`DEFAULT_TENANT_MESSAGE_BUDGET_MB`],
    /// [`DEFAULT_MESSAGE_BUDGET_MB`]): a budget of their own, which no client reaches.
    pub message_budget: BodyBudgetLimits,
    /// Largest deploy upload (default [`DEFAULT_MAX_DEPLOY_BYTES`]). Uploads are held in
    /// memory until deployed: one tenant's up to one this size, all tenants' up to two
    /// (`deploy_admission::upload_budget`); one more is refused, 429 or 503
    /// `deploy_budget`.
    pub max_deploy_bytes: usize,
    /// How many deploys one tenant may have in the gateway at once, in progress or
    /// waiting (default [`DEFAULT_MAX_DEPLOYS_PER_TENANT`]; 0 for no limit); one more is
    /// refused with 429 before its upload is read.
    pub max_deploys_per_tenant: usize,
    /// How many `faas logs` reads and `--follow` streams one tenant may have open on
    /// the gateway at once (default [`DEFAULT_MAX_LOG_FOLLOWS_PER_TENANT`]; 0 for no
    /// limit): a follow polls its workflow's log stream (in services mode, Redis, four
    /// times a second) for as long as it is open, a read is held whole until sent. One
    /// more is refused with 429. The operator's are not counted.
    pub max_log_follows_per_tenant: usize,
    /// How many bytes of log lines one tenant may read per second on the gateway, with
    /// a burst of two seconds' worth (default [`DEFAULT_MAX_LOG_READ_BYTES_PER_SEC`]; 0
    /// for no limit): a read costs the store what it reads (in services mode, the Redis
    /// every tenant shares). A read past it is refused with 429 until the tenant's
    /// allowance refills. The operator's are not counted.
    pub max_log_read_bytes_per_sec: u64,
    /// How long a client may take to send a request's head and body (default 30 s).
    pub read_timeout: Duration,
    /// How long shutdown waits for requests in flight (default 10 s).
    pub shutdown_grace: Duration,
    /// Connections per client and in all, how long one may stay idle, and how much of
    /// an IPv6 address names its client (defaults: [`DEFAULT_MAX_CONNECTIONS_PER_CLIENT`],
    /// [`DEFAULT_MAX_CONNECTIONS`], [`DEFAULT_IDLE_TIMEOUT`], a /64).
    pub connections: ConnectionLimits,
    /// Requests in flight per client address, across its connections, and in all
    /// (defaults: [`DEFAULT_MAX_REQUESTS_PER_CLIENT`], [`DEFAULT_MAX_REQUESTS`]); one
    /// more is answered at once, 429 or 503 (see [`faas_connections::ClientRequests`]).
    pub requests: RequestLimits,
    /// How many requests to one tenant's routes the gateway has in flight at once, from
    /// all clients (default [`DEFAULT_MAX_REQUESTS_PER_TENANT`], half of
    /// [`DEFAULT_MAX_REQUESTS`]; 0 for no limit): a tenant's slow function, called from
    /// enough addresses, held every place of `requests.total`, and every other tenant's
    /// requests were refused 503. One more is answered 429 at once.
    pub max_requests_per_tenant: usize,
    /// How long a consumer group of a stream that no deployed trigger names and no
    /// consumer reads is kept before the gateway destroys it (default
    /// [`faas_store::stream_groups::DEFAULT_IDLE`]; `None` keeps them for ever). See
    /// [`faas_store::stream_groups`].
    pub stream_group_idle: Option<Duration>,
}

/// How many connections one client address may hold by default: plenty for a browser
/// or a load balancer's pool, far below what exhausts the process's descriptors.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 256;

/// How many deploys one tenant may have in the gateway at once by default: one
/// compiling and one waiting its turn, so a tenant's uploads in memory stay bounded and
/// another tenant's deploy waits behind one of its deploys at most.
pub const DEFAULT_MAX_DEPLOYS_PER_TENANT: usize = 2;

/// How many log follow streams one tenant may have open at once by default: a few
/// terminals per workflow of a team, far below what would load Redis with their polls.
pub const DEFAULT_MAX_LOG_FOLLOWS_PER_TENANT: usize = 16;

/// How many bytes of log lines one tenant may read per second by default: eight full
/// reads ([`faas_store::logs::MAX_READ_BYTES`]) a second, about 25 ms of Redis's time,
/// and any number of small ones (a script polling for a line).
pub const DEFAULT_MAX_LOG_READ_BYTES_PER_SEC: u64 = 16 << 20;

/// The largest deploy upload by default: a dozen large components (a Python one is
/// 18 MiB). The Helm chart passes half of it (`gateway.maxDeployMb`), so that two
/// uploads, the body and message budgets and the rest fit its gateway pod.
pub const DEFAULT_MAX_DEPLOY_BYTES: usize = 256 << 20;

/// How many connections the gateway holds by default, in all.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// How many requests one client address may have in flight by default: as many as it
/// may hold connections, so that HTTP/2's streams give a client no more than HTTP/1.1
/// does.
pub const DEFAULT_MAX_REQUESTS_PER_CLIENT: usize = DEFAULT_MAX_CONNECTIONS_PER_CLIENT;

/// How many requests the gateway has in flight by default, in all: as many as it
/// holds connections.
pub const DEFAULT_MAX_REQUESTS: usize = DEFAULT_MAX_CONNECTIONS;

/// How many requests to one tenant's routes the gateway has in flight by default: half
/// of all it may, so that one tenant's callers leave the other half to the others.
pub const DEFAULT_MAX_REQUESTS_PER_TENANT: usize = DEFAULT_MAX_REQUESTS / 2;

/// How long a connection may carry no request by default before it is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a response may wait by default for its client to take more of it before
/// the connection is cut off: as long as nginx's `send_timeout`. A client on a slow
/// link still takes some every few seconds.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);

impl GatewayConfig {
    /// Defaults, with the admin API behind `token`.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 3000)),
            token: token.into(),
            max_body_bytes: 8 << 20,
            body_budget: BodyBudgetLimits {
                total: DEFAULT_BODY_BUDGET_MB << 20,
                per_holder: DEFAULT_CLIENT_BODY_BUDGET_MB << 20,
            },
            message_budget: BodyBudgetLimits {
                total: DEFAULT_MESSAGE_BUDGET_MB << 20,
                per_holder: DEFAULT_TENANT_MESSAGE_BUDGET_MB << 20,
            },
            max_deploy_bytes: DEFAULT_MAX_DEPLOY_BYTES,
            max_deploys_per_tenant: DEFAULT_MAX_DEPLOYS_PER_TENANT,
            max_log_follows_per_tenant: DEFAULT_MAX_LOG_FOLLOWS_PER_TENANT,
            max_log_read_bytes_per_sec: DEFAULT_MAX_LOG_READ_BYTES_PER_SEC,
            read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            connections: ConnectionLimits {
                per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
                total: DEFAULT_MAX_CONNECTIONS,
                idle_timeout: DEFAULT_IDLE_TIMEOUT,
                send_timeout: Some(DEFAULT_SEND_TIMEOUT),
                ipv6_client_prefix: IPV6_CLIENT_SUBNET,
            },
            requests: RequestLimits {
                per_client: DEFAULT_MAX_REQUESTS_PER_CLIENT,
                total: DEFAULT_MAX_REQUESTS,
            },
            max_requests_per_tenant: DEFAULT_MAX_REQUESTS_PER_TENANT,
            stream_group_idle: Some(faas_store::stream_groups::DEFAULT_IDLE),
        }
    }
}
