//! The SQLite backend: each tenant's entries and its usage in the state database.
//!
//! Every write is one `BEGIN IMMEDIATE` transaction that reads the tenant's usage,
//! checks the quota, writes the entry and the new usage, and commits. So a process
//! killed at any moment leaves either the whole write or none of it, and the usage
//! always equals what the entries add up to; `IMMEDIATE` takes the write lock before
//! the first read, so two processes sharing the file cannot interleave a
//! read-check-write either.

use std::sync::Arc;

use super::turns::TenantTurns;
use super::{KvError, KvQuota, Usage, entry_bytes, not_an_integer, parse_counter, would_overflow};
use crate::Database;
use rusqlite::{OptionalExtension, Transaction, TransactionBehavior, params};

/// The key-value tables. Entries are a rowid table (not `WITHOUT ROWID`) because values
/// reach 1 MiB, which SQLite stores best outside the key's b-tree.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS kv_entries (
    tenant TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    UNIQUE (tenant, key)
);
CREATE TABLE IF NOT EXISTS kv_usage (
    tenant TEXT PRIMARY KEY,
    keys INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
";

/// The SQLite backend as the store calls it: reads on connections of their own, writes
/// on the database's one connection in turns handed to tenants in rotation
/// ([`TenantTurns`]).
///
/// A write of a large value holds that connection for a millisecond or more (one that
/// triggers a WAL checkpoint, which syncs the file, far longer). With every call on
/// that connection, a tenant writing from all its instances at once kept every other
/// tenant's calls waiting behind its writes, each on a thread that polls guests. Now
/// a read does not wait for writes, and a write waits, without holding a thread,
/// behind at most one write of each other tenant with writes waiting.
pub(super) struct SqliteBackend {
    entries: SqliteEntries,
    turns: Arc<TenantTurns>,
}

impl std::fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteBackend")
    }
}

impl SqliteBackend {
    /// The backend on `database`.
    pub(super) fn new(database: Database) -> Self {
        Self {
            entries: SqliteEntries(database),
            turns: Arc::default(),
        }
    }

    /// The entries, for reads: those need no turn.
    pub(super) fn reads(&self) -> &SqliteEntries {
        &self.entries
    }

    /// Runs `write` on the entries, with `tenant`, once `tenant` has its turn, on a
    /// task of its own.
    ///
    /// Not in the caller's task: a guest's host calls run in its instance's task,
    /// which gets the CPU in turns among its tenant's instances. A turn handed to a
    /// call is used only once that call is polled, so a tenant with hundreds of busy
    /// instances kept each turn it was handed, and every other tenant's writes, waiting
    /// for its own CPU turn, hundreds of milliseconds. The caller dropped (its event's
    /// deadline passed) drops the task, and with it its place in the rotation; a write
    /// already under way completes first, as one transaction.
    pub(super) async fn write<T>(
        &self,
        tenant: &str,
        write: impl FnOnce(&SqliteEntries, &str) -> Result<T, KvError> + Send + 'static,
    ) -> Result<T, KvError>
    where
        T: Send + 'static,
    {
        let (turns, entries) = (Arc::clone(&self.turns), self.entries.clone());
        let tenant = tenant.to_owned();
        let mut task = AbortOnDrop(tokio::spawn(async move {
            let _turn = turns.take(&tenant).await;
            write(&entries, &tenant)
        }));
        (&mut task.0)
            .await
            .map_err(|err| KvError::Store(format!("the write's task failed: {err}")))?
    }
}

/// A task aborted when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The statements of the backend on a [`Database`].
#[derive(Clone)]
pub(super) struct SqliteEntries(Database);

impl SqliteEntries {
    pub(super) fn get(&self, tenant: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        self.0
            .read(|connection| {
                connection
                    .query_row(
                        "SELECT value FROM kv_entries WHERE tenant = ?1 AND key = ?2",
                        params![tenant, key],
                        |row| row.get(0),
                    )
                    .optional()
            })
            .map_err(failed("reading a key"))
    }

    pub(super) fn set(
        &self,
        quota: &KvQuota,
        tenant: &str,
        key: &str,
        value: &[u8],
    ) -> Result<(), KvError> {
        self.write(|tx| put(tx, quota, tenant, key, Some(value)))
    }

    pub(super) fn delete(&self, tenant: &str, key: &str) -> Result<(), KvError> {
        // Deleting never grows the usage, so no quota can refuse it.
        self.write(|tx| put(tx, &KvQuota::unlimited(), tenant, key, None))
    }

    pub(super) fn increment(
        &self,
        quota: &KvQuota,
        tenant: &str,
        key: &str,
        delta: i64,
    ) -> Result<i64, KvError> {
        self.write(|tx| {
            let current: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT value FROM kv_entries WHERE tenant = ?1 AND key = ?2",
                    params![tenant, key],
                    |row| row.get(0),
                )
                .optional()
                .map_err(failed("reading a counter"))?;
            let current = match current {
                None => 0,
                Some(value) => parse_counter(&value).ok_or_else(|| not_an_integer(key))?,
            };
            let next = current
                .checked_add(delta)
                .ok_or_else(|| would_overflow(key))?;
            put(tx, quota, tenant, key, Some(next.to_string().as_bytes()))?;
            Ok(next)
        })
    }

    /// Removes `tenant`'s entries and usage in one transaction; returns how many
    /// entries there were.
    pub(super) fn forget_tenant(&self, tenant: &str) -> Result<u64, KvError> {
        self.write(|tx| {
            let removed = tx
                .execute("DELETE FROM kv_entries WHERE tenant = ?1", [tenant])
                .map_err(failed("removing a tenant's entries"))?;
            tx.execute("DELETE FROM kv_usage WHERE tenant = ?1", [tenant])
                .map_err(failed("removing a tenant's usage"))?;
            Ok(removed as u64)
        })
    }

    /// Runs `change` in one immediate transaction, committed only if it succeeds (an
    /// error, or a panic, rolls everything back when the transaction is dropped).
    fn write<T>(
        &self,
        change: impl FnOnce(&Transaction<'_>) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        let mut connection = self.0.lock();
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(failed("starting a write"))?;
        let result = change(&tx)?;
        tx.commit().map_err(failed("committing a write"))?;
        Ok(result)
    }
}

/// Stores `value` under `key` (deletes it for `None`) and updates the tenant's usage,
/// if `quota` allows the change.
fn put(
    tx: &Transaction<'_>,
    quota: &KvQuota,
    tenant: &str,
    key: &str,
    value: Option<&[u8]>,
) -> Result<(), KvError> {
    let before = tx
        .query_row(
            "SELECT keys, bytes FROM kv_usage WHERE tenant = ?1",
            params![tenant],
            |row| {
                Ok(Usage {
                    keys: row.get(0)?,
                    bytes: row.get(1)?,
                })
            },
        )
        .optional()
        .map_err(failed("reading the tenant's usage"))?
        .unwrap_or_default();
    // `length` of a BLOB is its size in bytes, read from the record header.
    let old_value: Option<u64> = tx
        .query_row(
            "SELECT length(value) FROM kv_entries WHERE tenant = ?1 AND key = ?2",
            params![tenant, key],
            |row| row.get(0),
        )
        .optional()
        .map_err(failed("reading a key"))?;
    let old = old_value.map(|len| key.len() as u64 + len);
    let new = value.map(|value| entry_bytes(key, value));
    let after = Usage {
        // Saturating: usage is never below what the entries add up to, but a file
        // edited by hand must not make a delete panic.
        keys: (before.keys + u64::from(new.is_some())).saturating_sub(u64::from(old.is_some())),
        bytes: (before.bytes + new.unwrap_or(0)).saturating_sub(old.unwrap_or(0)),
    };
    quota.check(tenant, before, after)?;
    match value {
        Some(value) => tx.execute(
            "INSERT INTO kv_entries (tenant, key, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (tenant, key) DO UPDATE SET value = excluded.value",
            params![tenant, key, value],
        ),
        None => tx.execute(
            "DELETE FROM kv_entries WHERE tenant = ?1 AND key = ?2",
            params![tenant, key],
        ),
    }
    .map_err(failed("writing a key"))?;
    if after == before {
        return Ok(());
    }
    // A tenant without keys has no usage row left behind.
    if after.keys == 0 {
        tx.execute("DELETE FROM kv_usage WHERE tenant = ?1", params![tenant])
    } else {
        tx.execute(
            "INSERT INTO kv_usage (tenant, keys, bytes) VALUES (?1, ?2, ?3)
             ON CONFLICT (tenant) DO UPDATE SET keys = excluded.keys, bytes = excluded.bytes",
            params![tenant, after.keys, after.bytes],
        )
    }
    .map_err(failed("writing the tenant's usage"))?;
    Ok(())
}

/// A failed SQLite statement as a store error saying what was being done.
fn failed(doing: &'static str) -> impl FnOnce(rusqlite::Error) -> KvError {
    move |err| KvError::Store(format!("key-value store: SQLite failed {doing}: {err}"))
}
