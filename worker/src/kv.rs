//! The key-value store behind the `key-value` host interface.
//!
//! Keys are namespaced by tenant inside the store, so a function can only ever name
//! its own tenant's keys: isolation does not depend on guests behaving.

use std::collections::HashMap;
use std::sync::Mutex;

/// Longest key a function may use, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value a function may store, in bytes.
pub const MAX_VALUE_BYTES: usize = 1 << 20;

/// Why a key-value operation failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvError {
    /// The key or value exceeds [`MAX_KEY_BYTES`] / [`MAX_VALUE_BYTES`].
    #[error("{0}")]
    TooLarge(String),
    /// The stored value is not what the operation needs (e.g. not an integer).
    #[error("{0}")]
    Store(String),
}

/// The entries of the in-memory backend, keyed by (tenant, key).
type MemoryMap = HashMap<(String, String), Vec<u8>>;

/// A key-value backend. In-memory is the embedded default; the Redis backend of the
/// services mode is another variant of this enum.
#[derive(Debug)]
pub enum KeyValueStore {
    /// A map in this process; gone when the process exits.
    Memory(Mutex<MemoryMap>),
}

impl Default for KeyValueStore {
    fn default() -> Self {
        Self::memory()
    }
}

impl KeyValueStore {
    /// An empty in-memory store.
    pub fn memory() -> Self {
        Self::Memory(Mutex::default())
    }

    /// The value of `key` in `tenant`'s namespace.
    pub async fn get(&self, tenant: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        check_key(key)?;
        Ok(self.lock().get(&namespaced(tenant, key)).cloned())
    }

    /// Stores `value` under `key` in `tenant`'s namespace.
    pub async fn set(&self, tenant: &str, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        check_key(key)?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(KvError::TooLarge(format!(
                "value of {} bytes exceeds the limit of {MAX_VALUE_BYTES}",
                value.len()
            )));
        }
        self.lock().insert(namespaced(tenant, key), value);
        Ok(())
    }

    /// Removes `key` from `tenant`'s namespace.
    pub async fn delete(&self, tenant: &str, key: &str) -> Result<(), KvError> {
        check_key(key)?;
        self.lock().remove(&namespaced(tenant, key));
        Ok(())
    }

    /// Adds `delta` to the decimal integer under `key` and returns the result.
    pub async fn increment(&self, tenant: &str, key: &str, delta: i64) -> Result<i64, KvError> {
        check_key(key)?;
        let mut map = self.lock();
        let slot = map.entry(namespaced(tenant, key)).or_default();
        let current = if slot.is_empty() {
            0
        } else {
            std::str::from_utf8(slot)
                .ok()
                .and_then(|text| text.parse::<i64>().ok())
                .ok_or_else(|| KvError::Store(format!("value of `{key}` is not an integer")))?
        };
        let next = current
            .checked_add(delta)
            .ok_or_else(|| KvError::Store(format!("`{key}` would overflow")))?;
        *slot = next.to_string().into_bytes();
        Ok(next)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryMap> {
        let Self::Memory(map) = self;
        // A panic while holding the lock cannot leave a half-written entry (each
        // operation is one map call), so a poisoned lock is still consistent.
        map.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn namespaced(tenant: &str, key: &str) -> (String, String) {
    (tenant.to_owned(), key.to_owned())
}

fn check_key(key: &str) -> Result<(), KvError> {
    if key.len() > MAX_KEY_BYTES {
        return Err(KvError::TooLarge(format!(
            "key of {} bytes exceeds the limit of {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tenants_never_see_each_others_keys() {
        let store = KeyValueStore::memory();
        store.set("a", "k", b"from a".to_vec()).await.unwrap();
        assert_eq!(store.get("b", "k").await.unwrap(), None);
        assert_eq!(store.get("a", "k").await.unwrap(), Some(b"from a".to_vec()));
    }

    #[tokio::test]
    async fn increment_counts_from_zero_and_rejects_non_integers() {
        let store = KeyValueStore::memory();
        assert_eq!(store.increment("t", "n", 2).await.unwrap(), 2);
        assert_eq!(store.increment("t", "n", 3).await.unwrap(), 5);
        store.set("t", "s", b"text".to_vec()).await.unwrap();
        assert!(matches!(
            store.increment("t", "s", 1).await,
            Err(KvError::Store(_))
        ));
    }

    #[tokio::test]
    async fn oversized_keys_and_values_are_refused() {
        let store = KeyValueStore::memory();
        let long_key = "k".repeat(MAX_KEY_BYTES + 1);
        assert!(matches!(
            store.get("t", &long_key).await,
            Err(KvError::TooLarge(_))
        ));
        let big = vec![0; MAX_VALUE_BYTES + 1];
        assert!(matches!(
            store.set("t", "k", big).await,
            Err(KvError::TooLarge(_))
        ));
    }
}
