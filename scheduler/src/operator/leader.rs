//! Leader election: replicas of the operator compete for a `coordination.k8s.io/v1`
//! Lease (kube-lease-manager), and only its holder reconciles, places and scales.

use super::{OperatorConfig, OperatorError};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a Lease stays held without renewal: a dead leader's successor waits this
/// long at most.
const LEASE_SECONDS: u64 = 15;
/// How long before expiry the holder renews it.
const GRACE_SECONDS: u64 = 5;
/// How long releasing the Lease at shutdown may take.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(3);

/// The Lease, held.
pub(crate) struct Leadership {
    receiver: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
    lease: String,
}

/// Waits until this replica holds the Lease named in `config`.
pub(crate) async fn elect(
    client: &kube::Client,
    config: &OperatorConfig,
) -> Result<Leadership, OperatorError> {
    let lease = config.lease_name.clone();
    let failed = |err: &dyn std::fmt::Display| OperatorError::Lease {
        lease: lease.clone(),
        message: err.to_string(),
    };
    let manager = LeaseManagerBuilder::new(client.clone(), &config.lease_name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_field_manager("faas-operator")
        .with_duration(LEASE_SECONDS)
        .with_grace(GRACE_SECONDS)
        .build()
        .await
        .map_err(|err| failed(&err))?;
    let (mut receiver, task) = manager.watch().await;
    tracing::info!(lease = %lease, identity = %config.identity, "waiting for the leadership");
    while !*receiver.borrow_and_update() {
        receiver
            .changed()
            .await
            .map_err(|_| failed(&"the lease task stopped"))?;
    }
    Ok(Leadership {
        receiver,
        task,
        lease,
    })
}

impl Leadership {
    /// Returns once the Lease is lost (or its renewal stopped).
    pub(crate) async fn lost(&mut self) -> OperatorError {
        loop {
            if self.receiver.changed().await.is_err() {
                return OperatorError::Lease {
                    lease: self.lease.clone(),
                    message: "the lease task stopped".into(),
                };
            }
            if !*self.receiver.borrow_and_update() {
                return OperatorError::LostLeadership(self.lease.clone());
            }
        }
    }

    /// Gives the Lease up, so that another replica takes over at once instead of
    /// waiting for it to expire.
    pub(crate) async fn release(self) {
        // The manager releases the Lease when every receiver is gone.
        drop(self.receiver);
        if tokio::time::timeout(RELEASE_TIMEOUT, self.task)
            .await
            .is_err()
        {
            tracing::warn!(lease = %self.lease, "releasing the Lease timed out; it expires on its own");
        }
    }
}
