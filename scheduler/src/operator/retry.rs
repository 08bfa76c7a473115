//! Retrying what the operator must have done before its first reconcile (the revision
//! floor, the components' tenants): with a doubling wait, until it succeeds.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// The first wait after a failed attempt; it doubles up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(500);
/// The longest wait between attempts.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// Runs `attempt` until it succeeds, logging each failure as `what` failed.
pub(crate) async fn until_ok<T, E: Display, F: Future<Output = Result<T, E>>>(
    what: &str,
    mut attempt: impl FnMut() -> F,
) -> T {
    let mut wait = FIRST_WAIT;
    loop {
        match attempt().await {
            Ok(done) => return done,
            Err(err) => {
                tracing::warn!("{what} failed, retrying in {wait:?}: {err}");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_WAIT);
            }
        }
    }
}
