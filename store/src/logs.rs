//! Guests' log lines in Redis (services mode): one stream per workflow,
//! `faas:logs:<tenant>:<workflow>` (a platform key: guests' names are all under
//! `t:<tenant>:`, so no guest reaches it; the tenant in it, so that a workflow name
//! another tenant had, or still writes to from instances of a removed version, is
//! another stream). Each keeps a number of lines, and a tenant's log streams
//! together a number of bytes, by the append script of `stream_quota` (counted apart
//! from its message streams): a tenant's 100 workflows of 10,000 lines of 4 KiB would
//! otherwise hold 4 GiB of the Redis every tenant shares. Past its bytes, a line trims
//! the oldest lines of the tenant's largest log streams.
//!
//! Workers write through [`RedisLogWriter`]: a guest's line goes into a bounded queue
//! and a background task appends batches in one pipeline, so a slow or absent Redis
//! never slows a guest; what does not fit is dropped and counted. The queue is shared
//! fairly by tenants (`log_queue`), so a tenant flooding its logs loses its own lines,
//! not another's. Gateways read through [`RedisLogReader`].

use crate::log_queue::LogQueue;
use crate::stream_quota::{self, Counted, StreamQuota};
use crate::tenants::Tenant;
use faas_invoke::{LogLine, LogSink};
use redis::aio::MultiplexedConnection;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The default number of lines each workflow's stream keeps.
pub const DEFAULT_LOG_STREAM_LEN: u64 = 10_000;
/// The default number of bytes a tenant's log streams hold in all (as `stream_quota`
/// counts them): 16 MiB, 4,096 of the longest lines (4 KiB), or ten thousands of
/// usual ones.
pub const DEFAULT_LOG_MAX_BYTES: u64 = 16 << 20;

/// Lines waiting for the writer task, all tenants' together; past it a line makes room
/// from the tenant with the most waiting (`log_queue`).
const QUEUE_LINES: usize = 4096;

/// Most lines appended in one pipeline.
const BATCH_LINES: usize = 256;

/// How long one batch may take before it is given up (and its lines counted dropped).
const BATCH_TIMEOUT: Duration = Duration::from_secs(2);

/// Most lines one read returns (the newest).
pub const MAX_READ_LINES: usize = 10_000;

/// Most bytes of lines one read returns (the newest): a read is held whole in the
/// gateway, parsed and answered as JSON, and a tenant's guests choose how long its
/// lines are (up to 4 KiB, so 10,000 of them would be 40 MB).
pub const MAX_READ_BYTES: usize = 2 << 20;

/// Most entries one page of a read asks Redis for.
const READ_PAGE: usize = 500;

/// Most bytes one stored line takes: its JSON, where a text of control characters
/// escapes to six bytes each, with its names and times.
pub const MAX_ENTRY_BYTES: usize = 6 * faas_invoke::logs::MAX_LOG_LINE_BYTES + 1024;

/// How many entries the next page of a read asks Redis for, once it read `lines`
/// lines of `bytes` in all: no more than would fit in twice [`MAX_READ_BYTES`] were
/// each as large as a line can be, so that the gateway never holds a page of
/// [`READ_PAGE`] of the largest lines (12 MiB) only to cut it to [`MAX_READ_BYTES`].
fn page_len(lines: usize, bytes: usize) -> usize {
    let room = (2 * MAX_READ_BYTES).saturating_sub(bytes) / MAX_ENTRY_BYTES;
    room.clamp(1, READ_PAGE)
        .min(MAX_READ_LINES.saturating_sub(lines))
}

/// The Redis key of `tenant`'s `workflow`'s log stream. Tenant names are DNS labels
/// (no `:`), so no two tenants' keys meet.
pub fn log_key(tenant: &str, workflow: &str) -> String {
    format!("{}{workflow}", log_prefix(tenant))
}

/// The start of every key of `tenant`'s log streams.
pub fn log_prefix(tenant: &str) -> String {
    format!("faas:logs:{tenant}:")
}

/// Why the log store could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum LogStoreError {
    /// Redis could not be reached at start.
    #[error("connecting to Redis for logs: {0}")]
    Connect(String),
    /// A read failed.
    #[error("reading logs from Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// A worker's log sink: queues lines for a background task that appends them.
pub struct RedisLogWriter {
    queue: Arc<LogQueue>,
    dropped: Arc<AtomicU64>,
    own_quotas: OwnQuotas,
}

/// The tenants whose log streams hold their own bytes in all (`log_max_bytes` quota).
type OwnQuotas = Arc<RwLock<HashMap<String, u64>>>;

impl RedisLogWriter {
    /// Connects to `url` and starts the writer task; each stream keeps `quota.max_len`
    /// lines, and each tenant's streams `quota.max_bytes` in all.
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn connect(url: &str, quota: StreamQuota) -> Result<Self, LogStoreError> {
        let client = checked_client(url).await?;
        let queue = Arc::new(LogQueue::new(QUEUE_LINES));
        let dropped = Arc::new(AtomicU64::new(0));
        let own_quotas = OwnQuotas::default();
        tokio::spawn(write_batches(
            client,
            queue.clone(),
            Quotas {
                default: quota,
                own: own_quotas.clone(),
            },
            dropped.clone(),
        ));
        Ok(Self {
            queue,
            dropped,
            own_quotas,
        })
    }

    /// Gives each of `tenants` with a `log_max_bytes` quota that many bytes for its
    /// log streams in all, and every other tenant the default back: the whole list,
    /// as the tenant store has it.
    pub fn apply_tenant_quotas(&self, tenants: &[Tenant]) {
        let own = tenants
            .iter()
            .filter_map(|tenant| Some((tenant.name.clone(), tenant.quotas.log_max_bytes?)))
            .collect();
        *self
            .own_quotas
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = own;
    }

    /// How many lines were dropped (queue full, Redis too slow, or a line its tenant's
    /// quota has no room for) since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl LogSink for RedisLogWriter {
    fn push(&self, line: LogLine) {
        if self.queue.push(line) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for RedisLogWriter {
    fn drop(&mut self) {
        self.queue.close();
    }
}

/// A client for `url` whose server answered `PING`.
async fn checked_client(url: &str) -> Result<redis::Client, LogStoreError> {
    let connect_error = |err: redis::RedisError| LogStoreError::Connect(err.to_string());
    let client = redis::Client::open(url).map_err(connect_error)?;
    let mut connection = open(&client).await.map_err(connect_error)?;
    redis::cmd("PING")
        .query_async::<()>(&mut connection)
        .await
        .map_err(connect_error)?;
    Ok(client)
}

/// A connection, bounded in time both ways.
async fn open(client: &redis::Client) -> redis::RedisResult<MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(BATCH_TIMEOUT))
        .set_response_timeout(Some(BATCH_TIMEOUT));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// What the writer task appends within: each stream's lines and, by default, each
/// tenant's bytes; some tenants' bytes their own.
struct Quotas {
    default: StreamQuota,
    own: OwnQuotas,
}

/// Appends queued lines in batches until the writer is gone. It connects only when
/// it has lines to write and forgets a connection that failed, so an idle worker
/// holds no reconnecting connection and a Redis that came back is found again.
async fn write_batches(
    client: redis::Client,
    queue: Arc<LogQueue>,
    quotas: Quotas,
    dropped: Arc<AtomicU64>,
) {
    let mut batch = Vec::with_capacity(BATCH_LINES);
    let mut connection: Option<MultiplexedConnection> = None;
    while queue.take(&mut batch, BATCH_LINES).await {
        let mut pipe = redis::pipe();
        stream_quota::load_into(&mut pipe);
        let own = quotas
            .own
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for line in &batch {
            let Ok(json) = serde_json::to_string(line) else {
                continue;
            };
            let fields: [(&str, &[u8]); 1] = [("line", json.as_bytes())];
            let key = log_key(&line.tenant, &line.workflow);
            let quota = StreamQuota {
                max_bytes: own
                    .get(&line.tenant)
                    .copied()
                    .unwrap_or(quotas.default.max_bytes),
                ..quotas.default
            };
            let invocation =
                stream_quota::invocation(Counted::Logs, quota, &line.tenant, &key, &fields);
            pipe.invoke_script(&invocation);
        }
        let sent = tokio::time::timeout(BATCH_TIMEOUT, async {
            let live = match connection.take() {
                Some(live) => live,
                None => open(&client).await?,
            };
            let mut live = connection.insert(live).clone();
            pipe.query_async::<Vec<stream_quota::Answer>>(&mut live)
                .await
        });
        if let Ok(Ok(answers)) = &sent.await {
            let refused = answers
                .iter()
                .filter(|answer| stream_quota::appended(answer).is_none());
            dropped.fetch_add(refused.count() as u64, Ordering::Relaxed);
        } else {
            connection = None;
            dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
            tracing::debug!(
                lines = batch.len(),
                "log lines dropped: Redis too slow or down"
            );
        }
        batch.clear();
    }
}

/// A gateway's reader of the log streams, on one connection made at its first read
/// (an idle gateway holds none) and shared by every read and follow after: a follow
/// polls four times a second, and a connection for each poll would leave the gateway's
/// ports in TIME_WAIT by the thousand.
#[derive(Clone)]
pub struct RedisLogReader {
    client: redis::Client,
    connection: std::sync::Arc<tokio::sync::OnceCell<redis::aio::ConnectionManager>>,
}

/// Lines read from a stream, with the id to read after next time.
pub struct LogBatch {
    /// The lines, oldest first.
    pub lines: Vec<LogLine>,
    /// The last entry id read (or the one given, when none was new).
    pub last_id: String,
    /// The bytes of the entries read from Redis, what the read cost it (a reader's
    /// filters may then drop lines).
    pub bytes: usize,
}

impl RedisLogReader {
    /// Connects to `url`.
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, LogStoreError> {
        let client = checked_client(url).await?;
        Ok(Self {
            client,
            connection: std::sync::Arc::default(),
        })
    }

    /// The shared connection (reconnecting by itself after a failure).
    async fn connection(&self) -> Result<redis::aio::ConnectionManager, LogStoreError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(BATCH_TIMEOUT))
            .set_response_timeout(Some(BATCH_TIMEOUT));
        let connection = self
            .connection
            .get_or_try_init(|| {
                redis::aio::ConnectionManager::new_with_config(self.client.clone(), config)
            })
            .await?;
        Ok(connection.clone())
    }

    /// The newest lines of `tenant`'s `workflow` (at most [`MAX_READ_LINES`], and
    /// [`MAX_READ_BYTES`] of them), oldest first.
    ///
    /// # Errors
    /// When Redis fails.
    pub async fn recent(&self, tenant: &str, workflow: &str) -> Result<LogBatch, LogStoreError> {
        let key = log_key(tenant, workflow);
        let mut connection = self.connection().await?;
        let mut entries: Vec<(String, Vec<(String, String)>)> = Vec::new();
        let mut bytes = 0;
        let mut before = "+".to_owned();
        'pages: while entries.len() < MAX_READ_LINES {
            let asked = page_len(entries.len(), bytes);
            let page: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
                .arg(&key)
                .arg(&before)
                .arg("-")
                .arg("COUNT")
                .arg(asked)
                .query_async(&mut connection)
                .await?;
            let full = page.len() == asked;
            for entry in page {
                let size = entry_bytes(&entry.1);
                if bytes + size > MAX_READ_BYTES {
                    break 'pages;
                }
                bytes += size;
                entries.push(entry);
            }
            match entries.last() {
                Some((oldest, _)) if full => before = format!("({oldest}"),
                _ => break,
            }
        }
        let last_id = entries
            .first()
            .map_or_else(|| "0-0".to_owned(), |(id, _)| id.clone());
        Ok(LogBatch {
            lines: decode(entries.into_iter().rev()),
            last_id,
            bytes,
        })
    }

    /// The lines of `tenant`'s `workflow` appended after entry `after` (at most
    /// `count`), oldest first.
    ///
    /// # Errors
    /// When Redis fails.
    pub async fn after(
        &self,
        tenant: &str,
        workflow: &str,
        after: &str,
        count: usize,
    ) -> Result<LogBatch, LogStoreError> {
        let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg(log_key(tenant, workflow))
            .arg(format!("({after}"))
            .arg("+")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut self.connection().await?)
            .await?;
        let last_id = entries
            .last()
            .map_or_else(|| after.to_owned(), |(id, _)| id.clone());
        let bytes = entries.iter().map(|(_, fields)| entry_bytes(fields)).sum();
        Ok(LogBatch {
            lines: decode(entries.into_iter()),
            last_id,
            bytes,
        })
    }

    /// Removes the lines of `tenant`'s `workflow` (it was removed).
    ///
    /// # Errors
    /// When Redis fails.
    pub async fn remove(&self, tenant: &str, workflow: &str) -> Result<(), LogStoreError> {
        let key = log_key(tenant, workflow);
        redis::cmd("DEL")
            .arg(Counted::Logs.entries_key(&key))
            .arg(key)
            .query_async::<()>(&mut self.connection().await?)
            .await?;
        Ok(())
    }
}

/// The bytes of a stream entry's values.
fn entry_bytes(fields: &[(String, String)]) -> usize {
    fields.iter().map(|(_, value)| value.len()).sum()
}

/// The lines of stream entries; an entry that is not a line (none is written so) is
/// skipped.
fn decode(entries: impl Iterator<Item = (String, Vec<(String, String)>)>) -> Vec<LogLine> {
    entries
        .filter_map(|(_, fields)| {
            let (_, json) = fields.into_iter().find(|(name, _)| name == "line")?;
            serde_json::from_str(&json).ok()
        })
        .collect()
}
