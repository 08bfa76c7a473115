//! Command-line arguments shared by the commands that run platform processes: `faas
//! up` (everything in one process) and `faas gateway` / `faas worker` (services mode).

use anyhow::Context;
use faas_budget::mib_or_unlimited;
use faas_connections::{ConnectionLimits, IPV6_CLIENT_SUBNET, RequestLimits};
use faas_gateway::GatewayConfig;
use faas_gateway::body_budget::{
    BodyBudgetLimits, DEFAULT_BODY_BUDGET_MB, DEFAULT_CLIENT_BODY_BUDGET_MB,
    DEFAULT_MESSAGE_BUDGET_MB, DEFAULT_TENANT_MESSAGE_BUDGET_MB,
};
use faas_gateway::config::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    DEFAULT_MAX_DEPLOYS_PER_TENANT, DEFAULT_MAX_LOG_FOLLOWS_PER_TENANT, DEFAULT_MAX_REQUESTS,
    DEFAULT_MAX_REQUESTS_PER_CLIENT,
};
use faas_store::broker::RedisBroker;
use faas_store::stream_quota::{DEFAULT_STREAM_MAX_BYTES, DEFAULT_STREAM_MAX_LEN, StreamQuota};
use faas_workflow::DEFAULT_MAX_REDIS_CONSUMERS_PER_TENANT;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The token and the data directory.
#[derive(Debug, clap::Args)]
pub struct IdentityArgs {
    /// Admin API token; generated and written to <data-dir>/token when not given.
    /// Workers never accept it (services mode uses `--internal-token`).
    #[arg(long, env = "FAAS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Directory for compiled components and the token.
    #[arg(long, env = "FAAS_DATA_DIR", default_value = ".faas")]
    pub data_dir: PathBuf,
}

impl IdentityArgs {
    /// The token given, or a generated one; either way saved in <data-dir>/token.
    ///
    /// # Errors
    /// If the data directory or the token file cannot be written.
    pub fn token(&self) -> anyhow::Result<String> {
        std::fs::create_dir_all(&self.data_dir)
            .with_context(|| format!("creating data dir {}", self.data_dir.display()))?;
        let token = match &self.token {
            Some(token) => token.clone(),
            None => generate_token(),
        };
        write_token(&self.data_dir.join("token"), &token)?;
        Ok(token)
    }

    /// Tells the operator the token and where it is saved.
    pub fn print_token(&self, token: &str) {
        println!(
            "  admin token: {token} (saved in {}; send `Authorization: Bearer <token>`)",
            self.data_dir.join("token").display()
        );
    }
}

/// The gateway's listening address and limits.
#[derive(Debug, clap::Args)]
pub struct GatewayArgs {
    /// Address to listen on.
    #[arg(long, env = "FAAS_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// Largest request body an invocation may send, in bytes.
    #[arg(long, env = "FAAS_MAX_BODY_BYTES", default_value_t = 8 << 20)]
    pub max_body_bytes: usize,
    /// How much memory the request bodies the gateway holds may take in all, in MiB; a
    /// body past it is refused with 503. 0 for no limit.
    #[arg(long, env = "FAAS_BODY_BUDGET_MB", default_value_t = DEFAULT_BODY_BUDGET_MB)]
    pub body_budget_mb: u64,
    /// How much of that one client address's bodies may take, in MiB; a body past it
    /// is refused with 429. 0 for no limit.
    #[arg(long, env = "FAAS_CLIENT_BODY_BUDGET_MB", default_value_t = DEFAULT_CLIENT_BODY_BUDGET_MB)]
    pub client_body_budget_mb: u64,
    /// How much memory the pub/sub messages and stream entries the gateway holds may
    /// take in all, in MiB (a budget of their own, which no client reaches); a message
    /// past it is dropped, a stream entry waits in Redis. 0 for no limit.
    #[arg(long, env = "FAAS_MESSAGE_BUDGET_MB", default_value_t = DEFAULT_MESSAGE_BUDGET_MB)]
    pub message_budget_mb: u64,
    /// How much of that one tenant's messages and entries may take, in MiB. 0 for no
    /// limit.
    #[arg(long, env = "FAAS_TENANT_MESSAGE_BUDGET_MB", default_value_t = DEFAULT_TENANT_MESSAGE_BUDGET_MB)]
    pub tenant_message_budget_mb: u64,
    /// How many workflows each tenant may have deployed, unless the operator set the
    /// tenant's own quota (`faas tenant set <name> --max-workflows N`). 0 for no limit.
    #[arg(long, env = "FAAS_TENANT_MAX_WORKFLOWS", default_value_t = DEFAULT_TENANT_MAX_WORKFLOWS)]
    pub tenant_max_workflows: u64,
    /// How many MiB the components of each tenant's deployed workflows may take in all
    /// (every gateway keeps them in memory), unless the operator set the tenant's own
    /// quota (`faas tenant set <name> --code-max-mb N`). 0 for no limit.
    #[arg(long, env = "FAAS_TENANT_CODE_MAX_MB", default_value_t = DEFAULT_TENANT_CODE_MAX_MB)]
    pub tenant_code_max_mb: u64,
    /// How many channel and stream triggers one tenant's workflows may have in all:
    /// each is a Redis connection in every gateway (Redis refuses connections past its
    /// `maxclients`). A deploy past it is refused with 403. 0 for no limit.
    #[arg(long, env = "FAAS_MAX_REDIS_CONSUMERS_PER_TENANT", default_value_t = DEFAULT_MAX_REDIS_CONSUMERS_PER_TENANT)]
    pub max_redis_consumers_per_tenant: usize,
    /// How many deploys one tenant may have in the gateway at once, in progress or
    /// waiting their turn; one more is refused with 429 before its upload is read
    /// (`faas deploy` waits and sends it again). 0 for no limit.
    #[arg(long, env = "FAAS_MAX_DEPLOYS_PER_TENANT", default_value_t = DEFAULT_MAX_DEPLOYS_PER_TENANT)]
    pub max_deploys_per_tenant: usize,
    /// How many `faas logs` reads and `--follow` streams one tenant may have open on
    /// this gateway at once (a follow polls its workflow's log stream while open, a
    /// read is held until sent); one more is refused with 429. 0 for no limit. The
    /// operator's are not counted.
    #[arg(long, env = "FAAS_MAX_LOG_FOLLOWS_PER_TENANT", default_value_t = DEFAULT_MAX_LOG_FOLLOWS_PER_TENANT)]
    pub max_log_follows_per_tenant: usize,
    /// How many connections one client address may hold open; more are closed as soon
    /// as they are accepted.
    #[arg(long, env = "FAAS_MAX_CONNECTIONS_PER_CLIENT", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_CLIENT)]
    pub max_connections_per_client: usize,
    /// How many connections the gateway holds open in all.
    #[arg(long, env = "FAAS_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// How long a connection may carry no request before it is closed, in milliseconds.
    #[arg(long, env = "FAAS_IDLE_TIMEOUT_MS", default_value_t = DEFAULT_IDLE_TIMEOUT.as_millis() as u64)]
    pub idle_timeout_ms: u64,
    /// How many leading bits of an IPv6 address name one client for the limits per
    /// client (connections, requests, request bodies): 64 counts a /64, the subnet one
    /// host or home is given, as one client; 128 counts each address.
    #[arg(long, env = "FAAS_CLIENT_IPV6_PREFIX", default_value_t = IPV6_CLIENT_SUBNET,
          value_parser = clap::value_parser!(u8).range(0..=128))]
    pub client_ipv6_prefix: u8,
    /// How many requests one client address may have in flight at once, across its
    /// connections (HTTP/2 carries many on one); one more is answered 429 at once.
    #[arg(long, env = "FAAS_MAX_REQUESTS_PER_CLIENT", default_value_t = DEFAULT_MAX_REQUESTS_PER_CLIENT)]
    pub max_requests_per_client: usize,
    /// How many requests the gateway has in flight at once, in all; one more is
    /// answered 503 at once.
    #[arg(long, env = "FAAS_MAX_REQUESTS", default_value_t = DEFAULT_MAX_REQUESTS)]
    pub max_requests: usize,
}

/// Default of `--tenant-max-workflows`: far more than a team deploys by hand, few
/// enough that a runaway script cannot fill the cluster's placement and Redis.
pub const DEFAULT_TENANT_MAX_WORKFLOWS: u64 = 100;

/// What the components of one tenant's deployed workflows may take by default, in MiB:
/// the largest of this repository's example components (18 MiB, a Python hello) some
/// 28 times over, and a bound on what each tenant's deploys keep in every gateway.
pub const DEFAULT_TENANT_CODE_MAX_MB: u64 = 512;

impl GatewayArgs {
    /// The gateway's configuration with admin token `token`.
    pub fn config(&self, token: &str) -> GatewayConfig {
        let mut config = GatewayConfig::new(token);
        config.listen = self.listen;
        config.max_body_bytes = self.max_body_bytes;
        config.body_budget = BodyBudgetLimits {
            total: mib_or_unlimited(self.body_budget_mb),
            per_holder: mib_or_unlimited(self.client_body_budget_mb),
        };
        config.message_budget = BodyBudgetLimits {
            total: mib_or_unlimited(self.message_budget_mb),
            per_holder: mib_or_unlimited(self.tenant_message_budget_mb),
        };
        config.max_deploys_per_tenant = self.max_deploys_per_tenant;
        config.max_log_follows_per_tenant = self.max_log_follows_per_tenant;
        config.connections = ConnectionLimits {
            per_client: self.max_connections_per_client.max(1),
            total: self.max_connections.max(1),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms.max(1)),
            ipv6_client_prefix: self.client_ipv6_prefix,
        };
        config.requests = RequestLimits {
            per_client: self.max_requests_per_client.max(1),
            total: self.max_requests.max(1),
        };
        config
    }
}

/// How the processes that use Redis as a message broker treat its streams.
#[derive(Debug, clap::Args)]
pub struct BrokerArgs {
    /// How many entries a stream keeps at most when a function appends to it or an
    /// entry is dead-lettered; the oldest go first (1/64 of it, up to 64, at a time). 0
    /// for no limit. A tenant's own quota
    /// (`faas tenant set --stream-max-len`) replaces it.
    #[arg(long, env = "FAAS_STREAM_MAX_LEN", default_value_t = DEFAULT_STREAM_MAX_LEN)]
    pub stream_max_len: u64,
    /// How many bytes a tenant's streams hold in all (entries appended by functions and
    /// dead-letter moves, plus 16 bytes per entry and 4.5 KiB per stream). An append
    /// over it trims the oldest entries of the tenant's largest streams, and is refused
    /// only when trimming every entry would not make room. 0 for no limit. A tenant's own quota
    /// (`faas tenant set --stream-max-bytes`) replaces it.
    #[arg(long, env = "FAAS_STREAM_MAX_BYTES", default_value_t = DEFAULT_STREAM_MAX_BYTES)]
    pub stream_max_bytes: u64,
}

impl BrokerArgs {
    /// Connects to the broker at `url` with these settings.
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn connect(&self, url: &str) -> anyhow::Result<RedisBroker> {
        Ok(RedisBroker::connect(url)
            .await?
            .with_stream_quota(StreamQuota {
                max_len: self.stream_max_len,
                max_bytes: self.stream_max_bytes,
            }))
    }
}

/// A random 256-bit token, hex-encoded.
pub(crate) fn generate_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Writes the token readable by its owner only.
pub(crate) fn write_token(path: &Path, token: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(file, "{token}").with_context(|| format!("writing {}", path.display()))
}

/// A network of `--outbound-private-networks` or `--component-private-networks`: a CIDR
/// range, or one address.
pub(crate) fn parse_network(text: &str) -> Result<ipnet::IpNet, String> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("`{text}` is neither a CIDR range (10.1.0.0/16) nor an address"))
}
