//! How much memory the events' bodies the gateway holds may take: those of one holder
//! (a client address's request bodies, or a tenant's channel messages), and those of
//! all holders together.
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
//! 503 when all holders together hold the whole budget. A request without a body takes
//! nothing from it.
//!
//! A pub/sub message is a body too, held from when it arrives until its run ends, and
//! messages arrive as fast as a tenant's guests publish them, whatever its runs keep
//! up with: its tenant holds it (`redis/channel.rs`), and one that does not fit is
//! dropped, as pub/sub may drop messages. A stream consumer reserves room before it
//! reads (`redis/stream.rs`), so entries wait in Redis instead.
//!
//! Behind a proxy every client has the proxy's address, so the share per holder is a
//! generous part of the whole by default.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The budget's sizes, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyBudgetLimits {
    /// All holders' bodies together.
    pub total: u64,
    /// One holder's bodies: one client address's, or one tenant's channel messages.
    pub per_client: u64,
}

/// The default [`BodyBudgetLimits::total`]: half the memory limit of the Helm chart's
/// gateway pod (512 MiB), thirty-two bodies at the default body limit.
pub const DEFAULT_BODY_BUDGET_MB: u64 = 256;

/// The default [`BodyBudgetLimits::per_client`]: a quarter of the whole.
pub const DEFAULT_CLIENT_BODY_BUDGET_MB: u64 = 64;

/// What a pub/sub message or stream entry claims beyond its bytes: what holding it
/// costs besides, so that empty messages are bounded too.
pub(crate) const MESSAGE_OVERHEAD: u64 = 256;

/// Who holds a body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Holder {
    /// The client address that sent a request.
    Client(IpAddr),
    /// The tenant whose channel a message came on.
    Tenant(String),
}

/// Why a body did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OverBudget {
    /// Its holder's bodies would exceed the share of one holder.
    Share {
        /// The share per holder, in bytes.
        limit: u64,
    },
    /// All holders' bodies would exceed the budget.
    Total {
        /// The whole budget, in bytes.
        limit: u64,
    },
}

#[derive(Default)]
struct Held {
    total: u64,
    by_holder: HashMap<Holder, u64>,
}

impl Held {
    /// What `holder` holds.
    fn of(&self, holder: &Holder) -> u64 {
        self.by_holder.get(holder).copied().unwrap_or(0)
    }

    fn add(&mut self, holder: &Holder, more: u64) {
        if more == 0 {
            return;
        }
        self.total += more;
        match self.by_holder.get_mut(holder) {
            Some(held) => *held += more,
            None => {
                self.by_holder.insert(holder.clone(), more);
            }
        }
    }

    fn remove(&mut self, holder: &Holder, less: u64) {
        self.total = self.total.saturating_sub(less);
        if let Some(held) = self.by_holder.get_mut(holder) {
            *held = held.saturating_sub(less);
            if *held == 0 {
                self.by_holder.remove(holder);
            }
        }
    }
}

/// The bodies the gateway holds, by holder.
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

    /// An empty claim of `holder`'s, to grow as its body arrives.
    pub(crate) fn claim(self: &Arc<Self>, holder: Holder) -> Claim {
        Claim {
            budget: self.clone(),
            holder,
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

/// The part of the budget one body holds; given back when dropped.
pub(crate) struct Claim {
    budget: Arc<BodyBudget>,
    holder: Holder,
    bytes: u64,
}

impl Claim {
    /// Grows the claim to `bytes` in all, if the budget has room; a smaller `bytes`
    /// leaves it as it is.
    ///
    /// # Errors
    /// [`OverBudget`] when the holder's share, or the whole budget, has no room; the
    /// claim keeps what it held.
    pub(crate) fn grow_to(&mut self, bytes: u64) -> Result<(), OverBudget> {
        let Some(more) = bytes.checked_sub(self.bytes).filter(|&more| more > 0) else {
            return Ok(());
        };
        let limits = self.budget.limits;
        let mut held = self.budget.lock();
        if held.of(&self.holder).saturating_add(more) > limits.per_client {
            return Err(OverBudget::Share {
                limit: limits.per_client,
            });
        }
        if held.total.saturating_add(more) > limits.total {
            return Err(OverBudget::Total {
                limit: limits.total,
            });
        }
        held.add(&self.holder, more);
        self.bytes = bytes;
        Ok(())
    }

    /// Grows the claim by as many `unit`s as the budget has room for, `max` at most;
    /// returns how many.
    pub(crate) fn grow_by_units(&mut self, unit: u64, max: u64) -> u64 {
        let limits = self.budget.limits;
        let mut held = self.budget.lock();
        let room = limits
            .per_client
            .saturating_sub(held.of(&self.holder))
            .min(limits.total.saturating_sub(held.total));
        let units = (room / unit.max(1)).min(max);
        held.add(&self.holder, units * unit);
        self.bytes += units * unit;
        units
    }

    /// What the claim holds, in bytes.
    #[cfg(test)]
    fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Gives back what the claim holds past `bytes`; a larger `bytes` leaves it as it
    /// is.
    pub(crate) fn shrink_to(&mut self, bytes: u64) {
        let Some(less) = self.bytes.checked_sub(bytes).filter(|&less| less > 0) else {
            return;
        };
        self.budget.lock().remove(&self.holder, less);
        self.bytes = bytes;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.shrink_to(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Holder = Holder::Client(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)));
    const B: Holder = Holder::Client(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)));

    fn tenant(name: &str) -> Holder {
        Holder::Tenant(name.to_owned())
    }

    fn budget() -> Arc<BodyBudget> {
        Arc::new(BodyBudget::new(BodyBudgetLimits {
            total: 100,
            per_client: 60,
        }))
    }

    #[test]
    fn a_client_is_refused_past_its_share_and_another_still_fits() {
        let budget = budget();
        let mut first = budget.claim(A);
        first.grow_to(40).unwrap();
        let mut second = budget.claim(A);
        assert_eq!(
            second.grow_to(30),
            Err(OverBudget::Share { limit: 60 }),
            "40 + 30 is past A's 60"
        );
        second.grow_to(20).unwrap();
        let mut other = budget.claim(B);
        other.grow_to(40).unwrap();
        assert_eq!(budget.held(), 100);
        assert_eq!(
            budget.claim(tenant("shop")).grow_to(1),
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
        assert!(budget.lock().by_holder.is_empty());
        budget.claim(A).grow_to(60).unwrap();
    }

    #[test]
    fn a_claim_grows_by_the_units_that_fit() {
        let budget = budget();
        let mut other = budget.claim(B);
        other.grow_to(30).unwrap();
        let mut claim = budget.claim(tenant("shop"));
        assert_eq!(claim.grow_by_units(25, 10), 2, "60 of the share: two of 25");
        assert_eq!(claim.bytes(), 50);
        assert_eq!(claim.grow_by_units(25, 10), 0);
        assert_eq!(
            budget.claim(A).grow_by_units(15, 10),
            1,
            "20 left of the whole"
        );
        claim.shrink_to(10);
        assert_eq!(claim.grow_by_units(25, 1), 1, "at most `max`");
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
        assert!(budget.lock().by_holder.is_empty());
        drop(claim);
        assert_eq!(budget.held(), 0);
    }
}
