//! The one way the store's Redis backends connect.

use redis::RedisError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::time::Duration;

/// Why a Redis backend could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The URL does not parse.
    #[error("invalid Redis URL: {0}")]
    Url(RedisError),
    /// The server cannot be reached or did not answer `PING`.
    #[error("{0}")]
    Unreachable(RedisError),
}

/// A connection manager for `url`, checked with `PING`. It makes a few quick reconnect
/// attempts, then fails the operation: a guest or an admin request waiting on a dead
/// Redis gets an error well within its deadline rather than hanging, and the next
/// operation starts a new round. Responses may take 5 s (values reach 1 MiB; the
/// crate's default of 500 ms is tight for that over a real network).
pub(crate) async fn connect(url: &str) -> Result<ConnectionManager, ConnectError> {
    let client = redis::Client::open(url).map_err(ConnectError::Url)?;
    let config = ConnectionManagerConfig::new()
        .set_number_of_retries(3)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500))
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    let mut manager = ConnectionManager::new_with_config(client, config)
        .await
        .map_err(ConnectError::Unreachable)?;
    redis::cmd("PING")
        .query_async::<()>(&mut manager)
        .await
        .map_err(ConnectError::Unreachable)?;
    Ok(manager)
}
