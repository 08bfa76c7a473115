//! Hostile guests and tenants: each test runs an attack with a guest written for it,
//! asserts that the attack failed, and that another tenant's function kept answering
//! during and after it. One module per kind of attack.

mod bodies;
mod compiles;
mod connections;
mod deadlines;
mod fairness;
mod guest_memory;
mod history;
mod outbound;
mod platform_log;
mod quotas;
mod regions;
mod resources;
mod responses;

use crate::support::{Platform, client, write_manifest};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// The route of the other tenant's function, which must keep answering.
pub(crate) const BYSTANDER_ROUTE: &str = "/bystander";

/// Deploys `functions/hello` for tenant `bystander`, the tenant an attack must not
/// reach, and checks that it answers.
pub(crate) fn deploy_bystander(platform: &Platform, dir: &Path) {
    let manifest = write_manifest(dir, "bystander", "bystander", "hello", BYSTANDER_ROUTE, "");
    platform.deploy(&manifest);
    assert_bystander_served(platform);
}

/// Asserts that the bystander answers its hello now.
pub(crate) fn assert_bystander_served(platform: &Platform) {
    let response = platform.get(&format!("{BYSTANDER_ROUTE}?name=bystander"));
    assert_eq!(response.status(), 200, "the other tenant must be served");
    assert!(response.text().unwrap().contains("Hello, bystander"));
}

/// Requests the bystander's hello over and over on a thread of its own while an
/// attack runs; [`Watch::finish`] says how it went.
pub(crate) struct Watch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Result<Duration, String>>>,
}

impl Watch {
    /// Starts watching the bystander of `platform`.
    pub(crate) fn start(platform: &Platform) -> Self {
        Self::start_at(platform, &format!("{BYSTANDER_ROUTE}?name=bystander"))
    }

    /// Starts watching another tenant's function at `path` (GET, answering 200).
    pub(crate) fn start_at(platform: &Platform, path: &str) -> Self {
        let url = platform.at(path);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let client = client();
            let mut outcomes = Vec::new();
            // At least one request, however soon the attack ends: a quick one (a
            // flood stopped at a low limit) may end before this thread first looks.
            loop {
                let started = std::time::Instant::now();
                let outcome = match client.get(&url).send() {
                    Ok(response) if response.status() == 200 => Ok(started.elapsed()),
                    Ok(response) => Err(format!("status {}", response.status())),
                    Err(err) => Err(err.to_string()),
                };
                outcomes.push(outcome);
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            outcomes
        });
        Self { stop, thread }
    }

    /// Stops watching; asserts that every request during the attack was answered, and
    /// that there were some. Returns their latencies.
    pub(crate) fn finish(self) -> Vec<Duration> {
        self.stop.store(true, Ordering::Relaxed);
        let outcomes = self.thread.join().expect("the watch thread panicked");
        assert!(!outcomes.is_empty(), "no request reached the bystander");
        outcomes
            .into_iter()
            .map(|outcome| outcome.unwrap_or_else(|err| panic!("the bystander failed: {err}")))
            .collect()
    }
}
