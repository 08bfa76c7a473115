//! Outbound messages: publish to a channel or append to a stream through the
//! platform's broker (Redis), so workflows can chain through it.
//!
//! Names are the tenant's own: channel `orders` of tenant `shop` is the Redis key
//! `t:shop:orders`, the one its workflows' triggers read and outside producers write.

use crate::bindings::faas::platform::messaging as wit;

/// Publishes `payload` on pub/sub `channel`.
///
/// # Errors
/// The platform's explanation, e.g. when it runs without a broker.
pub fn publish(channel: &str, payload: impl AsRef<[u8]>) -> Result<(), String> {
    wit::publish(channel, payload.as_ref())
}

/// Appends `payload` to `stream` and returns the new entry's id.
///
/// # Errors
/// The platform's explanation, e.g. when it runs without a broker.
pub fn append(stream: &str, payload: impl AsRef<[u8]>) -> Result<String, String> {
    wit::append(stream, payload.as_ref())
}
