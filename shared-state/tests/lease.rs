//! The deploy lease and the staged records against a real redis-server: writes are
//! fenced by the lease's holder, and a staged record outlives its lease only until the
//! scheduler's next round.

use faas_shared_state::{DEPLOYMENTS, DeploymentRecord, Promotion, Removal, SharedState};
use faas_store::{TenantError, TenantStore, TenantWorkflows};
use faas_testing::RedisServer;
use std::collections::BTreeMap;
use std::time::Duration;

const MANIFEST: &str = "name = \"shop\"\ntenant = \"t\"\n\n[functions.f]\ncomponent = \"f.wasm\"\n\n\
                        [[triggers.http]]\nroute = \"/shop\"\nfunction = \"f\"\n";

fn record(revision: u64) -> DeploymentRecord {
    DeploymentRecord {
        workflow: faas_workflow::Workflow::parse("workflow.toml", MANIFEST).unwrap(),
        digest: format!("digest-{revision}"),
        revision,
        deployed_at: 0,
        components: BTreeMap::from([("f".to_owned(), format!("sha-{revision}"))]),
    }
}

async fn cluster(redis: &RedisServer) -> SharedState {
    SharedState::connect(&redis.url()).await.unwrap()
}

async fn tenants(redis: &RedisServer) -> TenantStore {
    TenantStore::redis(&redis.url()).await.unwrap()
}

/// Removing a tenant through one gateway while another deploys for it: each is one
/// step in Redis, so whichever comes second fails, and no workflow outlives its tenant.
#[tokio::test]
async fn a_tenants_removal_and_a_deploy_for_it_through_another_gateway_never_both_succeed() {
    let redis = RedisServer::start();
    let cluster = cluster(&redis).await;
    let tenants = tenants(&redis).await;
    let removal = TenantWorkflows::InRedisHash(DEPLOYMENTS);
    let lease = Duration::from_secs(30);
    tenants.create_tenant("t").await.unwrap();
    tenants.create_tenant("other").await.unwrap();
    let token = tenants.create_token("t", "").await.unwrap();

    // The removal comes first: the deploy staged before it cannot go live after it.
    assert!(cluster.lock_workflow("shop", "a", lease).await.unwrap());
    assert!(cluster.stage_deployment(&record(1), "a").await.unwrap());
    assert_eq!(tenants.remove_tenant("t", removal).await.unwrap(), 1);
    assert_eq!(
        cluster
            .promote_deployment(&record(1), "a", None)
            .await
            .unwrap(),
        Promotion::NoTenant
    );
    assert!(cluster.deployments().await.unwrap().is_empty());
    assert_eq!(tenants.authenticate(&token.secret).await.unwrap(), None);
    // Nor can the operator's write of a Workflow resource it checked before.
    assert!(!cluster.put_deployment_of_tenant(&record(1)).await.unwrap());
    assert!(cluster.deployments().await.unwrap().is_empty());

    // The deploy comes first: the removal sees its live version and is refused.
    tenants.release_name("t").await.unwrap();
    tenants.create_tenant("t").await.unwrap();
    let token = tenants.create_token("t", "").await.unwrap();
    assert_eq!(
        cluster
            .promote_deployment(&record(1), "a", None)
            .await
            .unwrap(),
        Promotion::Live
    );
    assert!(cluster.put_deployment_of_tenant(&record(2)).await.unwrap());
    assert_eq!(cluster.deployments().await.unwrap()["shop"], record(2));
    let refused = tenants.remove_tenant("t", removal).await.unwrap_err();
    assert!(
        matches!(&refused, TenantError::HasWorkflows { workflows, .. } if workflows == &["shop"]),
        "{refused}"
    );
    assert!(tenants.tenant("t").await.unwrap().is_some());
    assert_eq!(
        tenants
            .authenticate(&token.secret)
            .await
            .unwrap()
            .as_deref(),
        Some("t")
    );
    // Another tenant's workflow is not this one's.
    assert_eq!(tenants.remove_tenant("other", removal).await.unwrap(), 0);
}

/// A tenant's token deploys; while it loads, the operator removes the tenant and makes
/// one of the same name again (for someone else, perhaps). The staged version of the
/// removed tenant's deploy must not go live in the new tenant's name; a deploy by the
/// new tenant's own token does.
#[tokio::test]
async fn a_deploy_made_with_a_token_goes_live_only_while_the_token_is_live() {
    let redis = RedisServer::start();
    let cluster = cluster(&redis).await;
    let tenants = tenants(&redis).await;
    let removal = TenantWorkflows::InRedisHash(DEPLOYMENTS);
    tenants.create_tenant("t").await.unwrap();
    let old = tenants.create_token("t", "").await.unwrap();
    let old_hash = faas_store::tenants::secret_hash(&old.secret);
    assert!(
        cluster
            .lock_workflow("shop", "a", Duration::from_secs(30))
            .await
            .unwrap()
    );
    assert!(cluster.stage_deployment(&record(1), "a").await.unwrap());
    let staged = record(1);
    let promote = async |hash: &str| {
        let promoted = cluster.promote_deployment(&staged, "a", Some(hash));
        promoted.await.unwrap()
    };

    assert_eq!(tenants.remove_tenant("t", removal).await.unwrap(), 1);
    tenants.release_name("t").await.unwrap();
    tenants.create_tenant("t").await.unwrap();
    let new = tenants.create_token("t", "").await.unwrap();
    assert_eq!(promote(&old_hash).await, Promotion::TokenRevoked);
    assert!(cluster.deployments().await.unwrap().is_empty());

    // A token revoked on its own counts the same.
    let revoked = tenants.create_token("t", "").await.unwrap();
    tenants.revoke_token(&revoked.token.id).await.unwrap();
    let revoked_hash = faas_store::tenants::secret_hash(&revoked.secret);
    assert_eq!(promote(&revoked_hash).await, Promotion::TokenRevoked);

    // Nor does a live token of another tenant.
    tenants.create_tenant("other").await.unwrap();
    let other = tenants.create_token("other", "").await.unwrap();
    let other_hash = faas_store::tenants::secret_hash(&other.secret);
    assert_eq!(promote(&other_hash).await, Promotion::TokenRevoked);

    let new_hash = faas_store::tenants::secret_hash(&new.secret);
    assert_eq!(promote(&new_hash).await, Promotion::Live);
    assert_eq!(cluster.deployments().await.unwrap()["shop"], record(1));
}

#[tokio::test]
async fn only_the_leases_holder_stages_promotes_or_removes() {
    let redis = RedisServer::start();
    let cluster = cluster(&redis).await;
    tenants(&redis).await.create_tenant("t").await.unwrap();
    let lease = Duration::from_secs(30);
    assert!(cluster.lock_workflow("shop", "a", lease).await.unwrap());
    assert!(!cluster.lock_workflow("shop", "b", lease).await.unwrap());
    assert!(!cluster.renew_lock("shop", "b", lease).await.unwrap());
    assert!(cluster.renew_lock("shop", "a", lease).await.unwrap());

    assert!(!cluster.stage_deployment(&record(1), "b").await.unwrap());
    assert!(cluster.staged_deployments().await.unwrap().is_empty());
    assert!(cluster.stage_deployment(&record(1), "a").await.unwrap());
    assert_eq!(
        cluster.staged_deployments().await.unwrap()["shop"],
        record(1)
    );
    assert!(
        cluster.deployments().await.unwrap().is_empty(),
        "not live yet"
    );

    assert_eq!(
        cluster
            .promote_deployment(&record(1), "b", None)
            .await
            .unwrap(),
        Promotion::LeaseLost
    );
    assert_eq!(
        cluster
            .promote_deployment(&record(1), "a", None)
            .await
            .unwrap(),
        Promotion::Live
    );
    assert_eq!(cluster.deployments().await.unwrap()["shop"], record(1));
    assert!(cluster.staged_deployments().await.unwrap().is_empty());

    assert_eq!(
        cluster.remove_deployment("shop", "t", "b").await.unwrap(),
        Removal::LeaseLost
    );
    // The lease orders writers; it does not say who owns the name. A gateway whose
    // copy still showed `shop` as mallory's (a sync old) removes nothing of t's.
    assert_eq!(
        cluster
            .remove_deployment("shop", "mallory", "a")
            .await
            .unwrap(),
        Removal::OtherTenants
    );
    assert!(cluster.deployments().await.unwrap().contains_key("shop"));
    cluster.unlock_workflow("shop", "a").await.unwrap();
    assert_eq!(
        cluster.remove_deployment("shop", "t", "a").await.unwrap(),
        Removal::LeaseLost,
        "lease released"
    );
    assert!(cluster.lock_workflow("shop", "c", lease).await.unwrap());
    assert_eq!(
        cluster.remove_deployment("shop", "t", "c").await.unwrap(),
        Removal::Removed
    );
    assert!(cluster.deployments().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_staged_record_whose_lease_expired_is_dropped_and_its_components_collected() {
    let redis = RedisServer::start();
    let cluster = cluster(&redis).await;
    for revision in [1, 2] {
        cluster
            .put_component(&format!("sha-{revision}"), b"bytes", "t")
            .await
            .unwrap();
    }
    cluster.put_deployment(&record(1)).await.unwrap();
    assert!(
        cluster
            .lock_workflow("shop", "dead", Duration::from_millis(200))
            .await
            .unwrap()
    );
    assert!(cluster.stage_deployment(&record(2), "dead").await.unwrap());
    // While the lease lives, the staged record and its component stay.
    assert!(cluster.drop_abandoned_stages().await.unwrap().is_empty());
    assert!(
        cluster
            .collect_components(Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(cluster.drop_abandoned_stages().await.unwrap(), ["shop"]);
    assert_eq!(
        cluster.collect_components(Duration::ZERO).await.unwrap(),
        ["sha-2"]
    );
    assert_eq!(cluster.deployments().await.unwrap()["shop"], record(1));
    assert!(cluster.component("sha-1").await.is_ok());
}

/// A deploy that failed forgets at once the components it stored itself; what another
/// deploy stored first, stored again since, or what a record names stays.
#[tokio::test]
async fn a_failed_deploys_own_components_go_at_once_and_others_stay() {
    let redis = RedisServer::start();
    let cluster = cluster(&redis).await;
    // Another deploy stored `theirs` first: storing it again creates nothing.
    assert!(
        cluster
            .put_component("theirs", b"t", "t")
            .await
            .unwrap()
            .created
    );
    let theirs = cluster.put_component("theirs", b"t", "t").await.unwrap();
    assert!(!theirs.created);
    let mine = cluster.put_component("mine", b"m", "t").await.unwrap();
    assert!(mine.created);
    // Named by a live record (revision 1 names `sha-1`).
    let named = cluster.put_component("sha-1", b"n", "t").await.unwrap();
    cluster.put_deployment(&record(1)).await.unwrap();
    // Stored again by another deploy after this one.
    let raced = cluster.put_component("raced", b"r", "t").await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    cluster.put_component("raced", b"r", "t").await.unwrap();

    // Stored by another tenant too: its own deploy may be about to name it.
    let both = cluster.put_component("both", b"b", "t").await.unwrap();
    cluster.put_component("both", b"b", "u").await.unwrap();

    let candidates = [
        ("mine".to_owned(), mine.stamp),
        ("sha-1".to_owned(), named.stamp),
        ("raced".to_owned(), raced.stamp),
        ("both".to_owned(), both.stamp + 1_000),
    ];
    assert_eq!(
        cluster.forget_components("t", &candidates).await.unwrap(),
        ["mine"]
    );
    for kept in ["theirs", "sha-1", "raced", "both"] {
        assert!(cluster.has_component(kept).await.unwrap(), "{kept}");
    }
    assert!(!cluster.has_component("mine").await.unwrap());
    // Its stamp went with it: the scheduler's collection finds nothing of it (and
    // collects the others no record names, whoever stored them).
    assert_eq!(
        cluster.collect_components(Duration::ZERO).await.unwrap(),
        ["both", "raced", "theirs"]
    );
}

/// Removing a workflow deletes at once the components its live and staged versions
/// named, but those another deployment names or another tenant stored too: left to the
/// collection, a tenant deploying and removing workflows of fresh components in a loop
/// filled the Redis every tenant shares with bytes no quota counted.
#[tokio::test]
async fn a_removed_workflows_components_go_at_once_but_those_needed_elsewhere() {
    let redis = RedisServer::start();
    let cluster = cluster(&redis).await;
    for (digest, tenant) in [
        ("sha-1", "t"),
        ("sha-2", "t"),
        ("sha-3", "t"),
        ("both", "t"),
        ("both", "u"),
    ] {
        cluster.put_component(digest, b"c", tenant).await.unwrap();
    }
    let mut live = record(1);
    live.components.insert("g".to_owned(), "sha-3".to_owned());
    live.components.insert("h".to_owned(), "both".to_owned());
    cluster.put_deployment(&live).await.unwrap();
    let mut cart = record(3);
    cart.workflow.name = "cart".to_owned();
    cluster.put_deployment(&cart).await.unwrap();
    assert!(
        cluster
            .lock_workflow("shop", "a", Duration::from_secs(30))
            .await
            .unwrap()
    );
    assert!(cluster.stage_deployment(&record(2), "a").await.unwrap());
    // Stamps are in milliseconds, and one stored in the millisecond the removal began
    // counts as stored after it (by a deploy that may name it), so it is left to the
    // collection; on a quick machine that was every component here.
    tokio::time::sleep(Duration::from_millis(5)).await;

    assert_eq!(
        cluster.remove_deployment("shop", "t", "a").await.unwrap(),
        Removal::Removed
    );
    assert!(!cluster.has_component("sha-1").await.unwrap(), "live");
    assert!(!cluster.has_component("sha-2").await.unwrap(), "staged");
    assert!(
        cluster.has_component("sha-3").await.unwrap(),
        "named by cart"
    );
    assert!(
        cluster.has_component("both").await.unwrap(),
        "stored by u too"
    );
}

/// A component is stored once whatever tenants name it, and a tenant may name by
/// digest alone only one it stored: another tenant's, named so, would run that
/// tenant's code in its name. Its tenants go with it when it is collected, and the
/// deployments' tenants are recorded for components an older version stored without.
#[tokio::test]
async fn a_component_is_the_tenants_that_stored_it_and_they_go_with_it() {
    let redis = RedisServer::start();
    let cluster = cluster(&redis).await;
    let of = |tenant: &'static str, digest: &'static str| {
        let cluster = cluster.clone();
        async move { cluster.has_component_of(tenant, digest).await.unwrap() }
    };
    assert!(!of("acme", "shared").await, "nothing stored yet");
    let first = cluster.put_component("shared", b"s", "acme").await.unwrap();
    assert!(first.created);
    assert!(of("acme", "shared").await);
    assert!(!of("mallory", "shared").await, "another tenant's component");
    // Mallory stored the same bytes itself (it had them): no second copy, and now
    // both may name it.
    assert!(
        !cluster
            .put_component("shared", b"s", "mallory")
            .await
            .unwrap()
            .created
    );
    assert!(of("mallory", "shared").await && of("acme", "shared").await);

    // Collected, it takes its tenants along: stored again later by someone else, it
    // is not theirs.
    let stamp = cluster
        .put_component("gone", b"g", "acme")
        .await
        .unwrap()
        .stamp;
    assert_eq!(
        cluster
            .forget_components("acme", &[("gone".to_owned(), stamp)])
            .await
            .unwrap(),
        ["gone"]
    );
    cluster
        .put_component("gone", b"g", "mallory")
        .await
        .unwrap();
    assert!(!of("acme", "gone").await);

    // A removed tenant is forgotten wherever it stored, and no one else is.
    assert_eq!(cluster.forget_component_tenant("mallory").await.unwrap(), 2);
    assert!(!of("mallory", "shared").await && !of("mallory", "gone").await);
    assert!(of("acme", "shared").await);

    // At the operator's start: a component stored without a tenant (as by an older
    // version) and named by a deployment is recorded as its tenant's, and a member
    // that is no tenant (removed by an older version, or stored by a deploy under way
    // across its tenant's removal) is forgotten; tenants stay.
    tenants(&redis).await.create_tenant("acme").await.unwrap();
    cluster
        .put_component("shared", b"s", "removed-long-ago")
        .await
        .unwrap();
    let mut connection = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("SET")
        .arg("faas:component:sha-7")
        .arg("old")
        .query_async::<()>(&mut connection)
        .await
        .unwrap();
    cluster.put_deployment(&record(7)).await.unwrap();
    let tenant = record(7).workflow.tenant;
    assert!(!cluster.has_component_of(&tenant, "sha-7").await.unwrap());
    cluster.record_deployed_components_tenants().await.unwrap();
    assert!(cluster.has_component_of(&tenant, "sha-7").await.unwrap());
    assert!(!of("mallory", "sha-7").await);
    assert!(!of("removed-long-ago", "shared").await);
    assert!(of("acme", "shared").await);
}
