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
    DEFAULT_MAX_DEPLOYS_PER_TENANT, DEFAULT_MAX_LOG_FOLLOWS_PER_TENANT,
    DEFAULT_MAX_LOG_READ_BYTES_PER_SEC, DEFAULT_MAX_REQUESTS, DEFAULT_MAX_REQUESTS_PER_CLIENT,
    DEFAULT_MAX_REQUESTS_PER_TENANT, DEFAULT_SEND_TIMEOUT,
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
    /// Admin API token, at least 16 printable ASCII bytes; generated and written to
    /// <data-dir>/token when not given. Workers never accept it (services mode uses
    /// `--internal-token`).
    #[arg(long, env = "FAAS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Directory for compiled components, the state database and the tokens; created
    /// owner-only (0700), and refused if it exists writable by group or others.
    #[arg(long, env = "FAAS_DATA_DIR", default_value = ".faas")]
    pub data_dir: PathBuf,
}

impl IdentityArgs {
    /// The token given, or a generated one; either way saved in <data-dir>/token,
    /// which [`prepare_data_dir`] readies first.
    ///
    /// # Errors
    /// If the token given is too short or could not be sent in a header, or the data
    /// directory is refused or cannot be written.
    pub fn token(&self) -> anyhow::Result<String> {
        // Checked before anything is written: a refused token leaves no trace.
        if let (Some(token), Some(source)) = (&self.token, self.given_by()) {
            check_token("admin token", source, token, None)?;
        }
        prepare_data_dir(&self.data_dir)?;
        let token = match &self.token {
            Some(token) => token.clone(),
            None => generate_token(),
        };
        write_token(&self.data_dir.join("token"), &token)?;
        Ok(token)
    }

    /// Tells the operator where the token is saved, and the token itself only when
    /// this process generated it: one given comes from somewhere the operator already
    /// reads it (in Kubernetes a Secret, through `FAAS_TOKEN`), and stdout may be kept
    /// where more people read it (a pod's log).
    pub fn print_token(&self, token: &str) {
        println!("{}", self.token_line(token));
    }

    /// The line [`IdentityArgs::print_token`] prints.
    fn token_line(&self, token: &str) -> String {
        let saved = self.data_dir.join("token");
        match self.given_by() {
            None => format!(
                "  admin token: {token} (generated; saved in {}; send `Authorization: Bearer \
                 <token>`)",
                saved.display()
            ),
            Some(source) => format!(
                "  admin token: from {source} (also saved in {}; send `Authorization: Bearer \
                 <token>`)",
                saved.display()
            ),
        }
    }

    /// Where the token given came from, `None` when none was.
    fn given_by(&self) -> Option<&'static str> {
        let given = self.token.as_deref()?;
        Some(admin_token_source(
            given,
            std::env::var("FAAS_TOKEN").ok().as_deref(),
        ))
    }
}

/// Where the admin token `given` came from, the environment holding `env` as
/// `FAAS_TOKEN`: clap takes the flag over the variable, so the token is the variable's
/// only when they are equal (and then either is where it is).
fn admin_token_source(given: &str, env: Option<&str>) -> &'static str {
    if env == Some(given) {
        "FAAS_TOKEN"
    } else {
        "--token"
    }
}

/// The fewest bytes an admin or internal token may have: 128 bits even when written
/// in hex, too many to guess over the network. Generated tokens have 64.
pub(crate) const MIN_TOKEN_BYTES: usize = 16;

/// Refuses a token (`what`, e.g. "admin token", taken from `source`, a flag, a
/// variable or a file) shorter than [`MIN_TOKEN_BYTES`] or longer than `max_bytes`, or
/// one a header could not carry.
///
/// # Errors
/// Naming the token, where it came from and what it must be.
pub(crate) fn check_token(
    what: &str,
    source: &str,
    token: &str,
    max_bytes: Option<usize>,
) -> anyhow::Result<()> {
    if token.len() < MIN_TOKEN_BYTES {
        anyhow::bail!(
            "the {what} from {source} is {} bytes long, fewer than the {MIN_TOKEN_BYTES} it \
             must have: give a random one (`openssl rand -hex 32`)",
            token.len()
        );
    }
    if let Some(max_bytes) = max_bytes
        && token.len() > max_bytes
    {
        anyhow::bail!(
            "the {what} from {source} is {} bytes long, more than the {max_bytes} it may have",
            token.len()
        );
    }
    if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
        anyhow::bail!("the {what} from {source} must be printable ASCII without spaces");
    }
    Ok(())
}

/// Readies `dir`, the data dir, to hold what the platform keeps there: its tokens, the
/// state database (every tenant's key-value data, manifests and components) and the
/// worker's compiled-code cache, which the worker loads and runs as native code (see
/// [`prepare_private_dir`]).
///
/// # Errors
/// As [`prepare_private_dir`]'s.
pub(crate) fn prepare_data_dir(dir: &Path) -> anyhow::Result<()> {
    prepare_private_dir(
        dir,
        "data dir",
        "the tokens, the state database and compiled code the worker runs",
        "--data-dir",
    )
}

/// Readies `dir`, the `what` holding `holds`, named by the flag `flag`: a missing dir
/// is created owner-only (0700); an existing one is used as it is, unless it belongs to
/// another user or group or others may write to it, or the way to it follows a
/// symbolic link that belongs to another user (but root): whoever can write there can
/// plant code the worker runs, or a link where a token is written, the owner of a dir
/// can always make it writable again, and the owner of a link can point it elsewhere
/// later. (A dir whose parent others may write to, without the sticky bit `/tmp` has,
/// can still be renamed away and replaced: keep it out of such a parent.)
///
/// # Errors
/// If the dir cannot be created or read, or fails a check above (the error names the
/// dir or link and the fix).
pub(crate) fn prepare_private_dir(
    dir: &Path,
    what: &str,
    holds: &str,
    flag: &str,
) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {what} {}", dir.display()))?;
    let me = rustix::process::geteuid().as_raw();
    if let Some((link, owner)) = foreign_link_on_the_way(dir, me)
        .with_context(|| format!("reading the way to {what} {}", dir.display()))?
    {
        anyhow::bail!(
            "{what} {} is reached through the symbolic link {}, which belongs to user \
             {owner}: its owner can point it elsewhere, and {what} holds {holds}; give \
             another {flag}, or the path the link leads to",
            dir.display(),
            link.display(),
        );
    }
    let metadata =
        std::fs::metadata(dir).with_context(|| format!("reading {what} {}", dir.display()))?;
    if metadata.uid() != me {
        anyhow::bail!(
            "{what} {} belongs to user {}, not to this process's user {me}, and holds {holds}: \
             give another {flag}, or have it owned by user {me}",
            dir.display(),
            metadata.uid(),
        );
    }
    let mode = metadata.permissions().mode();
    if mode & 0o022 != 0 {
        anyhow::bail!(
            "{what} {} is writable by group or others (mode {:03o}), and holds {holds}: run \
             `chmod 700 {0}`, or give another {flag}",
            dir.display(),
            mode & 0o777
        );
    }
    Ok(())
}

/// The first symbolic link on the way to `path` (followed as the kernel would) that
/// belongs to neither user `me` nor root, with its owner.
fn foreign_link_on_the_way(path: &Path, me: u32) -> std::io::Result<Option<(PathBuf, u32)>> {
    use std::os::unix::fs::MetadataExt;
    use std::path::Component;
    // Linux's own bound on the links one lookup follows.
    const MAX_LINKS: usize = 40;
    let mut todo: std::collections::VecDeque<PathBuf> = std::path::absolute(path)?
        .components()
        .map(|component| PathBuf::from(component.as_os_str()))
        .collect();
    let mut reached = PathBuf::from("/");
    let mut links = 0;
    while let Some(step) = todo.pop_front() {
        match step.components().next() {
            Some(Component::RootDir) => reached = PathBuf::from("/"),
            Some(Component::ParentDir) => {
                reached.pop();
            }
            Some(Component::Normal(name)) => {
                let next = reached.join(name);
                let metadata = std::fs::symlink_metadata(&next)?;
                if !metadata.file_type().is_symlink() {
                    reached = next;
                    continue;
                }
                if metadata.uid() != me && metadata.uid() != 0 {
                    return Ok(Some((next, metadata.uid())));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(rustix::io::Errno::LOOP.into());
                }
                let target = std::fs::read_link(&next)?;
                for component in target.components().rev() {
                    todo.push_front(PathBuf::from(component.as_os_str()));
                }
            }
            _ => {}
        }
    }
    Ok(None)
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
    /// How many seconds a stream's consumer group that no deployed trigger names, and
    /// that no consumer has read, is kept before it is destroyed (with its stream, if
    /// empty): a tenant's redeploys and removals would otherwise leave one behind each
    /// time. A trigger naming it again later reads the stream from its start, as a new
    /// group does. 0 keeps them for ever.
    #[arg(long, env = "FAAS_STREAM_GROUP_IDLE_SECS", default_value_t = faas_store::stream_groups::DEFAULT_IDLE.as_secs())]
    pub stream_group_idle_secs: u64,
    /// The largest deploy upload, in MiB. Uploads are held in memory until deployed:
    /// one tenant's at most one this size, all tenants' at most two.
    #[arg(long, env = "FAAS_MAX_DEPLOY_MB", default_value_t = DEFAULT_MAX_DEPLOY_MB,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub max_deploy_mb: u64,
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
    /// How many MiB of log lines one tenant may read per second on this gateway, with a
    /// burst of two seconds' worth: a read costs the store what it reads (in services
    /// mode, the Redis every tenant shares), and one past it is refused with 429 until
    /// the tenant's allowance refills. 0 for no limit. The operator's are not counted.
    #[arg(long, env = "FAAS_MAX_LOG_READ_MIB_PER_SEC_PER_TENANT", default_value_t = DEFAULT_MAX_LOG_READ_BYTES_PER_SEC >> 20,
          value_parser = clap::value_parser!(u64).range(0..=1 << 20))]
    pub max_log_read_mib_per_sec_per_tenant: u64,
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
    /// How long a response may wait for its client to take more of it, in
    /// milliseconds; past it the connection is cut off (a client that reads nothing
    /// would hold it, and the response, for good). 0 for no limit.
    #[arg(long, env = "FAAS_SEND_TIMEOUT_MS", default_value_t = DEFAULT_SEND_TIMEOUT.as_millis() as u64)]
    pub send_timeout_ms: u64,
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
    /// How many requests to one tenant's routes the gateway has in flight at once, from
    /// all clients: so that one tenant's slow function cannot hold every place of
    /// `--max-requests`. One more is answered 429 at once. 0 for no limit.
    #[arg(long, env = "FAAS_MAX_REQUESTS_PER_TENANT", default_value_t = DEFAULT_MAX_REQUESTS_PER_TENANT)]
    pub max_requests_per_tenant: usize,
}

/// Default of `--max-deploy-mb`: the gateway's own default.
pub const DEFAULT_MAX_DEPLOY_MB: u64 =
    (faas_gateway::config::DEFAULT_MAX_DEPLOY_BYTES >> 20) as u64;

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
        config.max_deploy_bytes = (self.max_deploy_mb << 20) as usize;
        config.max_deploys_per_tenant = self.max_deploys_per_tenant;
        config.max_log_follows_per_tenant = self.max_log_follows_per_tenant;
        config.max_log_read_bytes_per_sec = self.max_log_read_mib_per_sec_per_tenant << 20;
        config.connections = ConnectionLimits {
            per_client: self.max_connections_per_client.max(1),
            total: self.max_connections.max(1),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms.max(1)),
            send_timeout: (self.send_timeout_ms > 0)
                .then(|| Duration::from_millis(self.send_timeout_ms)),
            ipv6_client_prefix: self.client_ipv6_prefix,
        };
        config.requests = RequestLimits {
            per_client: self.max_requests_per_client.max(1),
            total: self.max_requests.max(1),
        };
        config.max_requests_per_tenant = self.max_requests_per_tenant;
        config.stream_group_idle = (self.stream_group_idle_secs > 0)
            .then(|| Duration::from_secs(self.stream_group_idle_secs));
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

/// Writes the token at `path` readable by its owner only (0600), whatever the mode of
/// a file it replaces. It is written to a new file renamed into place, so that a reader
/// never sees half a token and nothing at `path` is followed; a symbolic link there is
/// refused, as the sign of someone else's hand in the data dir.
///
/// # Errors
/// If `path` is a symbolic link or cannot be written.
pub(crate) fn write_token(path: &Path, token: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    refuse_symlink(path)?;
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    let temporary = path.with_file_name(format!(
        ".{}.{:016x}.tmp",
        name.to_string_lossy(),
        rand::random::<u64>()
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut file| writeln!(file, "{token}"))
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.with_context(|| format!("writing {}", path.display()))
}

/// Refuses `path` if it is a symbolic link.
///
/// # Errors
/// If it is one, or cannot be looked at.
pub(crate) fn refuse_symlink(path: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => anyhow::bail!(
            "{} is a symbolic link, which a token file never is: remove it",
            path.display()
        ),
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(err).with_context(|| format!("reading {}", path.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    }

    fn identity(token: Option<&str>, data_dir: &Path) -> IdentityArgs {
        IdentityArgs {
            token: token.map(str::to_owned),
            data_dir: data_dir.to_owned(),
        }
    }

    #[test]
    fn a_missing_data_dir_is_created_owner_only() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("nested/.faas");
        prepare_data_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&parent.path().join("nested")), 0o700);
    }

    #[test]
    fn a_data_dir_others_may_write_to_is_refused_with_the_fix() {
        let parent = tempfile::tempdir().unwrap();
        for open in [0o777, 0o770, 0o702] {
            let dir = parent.path().join(format!("open-{open:o}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(open)).unwrap();
            let error = prepare_data_dir(&dir).unwrap_err().to_string();
            assert!(
                error.contains(&format!("chmod 700 {}", dir.display())),
                "{error}"
            );
            assert!(error.contains("writable by group or others"), "{error}");
            assert_eq!(mode(&dir), open, "an existing dir is left as it is");
        }
        // Readable is not writable: a dir an older version made with the umask's 0755
        // is still used.
        let dir = parent.path().join("readable");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare_data_dir(&dir).unwrap();
    }

    #[test]
    fn a_dir_another_user_owns_is_refused_even_when_only_they_may_write() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("planted");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        // Made by someone else ahead of the platform (a shared /tmp, say): only a
        // process running as root can hand a dir to another user here, so the test
        // sees the refusal where it can set the scene.
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
            let error = prepare_private_dir(&dir, "cache dir", "compiled code", "--cache-dir")
                .unwrap_err()
                .to_string();
            assert!(error.contains("belongs to user 65534"), "{error}");
            assert!(error.contains("give another --cache-dir"), "{error}");
        } else {
            // Not root: the dir is this user's, and the owner check lets it through.
            prepare_private_dir(&dir, "cache dir", "compiled code", "--cache-dir").unwrap();
        }
    }

    #[test]
    fn a_dir_reached_through_another_users_link_is_refused_and_ones_own_link_is_followed() {
        let parent = tempfile::tempdir().unwrap();
        let own = parent.path().join("own");
        std::fs::create_dir(&own).unwrap();
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A link this user made, to a dir of its own, through a relative target.
        let mine = parent.path().join("mine");
        std::os::unix::fs::symlink("own", &mine).unwrap();
        prepare_private_dir(&mine, "cache dir", "compiled code", "--cache-dir").unwrap();
        // The same link, another user's (a link left in a shared /tmp), may be pointed
        // at that user's own dir once the platform checked it. Only root can make one.
        if rustix::process::geteuid().is_root() {
            let theirs = parent.path().join("theirs");
            std::os::unix::fs::symlink(&own, &theirs).unwrap();
            std::os::unix::fs::lchown(&theirs, Some(65534), None).unwrap();
            let nested = theirs.join("cache");
            let error = prepare_private_dir(&nested, "cache dir", "compiled code", "--cache-dir")
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(&format!("the symbolic link {}", theirs.display())),
                "{error}"
            );
            assert!(error.contains("belongs to user 65534"), "{error}");
        }
    }

    #[test]
    fn a_token_file_is_owner_only_even_when_it_existed_and_a_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "old\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_token(&path, "new-token").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new-token\n");
        assert_eq!(mode(&path), 0o600);

        let target = dir.path().join("target");
        std::fs::write(&target, "someone else's\n").unwrap();
        let link = dir.path().join("demo-token");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let error = write_token(&link, "secret").unwrap_err().to_string();
        assert!(error.contains("symbolic link"), "{error}");
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "someone else's\n"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 3, "no temporary file is left: {left:?}");
    }

    #[test]
    fn an_admin_token_shorter_than_16_bytes_is_refused_naming_where_it_came_from() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data");
        for short in ["", "bench", "fifteen-bytes!!"] {
            let error = identity(Some(short), &data_dir)
                .token()
                .unwrap_err()
                .to_string();
            assert!(error.contains("admin token from --token"), "{error}");
            assert!(error.contains("16"), "{error}");
        }
        let error = identity(Some("sixteen bytes, a space"), &data_dir)
            .token()
            .unwrap_err()
            .to_string();
        assert!(error.contains("printable ASCII"), "{error}");
        assert!(!data_dir.exists(), "a refused token leaves no trace");
        let token = identity(Some("sixteen-bytes-ok"), &data_dir)
            .token()
            .unwrap();
        assert_eq!(token, "sixteen-bytes-ok");
        assert_eq!(mode(&data_dir.join("token")), 0o600);
    }

    #[test]
    fn a_token_is_refused_the_same_whatever_its_kind_and_source() {
        let error = check_token("internal token", "FAAS_INTERNAL_TOKEN", "short", Some(256))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("the internal token from FAAS_INTERNAL_TOKEN is 5 bytes long"),
            "{error}"
        );
        let long = "x".repeat(257);
        let error = check_token("internal token", "a file", &long, Some(256))
            .unwrap_err()
            .to_string();
        assert!(error.contains("more than the 256"), "{error}");
        check_token("admin token", "--token", &long, None).unwrap();
    }

    #[test]
    fn a_given_admin_token_is_never_printed_only_where_it_came_from() {
        let dir = tempfile::tempdir().unwrap();
        let given = "a-given-admin-token-from-a-secret";
        let line = identity(Some(given), dir.path()).token_line(given);
        assert!(!line.contains(given), "{line}");
        assert!(line.contains("admin token: from "), "{line}");
        assert_eq!(admin_token_source(given, Some(given)), "FAAS_TOKEN");
        assert_eq!(admin_token_source(given, Some("another")), "--token");
        assert_eq!(admin_token_source(given, None), "--token");
        // One this process made is the operator's only way to learn it.
        let generated = generate_token();
        let line = identity(None, dir.path()).token_line(&generated);
        assert!(line.contains(&generated), "{line}");
    }
}
