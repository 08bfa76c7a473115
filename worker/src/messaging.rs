//! Where a function's outbound messages go. The worker does not know Redis: the
//! platform hands it a [`Publisher`] (the gateway's Redis module implements one).

use std::future::Future;
use std::pin::Pin;

/// A boxed future, so [`Publisher`] can be used as a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Sends messages on behalf of functions.
pub trait Publisher: Send + Sync {
    /// Publishes `payload` on pub/sub `channel`.
    ///
    /// # Errors
    /// A message for the function when the broker refuses or is unreachable.
    fn publish<'a>(
        &'a self,
        channel: &'a str,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<(), String>>;

    /// Appends `payload` to `stream` and returns the entry id.
    ///
    /// # Errors
    /// A message for the function when the broker refuses or is unreachable.
    fn append<'a>(
        &'a self,
        stream: &'a str,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<String, String>>;
}

/// The message that started a run (for runs started by a Redis trigger).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TriggerMessage {
    /// The channel or stream.
    pub source: String,
    /// The stream entry id; empty for pub/sub.
    pub id: String,
    /// How many times it has been delivered, from 1.
    pub delivery_count: u32,
}
