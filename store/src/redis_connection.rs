//! The one way the platform's Redis clients connect: the store's backends here, and
//! services mode's shared state (`faas-shared-state`).

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

/// A connection manager for `url`, checked with `PING` (see [`manage`]).
pub(crate) async fn connect(url: &str) -> Result<ConnectionManager, ConnectError> {
    let client = redis::Client::open(url).map_err(ConnectError::Url)?;
    manage(client).await.map_err(ConnectError::Unreachable)
}

/// How long a value's reply may take: values reach 1 MiB (the crate's default of
/// 500 ms is tight for that over a real network).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection manager for `client`, checked with `PING`, whose replies may take
/// [`RESPONSE_TIMEOUT`] (see [`manage_with`]).
///
/// # Errors
/// When the server cannot be reached or does not answer.
pub async fn manage(client: redis::Client) -> Result<ConnectionManager, RedisError> {
    manage_with(client, RESPONSE_TIMEOUT).await
}

/// A connection manager for `client`, checked with `PING`, whose replies may take
/// `response_timeout`. It makes a few quick reconnect attempts, then fails the
/// operation: a guest (a key-value call, a message) or an admin request waiting on a
/// dead Redis gets an error well within its deadline rather than hanging (the crate's
/// defaults wait about 11 s), and the next operation starts a new round.
///
/// # Errors
/// When the server cannot be reached or does not answer.
pub async fn manage_with(
    client: redis::Client,
    response_timeout: Duration,
) -> Result<ConnectionManager, RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_number_of_retries(3)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500))
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(response_timeout));
    let mut manager = ConnectionManager::new_with_config(client, config).await?;
    redis::cmd("PING").query_async::<()>(&mut manager).await?;
    Ok(manager)
}

/// Running a command (or a pipeline) on a shared connection manager.
pub(crate) trait Run {
    /// Runs the command, once more if the connection had dropped (a Redis restart or
    /// failover): the manager reconnects only once a command meets the dropped
    /// connection, so without this the first command after a restart fails on every
    /// connection. Only for commands whose second run leaves what one run leaves
    /// (reads, setting a value, deleting a key, a compare-and-set), or where a
    /// duplicate is allowed (messages, delivered at least once), since a command that
    /// met the dropped connection may have run.
    async fn run<T: redis::FromRedisValue>(
        &self,
        connection: &ConnectionManager,
    ) -> Result<T, RedisError>;
}

/// Whether a command that failed with `err` may be sent again (see [`Run`]). Not after
/// a timeout: the server may be slow rather than gone, and a second wait would double
/// the caller's.
fn connection_dropped(err: &RedisError) -> bool {
    (err.is_io_error() && !err.is_timeout()) || err.is_connection_dropped()
}

// `Cmd`, `Pipeline` and a script's invocation (`EVALSHA`, loaded on `NOSCRIPT`) share
// no trait for sending, so one body serves all three, given each one's method.
macro_rules! impl_run {
    ($send:ident: $($command:ty),*) => {$(
        impl Run for $command {
            async fn run<T: redis::FromRedisValue>(
                &self,
                connection: &ConnectionManager,
            ) -> Result<T, RedisError> {
                match self.$send(&mut connection.clone()).await {
                    Err(err) if connection_dropped(&err) => {
                        self.$send(&mut connection.clone()).await
                    }
                    result => result,
                }
            }
        }
    )*};
}

impl_run!(query_async: redis::Cmd, redis::Pipeline);
impl_run!(invoke_async: redis::ScriptInvocation<'_>);

/// `url` for messages: user information and query (where Redis URLs carry
/// passwords) are replaced by `***`, so connection errors can be logged safely.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL we could parse for credentials; show nothing rather than a secret.
        return "<unparseable Redis URL>".to_owned();
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, _)) => (rest, "?***"),
        None => (rest, ""),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = match authority.rsplit_once('@') {
        Some((_, host)) => format!("***@{host}"),
        None => authority.to_owned(),
    };
    format!("{scheme}://{host}{path}{query}")
}

/// Removes every key matching the `SCAN` pattern `pattern`, a batch at a time (`UNLINK`
/// frees the values off Redis's main thread), and returns how many there were. Keys
/// written while it runs may be left; callers run it once nothing writes them.
pub(crate) async fn unlink_matching(
    manager: &mut ConnectionManager,
    pattern: &str,
) -> Result<u64, RedisError> {
    let mut cursor: u64 = 0;
    let mut removed = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(manager)
            .await?;
        if !keys.is_empty() {
            removed += redis::cmd("UNLINK")
                .arg(&keys)
                .query_async::<u64>(manager)
                .await?;
        }
        if next == 0 {
            return Ok(removed);
        }
        cursor = next;
    }
}

/// `text` with the characters `SCAN MATCH` patterns give a meaning to escaped, so a
/// pattern built from it matches it literally.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redis_urls_are_shown_without_credentials() {
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("redis://user:secret@db.example:6380/2"),
            "redis://***@db.example:6380/2"
        );
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?pass=secret"),
            "redis+unix:///run/redis.sock?***"
        );
        assert!(!redact_url("secret").contains("secret"));
    }
}
