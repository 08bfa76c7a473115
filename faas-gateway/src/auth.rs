//! Who is calling the admin API: the operator (the admin token) or a tenant (one of its
//! tokens, see [`faas_store::TenantStore`]).

use faas_store::{TenantError, TenantStore};
use http::HeaderMap;
use http::header::AUTHORIZATION;
use std::sync::atomic::{AtomicU64, Ordering};
use subtle::ConstantTimeEq;

/// The credential behind an admin request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The operator: may do everything, for every tenant.
    Admin,
    /// A tenant's token: may act on that tenant's workflows and tokens only.
    Tenant(String),
}

impl Caller {
    /// Whether the caller may see and change what belongs to `tenant`.
    pub fn may_act_for(&self, tenant: &str) -> bool {
        match self {
            Caller::Admin => true,
            Caller::Tenant(own) => own == tenant,
        }
    }

    /// Whether this is the operator.
    pub fn is_admin(&self) -> bool {
        matches!(self, Caller::Admin)
    }
}

/// A tenant token as a request presented it, kept by what outlives its request's
/// authentication (a log follow, a deploy reading its upload and waiting for its
/// workers) to ask again whether the token still acts for its tenant: a tenant removed
/// meanwhile, and perhaps made again under its name for someone else, must not find
/// what the old one's token started. Not `Debug`: it holds the secret.
pub struct TenantCredential {
    tenant: String,
    secret: String,
}

impl TenantCredential {
    /// The tenant token `headers` carry, when `caller` is the tenant it authenticated
    /// as; `None` for the operator, whose token is not revoked.
    pub(crate) fn presented(headers: &HeaderMap, caller: &Caller) -> Option<Self> {
        let Caller::Tenant(tenant) = caller else {
            return None;
        };
        Some(Self {
            tenant: tenant.clone(),
            secret: bearer(headers)?.to_owned(),
        })
    }

    /// The tenant it acts for.
    pub(crate) fn tenant(&self) -> &str {
        &self.tenant
    }

    /// Whether it is still a live token of its tenant, and the tenant still exists:
    /// the check [`authenticate`] made of the request.
    ///
    /// # Errors
    /// When the tenant store cannot be read.
    pub(crate) async fn is_live(&self, tenants: &TenantStore) -> Result<bool, TenantError> {
        let acts_for = tenants.authenticate(&self.secret).await?;
        Ok(acts_for.as_deref() == Some(self.tenant.as_str()))
    }

    /// Its secret's hash, for a check that it is still live made in the same step as
    /// a change it authorised ([`faas_shared_state::SharedState::promote_deployment`]).
    pub(crate) fn secret_hash(&self) -> String {
        faas_store::tenants::secret_hash(&self.secret)
    }
}

/// How many times this process took access back: revoked a token or removed a tenant.
/// Process-wide rather than per gateway because both happen through the tenant store,
/// which gateways in one process (tests) may share; another gateway's count moving only
/// costs a follow one needless check.
static TAKEN_BACK: AtomicU64 = AtomicU64::new(0);

/// Where this process stands in taking access back (see [`access_taken_back`]): a
/// follow compares it before each chunk it sends, an atomic load, and asks the tenant
/// store again only when it moved, so that no line written after a revocation made
/// here reaches the revoked reader.
pub(crate) fn access_generation() -> u64 {
    TAKEN_BACK.load(Ordering::Acquire)
}

/// Records that access was taken back (a token revoked, a tenant removed), once the
/// tenant store holds it: a follow that sees the count move and asks the store then
/// finds it changed.
pub(crate) fn access_taken_back() {
    TAKEN_BACK.fetch_add(1, Ordering::Release);
}

/// The bearer token of `headers`, if there is one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Whether `presented` is the admin token, compared in constant time so that response
/// timing does not reveal how much of a guess was right.
fn is_admin_token(presented: &str, admin_token: &str) -> bool {
    bool::from(presented.as_bytes().ct_eq(admin_token.as_bytes()))
}

/// Who `headers` authenticate as: the operator when they carry the admin token, a
/// tenant when they carry one of its live tokens, `None` otherwise.
///
/// # Errors
/// When the tenant store cannot be read.
pub(crate) async fn authenticate(
    headers: &HeaderMap,
    admin_token: &str,
    tenants: Option<&TenantStore>,
) -> Result<Option<Caller>, TenantError> {
    let Some(presented) = bearer(headers) else {
        return Ok(None);
    };
    if is_admin_token(presented, admin_token) {
        return Ok(Some(Caller::Admin));
    }
    let Some(tenants) = tenants else {
        return Ok(None);
    };
    Ok(tenants.authenticate(presented).await?.map(Caller::Tenant))
}

#[cfg(test)]
mod tests {
    use super::*;
    use faas_store::Database;
    use http::HeaderValue;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    async fn caller(headers: &HeaderMap, tenants: &TenantStore) -> Option<Caller> {
        authenticate(headers, "s3cret", Some(tenants))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn only_the_exact_admin_token_or_a_live_tenant_token_is_accepted() {
        let tenants = TenantStore::sqlite(Database::in_memory().unwrap());
        tenants.create_tenant("demo").await.unwrap();
        let issued = tenants.create_token("demo", "").await.unwrap();
        let admin = Some(Caller::Admin);
        assert_eq!(caller(&headers("Bearer s3cret"), &tenants).await, admin);
        assert_eq!(caller(&headers("Bearer s3cre"), &tenants).await, None);
        assert_eq!(caller(&headers("Bearer s3cretX"), &tenants).await, None);
        assert_eq!(caller(&headers("Basic s3cret"), &tenants).await, None);
        assert_eq!(caller(&HeaderMap::new(), &tenants).await, None);
        let bearer = format!("Bearer {}", issued.secret);
        let demo = Some(Caller::Tenant("demo".into()));
        assert_eq!(caller(&headers(&bearer), &tenants).await, demo);
        tenants.revoke_token(&issued.token.id).await.unwrap();
        assert_eq!(caller(&headers(&bearer), &tenants).await, None);
    }

    #[tokio::test]
    async fn a_kept_credential_is_live_until_its_token_is_revoked_or_its_tenant_removed() {
        let tenants = TenantStore::sqlite(Database::in_memory().unwrap());
        for name in ["demo", "other"] {
            tenants.create_tenant(name).await.unwrap();
        }
        let kept = |issued: &faas_store::IssuedToken| {
            let headers = headers(&format!("Bearer {}", issued.secret));
            TenantCredential::presented(&headers, &Caller::Tenant(issued.token.tenant.clone()))
                .expect("a tenant's token is kept")
        };
        assert!(
            TenantCredential::presented(&headers("Bearer s3cret"), &Caller::Admin).is_none(),
            "the admin token is not revoked, so not kept"
        );
        let revoked = tenants.create_token("demo", "").await.unwrap();
        let credential = kept(&revoked);
        assert!(credential.is_live(&tenants).await.unwrap());
        tenants.revoke_token(&revoked.token.id).await.unwrap();
        assert!(!credential.is_live(&tenants).await.unwrap());
        // A live token of another tenant is not this tenant's.
        let theirs = tenants.create_token("other", "").await.unwrap();
        let mut posing = kept(&theirs);
        posing.tenant = "demo".into();
        assert!(!posing.is_live(&tenants).await.unwrap());
        // Its tenant removed (and made again), a token is no longer live.
        let removed = kept(&tenants.create_token("demo", "").await.unwrap());
        tenants
            .remove_tenant("demo", faas_store::TenantWorkflows::Listed(&[]))
            .await
            .unwrap();
        tenants.release_name("demo").await.unwrap();
        tenants.create_tenant("demo").await.unwrap();
        assert!(!removed.is_live(&tenants).await.unwrap());
        // Taking access back moves the generation that follows compare.
        let before = access_generation();
        access_taken_back();
        assert!(access_generation() > before);
    }

    #[test]
    fn a_tenant_acts_for_itself_only_and_the_admin_for_all() {
        let mallory = Caller::Tenant("mallory".into());
        assert!(mallory.may_act_for("mallory"));
        assert!(!mallory.may_act_for("victim"));
        assert!(Caller::Admin.may_act_for("victim"));
    }
}
