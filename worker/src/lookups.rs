//! Name lookups for guests' outbound HTTP, bounded in all and per tenant.
//!
//! A lookup runs `getaddrinfo` on a blocking thread, which nothing can stop: the thread
//! stays busy until the resolver answers or gives up (seconds, for a name server that
//! never answers), whatever became of the request that asked. Counted only while
//! their requests lived, a guest sending requests to names that never resolve and
//! dropping them could start lookups without end and take every blocking thread of the
//! guests' runtime, which also tears stores down and resolves every other tenant's
//! names. So a lookup holds its place in [`Lookups`] (and whatever its caller gives it
//! to hold, such as the request's connection permit) until `getaddrinfo` returns.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use faas_budget::{Budget, BudgetLimits};

/// Lookups under way at once in a worker: half of Tokio's default 512 blocking threads
/// of the guests' runtime.
pub(crate) const MAX_LOOKUPS: u64 = 256;

/// Lookups under way at once for one tenant's instances, so that a few tenants cannot
/// take every place.
pub(crate) const MAX_LOOKUPS_PER_TENANT: u64 = 32;

/// How a name becomes addresses: the system's resolver, but in tests.
pub(crate) type Resolver = fn(&str, u16) -> std::io::Result<Vec<SocketAddr>>;

/// Why a lookup gave no address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LookupError {
    /// The tenant's lookups, or the worker's, are all under way.
    #[error("too many name lookups under way")]
    Busy,
    /// The resolver found no address.
    #[error("address not available")]
    Failed,
}

/// The worker's budget of lookups under way, held by tenant.
pub(crate) struct Lookups {
    budget: Arc<Budget<Arc<str>>>,
    resolve: Resolver,
}

impl std::fmt::Debug for Lookups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lookups")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Lookups {
    /// The worker's lookups: [`MAX_LOOKUPS`], [`MAX_LOOKUPS_PER_TENANT`] each, by the
    /// system's resolver.
    pub(crate) fn new() -> Arc<Self> {
        let limits = BudgetLimits {
            total: MAX_LOOKUPS,
            per_holder: MAX_LOOKUPS_PER_TENANT,
        };
        Self::with_resolver(limits, system_resolve)
    }

    /// Lookups within `limits`, made by `resolve`.
    pub(crate) fn with_resolver(limits: BudgetLimits, resolve: Resolver) -> Arc<Self> {
        Arc::new(Self {
            budget: Arc::new(Budget::new(limits)),
            resolve,
        })
    }

    /// The addresses of `host` (`port` on each), looked up for `tenant` on a blocking
    /// thread that holds the tenant's place, and `hold`, until the lookup returns.
    ///
    /// # Errors
    /// [`LookupError::Busy`] at once when the tenant's or the worker's places are all
    /// taken; [`LookupError::Failed`] when the name has no address.
    pub(crate) async fn resolve(
        &self,
        tenant: &Arc<str>,
        host: String,
        port: u16,
        hold: impl Send + 'static,
    ) -> Result<Vec<SocketAddr>, LookupError> {
        let mut place = self.budget.claim(tenant.clone());
        place.grow_to(1).map_err(|_| LookupError::Busy)?;
        let resolve = self.resolve;
        let lookup = tokio::task::spawn_blocking(move || {
            let _held = (place, hold);
            resolve(&host, port)
        });
        match lookup.await {
            Ok(Ok(addresses)) => Ok(addresses),
            _ => Err(LookupError::Failed),
        }
    }
}

fn system_resolve(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    Ok((host, port).to_socket_addrs()?.collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::mpsc;
    use std::time::Duration;

    /// The stuck lookups' release: each test's resolver waits for one message per
    /// lookup of `stuck.test`.
    static RELEASE: Mutex<Option<mpsc::Receiver<()>>> = Mutex::new(None);

    /// A resolver whose `stuck.test` answers only once released, as a name server
    /// that never answers keeps `getaddrinfo` waiting (the system's resolver cannot
    /// be pointed at such a server from a test); any other name is loopback.
    fn stuck_resolve(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        if host == "stuck.test" {
            let release = RELEASE.lock().unwrap();
            let _ = release
                .as_ref()
                .unwrap()
                .recv_timeout(Duration::from_secs(30));
        }
        Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_lookup_keeps_its_place_until_the_resolver_returns() {
        let (release, receiver) = mpsc::channel();
        *RELEASE.lock().unwrap() = Some(receiver);
        let lookups = Lookups::with_resolver(
            BudgetLimits {
                total: 3,
                per_holder: 2,
            },
            stuck_resolve,
        );
        let attacker: Arc<str> = Arc::from("attacker");
        let bystander: Arc<str> = Arc::from("bystander");
        // Two lookups the caller gives up on at once, as a guest dropping its requests.
        for _ in 0..2 {
            let lookup = lookups.resolve(&attacker, "stuck.test".into(), 80, ());
            let gave_up = tokio::time::timeout(Duration::from_millis(50), lookup).await;
            assert!(gave_up.is_err(), "the lookup is stuck");
        }
        // Their threads still wait: the tenant has no place left, another tenant has.
        let third = lookups.resolve(&attacker, "a.test".into(), 80, ()).await;
        assert_eq!(third, Err(LookupError::Busy));
        let served = lookups.resolve(&bystander, "b.test".into(), 80, ()).await;
        assert_eq!(
            served.unwrap(),
            vec![SocketAddr::from(([127, 0, 0, 1], 80))]
        );
        // Once the resolver returns, the places come back.
        release.send(()).unwrap();
        release.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match lookups.resolve(&attacker, "a.test".into(), 80, ()).await {
                Ok(_) => break,
                Err(LookupError::Busy) if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                other => panic!("the tenant's places did not come back: {other:?}"),
            }
        }
    }
}
