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

/// Most messages one [`publish_all`] may send.
pub const MAX_PUBLISH_ALL: usize = 1024;

/// Publishes every one of `payloads` on pub/sub `channel`, in order, in one round trip
/// to the broker: cheaper than a [`publish`] per message when a function fans out
/// many (at most [`MAX_PUBLISH_ALL`] messages and 16 MiB per call).
///
/// # Errors
/// The platform's explanation; if the broker failed during the call, any of the
/// messages may have been published.
pub fn publish_all(channel: &str, payloads: &[Vec<u8>]) -> Result<(), String> {
    wit::publish_all(channel, payloads)
}

/// Appends `payload` to `stream` and returns the new entry's id.
///
/// # Errors
/// The platform's explanation, e.g. when it runs without a broker.
pub fn append(stream: &str, payload: impl AsRef<[u8]>) -> Result<String, String> {
    wit::append(stream, payload.as_ref())
}
