//! The tenant's key-value store. Every function of one tenant sees the same keys; no
//! other tenant sees them.

use crate::bindings::faas::platform::key_value as wit;

/// Why a key-value operation failed (implements `Display` and `std::error::Error`).
pub type Error = wit::Error;

/// The value stored under `key`, if any.
///
/// # Errors
/// If the key is too long or the store fails.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, Error> {
    wit::get(key)
}

/// Stores `value` under `key`.
///
/// # Errors
/// If the key or value is too large or the store fails.
pub fn set(key: &str, value: impl AsRef<[u8]>) -> Result<(), Error> {
    wit::set(key, value.as_ref())
}

/// Removes `key` (a missing key is not an error).
///
/// # Errors
/// If the store fails.
pub fn delete(key: &str) -> Result<(), Error> {
    wit::delete(key)
}

/// Atomically adds `delta` to the counter under `key` and returns the new value.
///
/// # Errors
/// If the stored value is not a decimal integer or the store fails.
pub fn increment(key: &str, delta: i64) -> Result<i64, Error> {
    wit::increment(key, delta)
}
