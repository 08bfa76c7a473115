//! How much memory the request bodies the gateway holds may take: those of one client
//! address, and those of all clients together.
//!
//! An invocation's body is read whole before its event starts, and held until the
//! event's response is ready (an event waiting for a replica holds its body too). The
//! body limit bounds one body; without a bound on all of them, one client could send
//! `--max-connections-per-client` bodies at the limit at once over HTTP/1.1 (2 GiB by
//! default), and two hundred times that over HTTP/2's concurrent streams, and the
//! gateway every tenant shares would run out of memory. So a body is counted against
//! the budget as its declared length before any of it is read (or chunk by chunk as it
//! arrives, when no length is declared, and twice over while those chunks are joined),
//! and one that does not fit is refused at once: 429 when its client holds its share,
//! 503 when all clients together hold the whole budget. A request without a body takes
//! nothing from it.
//!
//! Behind a proxy every client has the proxy's address, so the share per client is a
//! generous part of the whole by default.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// The budget's sizes, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyBudgetLimits {
    /// All clients' bodies together.
    pub total: u64,
    /// One client address's bodies.
    pub per_client: u64,
}

/// The default [`BodyBudgetLimits::total`]: half the memory limit of the Helm chart's
/// gateway pod (512 MiB), thirty-two bodies at the default body limit.
pub const DEFAULT_BODY_BUDGET_MB: u64 = 256;

/// The default [`BodyBudgetLimits::per_client`]: a quarter of the whole.
pub const DEFAULT_CLIENT_BODY_BUDGET_MB: u64 = 64;

/// Why a body did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OverBudget {
    /// Its client's bodies would exceed the share of one client.
    #[error(
        "this client's request bodies in the gateway would exceed {} MiB \
         (--client-body-budget-mb); try again when one has been served",
        .limit >> 20
    )]
    Client {
        /// The share per client, in bytes.
        limit: u64,
    },
    /// All clients' bodies would exceed the budget.
    #[error(
        "the gateway holds {} MiB of request bodies, its budget \
         (--body-budget-mb); try again shortly",
        .limit >> 20
    )]
    Total {
        /// The whole budget, in bytes.
        limit: u64,
    },
}

#[derive(Default)]
struct Held {
    total: u64,
    by_client: HashMap<IpAddr, u64>,
}

/// The request bodies the gateway holds, by client address.
pub(crate) struct BodyBudget {
    limits: BodyBudgetLimits,
    held: Mutex<Held>,
}

impl BodyBudget {
    /// An empty budget of `limits`.
    pub(crate) fn new(limits: BodyBudgetLimits) -> Self {
        Self {
            limits,
            held: Mutex::default(),
        }
    }

    /// An empty claim of `client`'s, to grow as its body arrives.
    pub(crate) fn claim(&self, client: IpAddr) -> Claim<'_> {
        Claim {
            budget: self,
            client,
            bytes: 0,
        }
    }

    /// What all clients hold, in bytes.
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Counts change together under the lock: a poisoned lock still holds them whole.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The part of the budget one request's body holds; given back when dropped.
pub(crate) struct Claim<'a> {
    budget: &'a BodyBudget,
    client: IpAddr,
    bytes: u64,
}

impl Claim<'_> {
    /// Grows the claim to `bytes` in all, if the budget has room; a smaller `bytes`
    /// leaves it as it is.
    ///
    /// # Errors
    /// [`OverBudget`] when the client's share, or the whole budget, has no room; the
    /// claim keeps what it held.
    pub(crate) fn grow_to(&mut self, bytes: u64) -> Result<(), OverBudget> {
        let Some(more) = bytes.checked_sub(self.bytes).filter(|&more| more > 0) else {
            return Ok(());
        };
        let limits = self.budget.limits;
        let mut held = self.budget.lock();
        let client = held.by_client.get(&self.client).copied().unwrap_or(0);
        if client.saturating_add(more) > limits.per_client {
            return Err(OverBudget::Client {
                limit: limits.per_client,
            });
        }
        if held.total.saturating_add(more) > limits.total {
            return Err(OverBudget::Total {
                limit: limits.total,
            });
        }
        held.total += more;
        *held.by_client.entry(self.client).or_default() += more;
        self.bytes = bytes;
        Ok(())
    }

    /// Gives back what the claim holds past `bytes`; a larger `bytes` leaves it as it
    /// is.
    pub(crate) fn shrink_to(&mut self, bytes: u64) {
        let Some(less) = self.bytes.checked_sub(bytes).filter(|&less| less > 0) else {
            return;
        };
        let mut held = self.budget.lock();
        held.total = held.total.saturating_sub(less);
        if let Some(client) = held.by_client.get_mut(&self.client) {
            *client = client.saturating_sub(less);
            if *client == 0 {
                held.by_client.remove(&self.client);
            }
        }
        self.bytes = bytes;
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.shrink_to(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));
    const C: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 3));

    fn budget() -> BodyBudget {
        BodyBudget::new(BodyBudgetLimits {
            total: 100,
            per_client: 60,
        })
    }

    #[test]
    fn a_client_is_refused_past_its_share_and_another_still_fits() {
        let budget = budget();
        let mut first = budget.claim(A);
        first.grow_to(40).unwrap();
        let mut second = budget.claim(A);
        assert_eq!(
            second.grow_to(30),
            Err(OverBudget::Client { limit: 60 }),
            "40 + 30 is past A's 60"
        );
        second.grow_to(20).unwrap();
        let mut other = budget.claim(B);
        other.grow_to(40).unwrap();
        assert_eq!(budget.held(), 100);
        assert_eq!(
            budget.claim(C).grow_to(1),
            Err(OverBudget::Total { limit: 100 })
        );
    }

    #[test]
    fn a_claim_grows_by_what_it_lacks_and_gives_all_back_when_dropped() {
        let budget = budget();
        let mut claim = budget.claim(A);
        claim.grow_to(10).unwrap();
        claim.grow_to(25).unwrap();
        claim.grow_to(5).unwrap();
        assert_eq!(budget.held(), 25);
        assert!(claim.grow_to(61).is_err());
        assert_eq!(budget.held(), 25, "a refused growth takes nothing");
        drop(claim);
        assert_eq!(budget.held(), 0);
        assert!(budget.lock().by_client.is_empty());
        budget.claim(A).grow_to(60).unwrap();
    }

    #[test]
    fn a_claim_shrinks_to_what_it_still_holds() {
        let budget = budget();
        let mut claim = budget.claim(A);
        claim.grow_to(50).unwrap();
        claim.shrink_to(20);
        claim.shrink_to(30);
        assert_eq!(budget.held(), 20, "a larger size leaves the claim as it is");
        budget.claim(A).grow_to(40).unwrap();
        claim.shrink_to(0);
        assert!(budget.lock().by_client.is_empty());
        drop(claim);
        assert_eq!(budget.held(), 0);
    }
}
