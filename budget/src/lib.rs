//! A budget that holders claim shares of: all holders together hold at most
//! [`BudgetLimits::total`], and one holder at most [`BudgetLimits::per_holder`], so one
//! holder (a client address, a tenant) cannot take what every other holder needs.
//! Its unit is the user's: bytes most often (the docs below say bytes), or things.
//!
//! The gateway holds events' bodies against one (`faas-gateway/src/body_budget.rs`)
//! and counts tenants' log follows in another; each worker its instances' guest memory
//! (`faas-worker`'s memory limiter) and the guest page ranges its regions map. A
//! [`Claim`] grows as what it stands for grows, is refused ([`OverBudget`]) when
//! either limit has no room, and gives back what it holds when dropped.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// A budget's sizes, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetLimits {
    /// All holders' claims together.
    pub total: u64,
    /// One holder's claims together.
    pub per_holder: u64,
}

/// A size in MiB (a flag's, a quota's) as bytes, where 0 means no limit.
pub fn mib_or_unlimited(mb: u64) -> u64 {
    match mb {
        0 => u64::MAX,
        mb => mb.saturating_mul(1 << 20),
    }
}

/// Why a claim could not grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverBudget {
    /// Its holder's claims would exceed the share of one holder.
    Share {
        /// The share per holder, in bytes.
        limit: u64,
    },
    /// All holders' claims would exceed the budget.
    Total {
        /// The whole budget, in bytes.
        limit: u64,
    },
}

/// What is held, in all and by holder.
struct Held<H> {
    total: u64,
    by_holder: HashMap<H, u64>,
    /// The holders whose share is not [`BudgetLimits::per_holder`]
    /// ([`Budget::set_share`]).
    own_shares: HashMap<H, u64>,
}

impl<H: Eq + Hash + Clone> Held<H> {
    /// What `holder` holds.
    fn of(&self, holder: &H) -> u64 {
        self.by_holder.get(holder).copied().unwrap_or(0)
    }

    /// The most `holder` may hold.
    fn share_of(&self, holder: &H, limits: BudgetLimits) -> u64 {
        self.own_shares
            .get(holder)
            .copied()
            .unwrap_or(limits.per_holder)
    }

    fn add(&mut self, holder: &H, more: u64) {
        if more == 0 {
            return;
        }
        self.total += more;
        match self.by_holder.get_mut(holder) {
            Some(held) => *held += more,
            // The holder's key is copied only when it first holds something.
            None => {
                self.by_holder.insert(holder.clone(), more);
            }
        }
    }

    fn remove(&mut self, holder: &H, less: u64) {
        self.total = self.total.saturating_sub(less);
        if let Some(held) = self.by_holder.get_mut(holder) {
            *held = held.saturating_sub(less);
            if *held == 0 {
                self.by_holder.remove(holder);
            }
        }
    }
}

/// The claims of holders of type `H` against one pair of limits.
pub struct Budget<H> {
    limits: BudgetLimits,
    held: Mutex<Held<H>>,
}

impl<H: Eq + Hash + Clone> Budget<H> {
    /// An empty budget of `limits`.
    pub fn new(limits: BudgetLimits) -> Self {
        Self {
            limits,
            held: Mutex::new(Held {
                total: 0,
                by_holder: HashMap::new(),
                own_shares: HashMap::new(),
            }),
        }
    }

    /// Gives `holder` a share of its own (`Some`), larger or smaller than
    /// [`BudgetLimits::per_holder`] but still within the whole budget, or the
    /// default back (`None`). What its claims hold already stays held; a smaller
    /// share refuses their growth until they are back under it.
    pub fn set_share(&self, holder: H, share: Option<u64>) {
        let mut held = self.lock();
        match share {
            Some(share) => {
                held.own_shares.insert(holder, share);
            }
            None => {
                held.own_shares.remove(&holder);
            }
        }
    }

    /// An empty claim of `holder`'s, to grow as what it stands for grows.
    pub fn claim(self: &Arc<Self>, holder: H) -> Claim<H> {
        Claim {
            budget: self.clone(),
            holder,
            bytes: 0,
        }
    }

    /// What all holders hold, in bytes.
    pub fn held(&self) -> u64 {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held<H>> {
        // Counts change together under the lock: a poisoned lock still holds them whole.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<H> std::fmt::Debug for Budget<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The part of a budget one holder's thing holds; given back when dropped.
pub struct Claim<H: Eq + Hash + Clone> {
    budget: Arc<Budget<H>>,
    holder: H,
    bytes: u64,
}

impl<H: Eq + Hash + Clone> Claim<H> {
    /// Grows the claim to `bytes` in all, if the budget has room; a smaller `bytes`
    /// leaves it as it is.
    ///
    /// # Errors
    /// [`OverBudget`] when the holder's share, or the whole budget, has no room; the
    /// claim keeps what it held.
    pub fn grow_to(&mut self, bytes: u64) -> Result<(), OverBudget> {
        let Some(more) = bytes.checked_sub(self.bytes).filter(|&more| more > 0) else {
            return Ok(());
        };
        let limits = self.budget.limits;
        let mut held = self.budget.lock();
        let share = held.share_of(&self.holder, limits);
        if held.of(&self.holder).saturating_add(more) > share {
            return Err(OverBudget::Share { limit: share });
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
    pub fn grow_by_units(&mut self, unit: u64, max: u64) -> u64 {
        let limits = self.budget.limits;
        let mut held = self.budget.lock();
        let room = held
            .share_of(&self.holder, limits)
            .saturating_sub(held.of(&self.holder))
            .min(limits.total.saturating_sub(held.total));
        let units = (room / unit.max(1)).min(max);
        held.add(&self.holder, units * unit);
        self.bytes += units * unit;
        units
    }

    /// What the claim holds, in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Who holds it.
    pub fn holder(&self) -> &H {
        &self.holder
    }

    /// Moves `bytes` of what this claim holds (all of it, if it holds less) into a new
    /// claim of the same holder, which gives them back when dropped: for a part of what
    /// the claim stands for that lives on apart from it. Nothing is claimed or given
    /// back meanwhile, so this cannot fail.
    pub fn split_off(&mut self, bytes: u64) -> Claim<H> {
        let moved = bytes.min(self.bytes);
        self.bytes -= moved;
        Claim {
            budget: self.budget.clone(),
            holder: self.holder.clone(),
            bytes: moved,
        }
    }

    /// Gives back what the claim holds past `bytes`; a larger `bytes` leaves it as it
    /// is.
    pub fn shrink_to(&mut self, bytes: u64) {
        let Some(less) = self.bytes.checked_sub(bytes).filter(|&less| less > 0) else {
            return;
        };
        self.budget.lock().remove(&self.holder, less);
        self.bytes = bytes;
    }
}

impl<H: Eq + Hash + Clone + std::fmt::Debug> std::fmt::Debug for Claim<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("holder", &self.holder)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl<H: Eq + Hash + Clone> Drop for Claim<H> {
    fn drop(&mut self) {
        self.shrink_to(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> Arc<Budget<&'static str>> {
        Arc::new(Budget::new(BudgetLimits {
            total: 100,
            per_holder: 60,
        }))
    }

    #[test]
    fn a_holder_is_refused_past_its_share_and_another_still_fits() {
        let budget = budget();
        let mut first = budget.claim("a");
        first.grow_to(40).unwrap();
        let mut second = budget.claim("a");
        assert_eq!(
            second.grow_to(30),
            Err(OverBudget::Share { limit: 60 }),
            "40 + 30 is past a's 60"
        );
        second.grow_to(20).unwrap();
        let mut other = budget.claim("b");
        other.grow_to(40).unwrap();
        assert_eq!(budget.held(), 100);
        assert_eq!(budget.lock().of(&"a"), 60);
        assert_eq!(
            budget.claim("c").grow_to(1),
            Err(OverBudget::Total { limit: 100 })
        );
    }

    #[test]
    fn a_holder_with_a_share_of_its_own_is_held_to_it_within_the_whole() {
        let budget = budget();
        budget.set_share("small", Some(20));
        budget.set_share("large", Some(90));
        let mut small = budget.claim("small");
        assert_eq!(small.grow_to(21), Err(OverBudget::Share { limit: 20 }));
        small.grow_to(20).unwrap();
        assert_eq!(budget.claim("small").grow_by_units(1, 10), 0);
        // Past the default share of 60, and then past what the whole has left.
        let mut large = budget.claim("large");
        large.grow_to(70).unwrap();
        assert_eq!(large.grow_to(90), Err(OverBudget::Total { limit: 100 }));
        // The others keep the default.
        drop(large);
        let mut other = budget.claim("other");
        assert_eq!(other.grow_to(61), Err(OverBudget::Share { limit: 60 }));
        // Given the default back, what it holds stays and it grows to 60.
        budget.set_share("small", None);
        small.grow_to(60).unwrap();
        // A smaller share keeps what is held, and refuses growth.
        budget.set_share("small", Some(10));
        assert_eq!(budget.held(), 60);
        assert_eq!(small.grow_to(61), Err(OverBudget::Share { limit: 10 }));
    }

    #[test]
    fn a_claim_grows_by_what_it_lacks_and_gives_all_back_when_dropped() {
        let budget = budget();
        let mut claim = budget.claim("a");
        claim.grow_to(10).unwrap();
        claim.grow_to(25).unwrap();
        claim.grow_to(5).unwrap();
        assert_eq!(budget.held(), 25);
        assert!(claim.grow_to(61).is_err());
        assert_eq!(budget.held(), 25, "a refused growth takes nothing");
        drop(claim);
        assert_eq!(budget.held(), 0);
        assert!(budget.lock().by_holder.is_empty());
        budget.claim("a").grow_to(60).unwrap();
    }

    #[test]
    fn a_part_split_off_stays_held_until_its_own_claim_goes() {
        let budget = budget();
        let mut whole = budget.claim("a");
        whole.grow_to(50).unwrap();
        let part = whole.split_off(20);
        assert_eq!((whole.bytes(), part.bytes()), (30, 20));
        drop(whole);
        assert_eq!(budget.held(), 20, "the part is still held");
        assert!(
            budget.claim("a").grow_to(41).is_err(),
            "and counts in the share"
        );
        drop(part);
        assert_eq!(budget.held(), 0);
        // Splitting off more than is held moves what is held.
        let mut small = budget.claim("a");
        small.grow_to(5).unwrap();
        assert_eq!(small.split_off(10).bytes(), 5);
        assert_eq!(small.bytes(), 0);
    }

    #[test]
    fn a_claim_grows_by_the_units_that_fit() {
        let budget = budget();
        let mut other = budget.claim("b");
        other.grow_to(30).unwrap();
        let mut claim = budget.claim("c");
        assert_eq!(claim.grow_by_units(25, 10), 2, "60 of the share: two of 25");
        assert_eq!(claim.bytes(), 50);
        assert_eq!(claim.grow_by_units(25, 10), 0);
        assert_eq!(
            budget.claim("a").grow_by_units(15, 10),
            1,
            "20 left of the whole"
        );
        claim.shrink_to(10);
        assert_eq!(claim.grow_by_units(25, 1), 1, "at most `max`");
    }

    #[test]
    fn a_claim_shrinks_to_what_it_still_holds() {
        let budget = budget();
        let mut claim = budget.claim("a");
        claim.grow_to(50).unwrap();
        claim.shrink_to(20);
        claim.shrink_to(30);
        assert_eq!(budget.held(), 20, "a larger size leaves the claim as it is");
        budget.claim("a").grow_to(40).unwrap();
        claim.shrink_to(0);
        assert!(budget.lock().by_holder.is_empty());
        drop(claim);
        assert_eq!(budget.held(), 0);
    }
}
