//! How many deploys of one tenant the gateway takes at once.
//!
//! A deploy holds its upload in memory (up to `max_deploy_bytes`: one copy of its
//! components, read as they arrive, `crate::upload`) and then the registry's deploy lock, which every deploy
//! takes in turn, while its components compile: seconds for a large component. Without
//! a bound per tenant, one tenant sending many deploys at once would hold gigabytes of
//! uploads and put every other tenant's deploy behind all of its own. So a tenant holds
//! at most `limit` deploys in the gateway (in progress or waiting), and one more is
//! refused before its body is read; and a tenant's deploys take the registry's lock one
//! at a time, so another tenant's deploy waits behind one of them at most.
//!
//! The operator (admin credential) is not limited in deploys at once: it is trusted
//! with everything. Its uploads still count in the [`UploadBudget`], whose whole is
//! the gateway's memory.

use crate::auth::Caller;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// How long a refused client is told to wait by default (`Retry-After`, seconds): about
/// the time a small component's deploy takes.
pub(crate) const RETRY_AFTER_SECS: u64 = 2;

/// The deploys each tenant holds in the gateway.
pub(crate) struct DeployAdmission {
    /// At most this many per tenant; 0 for no limit.
    limit: usize,
    tenants: Mutex<HashMap<String, Held>>,
}

/// One tenant's deploys in the gateway.
struct Held {
    count: usize,
    /// Taken by each of them around the registry's deploy lock.
    turn: Arc<tokio::sync::Mutex<()>>,
}

/// A deploy refused because its tenant holds its limit of deploys already.
#[derive(Debug, thiserror::Error)]
#[error(
    "tenant `{tenant}` already has {limit} deploys or removals in progress or waiting (the gateway's \
     --max-deploys-per-tenant); send this one again once one of them has answered"
)]
pub(crate) struct TooManyDeploys {
    tenant: String,
    limit: usize,
}

/// One admitted deploy: counts against its tenant's limit until dropped.
pub(crate) struct DeployTicket<'a> {
    admission: &'a DeployAdmission,
    /// The tenant and its deploys' turn; `None` for the operator's deploys.
    tenant: Option<(String, Arc<tokio::sync::Mutex<()>>)>,
}

impl DeployAdmission {
    /// At most `limit` deploys per tenant at once (0 for no limit).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// Admits one deploy of `caller`, or refuses it when its tenant holds the limit.
    pub(crate) fn admit(&self, caller: &Caller) -> Result<DeployTicket<'_>, TooManyDeploys> {
        let Caller::Tenant(tenant) = caller else {
            return Ok(DeployTicket {
                admission: self,
                tenant: None,
            });
        };
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let held = tenants.entry(tenant.clone()).or_insert_with(|| Held {
            count: 0,
            turn: Arc::default(),
        });
        if self.limit != 0 && held.count >= self.limit {
            return Err(TooManyDeploys {
                tenant: tenant.clone(),
                limit: self.limit,
            });
        }
        held.count += 1;
        Ok(DeployTicket {
            admission: self,
            tenant: Some((tenant.clone(), held.turn.clone())),
        })
    }

    /// How many deploys `tenant` holds now.
    #[cfg(test)]
    fn held(&self, tenant: &str) -> usize {
        let tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        tenants.get(tenant).map_or(0, |held| held.count)
    }
}

impl DeployTicket<'_> {
    /// Waits until no other deploy of this tenant is past this point, and holds that
    /// until the guard is dropped (nothing to wait for with the operator's deploys).
    pub(crate) async fn turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match &self.tenant {
            Some((_, turn)) => Some(turn.lock().await),
            None => None,
        }
    }
}

impl Drop for DeployTicket<'_> {
    fn drop(&mut self) {
        let Some((tenant, _)) = &self.tenant else {
            return;
        };
        let mut tenants = self
            .admission
            .tenants
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = tenants.get_mut(tenant) {
            held.count -= 1;
            if held.count == 0 {
                tenants.remove(tenant);
            }
        }
    }
}

/// The deploy uploads the gateway holds, by tenant (`None`: the operator's): each from
/// when its head lists its components' sizes until its deploy is done. Deploys take the
/// registry's lock one at a time, so uploads wait in memory, and the places above bound
/// them by tenant only: every tenant's two uploads at `--max-deploy-mb` added up to
/// more than the gateway's memory.
pub(crate) type UploadBudget = faas_budget::Budget<Option<String>>;

/// What one upload holds of the [`UploadBudget`]; given back when dropped.
pub(crate) type UploadClaim = faas_budget::Claim<Option<String>>;

/// The upload budget of a gateway taking uploads of up to `max_deploy_bytes`: one such
/// upload a tenant, two in all (one deploying, one read meanwhile).
pub(crate) fn upload_budget(max_deploy_bytes: usize) -> Arc<UploadBudget> {
    let max = max_deploy_bytes as u64;
    Arc::new(UploadBudget::new(faas_budget::BudgetLimits {
        total: max.saturating_mul(2),
        per_holder: max,
    }))
}

/// Whose the uploads of `caller` are, in the [`UploadBudget`].
pub(crate) fn upload_holder(caller: &Caller) -> Option<String> {
    match caller {
        Caller::Tenant(tenant) => Some(tenant.clone()),
        Caller::Admin => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> Caller {
        Caller::Tenant(name.to_owned())
    }

    #[test]
    fn a_tenant_holds_at_most_its_limit_and_gets_a_place_back_when_one_ends() {
        let admission = DeployAdmission::new(2);
        let first = admission.admit(&tenant("a")).unwrap();
        let _second = admission.admit(&tenant("a")).unwrap();
        let refused = admission
            .admit(&tenant("a"))
            .err()
            .expect("a third refused");
        assert_eq!(
            refused.to_string(),
            "tenant `a` already has 2 deploys or removals in progress or waiting (the gateway's \
             --max-deploys-per-tenant); send this one again once one of them has answered"
        );
        // Another tenant and the operator are not held back by `a`.
        let _other = admission.admit(&tenant("b")).unwrap();
        let _operator = [(); 5].map(|()| admission.admit(&Caller::Admin).unwrap());
        drop(first);
        assert_eq!(admission.held("a"), 1);
        let _third = admission.admit(&tenant("a")).expect("a place came back");
    }

    #[test]
    fn a_tenant_with_nothing_held_leaves_nothing_behind() {
        let admission = DeployAdmission::new(1);
        drop(admission.admit(&tenant("gone")).unwrap());
        assert!(admission.tenants.lock().unwrap().is_empty());
        let unlimited = DeployAdmission::new(0);
        let _many = [(); 10].map(|()| unlimited.admit(&tenant("a")).unwrap());
        assert_eq!(unlimited.held("a"), 10);
    }

    #[tokio::test]
    async fn a_tenants_deploys_take_their_turn_one_at_a_time() {
        use futures_util::FutureExt as _;
        let admission = DeployAdmission::new(3);
        let first = admission.admit(&tenant("a")).unwrap();
        let second = admission.admit(&tenant("a")).unwrap();
        let other = admission.admit(&tenant("b")).unwrap();
        let held = first.turn().await.expect("a tenant's deploy has a turn");
        assert!(
            second.turn().now_or_never().is_none(),
            "the second waits while the first holds the turn"
        );
        assert!(
            other.turn().now_or_never().is_some(),
            "another tenant does not wait"
        );
        drop(held);
        assert!(second.turn().now_or_never().is_some());
        let operator = admission.admit(&Caller::Admin).unwrap();
        assert!(operator.turn().now_or_never().expect("no wait").is_none());
    }
}
