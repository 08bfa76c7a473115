//! [`SharedState`]: the shared state in Redis, one method per thing a process reads or
//! writes. Values are JSON, except component bytes.

use crate::activity::{ACTIVITY, DEMAND};
use crate::records::{DeploymentRecord, LoadStatus, PlacementRecord, WorkerInfo};
use crate::worker_pods::{Vouched, WORKER_PODS};
use faas_store::redis_connection;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Worker id -> [`WorkerInfo`].
const WORKERS: &str = "faas:workers";
/// Workflow name -> [`DeploymentRecord`]: the live version of each workflow. A
/// tenant's removal reads it in the same step (`faas_store::TenantWorkflows`), as a
/// promotion checks the tenant in the same step as its write: whichever comes first,
/// the other fails.
pub const DEPLOYMENTS: &str = "faas:deployments";
/// Workflow name -> [`DeploymentRecord`]: a new version being deployed, which workers
/// load beside the live one; it becomes live once they all have.
const STAGED: &str = "faas:deployments:staged";
/// A token set anew after every write to [`DEPLOYMENTS`] or [`STAGED`]: readers keep
/// what they read with the token, and read the hashes again only when it changed
/// (every process reads them at every sync, and a tenant's records may be large).
const RECORDS_VERSION: &str = "faas:deployments:version";
/// How long a reader keeps records under an unchanged token at most: so a write
/// whose token was lost (its writer died in between, or predates the token) is seen
/// within this.
const RECORDS_MAX_AGE: Duration = Duration::from_secs(5);
/// Workflow name -> [`PlacementRecord`].
const PLACEMENTS: &str = "faas:placements";
/// Component digest -> when it was last stored (milliseconds since the Unix epoch).
const COMPONENTS: &str = "faas:components";
/// The last revision handed out.
const REVISION: &str = "faas:revision";
/// Sets KEYS[1] to ARGV[1] unless it holds that or more already.
const RAISE_REVISION: &str = "if (tonumber(redis.call('get', KEYS[1])) or 0) < tonumber(ARGV[1]) then \
     redis.call('set', KEYS[1], ARGV[1]) end return 1";
/// A random id set when the shared state was first written: if it vanishes, Redis lost
/// the state (an empty restart) and the gateways write back what they serve.
const EPOCH: &str = "faas:epoch";
/// Held by the gateway that writes a lost state back (a lease, as `faas:lock:<name>`).
const WRITE_BACK: &str = "faas:write-back";

/// `faas:alive:<worker>`: exists while the worker heartbeats (it expires on its own).
fn alive_key(id: &str) -> String {
    format!("faas:alive:{id}")
}

/// `faas:loaded:<worker>`: workflow name -> [`LoadStatus`].
fn loaded_key(id: &str) -> String {
    format!("faas:loaded:{id}")
}

/// `faas:loaded-staged:<worker>`: workflow name -> [`LoadStatus`] of its staged version.
fn staged_loaded_key(id: &str) -> String {
    format!("faas:loaded-staged:{id}")
}

/// `faas:lock:<workflow>`: a short lease held (and renewed) by the gateway changing
/// that workflow; its value names the holder.
fn lock_key(name: &str) -> String {
    format!("faas:lock:{name}")
}

/// Extends a lease only if it still names the holder.
const RENEW: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
     return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0";

/// Sets `HSET KEYS[2] ARGV[2] ARGV[3]` and removes field ARGV[2] from every further key,
/// only while the lease KEYS[1] names holder ARGV[1]: a gateway whose lease expired
/// writes nothing over a newer holder.
const FENCED_WRITE: &str = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
     redis.call('hset', KEYS[2], ARGV[2], ARGV[3]) \
     for i = 3, #KEYS do redis.call('hdel', KEYS[i], ARGV[2]) end return 1";

/// Makes record ARGV[3] live as field ARGV[2] of KEYS[2] and removes its staged copy
/// (KEYS[3]), only while the lease KEYS[1] names holder ARGV[1] (else 0), tenant
/// ARGV[4] is in the tenants hash KEYS[4] (else -1: removed since the deploy began),
/// and, unless ARGV[5] is empty, the token whose secret hashes to ARGV[5] is still a
/// token of that tenant: in the token hashes KEYS[5], its record in the tokens KEYS[6]
/// (else -2: revoked, or its tenant removed, even if a tenant of that name was created
/// again since).
const FENCED_PROMOTE: &str = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
     if redis.call('hexists', KEYS[4], ARGV[4]) == 0 then return -1 end \
     if ARGV[5] ~= '' then \
       local id = redis.call('hget', KEYS[5], ARGV[5]) \
       local token = id and redis.call('hget', KEYS[6], id) \
       if not token or cjson.decode(token).tenant ~= ARGV[4] then return -2 end \
     end \
     redis.call('hset', KEYS[2], ARGV[2], ARGV[3]) \
     redis.call('hdel', KEYS[3], ARGV[2]) return 1";

/// Sets `HSET KEYS[1] ARGV[1] ARGV[2]` only while tenant ARGV[3] is in the tenants hash
/// KEYS[2]; returns 1 if it did.
const PUT_IF_TENANT: &str = "if redis.call('hexists', KEYS[2], ARGV[3]) == 0 then return 0 end \
     redis.call('hset', KEYS[1], ARGV[1], ARGV[2]) return 1";

/// Removes field ARGV[2] from every key after the first, only while the lease KEYS[1]
/// names holder ARGV[1].
const FENCED_REMOVE: &str = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end \
     for i = 2, #KEYS do redis.call('hdel', KEYS[i], ARGV[2]) end return 1";

/// Removes a staged version whose deploy holds no lease any more (its gateway died).
const DROP_ABANDONED: &str = "if redis.call('exists', KEYS[1]) == 0 then \
     return redis.call('hdel', KEYS[2], ARGV[1]) end return 0";

/// Removes field ARGV[2] from every key after the first (the deployments, then the
/// staged versions, then the rest), only while the lease KEYS[1] names holder ARGV[1]
/// (else 0) and neither a live nor a staged record of that name is another tenant's
/// than ARGV[3] (else -1): a gateway's copy of who owns a name may be a sync old, and
/// the name may have gone to another tenant since. Returns `{1, live, staged}` with the
/// records it removed (`''` for none), so that their components can be forgotten.
const OWNED_REMOVE: &str = "if redis.call('get', KEYS[1]) ~= ARGV[1] then return {0, '', ''} end \
     local records = {1} \
     for i = 2, 3 do \
       local record = redis.call('hget', KEYS[i], ARGV[2]) \
       if record and cjson.decode(record).workflow.tenant ~= ARGV[3] then return {-1, '', ''} end \
       records[i] = record or '' \
     end \
     for i = 2, #KEYS do redis.call('hdel', KEYS[i], ARGV[2]) end return records";

/// Deletes a component (its bytes KEYS[2] and its tenants KEYS[3]) only if it was not
/// stored again since its stamp was read.
const COLLECT: &str = "if redis.call('hget', KEYS[1], ARGV[1]) == ARGV[2] then \
     redis.call('del', KEYS[2], KEYS[3]) redis.call('hdel', KEYS[1], ARGV[1]) return 1 end \
     return 0";

/// The largest piece of a component [`SharedState::put_component`] sends in one
/// command: larger ones are sent in pieces of this size.
const UPLOAD_PIECE: usize = 1 << 20;

/// A counter of component uploads sent in pieces, and the prefix of the key each is
/// written to (`faas:component-uploads:<n>`) before it is moved in place.
const UPLOADS: &str = "faas:component-uploads";

/// How long an upload's key lives, in milliseconds: far longer than an upload takes.
const UPLOAD_TTL_MS: i64 = 10 * 60 * 1000;

/// Moves upload `KEYS[1]` to component key `KEYS[2]` unless the component is stored
/// already (the same bytes: the key is their digest), then records tenant `ARGV[1]`
/// in `KEYS[3]` and stamps digest `ARGV[2]` with `ARGV[3]` in `KEYS[4]`. Returns 1 if it
/// stored the bytes, 0 if they were there, -1 (storing nothing) if the upload is not
/// `ARGV[4]` bytes long.
const MOVE_UPLOAD: &str = "if redis.call('strlen', KEYS[1]) ~= tonumber(ARGV[4]) then \
         redis.call('del', KEYS[1]) return -1 end \
     local created = 0 \
     if redis.call('exists', KEYS[2]) == 0 then \
         redis.call('rename', KEYS[1], KEYS[2]) redis.call('persist', KEYS[2]) created = 1 \
     else redis.call('del', KEYS[1]) end \
     redis.call('sadd', KEYS[3], ARGV[1]) redis.call('hset', KEYS[4], ARGV[2], ARGV[3]) \
     return created";

/// Deletes a key only if it still holds the value given (a lock taken by someone else
/// after ours expired stays).
const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

/// `faas:component:<sha256>`: a component's bytes.
fn component_key(digest: &str) -> String {
    format!("faas:component:{digest}")
}

/// `faas:component-tenants:<sha256>`: the tenants that stored a component (uploaded
/// it, or had its bytes fetched from a URL), and so may name it by its digest alone.
/// Components are stored once whatever tenants name them; without this, a tenant's
/// Workflow naming another tenant's digest ran that tenant's code under its own name,
/// and told it whether a component of that digest was deployed anywhere.
fn component_tenants_key(digest: &str) -> String {
    format!("faas:component-tenants:{digest}")
}

/// What [`SharedState::put_component`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredComponent {
    /// Whether this call stored the bytes (they were not there).
    pub created: bool,
    /// The time it stamped the component with (ms since the epoch).
    pub stamp: u64,
}

/// Why the shared state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SharedStateError {
    /// Redis refused or could not be reached.
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A record in Redis is not what this version writes.
    #[error("malformed `{key}` in Redis: {source}")]
    Malformed {
        /// The hash field or key.
        key: String,
        /// What failed to parse.
        source: serde_json::Error,
    },
    /// A deployment names a component that is not stored.
    #[error("component {0} is missing from Redis")]
    MissingComponent(String),
    /// Kubernetes mode, and the operator has not recorded the worker pods (yet, or
    /// since Redis restarted empty, or in a form this version reads): which workers
    /// there are is not known, and nothing should be placed or dropped on that account.
    #[error("the worker pods are not recorded (yet): waiting for the operator")]
    WorkersUnknown,
    /// A component sent in pieces did not arrive whole (its upload key expired or
    /// was evicted meanwhile); nothing was stored, and storing it again may work.
    #[error("component {0} did not arrive whole in Redis; nothing was stored")]
    UploadLost(String),
}

impl SharedStateError {
    /// Logs that `what` failed and is retried: at `warn`, but for
    /// [`SharedStateError::WorkersUnknown`], which a Kubernetes process meets at every
    /// sync until the operator has recorded the worker pods (its first seconds), at
    /// `debug`.
    pub fn log_retry(&self, what: &str) {
        match self {
            Self::WorkersUnknown => tracing::debug!("{what} waits, retrying: {self}"),
            _ => tracing::warn!("{what} failed, retrying: {self}"),
        }
    }
}

/// What [`SharedState::promote_deployment`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Promotion {
    /// The record is the live version.
    Live,
    /// Nothing: the caller no longer holds the workflow's lease.
    LeaseLost,
    /// Nothing: the workflow's tenant was removed since the deploy began.
    NoTenant,
    /// Nothing: the token that made the deploy was revoked since, or its tenant removed
    /// (and perhaps created again, for someone else).
    TokenRevoked,
}

/// What [`SharedState::remove_deployment`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// The workflow is gone from the shared state (or was not there).
    Removed,
    /// Nothing: the caller no longer holds the workflow's lease.
    LeaseLost,
    /// Nothing: the name is another tenant's workflow now.
    OtherTenants,
}

/// The registered workers, split by whether their heartbeat is current.
#[derive(Debug, Default, Clone)]
pub struct WorkerSets {
    /// Workers whose heartbeat has not expired (in Kubernetes mode: the Ready worker
    /// pods).
    pub live: Vec<WorkerInfo>,
    /// Registered workers whose heartbeat expired: they are presumed dead.
    pub dead: Vec<String>,
}

/// How long a component's transfer may take: a component may be as large as a deploy
/// (256 MiB by default), which takes seconds over a real network (two minutes covers
/// about 2 MiB/s).
const COMPONENT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(120);

/// A handle on the shared state; cheap to clone, reconnects on its own.
///
/// It holds two connections: component bytes travel on their own, so a transfer of
/// hundreds of MiB neither waits under the records' short timeout nor holds up the
/// records behind it (a worker's heartbeat while it fetches a component).
#[derive(Clone)]
pub struct SharedState {
    connection: ConnectionManager,
    components: ConnectionManager,
    /// The records last read, by hash, with the token they were read under.
    records: Arc<Mutex<HashMap<&'static str, CachedRecords>>>,
    /// Kubernetes mode: the workers are the worker pods the operator records
    /// ([`crate::worker_pods`]), whether or not it has yet.
    pub(crate) worker_pods_required: bool,
}

/// One hash of records as last read.
struct CachedRecords {
    version: String,
    read_at: std::time::Instant,
    records: BTreeMap<String, DeploymentRecord>,
}

impl SharedState {
    /// Connects to Redis at `url` and checks that it answers. A dead Redis fails an
    /// operation within about a second (a few quick reconnect attempts), as the store's
    /// Redis backends do (`faas_store::redis_connection`).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`] if the URL is invalid or the server does not answer.
    pub async fn connect(url: &str) -> Result<Self, SharedStateError> {
        let client = redis::Client::open(url)?;
        let connection = redis_connection::manage(client.clone()).await?;
        let components = redis_connection::manage_with(client, COMPONENT_RESPONSE_TIMEOUT).await?;
        Ok(Self {
            connection,
            components,
            records: Arc::default(),
            worker_pods_required: false,
        })
    }

    pub(crate) fn conn(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// Registers `worker` (again) and marks it alive for `ttl`. Workers call this at a
    /// fraction of `ttl`, so registration survives a Redis restart.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn heartbeat(
        &self,
        worker: &WorkerInfo,
        ttl: Duration,
    ) -> Result<(), SharedStateError> {
        let info = to_json(worker);
        let ttl_ms = ttl.as_millis().max(1) as u64;
        redis::pipe()
            .hset(WORKERS, &worker.id, info)
            .ignore()
            .pset_ex(alive_key(&worker.id), 1, ttl_ms)
            .ignore()
            .query_async::<()>(&mut self.conn())
            .await?;
        Ok(())
    }

    /// Every registered worker, live or presumed dead.
    ///
    /// In Kubernetes mode the workers are the worker pods the operator records, and
    /// what workers wrote of themselves is ignored ([`crate::worker_pods`]). Otherwise
    /// they are the registry; workers write their entries, so one that does not parse
    /// (or names another id) is left out, with a warning, rather than fail every
    /// reader.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn workers(&self) -> Result<WorkerSets, SharedStateError> {
        let mut conn = self.conn();
        let pods: BTreeMap<String, String> = match conn.hgetall(WORKER_PODS).await {
            Ok(pods) => pods,
            // A workers' Redis user of an older chart, which may not read them: no
            // operator records them then either.
            Err(err) if !self.worker_pods_required && err.code() == Some("NOPERM") => {
                BTreeMap::new()
            }
            Err(err) => return Err(err.into()),
        };
        let vouched = Vouched::from_hash(pods, self.worker_pods_required);
        if vouched.is_enforced() {
            // Only the scheduler acts on the dead, and a registry a worker made
            // unreadable (another type of key) must not stop every reader: read as
            // none then.
            let registered: Vec<String> = match conn.hkeys(WORKERS).await {
                Ok(registered) => registered,
                Err(err) if err.code() == Some("WRONGTYPE") => {
                    tracing::warn!("the worker registry is not a hash: {err}");
                    Vec::new()
                }
                Err(err) => return Err(err.into()),
            };
            return vouched
                .workers(registered)
                .ok_or(SharedStateError::WorkersUnknown);
        }
        let infos: BTreeMap<String, String> = conn.hgetall(WORKERS).await?;
        let mut sets = WorkerSets::default();
        if infos.is_empty() {
            return Ok(sets);
        }
        let alive_keys: Vec<String> = infos.keys().map(|id| alive_key(id)).collect();
        let alive: Vec<Option<u8>> = redis::cmd("MGET")
            .arg(&alive_keys)
            .query_async(&mut conn)
            .await?;
        for ((id, info), alive) in infos.into_iter().zip(alive) {
            let info = match from_json::<WorkerInfo>(&format!("{WORKERS}/{id}"), &info) {
                Ok(info) if info.id == id => info,
                Ok(info) => {
                    tracing::warn!(
                        worker = id,
                        named = info.id,
                        "ignoring a worker registration under another worker's id"
                    );
                    continue;
                }
                Err(err) => {
                    tracing::warn!(worker = id, "ignoring a worker registration: {err}");
                    continue;
                }
            };
            if alive.is_some() {
                sets.live.push(info);
            } else {
                sets.dead.push(id);
            }
        }
        Ok(sets)
    }

    /// Takes a stopping worker out at once, rather than when its heartbeat expires.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn deregister(&self, id: &str) -> Result<(), SharedStateError> {
        let _: i64 = self.conn().del(alive_key(id)).await?;
        self.forget_worker(id).await
    }

    /// Forgets a dead worker: its registration and its load reports.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn forget_worker(&self, id: &str) -> Result<(), SharedStateError> {
        self.forget_workers(&[id.to_owned()]).await
    }

    /// Forgets dead workers, in one round trip (there may be many: in Kubernetes mode
    /// every registration of no worker pod is one).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn forget_workers(&self, ids: &[String]) -> Result<(), SharedStateError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hdel(WORKERS, id)
                .ignore()
                .del(loaded_key(id))
                .ignore()
                .del(staged_loaded_key(id))
                .ignore();
        }
        pipe.query_async::<()>(&mut self.conn()).await?;
        Ok(())
    }

    /// Stores a component's bytes under their SHA-256 (a no-op when present) for
    /// `tenant`, who may name it by digest from now on ([`Self::has_component_of`]),
    /// and stamps it with the time; says whether this call stored the bytes, and the
    /// stamp. `digest` must be the SHA-256 of `bytes`: the caller checked it, or
    /// computed it.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn put_component(
        &self,
        digest: &str,
        bytes: &[u8],
        tenant: &str,
    ) -> Result<StoredComponent, SharedStateError> {
        let mut conn = self.components.clone();
        if bytes.len() <= UPLOAD_PIECE {
            let stamp = unix_millis();
            let (created,): (bool,) = redis::pipe()
                .atomic()
                .set_nx(component_key(digest), bytes)
                .sadd(component_tenants_key(digest), tenant)
                .ignore()
                .hset(COMPONENTS, digest, stamp)
                .ignore()
                .query_async(&mut conn)
                .await?;
            return Ok(StoredComponent { created, stamp });
        }
        // In pieces, to a key of this upload's own, moved in place at the end: in one
        // command the whole value was copied three more times on its way out (the
        // command's arguments, the pipeline, the connection's buffer), so storing a
        // component of 200 MiB took 800 MiB of the operator's or a gateway's memory.
        let id: u64 = conn.incr(UPLOADS, 1).await?;
        let upload = format!("{UPLOADS}:{id}");
        for piece in bytes.chunks(UPLOAD_PIECE) {
            // A process that dies mid-upload leaves nothing behind for long.
            let () = redis::pipe()
                .append(&upload, piece)
                .ignore()
                .pexpire(&upload, UPLOAD_TTL_MS)
                .ignore()
                .query_async(&mut conn)
                .await?;
        }
        // Stamped once it is all there: a deploy that began during a long upload
        // must count it as stored after it began (see `forget_components`).
        let stamp = unix_millis();
        let moved: i64 = redis::cmd("EVAL")
            .arg(MOVE_UPLOAD)
            .arg(4)
            .arg(&upload)
            .arg(component_key(digest))
            .arg(component_tenants_key(digest))
            .arg(COMPONENTS)
            .arg(tenant)
            .arg(digest)
            .arg(stamp)
            .arg(bytes.len())
            .query_async(&mut conn)
            .await?;
        if moved < 0 {
            return Err(SharedStateError::UploadLost(digest.to_owned()));
        }
        Ok(StoredComponent {
            created: moved == 1,
            stamp,
        })
    }

    /// Whether the component whose SHA-256 is `digest` is stored and `tenant` stored
    /// it ([`Self::put_component`]): what a tenant may name by digest alone.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn has_component_of(
        &self,
        tenant: &str,
        digest: &str,
    ) -> Result<bool, SharedStateError> {
        let (stored, theirs): (bool, bool) = redis::pipe()
            .exists(component_key(digest))
            .sismember(component_tenants_key(digest), tenant)
            .query_async(&mut self.conn())
            .await?;
        Ok(stored && theirs)
    }

    /// Forgets that `tenant` stored any component, so that a tenant created again under
    /// its name cannot name the removed one's components by digest; run when the tenant
    /// is removed. Returns how many components it was forgotten for.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`]; what was forgotten stays forgotten, and running it
    /// again forgets the rest.
    pub async fn forget_component_tenant(&self, tenant: &str) -> Result<u64, SharedStateError> {
        let mut conn = self.conn();
        let digests: Vec<String> = conn.hkeys(COMPONENTS).await?;
        if digests.is_empty() {
            return Ok(0);
        }
        let mut pipe = redis::pipe();
        for digest in &digests {
            pipe.srem(component_tenants_key(digest), tenant);
        }
        let removed: Vec<u64> = pipe.query_async(&mut conn).await?;
        Ok(removed.iter().sum())
    }

    /// Records, for each deployment (live or staged), that its tenant stored the
    /// components it names: for components stored before their tenants were recorded
    /// (by an older version), which their tenants' Workflows name by digest. And
    /// forgets every tenant that is no tenant any more (removed by an older version,
    /// which did not forget it there, or stored by a deploy that was under way while
    /// its tenant was removed), so that a tenant made again under its name inherits
    /// none of its components.
    ///
    /// # Errors
    /// [`SharedStateError`] if Redis fails or a record is malformed.
    pub async fn record_deployed_components_tenants(&self) -> Result<(), SharedStateError> {
        let records = self
            .deployments()
            .await?
            .into_values()
            .chain(self.staged_deployments().await?.into_values());
        let mut pipe = redis::pipe();
        let mut recorded = 0;
        for record in records {
            for digest in record.components.values() {
                pipe.sadd(component_tenants_key(digest), &record.workflow.tenant)
                    .ignore();
                recorded += 1;
            }
        }
        if recorded > 0 {
            pipe.query_async::<()>(&mut self.conn()).await?;
        }
        let mut conn = self.conn();
        let tenants: HashSet<String> = conn.hkeys(faas_store::tenants::TENANTS_KEY).await?;
        let digests: Vec<String> = conn.hkeys(COMPONENTS).await?;
        for digest in digests {
            let key = component_tenants_key(&digest);
            let members: Vec<String> = conn.smembers(&key).await?;
            let gone: Vec<&String> = members
                .iter()
                .filter(|member| !tenants.contains(*member))
                .collect();
            if !gone.is_empty() {
                let _: u64 = conn.srem(&key, gone).await?;
            }
        }
        Ok(())
    }

    /// Deletes at once each component of `candidates` (digest, latest stamp) that no
    /// deployment names, live or staged, and that was last stored at or before its
    /// stamp given; returns the digests deleted. For what a deploy or a removal leaves
    /// behind: the
    /// components it stored itself when it failed (their own stamps), the ones its
    /// previous version named once it replaced it (stored before it started). A
    /// component another deploy stored since is kept, as it may be about to name it,
    /// and so is one another tenant than `tenant` stored too: only the collection,
    /// after `--component-ttl-s`, deletes it, so that one tenant's deploys never take
    /// another's component from under a deploy of its own that names it but is not
    /// recorded yet.
    ///
    /// # Errors
    /// [`SharedStateError`] if Redis fails or a record is malformed.
    pub async fn forget_components(
        &self,
        tenant: &str,
        candidates: &[(String, u64)],
    ) -> Result<Vec<String>, SharedStateError> {
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let named = self.named_components().await?;
        let mut conn = self.conn();
        let mut deleted = Vec::new();
        for (digest, latest) in candidates {
            if named.contains(digest) {
                continue;
            }
            let stored_by: Vec<String> = conn.smembers(component_tenants_key(digest)).await?;
            if stored_by.iter().any(|other| other != tenant) {
                continue;
            }
            let stamp: Option<u64> = conn.hget(COMPONENTS, digest).await?;
            let Some(stamp) = stamp.filter(|stamp| stamp <= latest) else {
                continue;
            };
            if self.collect_one(&mut conn, digest, stamp).await? {
                deleted.push(digest.clone());
            }
        }
        Ok(deleted)
    }

    /// The digests the deployments name, live or staged.
    async fn named_components(
        &self,
    ) -> Result<std::collections::BTreeSet<String>, SharedStateError> {
        Ok(self
            .deployments()
            .await?
            .into_values()
            .chain(self.staged_deployments().await?.into_values())
            .flat_map(|record| record.components.into_values())
            .collect())
    }

    /// Deletes component `digest` if its stamp is still `stamp`.
    async fn collect_one(
        &self,
        conn: &mut ConnectionManager,
        digest: &str,
        stamp: u64,
    ) -> Result<bool, SharedStateError> {
        let removed: i64 = redis::cmd("EVAL")
            .arg(COLLECT)
            .arg(3)
            .arg(COMPONENTS)
            .arg(component_key(digest))
            .arg(component_tenants_key(digest))
            .arg(digest)
            .arg(stamp)
            .query_async(conn)
            .await?;
        Ok(removed == 1)
    }

    /// Deletes the components no deployment names, live or staged, that were last
    /// stored at least `min_age` ago, and returns their digests. A deploy stores its
    /// components before its staged record, so the age keeps a deploy in progress from
    /// losing them; a component stored again meanwhile is kept.
    ///
    /// # Errors
    /// [`SharedStateError`] if Redis fails or a record is malformed.
    pub async fn collect_components(
        &self,
        min_age: Duration,
    ) -> Result<Vec<String>, SharedStateError> {
        let named = self.named_components().await?;
        let mut conn = self.conn();
        let stamps: BTreeMap<String, u64> = conn.hgetall(COMPONENTS).await?;
        let cutoff = unix_millis().saturating_sub(min_age.as_millis() as u64);
        let mut deleted = Vec::new();
        for (digest, stamp) in stamps {
            if named.contains(&digest) || stamp > cutoff {
                continue;
            }
            if self.collect_one(&mut conn, &digest, stamp).await? {
                deleted.push(digest);
            }
        }
        Ok(deleted)
    }

    /// Whether the component whose SHA-256 is `digest` is stored (without reading it).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn has_component(&self, digest: &str) -> Result<bool, SharedStateError> {
        Ok(self.conn().exists(component_key(digest)).await?)
    }

    /// How many bytes the components whose SHA-256s are `digests` take, each counted
    /// as often as it is named (pass each once to count what Redis holds); one not
    /// stored counts 0.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn components_bytes<'a>(
        &self,
        digests: impl IntoIterator<Item = &'a String>,
    ) -> Result<u64, SharedStateError> {
        let mut pipe = redis::pipe();
        for digest in digests {
            pipe.strlen(component_key(digest));
        }
        let lengths: Vec<u64> = pipe.query_async(&mut self.conn()).await?;
        Ok(lengths.iter().sum())
    }

    /// The component whose SHA-256 is `digest`.
    ///
    /// # Errors
    /// [`SharedStateError::MissingComponent`] if it is not stored.
    pub async fn component(&self, digest: &str) -> Result<Vec<u8>, SharedStateError> {
        let bytes: Option<Vec<u8>> = self.components.clone().get(component_key(digest)).await?;
        bytes.ok_or_else(|| SharedStateError::MissingComponent(digest.to_owned()))
    }

    /// A new revision number, shared by every gateway.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn next_revision(&self) -> Result<u64, SharedStateError> {
        Ok(self.conn().incr(REVISION, 1).await?)
    }

    /// Takes the lease on changing workflow `name` for `ttl`, as `holder`; returns
    /// false when someone else holds it. The holder renews it with
    /// [`SharedState::renew_lock`] while it works, so a dead holder's lease ends soon.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn lock_workflow(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, SharedStateError> {
        self.take_lease(&lock_key(name), holder, ttl).await
    }

    /// Extends `holder`'s lease on workflow `name` to `ttl` from now; returns false when
    /// the lease is not (any longer) `holder`'s.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn renew_lock(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, SharedStateError> {
        let renewed: i64 = redis::cmd("EVAL")
            .arg(RENEW)
            .arg(1)
            .arg(lock_key(name))
            .arg(holder)
            .arg(ttl.as_millis().max(1) as u64)
            .query_async(&mut self.conn())
            .await?;
        Ok(renewed == 1)
    }

    /// Releases the lock on workflow `name` if `holder` still holds it.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn unlock_workflow(&self, name: &str, holder: &str) -> Result<(), SharedStateError> {
        self.release_lease(&lock_key(name), holder).await
    }

    /// Takes the lease on writing back a state Redis lost (see [`SharedState::epoch`])
    /// for `ttl`, as `holder`; returns false when another gateway holds it. One gateway
    /// writes back at a time; a dead one's lease ends after `ttl`.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn claim_write_back(
        &self,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, SharedStateError> {
        self.take_lease(WRITE_BACK, holder, ttl).await
    }

    /// Releases the write-back lease if `holder` still holds it.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn release_write_back(&self, holder: &str) -> Result<(), SharedStateError> {
        self.release_lease(WRITE_BACK, holder).await
    }

    /// `SET key holder NX PX ttl`: whether `holder` took the lease.
    async fn take_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, SharedStateError> {
        let taken: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(holder)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64)
            .query_async(&mut self.conn())
            .await?;
        Ok(taken.is_some())
    }

    /// Deletes lease `key` if `holder` still holds it.
    async fn release_lease(&self, key: &str, holder: &str) -> Result<(), SharedStateError> {
        let _: i64 = redis::cmd("EVAL")
            .arg(RELEASE)
            .arg(1)
            .arg(key)
            .arg(holder)
            .query_async(&mut self.conn())
            .await?;
        Ok(())
    }

    /// The id of the shared state's current epoch, if any was set.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn epoch(&self) -> Result<Option<String>, SharedStateError> {
        Ok(self.conn().get(EPOCH).await?)
    }

    /// Starts epoch `id` unless one exists; returns whether this call started it. A
    /// gateway starts one once the state is whole: on a fresh Redis, or after writing
    /// back what a restart lost (never before, so a write-back cut short is done again).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn start_epoch(&self, id: &str) -> Result<bool, SharedStateError> {
        Ok(self.conn().set_nx(EPOCH, id).await?)
    }

    /// Makes sure revisions handed out from now on are above `revision` (after the
    /// counter was lost with the rest of the state).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn raise_revision(&self, revision: u64) -> Result<(), SharedStateError> {
        // In one step: between a read and a write, another gateway's `INCR` could
        // hand out the number this then sets again.
        let _: i64 = redis::cmd("EVAL")
            .arg(RAISE_REVISION)
            .arg(1)
            .arg(REVISION)
            .arg(revision)
            .query_async(&mut self.conn())
            .await?;
        Ok(())
    }

    /// Makes `record` the live version of its workflow (writing back a lost state;
    /// deploys go through [`SharedState::stage_deployment`] and
    /// [`SharedState::promote_deployment`]).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn put_deployment(&self, record: &DeploymentRecord) -> Result<(), SharedStateError> {
        let _: i64 = self
            .conn()
            .hset(DEPLOYMENTS, &record.workflow.name, to_json(record))
            .await?;
        self.records_changed().await;
        Ok(())
    }

    /// Makes `record` the live version (the operator's deploy, from a Workflow
    /// resource) if its tenant is still in the tenant store, in one step; returns false,
    /// writing nothing, when it is not (removed since the resource was checked).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn put_deployment_of_tenant(
        &self,
        record: &DeploymentRecord,
    ) -> Result<bool, SharedStateError> {
        let done: i64 = redis::cmd("EVAL")
            .arg(PUT_IF_TENANT)
            .arg(2)
            .arg(DEPLOYMENTS)
            .arg(faas_store::tenants::TENANTS_KEY)
            .arg(&record.workflow.name)
            .arg(to_json(record))
            .arg(&record.workflow.tenant)
            .query_async(&mut self.conn())
            .await?;
        self.records_changed().await;
        Ok(done == 1)
    }

    /// Stages `record` (workers load it beside the live version) while `holder` holds
    /// the workflow's lease; returns false, writing nothing, when it does not.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn stage_deployment(
        &self,
        record: &DeploymentRecord,
        holder: &str,
    ) -> Result<bool, SharedStateError> {
        self.fenced(
            FENCED_WRITE,
            &record.workflow.name,
            holder,
            &[STAGED],
            Some(record),
        )
        .await
    }

    /// Makes `record` (staged) the live version and removes its staged copy, in one
    /// step, while `holder` holds the workflow's lease, its tenant is still in the
    /// tenant store ([`faas_store::tenants::TENANTS_KEY`]) and, for a deploy a tenant's
    /// token made, `token_hash` (its secret's [`faas_store::tenants::secret_hash`]) is
    /// still a live token's.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn promote_deployment(
        &self,
        record: &DeploymentRecord,
        holder: &str,
        token_hash: Option<&str>,
    ) -> Result<Promotion, SharedStateError> {
        use faas_store::tenants::{HASHES_KEY, TENANTS_KEY, TOKENS_KEY};
        let name = &record.workflow.name;
        let done: i64 = redis::cmd("EVAL")
            .arg(FENCED_PROMOTE)
            .arg(6)
            .arg(lock_key(name))
            .arg(&[DEPLOYMENTS, STAGED, TENANTS_KEY, HASHES_KEY, TOKENS_KEY][..])
            .arg(holder)
            .arg(name)
            .arg(to_json(record))
            .arg(&record.workflow.tenant)
            .arg(token_hash.unwrap_or_default())
            .query_async(&mut self.conn())
            .await?;
        self.records_changed().await;
        Ok(match done {
            1 => Promotion::Live,
            -1 => Promotion::NoTenant,
            -2 => Promotion::TokenRevoked,
            _ => Promotion::LeaseLost,
        })
    }

    /// Removes workflow `name`'s staged version (a deploy that failed) while `holder`
    /// holds its lease.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn unstage_deployment(
        &self,
        name: &str,
        holder: &str,
    ) -> Result<bool, SharedStateError> {
        self.fenced(FENCED_REMOVE, name, holder, &[STAGED], None)
            .await
    }

    /// Removes `tenant`'s workflow `name`: its deployment, staged version, placement,
    /// activity and demand, while `holder` holds its lease and no version of that name
    /// is another tenant's. Then deletes at once the components the removed versions
    /// named that nothing else needs ([`Self::forget_components`]), as a deploy does
    /// for the version it replaces: left to the collection, a tenant deploying and
    /// removing workflows of fresh components in a loop filled the Redis every tenant
    /// shares with bytes no quota counted, for `--component-ttl-s`.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`] if the removal failed; nothing was removed then.
    pub async fn remove_deployment(
        &self,
        name: &str,
        tenant: &str,
        holder: &str,
    ) -> Result<Removal, SharedStateError> {
        // A component stored again after this (by a deploy that may be about to name
        // it) is kept.
        let started = unix_millis();
        let (done, live, staged): (i64, String, String) = redis::cmd("EVAL")
            .arg(OWNED_REMOVE)
            .arg(6)
            .arg(lock_key(name))
            .arg(&[DEPLOYMENTS, STAGED, PLACEMENTS, ACTIVITY, DEMAND][..])
            .arg(holder)
            .arg(name)
            .arg(tenant)
            .query_async(&mut self.conn())
            .await?;
        self.records_changed().await;
        match done {
            1 => {}
            -1 => return Ok(Removal::OtherTenants),
            _ => return Ok(Removal::LeaseLost),
        }
        let mut candidates = Vec::new();
        for (hash, json) in [(DEPLOYMENTS, live), (STAGED, staged)] {
            if json.is_empty() {
                continue;
            }
            // Removed all the same: the collection deletes its components later.
            let record: DeploymentRecord = match from_json(&format!("{hash}/{name}"), &json) {
                Ok(record) => record,
                Err(err) => {
                    tracing::warn!(workflow = name, "a removed record: {err}");
                    continue;
                }
            };
            candidates.extend(
                record
                    .components
                    .into_values()
                    .map(|digest| (digest, started.saturating_sub(1))),
            );
        }
        if let Err(err) = self.forget_components(tenant, &candidates).await {
            tracing::warn!(
                workflow = name,
                "deleting the components of a removed workflow (the collection will): {err}"
            );
        }
        Ok(Removal::Removed)
    }

    /// Runs `script` on workflow `name`'s field of `hashes`, fenced by its lease.
    async fn fenced(
        &self,
        script: &str,
        name: &str,
        holder: &str,
        hashes: &[&str],
        record: Option<&DeploymentRecord>,
    ) -> Result<bool, SharedStateError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script)
            .arg(1 + hashes.len())
            .arg(lock_key(name))
            .arg(hashes)
            .arg(holder)
            .arg(name);
        if let Some(record) = record {
            cmd.arg(to_json(record));
        }
        let done: i64 = cmd.query_async(&mut self.conn()).await?;
        if hashes
            .iter()
            .any(|hash| [DEPLOYMENTS, STAGED].contains(hash))
        {
            self.records_changed().await;
        }
        Ok(done == 1)
    }

    /// Every staged version, by workflow name.
    ///
    /// # Errors
    /// [`SharedStateError`] if Redis fails or a record is malformed.
    pub async fn staged_deployments(
        &self,
    ) -> Result<BTreeMap<String, DeploymentRecord>, SharedStateError> {
        self.read_records(STAGED).await
    }

    /// Removes the staged versions whose deploy lost its lease (its gateway died, or
    /// gave up without cleaning up) and returns their names.
    ///
    /// # Errors
    /// [`SharedStateError`] if Redis fails or a record is malformed.
    pub async fn drop_abandoned_stages(&self) -> Result<Vec<String>, SharedStateError> {
        let mut conn = self.conn();
        let names: Vec<String> = conn.hkeys(STAGED).await?;
        let mut dropped = Vec::new();
        for name in names {
            let removed: i64 = redis::cmd("EVAL")
                .arg(DROP_ABANDONED)
                .arg(2)
                .arg(lock_key(&name))
                .arg(STAGED)
                .arg(&name)
                .query_async(&mut conn)
                .await?;
            if removed == 1 {
                dropped.push(name);
            }
        }
        if !dropped.is_empty() {
            self.records_changed().await;
        }
        Ok(dropped)
    }

    /// Every deployment, by workflow name.
    ///
    /// # Errors
    /// [`SharedStateError`] if Redis fails or a record is malformed.
    pub async fn deployments(
        &self,
    ) -> Result<BTreeMap<String, DeploymentRecord>, SharedStateError> {
        self.read_records(DEPLOYMENTS).await
    }

    /// Every placement, by workflow name.
    ///
    /// # Errors
    /// [`SharedStateError`] if Redis fails or a record is malformed.
    pub async fn placements(&self) -> Result<BTreeMap<String, PlacementRecord>, SharedStateError> {
        self.read_hash(PLACEMENTS).await
    }

    /// Writes the placements in `set` and removes those named in `removed`.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn write_placements(
        &self,
        set: &BTreeMap<String, PlacementRecord>,
        removed: &[String],
    ) -> Result<(), SharedStateError> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (name, record) in set {
            pipe.hset(PLACEMENTS, name, to_json(record)).ignore();
        }
        for name in removed {
            pipe.hdel(PLACEMENTS, name).ignore();
        }
        pipe.query_async::<()>(&mut self.conn()).await?;
        Ok(())
    }

    /// What `worker` reported for each workflow placed on it.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn load_statuses(
        &self,
        worker: &str,
    ) -> Result<BTreeMap<String, LoadStatus>, SharedStateError> {
        self.read_reports(&loaded_key(worker)).await
    }

    /// What `worker` reported for the staged version of each workflow placed on it.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn staged_load_statuses(
        &self,
        worker: &str,
    ) -> Result<BTreeMap<String, LoadStatus>, SharedStateError> {
        self.read_reports(&staged_loaded_key(worker)).await
    }

    /// Reports what `worker` did with workflow `name` (`None`: it dropped it).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn report_load(
        &self,
        worker: &str,
        name: &str,
        status: Option<&LoadStatus>,
    ) -> Result<(), SharedStateError> {
        self.report(&loaded_key(worker), name, status).await
    }

    /// Reports what `worker` did with workflow `name`'s staged version (`None`: it has
    /// none any more).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn report_staged_load(
        &self,
        worker: &str,
        name: &str,
        status: Option<&LoadStatus>,
    ) -> Result<(), SharedStateError> {
        self.report(&staged_loaded_key(worker), name, status).await
    }

    async fn report(
        &self,
        key: &str,
        name: &str,
        status: Option<&LoadStatus>,
    ) -> Result<(), SharedStateError> {
        let mut conn = self.conn();
        match status {
            Some(status) => {
                let _: i64 = conn.hset(key, name, to_json(status)).await?;
            }
            None => {
                let _: i64 = conn.hdel(key, name).await?;
            }
        }
        Ok(())
    }

    /// Sets a new [`RECORDS_VERSION`] token after a write to the records. A failure is
    /// logged: readers then see the write within [`RECORDS_MAX_AGE`].
    async fn records_changed(&self) {
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let token = format!(
            "{nanos:x}.{:x}.{:x}",
            std::process::id(),
            WRITES.fetch_add(1, Ordering::Relaxed)
        );
        if let Err(err) = self.conn().set::<_, _, ()>(RECORDS_VERSION, token).await {
            tracing::warn!("marking the deployment records changed: {err}");
        }
    }

    /// The records of `hash` ([`DEPLOYMENTS`] or [`STAGED`]): as last read when the
    /// [`RECORDS_VERSION`] token is unchanged and the read is recent, read again (with
    /// the token, in one step) otherwise.
    async fn read_records(
        &self,
        hash: &'static str,
    ) -> Result<BTreeMap<String, DeploymentRecord>, SharedStateError> {
        let mut conn = self.conn();
        let version: Option<String> = conn.get(RECORDS_VERSION).await?;
        if let Some(version) = &version {
            let cached = self.lock_records();
            if let Some(cached) = cached.get(hash).filter(|cached| {
                cached.version == *version && cached.read_at.elapsed() < RECORDS_MAX_AGE
            }) {
                return Ok(cached.records.clone());
            }
        }
        let read_at = std::time::Instant::now();
        let (version, raw): (Option<String>, BTreeMap<String, String>) = redis::pipe()
            .atomic()
            .get(RECORDS_VERSION)
            .hgetall(hash)
            .query_async(&mut conn)
            .await?;
        let records: BTreeMap<String, DeploymentRecord> = raw
            .into_iter()
            .map(|(field, json)| Ok((field.clone(), from_json(&format!("{hash}/{field}"), &json)?)))
            .collect::<Result<_, SharedStateError>>()?;
        let mut cached = self.lock_records();
        match version {
            Some(version) => {
                cached.insert(
                    hash,
                    CachedRecords {
                        version,
                        read_at,
                        records: records.clone(),
                    },
                );
            }
            None => {
                cached.remove(hash);
            }
        }
        Ok(records)
    }

    fn lock_records(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, CachedRecords>> {
        // Each entry is replaced whole: a poisoned lock still holds whole entries.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The entries of hash `key` that a worker wrote (its load reports): one that does
    /// not parse is left out, with a warning, rather than fail every reader of every
    /// worker's reports.
    async fn read_reports<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<BTreeMap<String, T>, SharedStateError> {
        let raw: BTreeMap<String, String> = match self.conn().hgetall(key).await {
            Ok(raw) => raw,
            // Made another type of key by a worker: no report, rather than no reader.
            Err(err) if err.code() == Some("WRONGTYPE") => {
                tracing::warn!("ignoring a worker's reports: `{key}` is not a hash: {err}");
                BTreeMap::new()
            }
            Err(err) => return Err(err.into()),
        };
        Ok(raw
            .into_iter()
            .filter_map(
                |(field, json)| match from_json(&format!("{key}/{field}"), &json) {
                    Ok(value) => Some((field, value)),
                    Err(err) => {
                        tracing::warn!("ignoring a worker's report: {err}");
                        None
                    }
                },
            )
            .collect())
    }

    async fn read_hash<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<BTreeMap<String, T>, SharedStateError> {
        let raw: BTreeMap<String, String> = self.conn().hgetall(key).await?;
        raw.into_iter()
            .map(|(field, json)| {
                let value = from_json(&format!("{key}/{field}"), &json)?;
                Ok((field, value))
            })
            .collect()
    }
}

pub(crate) fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

pub(crate) fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("records serialize to JSON")
}

fn from_json<T: DeserializeOwned>(key: &str, json: &str) -> Result<T, SharedStateError> {
    serde_json::from_str(json).map_err(|source| SharedStateError::Malformed {
        key: key.to_owned(),
        source,
    })
}
