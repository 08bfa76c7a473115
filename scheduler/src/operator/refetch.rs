//! Component URLs whose fetch was refused, kept so that waking a Workflow does not
//! fetch them again at once.
//!
//! A Workflow is reconciled whenever its spec or status changes, whenever any
//! tenant's deploy changes the placements or load statuses, and every 30 s when
//! nothing happens. A component that was refused (its URL failed, answered the bytes
//! of another digest, or bytes that are no component) used to be fetched again each
//! time: a tenant keeping Workflows that name large URLs which are always refused made
//! the operator download them over and over, on every other tenant's deploy, holding
//! the bytes of the fetch budget meanwhile. Now a tenant's URL refused for a digest is
//! fetched again only once a wait is over, one that doubles with each refusal in a row
//! (from [`FIRST_WAIT`] up to [`LAST_WAIT`]); a spec naming another URL or digest is
//! fetched at once. Until then the Workflow keeps the refusal it had.

use super::reconcile::{Refusal, doubling};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The wait after a first refusal before the same URL is fetched again.
const FIRST_WAIT: Duration = Duration::from_secs(10);
/// The longest wait before a URL refused many times in a row is fetched again.
const LAST_WAIT: Duration = Duration::from_secs(600);

/// One tenant's URL for one digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Source {
    tenant: String,
    url: String,
    sha256: String,
}

/// The last refusal of a [`Source`].
struct Refused {
    refusal: Refusal,
    in_a_row: u32,
    /// When the URL may be fetched again.
    until: Instant,
}

/// The refused fetches of every tenant, by URL and digest.
#[derive(Default)]
pub(crate) struct RefusedFetches(Mutex<HashMap<Source, Refused>>);

impl RefusedFetches {
    /// The refusal of `tenant`'s last fetch of `url` for `sha256`, while its wait lasts.
    pub(crate) fn standing(&self, tenant: &str, url: &str, sha256: &str) -> Option<Refusal> {
        let now = Instant::now();
        self.entries()
            .get(&source(tenant, url, sha256))
            .filter(|refused| now < refused.until)
            .map(|refused| refused.refusal.clone())
    }

    /// Records that fetching `tenant`'s `url` for `sha256` ended in `refusal`; returns
    /// the refusal, saying when the URL is fetched again.
    pub(crate) fn refused(
        &self,
        tenant: &str,
        url: &str,
        sha256: &str,
        refusal: Refusal,
    ) -> Refusal {
        let now = Instant::now();
        let mut entries = self.entries();
        // Bounded by what was refused lately: a refusal whose wait ended long ago is
        // counted from the start again.
        entries.retain(|_, refused| now < refused.until + LAST_WAIT);
        let key = source(tenant, url, sha256);
        let in_a_row = entries
            .get(&key)
            .map_or(1, |refused| refused.in_a_row.saturating_add(1));
        let wait = doubling(FIRST_WAIT, in_a_row, LAST_WAIT);
        let refusal = Refusal::new(
            refusal.reason,
            format!(
                "{}; fetched again in {} s, or at once for a spec naming another url or sha256",
                refusal.message,
                wait.as_secs()
            ),
        );
        entries.insert(
            key,
            Refused {
                refusal: refusal.clone(),
                in_a_row,
                until: now + wait,
            },
        );
        refusal
    }

    /// Forgets the refusals of `tenant`'s `url` for `sha256`, which it now answered.
    pub(crate) fn fetched(&self, tenant: &str, url: &str, sha256: &str) {
        self.entries().remove(&source(tenant, url, sha256));
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Source, Refused>> {
        // Each entry is whole at every point, even after a panic elsewhere.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn source(tenant: &str, url: &str, sha256: &str) -> Source {
    Source {
        tenant: tenant.to_owned(),
        url: url.to_owned(),
        sha256: sha256.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faas_kube::status::reason;

    fn refusal() -> Refusal {
        Refusal::new(reason::DIGEST_MISMATCH, "other bytes".to_owned())
    }

    #[test]
    fn a_refused_url_stands_refused_for_its_tenant_and_digest_only() {
        let fetches = RefusedFetches::default();
        let said = fetches.refused("acme", "http://x/c.wasm", "aa", refusal());
        assert!(
            said.message
                .starts_with("other bytes; fetched again in 10 s"),
            "{said:?}"
        );
        assert_eq!(
            fetches.standing("acme", "http://x/c.wasm", "aa"),
            Some(said)
        );
        assert_eq!(fetches.standing("other", "http://x/c.wasm", "aa"), None);
        assert_eq!(fetches.standing("acme", "http://x/c.wasm", "bb"), None);
        assert_eq!(fetches.standing("acme", "http://y/c.wasm", "aa"), None);
        fetches.fetched("acme", "http://x/c.wasm", "aa");
        assert_eq!(fetches.standing("acme", "http://x/c.wasm", "aa"), None);
    }

    #[test]
    fn the_wait_doubles_with_each_refusal_in_a_row_up_to_the_last() {
        let fetches = RefusedFetches::default();
        let waits: Vec<String> = (0..8)
            .map(|_| {
                fetches
                    .refused("acme", "http://x/c.wasm", "aa", refusal())
                    .message
            })
            .collect();
        for (said, secs) in waits.iter().zip([10, 20, 40, 80, 160, 320, 600, 600]) {
            assert!(
                said.contains(&format!("fetched again in {secs} s")),
                "{said}"
            );
        }
    }
}
