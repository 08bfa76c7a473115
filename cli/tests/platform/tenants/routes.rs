//! Ownership of routes: a route prefix belongs to one tenant. Mallory tries to deploy
//! under and over the victim's routes, and a catch-all; each is refused, names no
//! workflow of the victim's nor a route of the victim's that mallory's does not begin
//! with, and the victim keeps being served.

use super::scene::{Scene, VICTIM_WORKFLOW, assert_success, refused};
use crate::services::{Services, spawn_gateway};
use crate::support::{TOKEN, client, wait_ready};
use std::time::Duration;

/// Mallory's takeovers of the victim's routes, each with the refusal it must get.
const TAKEOVERS: [(&str, &str); 3] = [
    (
        "/shop/checkout",
        "route `/shop/checkout` lies under `/shop/...`, which belongs to another tenant",
    ),
    (
        "/api/...",
        "route `/api/...` lies over a route of another tenant",
    ),
    (
        "/shop/...",
        "route `/shop/...` is already served by another tenant",
    ),
];

impl<P> Scene<P> {
    /// Mallory tries each takeover with its own token, then with the claim of the
    /// victim's tenant; asserts every refusal and that the victim is still served.
    fn assert_takeovers_refused(&self) {
        for (index, (route, expected)) in TAKEOVERS.iter().enumerate() {
            let manifest = self.manifest(&format!("takeover-{index}"), None, &[route]);
            let stderr = refused(&self.deploy(&self.mallory, &manifest));
            assert!(stderr.contains(expected), "{stderr}");
            assert!(!stderr.contains(VICTIM_WORKFLOW), "{stderr}");
            // Nor the victim's route that mallory's lies over: a route's path may be a
            // secret (a webhook's).
            assert!(!stderr.contains("/api/orders"), "{stderr}");
            self.assert_victim_served();
        }
        let claim = self.manifest("claim", Some("victim"), &["/shop/checkout"]);
        let stderr = refused(&self.deploy(&self.mallory, &claim));
        assert!(
            stderr.contains("is not this token's tenant `mallory`"),
            "{stderr}"
        );
        self.assert_victim_served();
    }
}

#[test]
fn another_tenants_route_cannot_be_taken_under_over_or_as_is() {
    let scene = Scene::embedded();
    scene.assert_takeovers_refused();
    // A sibling sharing the prefix's letters is not under it.
    let beside = scene.manifest("beside", None, &["/shopping/..."]);
    assert_success(&scene.deploy(&scene.mallory, &beside), "a deploy beside");
    assert!(
        scene
            .get("/shopping/x?name=m")
            .text()
            .unwrap()
            .contains("Hello, m")
    );
    scene.assert_victim_served();
}

#[test]
fn routes_of_one_tenant_may_nest() {
    let scene = Scene::embedded();
    let nested = scene.manifest("checkout", None, &["/shop/checkout/..."]);
    assert_success(
        &scene.deploy(&scene.victim, &nested),
        "the victim's nested deploy",
    );
    assert!(
        scene
            .get("/shop/checkout/now?name=v")
            .text()
            .unwrap()
            .contains("Hello, v")
    );
    scene.assert_victim_served();
}

#[test]
fn only_the_operator_deploys_a_catch_all_and_it_claims_no_prefix() {
    let scene = Scene::embedded();
    let catch_all = scene.manifest("everything", None, &["/..."]);
    let stderr = refused(&scene.deploy(&scene.mallory, &catch_all));
    assert!(
        stderr.contains("route `/...` is a catch-all: only the operator"),
        "{stderr}"
    );
    assert!(stderr.contains("HTTP 403"), "{stderr}");
    assert_eq!(scene.get("/nowhere").status(), 404);
    scene.assert_victim_served();

    // The operator's fallback for tenant `mallory`...
    let fallback = scene.manifest("fallback", Some("mallory"), &["/..."]);
    assert_success(&scene.deploy(TOKEN, &fallback), "the operator's catch-all");
    assert!(
        scene
            .get("/nowhere?name=f")
            .text()
            .unwrap()
            .contains("Hello, f")
    );
    // ...leaves the victim its routes and lets it deploy new ones under `/`.
    scene.assert_victim_served();
    let more = scene.manifest("more", None, &["/more/..."]);
    assert_success(
        &scene.deploy(&scene.victim, &more),
        "a deploy under the fallback",
    );
}

#[test]
fn a_route_given_up_stops_being_served_and_another_tenant_may_take_it() {
    let scene = Scene::embedded();
    let served = |path: &str| scene.get(&format!("{path}?name=x")).status().as_u16();
    let blog = scene.manifest("blog", None, &["/blog/..."]);
    assert_success(&scene.deploy(&scene.victim, &blog), "the victim's blog");
    let taken = scene.manifest("taken", None, &["/blog/..."]);
    refused(&scene.deploy(&scene.mallory, &taken));
    // A new version on another route gives `/blog/...` up...
    let moved = scene.manifest("blog", None, &["/journal/..."]);
    assert_success(&scene.deploy(&scene.victim, &moved), "the blog moved");
    assert_eq!((served("/blog/a"), served("/journal/a")), (404, 200));
    // ...to anyone; and removing the workflow gives up the rest.
    assert_success(&scene.deploy(&scene.mallory, &taken), "the route given up");
    assert_success(&scene.faas(&scene.victim, &["rm", "blog"]), "removing it");
    assert_eq!((served("/blog/a"), served("/journal/a")), (200, 404));
    let journal = scene.manifest("journal", None, &["/journal/..."]);
    assert_success(&scene.deploy(&scene.mallory, &journal), "the removed route");
    assert_eq!(served("/journal/a"), 200);
    scene.assert_victim_served();
}

#[test]
fn services_mode_refuses_claims_and_route_takeovers() {
    let services = Services::start(&["w1"]);
    let scene = Scene::set_up(services.url.clone(), services);
    scene.assert_takeovers_refused();
    // Tenants and tokens live in Redis: the operator's list there has both.
    let tenants: serde_json::Value = serde_json::from_slice(
        &scene
            .faas(TOKEN, &["tenant", "ls", "--output", "json"])
            .stdout,
    )
    .unwrap();
    assert_eq!(tenants["tenants"].as_array().unwrap().len(), 2, "{tenants}");
}

#[test]
fn a_workflow_with_more_routes_than_one_may_have_is_refused_and_one_at_the_limit_is_served() {
    let scene = Scene::embedded();
    let max = faas_workflow::MAX_HTTP_TRIGGERS;
    let routes: Vec<String> = (0..=max).map(|i| format!("/many/{i}")).collect();
    let routes: Vec<&str> = routes.iter().map(String::as_str).collect();
    let manifest = scene.manifest("many", None, &routes);
    let stderr = refused(&scene.deploy(&scene.mallory, &manifest));
    assert!(
        stderr.contains(&format!("triggers.http[{max}]")),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("at most {max}")), "{stderr}");
    assert!(
        stderr.contains(manifest.file_name().unwrap().to_str().unwrap()),
        "{stderr}"
    );
    scene.assert_victim_served();
    // Straight to the admin API, past the CLI's own check: the gateway refuses it too.
    let response = scene.upload(&scene.mallory, &manifest);
    assert_eq!(response.status(), 400);
    let error: serde_json::Value = response.json().unwrap();
    assert_eq!(error["error"]["field"], format!("triggers.http[{max}]"));
    scene.assert_victim_served();

    let at_limit = scene.manifest("many", None, &routes[..max]);
    assert_success(&scene.deploy(&scene.mallory, &at_limit), "128 routes");
    let last = format!("{}?name=m", routes[max - 1]);
    assert!(scene.get(&last).text().unwrap().contains("Hello, m"));
    scene.assert_victim_served();
}

/// A gateway's copy of who owns each workflow name is up to a sync old, and a removal
/// went by it: mallory, removing a name she had held, through a gateway that had not
/// yet seen the name go to the victim, removed the victim's workflow (whose routes she
/// could then take). The shared state now checks the owner in the removal's own step.
#[test]
fn services_mode_a_removal_through_a_gateway_behind_on_the_names_owner_removes_nothing() {
    let services = Services::start(&["w1"]);
    let scene = Scene::set_up(services.url.clone(), services);
    let held = scene.manifest("wanted", Some("mallory"), &["/wanted/mallory"]);
    assert_success(&scene.deploy(&scene.mallory, &held), "mallory's deploy");
    // A gateway that takes its copy of the deployments at its start, and not again
    // for ten minutes: it has `wanted` as mallory's.
    let behind_dir = faas_testing::temp_dir();
    let behind = spawn_gateway(&scene._host.redis, behind_dir.path(), "600000");
    wait_ready(&behind.announced, Duration::from_secs(30));
    let listed = || {
        let list = client()
            .get(format!("{}/admin/v1/workflows", behind.announced))
            .bearer_auth(&scene.mallory)
            .send()
            .unwrap();
        list.status() == 200 && list.text().unwrap().contains("\"wanted\"")
    };
    let started = std::time::Instant::now();
    while !listed() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the second gateway never had mallory's `wanted`"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    assert_success(&scene.faas(&scene.mallory, &["rm", "wanted"]), "faas rm");
    let wanted = scene.manifest("wanted", Some("victim"), &["/wanted/victim"]);
    assert_success(&scene.deploy(&scene.victim, &wanted), "the victim's deploy");
    let removal = client()
        .delete(format!("{}/admin/v1/workflows/wanted", behind.announced))
        .bearer_auth(&scene.mallory)
        .send()
        .unwrap();
    assert_eq!(removal.status(), 404, "{:?}", removal.text());

    let victims = scene.get("/wanted/victim?name=victim");
    assert_eq!(
        victims.status(),
        200,
        "the victim's `wanted` is still served"
    );
    assert!(victims.text().unwrap().contains("Hello, victim"));
    scene.assert_victim_served();
}
