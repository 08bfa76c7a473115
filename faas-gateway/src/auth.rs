//! Who is calling the admin API: the operator (the admin token) or a tenant (one of its
//! tokens, see [`faas_store::TenantStore`]).

use faas_store::{TenantError, TenantStore};
use http::HeaderMap;
use http::header::AUTHORIZATION;
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

    #[test]
    fn a_tenant_acts_for_itself_only_and_the_admin_for_all() {
        let mallory = Caller::Tenant("mallory".into());
        assert!(mallory.may_act_for("mallory"));
        assert!(!mallory.may_act_for("victim"));
        assert!(Caller::Admin.may_act_for("victim"));
    }
}
