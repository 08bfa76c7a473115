//! A short lease in Redis that one process of the cluster holds at a time: `SET NX PX`
//! to take it, a compare-and-expire to renew it, a compare-and-delete to give it back.
//!
//! The holder counts its lease from the moment it *sent* the command that took or
//! renewed it, so its own view ends before Redis's does: a holder that stops renewing
//! (it died, or cannot reach Redis) is past its lease before anyone else can take it.

use redis::aio::ConnectionManager;
use std::time::Duration;
use tokio::time::Instant;

/// How long a lease lasts unless renewed.
pub(super) const TTL: Duration = Duration::from_millis(3_000);
/// How often the holder renews it, and a contender tries to take it.
pub(super) const RENEW_EVERY: Duration = Duration::from_millis(1_000);

/// Takes the lease if it is free, or renews it if `ARGV[1]` already holds it.
const TAKE_OR_RENEW: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

/// Deletes the lease if `ARGV[1]` holds it.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// One lease key contended for under one holder name.
pub(super) struct Lease {
    key: String,
    holder: String,
    connection: ConnectionManager,
}

impl Lease {
    /// The lease `key`, contended for as `process` (unique per process) plus a random
    /// suffix: two tasks of one process (an old and a new revision of a workflow) are
    /// two holders, so the old one's release never frees the new one's lease.
    pub(super) fn new(key: String, process: &str, connection: ConnectionManager) -> Self {
        Self {
            key,
            holder: format!("{process}:{:08x}", rand::random::<u32>()),
            connection,
        }
    }

    /// Takes or renews the lease. `Some(until)` when this process holds it, `until`
    /// being when its hold ends unless renewed again; `None` when another holds it.
    ///
    /// # Errors
    /// When Redis cannot be asked: the caller must then act as if it did not hold the
    /// lease.
    pub(super) async fn take_or_renew(&mut self) -> redis::RedisResult<Option<Instant>> {
        let sent = Instant::now();
        let held: i64 = redis::cmd("EVAL")
            .arg(TAKE_OR_RENEW)
            .arg(1)
            .arg(&self.key)
            .arg(&self.holder)
            .arg(TTL.as_millis() as u64)
            .query_async(&mut self.connection)
            .await?;
        Ok((held == 1).then_some(sent + TTL))
    }
}

impl Drop for Lease {
    /// Gives the lease back at once (a workflow removed or redeployed here), so another
    /// gateway need not wait for it to expire.
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (key, holder) = (self.key.clone(), self.holder.clone());
        let mut connection = self.connection.clone();
        runtime.spawn(async move {
            let released: redis::RedisResult<i64> = redis::cmd("EVAL")
                .arg(RELEASE)
                .arg(1)
                .arg(&key)
                .arg(&holder)
                .query_async(&mut connection)
                .await;
            if let Err(err) = released {
                tracing::debug!(key, "could not release the lease; it expires: {err}");
            }
        });
    }
}
