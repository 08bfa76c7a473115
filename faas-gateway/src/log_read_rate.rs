//! How many bytes of log lines each tenant may read per second.
//!
//! A log read costs the store what it reads, not what it returns: in services mode up
//! to [`faas_store::logs::MAX_READ_BYTES`] from the Redis every tenant shares (about
//! 3 ms of its time per full read), before a query's filters drop any line. The reads
//! a tenant may have open at once are bounded (`--max-log-follows-per-tenant`), but one
//! that read in a loop took most of Redis's time. So each tenant has an allowance of
//! bytes that refills at a steady rate up to a burst; a read is let in while the
//! allowance is above zero and charged at once the most it may cost, which may take it
//! below zero; once done, the charge is corrected to what it read (known only then).
//! Further reads wait off what is below zero. Charged after the read alone, reads made
//! at once all found the allowance whole and went in together.
//!
//! Hand-written rather than `governor`'s: that crate refuses a cost larger than its
//! burst, and has no correction of a charge once the cost is known.

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

    /// Lets `tenant` make a read that costs at most `most` bytes, charging that much
    /// now; the caller corrects it with [`Admitted::settle`] once the read is done.
    ///
    /// # Errors
    /// How long `tenant` must wait before it may read.
    pub(crate) fn admit(&self, tenant: &str, most: usize) -> Result<Admitted, Duration> {
        self.admit_at(tenant, most, Instant::now())
    }

    fn admit_at(&self, tenant: &str, most: usize, now: Instant) -> Result<Admitted, Duration> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        let left = self.left(&tenants, tenant, now);
        if left <= 0.0 {
            return Err(Duration::from_secs_f64((1.0 - left) / self.bytes_per_sec));
        }
        self.charge(&mut tenants, tenant, most as f64, now);
        Ok(Admitted { charged: most })
    }

    /// What `tenant` has left to read at `now`.
    fn left(&self, tenants: &HashMap<String, Allowance>, tenant: &str, now: Instant) -> f64 {
        tenants
            .get(tenant)
            .map_or(self.burst, |allowance| self.refilled(*allowance, now))
    }

    /// Charges `tenant` `bytes` more (fewer, if negative) at `now`.
    fn charge(
        &self,
        tenants: &mut HashMap<String, Allowance>,
        tenant: &str,
        bytes: f64,
        now: Instant,
    ) {
        let left = self.left(tenants, tenant, now);
        tenants.insert(
            tenant.to_owned(),
            Allowance {
                // A refund does not take it past its burst.
                bytes: (left - bytes).min(self.burst),
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

/// A read [`LogReadRate::admit`] let in, charged the most it may cost. Dropped
/// without [`Admitted::settle`] (the read failed), it stays charged that much.
#[derive(Debug)]
#[must_use = "a read's charge is corrected by settling it"]
pub(crate) struct Admitted {
    charged: usize,
}

impl Admitted {
    /// Corrects the charge of `tenant`'s read on `rate` to the `bytes` it read.
    pub(crate) fn settle(self, rate: &LogReadRate, tenant: &str, bytes: usize) {
        self.settle_at(rate, tenant, bytes, Instant::now());
    }

    fn settle_at(self, rate: &LogReadRate, tenant: &str, bytes: usize, now: Instant) {
        let mut tenants = rate.tenants.lock().unwrap_or_else(|p| p.into_inner());
        rate.charge(
            &mut tenants,
            tenant,
            bytes as f64 - self.charged as f64,
            now,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// A read of `bytes` by `tenant` at `now`, admitted as one of at most 2 MiB.
    fn read(rate: &LogReadRate, tenant: &str, bytes: usize, now: Instant) {
        let admitted = rate.admit_at(tenant, 2 * MIB, now).expect("admitted");
        admitted.settle_at(rate, tenant, bytes, now);
    }

    #[test]
    fn a_tenant_reads_its_burst_then_waits_off_what_it_read_past_it() {
        let rate = LogReadRate::new(MIB as u64).unwrap();
        let start = Instant::now();
        // Two seconds' worth at once, the last read going past it.
        read(&rate, "mallory", MIB, start);
        read(&rate, "mallory", 2 * MIB, start);
        let wait = rate
            .admit_at("mallory", 1, start)
            .expect_err("over its burst");
        assert!(
            wait > Duration::from_millis(990) && wait < Duration::from_millis(1010),
            "{wait:?}"
        );
        // Another tenant is not charged for it.
        assert!(rate.admit_at("victim", 1, start).is_ok());
        // Once the debt is paid off it reads again.
        assert!(rate.admit_at("mallory", 1, start + wait).is_ok());
    }

    #[test]
    fn reads_at_once_are_charged_before_they_read() {
        let rate = LogReadRate::new(MIB as u64).unwrap();
        let now = Instant::now();
        // A burst of 2 MiB lets in one read of at most 2 MiB, not sixteen.
        let first = rate.admit_at("mallory", 2 * MIB, now).expect("admitted");
        assert!(rate.admit_at("mallory", 2 * MIB, now).is_err());
        // It read 1 KiB: the rest of its charge comes back.
        first.settle_at(&rate, "mallory", 1024, now);
        let second = rate.admit_at("mallory", 2 * MIB, now).expect("admitted");
        second.settle_at(&rate, "mallory", 2 * MIB, now);
        assert!(rate.admit_at("mallory", 1, now).is_err());
    }

    #[test]
    fn an_allowance_refills_to_its_burst_and_no_further() {
        let rate = LogReadRate::new(MIB as u64).unwrap();
        let start = Instant::now();
        read(&rate, "t", MIB / 2, start);
        let later = start + Duration::from_secs(60);
        // A minute idle gives two seconds' worth, not sixty.
        read(&rate, "t", 2 * MIB, later);
        assert!(rate.admit_at("t", 1, later).is_err());
        assert!(rate.tenants.lock().unwrap().contains_key("t"));
        // Refilled, it is forgotten at the next charge.
        read(&rate, "u", 1, later + Duration::from_secs(10));
        assert!(!rate.tenants.lock().unwrap().contains_key("t"));
    }

    #[test]
    fn zero_is_no_limit() {
        assert!(LogReadRate::new(0).is_none());
    }
}
