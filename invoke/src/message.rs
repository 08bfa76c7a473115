//! Where a function's outbound messages go. The worker's `messaging` host interface
//! does not know Redis: the platform hands it a [`Publisher`]
//! (`faas_store::broker::RedisBroker` is one).
//!
//! Every name a guest gives is relative to its tenant: the publisher places it in that
//! tenant's namespace, so a guest reaches neither another tenant's channels and streams
//! nor the platform's own keys. The tenant comes from the event, never from the guest.

use std::future::Future;
use std::pin::Pin;

/// Largest message a function may publish or append: so also the largest stream entry
/// a guest can make, which the gateway's stream consumers reserve room for.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// A boxed future, so [`Publisher`] can be used as a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a message could not be sent; its text is what the function sees.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The channel or stream name is not one a trigger could name either.
    #[error(
        "`{name}` is not a valid channel or stream name (1 to {} characters, no \
         whitespace or control characters)",
        faas_workflow::MAX_REDIS_NAME_LEN
    )]
    InvalidName {
        /// The name as the function gave it (cut to a few hundred bytes).
        name: String,
    },
    /// The message is larger than a function may send.
    #[error("message of {len} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// Its size.
        len: usize,
        /// The largest accepted.
        limit: usize,
    },
    /// A batch of messages is larger than a function may send in one call.
    #[error(
        "{count} messages of {bytes} bytes in all exceed the limit of one call \
         ({max_count} messages, {max_bytes} bytes)"
    )]
    BatchTooLarge {
        /// How many messages it has.
        count: usize,
        /// Their total size.
        bytes: usize,
        /// The most messages accepted in one call.
        max_count: usize,
        /// The largest total size accepted in one call.
        max_bytes: usize,
    },
    /// The platform runs without a broker.
    #[error("no message broker is configured (run the platform with --redis)")]
    NoBroker,
    /// The broker refused or could not be reached.
    #[error("{operation} `{name}`: {reason}")]
    Broker {
        /// `publishing to` or `appending to`.
        operation: &'static str,
        /// The channel or stream as the function named it (not the broker's key).
        name: String,
        /// The broker's explanation.
        reason: String,
    },
}

/// Sends messages on behalf of functions.
pub trait Publisher: Send + Sync {
    /// Publishes `payload` on pub/sub `channel` of `tenant`.
    ///
    /// # Errors
    /// [`PublishError::Broker`] when the broker refuses or is unreachable.
    fn publish<'a>(
        &'a self,
        tenant: &'a str,
        channel: &'a str,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<(), PublishError>>;

    /// Publishes every one of `payloads` on pub/sub `channel` of `tenant`, in order, in
    /// one round trip to the broker.
    ///
    /// # Errors
    /// [`PublishError::Broker`] when the broker refuses or is unreachable; any of the
    /// payloads may have been published then.
    fn publish_all<'a>(
        &'a self,
        tenant: &'a str,
        channel: &'a str,
        payloads: &'a [Vec<u8>],
    ) -> BoxFuture<'a, Result<(), PublishError>>;

    /// Appends `payload` to `stream` of `tenant` and returns the entry id.
    ///
    /// # Errors
    /// [`PublishError::Broker`] when the broker refuses or is unreachable.
    fn append<'a>(
        &'a self,
        tenant: &'a str,
        stream: &'a str,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<String, PublishError>>;
}

/// The message that started a run (for runs started by a Redis trigger).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TriggerMessage {
    /// The channel or stream, as the workflow names it (inside its tenant's namespace).
    pub source: String,
    /// The stream entry id; empty for pub/sub.
    pub id: String,
    /// How many times it has been delivered, from 1.
    pub delivery_count: u32,
}
