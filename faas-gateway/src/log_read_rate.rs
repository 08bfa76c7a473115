//! How many bytes of log lines each tenant may read per second.
//!
//! A log read costs the store what it reads, not what it returns: in services mode up
//! to [`faas_store::logs::MAX_READ_BYTES`] from the Redis every tenant shares (about
//! 3 ms of its time per full read), before a query's filters drop any line. The reads
//! a tenant may have open at once are bounded (`--max-log-follows-per-tenant`), but one
//! that read in a loop took most of Redis's time. So each tenant has an allowance of
//! bytes that refills at a steady rate up to a burst; a read is let in while the
//! allowance is above zero and then charged what it read, which may take it below zero
//! (what a read costs is known only once it is done); further reads wait it off.
//!
//! Hand-written rather than `governor`'s: that crate charges a cost before the work,
//! and refuses one larger than its burst, where this charges after.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Each tenant's allowance of log bytes to read.
#[derive(Debug)]
pub(crate) struct LogReadRate {
    bytes_per_sec: f64,
    burst: f64,
    tenants: Mutex<HashMap<String, Allowance>>,
}

/// One tenant's bytes left to read, as of `at`.
#[derive(Debug, Clone, Copy)]
struct Allowance {
    bytes: f64,
    at: Instant,
}

impl LogReadRate {
    /// `bytes_per_sec` for each tenant, with a burst of two seconds' worth; `None` for
    /// no limit (0).
    pub(crate) fn new(bytes_per_sec: u64) -> Option<Self> {
        (bytes_per_sec > 0).then(|| Self {
            bytes_per_sec: bytes_per_sec as f64,
            burst: 2.0 * bytes_per_sec as f64,
            tenants: Mutex::default(),
        })
    }

    /// How long `tenant` must wait before it may read; `None` when it may now.
    pub(crate) fn wait(&self, tenant: &str) -> Option<Duration> {
        self.wait_at(tenant, Instant::now())
    }

    /// Charges `tenant` the `bytes` a read of its read.
    pub(crate) fn charge(&self, tenant: &str, bytes: usize) {
        self.charge_at(tenant, bytes, Instant::now());
    }

    fn wait_at(&self, tenant: &str, now: Instant) -> Option<Duration> {
        let tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        let left = tenants
            .get(tenant)
            .map_or(self.burst, |allowance| self.refilled(*allowance, now));
        (left <= 0.0).then(|| Duration::from_secs_f64((1.0 - left) / self.bytes_per_sec))
    }

    fn charge_at(&self, tenant: &str, bytes: usize, now: Instant) {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        let left = tenants
            .get(tenant)
            .map_or(self.burst, |allowance| self.refilled(*allowance, now));
        tenants.insert(
            tenant.to_owned(),
            Allowance {
                bytes: left - bytes as f64,
                at: now,
            },
        );
        // A tenant back at its burst is the same as one never seen: kept small (the
        // map holds only tenants that read lately).
        tenants.retain(|_, allowance| self.refilled(*allowance, now) < self.burst);
    }

    fn refilled(&self, allowance: Allowance, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(allowance.at).as_secs_f64();
        (allowance.bytes + elapsed * self.bytes_per_sec).min(self.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_tenant_reads_its_burst_then_waits_off_what_it_read_past_it() {
        let rate = LogReadRate::new(MIB as u64).unwrap();
        let start = Instant::now();
        // Two seconds' worth at once, the last read going past it.
        assert_eq!(rate.wait_at("mallory", start), None);
        rate.charge_at("mallory", MIB, start);
        assert_eq!(rate.wait_at("mallory", start), None);
        rate.charge_at("mallory", 2 * MIB, start);
        let wait = rate.wait_at("mallory", start).expect("over its burst");
        assert!(
            wait > Duration::from_millis(990) && wait < Duration::from_millis(1010),
            "{wait:?}"
        );
        // Another tenant is not charged for it.
        assert_eq!(rate.wait_at("victim", start), None);
        // Once the debt is paid off it reads again.
        assert_eq!(rate.wait_at("mallory", start + wait), None);
    }

    #[test]
    fn an_allowance_refills_to_its_burst_and_no_further() {
        let rate = LogReadRate::new(MIB as u64).unwrap();
        let start = Instant::now();
        rate.charge_at("t", MIB / 2, start);
        let later = start + Duration::from_secs(60);
        // A minute idle gives two seconds' worth, not sixty.
        rate.charge_at("t", 2 * MIB, later);
        assert!(rate.wait_at("t", later).is_some());
        assert!(rate.tenants.lock().unwrap().contains_key("t"));
        // Refilled, it is forgotten at the next charge.
        rate.charge_at("u", 1, later + Duration::from_secs(10));
        assert!(!rate.tenants.lock().unwrap().contains_key("t"));
    }

    #[test]
    fn zero_is_no_limit() {
        assert!(LogReadRate::new(0).is_none());
    }
}
