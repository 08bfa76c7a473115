//! Which tenant a manifest is deployed for: named by the operator, or taken from a
//! tenant's own token.

use faas_workflow::{ManifestError, TenantScope, Workflow};

const WITHOUT_TENANT: &str = r#"name = "hello"

[functions.hello]
component = "hello.wasm"

[[triggers.http]]
route = "/hello"
function = "hello"
"#;

fn with_tenant(tenant: &str) -> String {
    WITHOUT_TENANT.replacen("\n\n", &format!("\ntenant = \"{tenant}\"\n\n"), 1)
}

fn parse(text: &str, scope: TenantScope<'_>) -> Result<Workflow, ManifestError> {
    Workflow::parse_scoped("workflow.toml", text, None, scope)
}

#[test]
fn a_tenant_token_may_leave_the_tenant_out_and_gets_its_own() {
    let workflow = parse(WITHOUT_TENANT, TenantScope::Own("mallory")).unwrap();
    assert_eq!(workflow.tenant, "mallory");
    let workflow = parse(&with_tenant("mallory"), TenantScope::Own("mallory")).unwrap();
    assert_eq!(workflow.tenant, "mallory");
}

#[test]
fn a_tenant_token_naming_another_tenant_is_a_mismatch_at_the_tenant_field() {
    let err = parse(&with_tenant("victim"), TenantScope::Own("mallory")).unwrap_err();
    assert!(matches!(err, ManifestError::TenantMismatch(_)), "{err:?}");
    assert_eq!(err.field(), "tenant");
    assert_eq!((err.line(), err.column()), (2, 10));
    assert_eq!(
        err.to_string(),
        "workflow.toml:2:10: tenant: tenant `victim` is not this token's tenant `mallory`"
    );
}

#[test]
fn the_mismatch_is_reported_before_any_other_problem() {
    let text = with_tenant("victim").replace("function = \"hello\"", "function = \"nope\"");
    let err = parse(&text, TenantScope::Own("mallory")).unwrap_err();
    assert!(matches!(err, ManifestError::TenantMismatch(_)), "{err:?}");
}

#[test]
fn an_operator_deploy_must_name_the_tenant() {
    let err = parse(WITHOUT_TENANT, TenantScope::Named).unwrap_err();
    assert!(matches!(err, ManifestError::Invalid(_)), "{err:?}");
    assert_eq!(err.field(), "tenant");
    assert!(
        err.to_string()
            .starts_with("workflow.toml:1:1: tenant: missing field `tenant`")
    );
    assert_eq!(
        parse(&with_tenant("demo"), TenantScope::Named)
            .unwrap()
            .tenant,
        "demo"
    );
}

#[test]
fn an_unchecked_parse_uses_the_placeholder_only_when_the_tenant_is_left_out() {
    assert_eq!(
        parse(WITHOUT_TENANT, TenantScope::Unchecked("x"))
            .unwrap()
            .tenant,
        "x"
    );
    let named = parse(&with_tenant("demo"), TenantScope::Unchecked("x")).unwrap();
    assert_eq!(named.tenant, "demo");
}
