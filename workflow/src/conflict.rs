//! Whether a workflow's HTTP routes may be served beside other workflows' routes: one
//! rule for every writer of deployments (the gateway's deploy path and the Kubernetes
//! operator), so they cannot disagree about who owns a route.
//!
//! The rule: one of a workflow's routes conflicts when another workflow serves it
//! already, or when it lies under or over a route of another tenant (a route prefix has
//! one owner). Routes of one tenant may nest; the catch-all `/...`, the operator's
//! fallback, claims no prefix. A workflow of the same name is the one being replaced
//! and is skipped. A message never names another tenant's workflow.
//!
//! Every tenant deploys routes, so checking one against every deployed route would let
//! one tenant, by filling its quota with routes, make every deploy and every restart
//! slow (a restart checks each saved workflow against those restored before it: a
//! scan makes that quadratic). [`RouteOwners`] indexes the deployed routes by their
//! root instead, so a check costs a few lookups per route of the workflow checked,
//! however many routes are deployed.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::{Route, Workflow};

/// Why `workflow` may not be served beside `deployed`, or `None` when it may (the
/// rule in this module's documentation).
///
/// For a caller that has `deployed` only for this check: it indexes `workflow`'s few
/// routes and meets each deployed route with them once (the rule is symmetric), a few
/// lookups per deployed route and no copy of them. A caller that checks many
/// workflows against one set keeps a [`RouteOwners`] of it instead.
pub fn route_conflict<'a>(
    workflow: &Workflow,
    deployed: impl IntoIterator<Item = &'a Workflow>,
) -> Option<String> {
    let ours = RouteOwners::from_iter([workflow]);
    deployed
        .into_iter()
        .filter(|other| other.name != workflow.name)
        .find_map(|other| {
            other.http_triggers.iter().find_map(|theirs| {
                let theirs = &theirs.route;
                // How `theirs` meets ours, told from ours' side.
                Some(match ours.meeting(other, theirs)? {
                    Meeting::Same(_) => same_route(theirs, workflow, &other.tenant, &other.name),
                    Meeting::Under(prefix) => over(&format!("{prefix}/...")),
                    Meeting::Over(route) => under(&route, theirs),
                })
            })
        })
}

/// How a route meets the routes held in a [`RouteOwners`].
enum Meeting<'a> {
    /// Another workflow holds the same route.
    Same(&'a Claim),
    /// It lies under another tenant's prefix route, `<this>/...`.
    Under(&'a str),
    /// It is a prefix route over another tenant's route, this one.
    Over(String),
}

/// The refusal of `route`, a route of `workflow`, that `other` serves already.
fn same_route(route: &Route, workflow: &Workflow, other_tenant: &str, other: &str) -> String {
    if other_tenant == workflow.tenant {
        format!("route `{route}` is already served by workflow `{other}`")
    } else {
        format!("route `{route}` is already served by another tenant")
    }
}

/// The refusal of `ours`, which lies under `theirs`, another tenant's prefix route.
/// Naming it tells nothing new: its prefix begins `ours`.
fn under(ours: &dyn std::fmt::Display, theirs: &dyn std::fmt::Display) -> String {
    format!("route `{ours}` lies under `{theirs}`, which belongs to another tenant")
}

/// The refusal of `ours`, a prefix route over a route of another tenant. Which route is
/// not said: its path may be a secret of that tenant's (a webhook's), and anyone may
/// probe with deploys that are refused before anything compiles.
fn over(ours: &dyn std::fmt::Display) -> String {
    format!("route `{ours}` lies over a route of another tenant")
}

/// The deployed workflows' HTTP routes, by root, with the workflow and tenant that
/// serve each: what a deploy's routes are checked against ([`Self::conflict`]), kept
/// up to date as workflows are deployed and removed.
#[derive(Debug, Clone, Default)]
pub struct RouteOwners {
    /// The claims on each root: the path of an exact route, the prefix of a prefix
    /// route (`/api` for `/api/...`, empty for the catch-all). Ordered, so that the
    /// roots under a prefix are one range.
    by_root: BTreeMap<String, Vec<Claim>>,
}

/// One workflow's route on a root.
#[derive(Debug, Clone)]
struct Claim {
    /// A prefix route (`<root>/...`) rather than the exact route `<root>`.
    prefix: bool,
    workflow: Arc<str>,
    tenant: Arc<str>,
}

impl Claim {
    /// Whether this claim belongs to a workflow other than `workflow`, the one being
    /// checked (a workflow of the same name is the one it replaces).
    fn is_other_than(&self, workflow: &Workflow) -> bool {
        *self.workflow != *workflow.name
    }

    /// Whether another tenant than `workflow`'s holds this claim.
    fn is_foreign_to(&self, workflow: &Workflow) -> bool {
        self.is_other_than(workflow) && *self.tenant != *workflow.tenant
    }
}

/// Whether `workflow` conflicts with `deployed` by the rule read literally: each of
/// its routes against each route of every other workflow, O(its routes × deployed
/// routes). [`RouteOwners`] answers the same in a few lookups per route; this is what
/// its tests check it against, and the peer `bench/route-owners.sh` measures it with
/// (the gateway checked this way before).
pub fn conflicts_by_scan<'a>(
    workflow: &Workflow,
    deployed: impl IntoIterator<Item = &'a Workflow>,
) -> bool {
    deployed
        .into_iter()
        .filter(|other| other.name != workflow.name)
        .any(|other| {
            workflow.http_triggers.iter().any(|ours| {
                other.http_triggers.iter().any(|theirs| {
                    let (ours, theirs) = (&ours.route, &theirs.route);
                    ours == theirs
                        || (other.tenant != workflow.tenant
                            && !ours.is_catch_all()
                            && !theirs.is_catch_all()
                            && ours.overlaps(theirs))
                })
            })
        })
}

impl<'a> FromIterator<&'a Workflow> for RouteOwners {
    fn from_iter<I: IntoIterator<Item = &'a Workflow>>(workflows: I) -> Self {
        let mut owners = Self::default();
        for workflow in workflows {
            owners.insert(workflow);
        }
        owners
    }
}

/// Where a route starts: its prefix, or its path if it is exact.
fn root(route: &Route) -> &str {
    route.prefix().unwrap_or(route.as_str())
}

impl RouteOwners {
    /// Adds `workflow`'s routes. Deploys check first ([`Self::conflict`]); a set that
    /// holds two claims on one route anyway keeps both, and reports both.
    pub fn insert(&mut self, workflow: &Workflow) {
        let name: Arc<str> = workflow.name.as_str().into();
        let tenant: Arc<str> = workflow.tenant.as_str().into();
        for route in workflow.http_triggers.iter().map(|trigger| &trigger.route) {
            self.by_root
                .entry(root(route).to_owned())
                .or_default()
                .push(Claim {
                    prefix: route.is_prefix(),
                    workflow: name.clone(),
                    tenant: tenant.clone(),
                });
        }
    }

    /// Takes out the routes of `workflow` (as inserted: its name and its routes).
    pub fn remove(&mut self, workflow: &Workflow) {
        for route in workflow.http_triggers.iter().map(|trigger| &trigger.route) {
            let root = root(route);
            let Some(claims) = self.by_root.get_mut(root) else {
                continue;
            };
            claims.retain(|claim| {
                claim.prefix != route.is_prefix() || *claim.workflow != *workflow.name
            });
            if claims.is_empty() {
                self.by_root.remove(root);
            }
        }
    }

    /// How many routes it holds.
    pub fn len(&self) -> usize {
        self.by_root.values().map(Vec::len).sum()
    }

    /// Whether it holds no route.
    pub fn is_empty(&self) -> bool {
        self.by_root.is_empty()
    }

    /// Why `workflow` may not be served beside the routes held here, or `None` when it
    /// may: the first of its routes, in manifest order, that conflicts.
    ///
    /// Costs, per route of `workflow`, one lookup per segment of the route and one
    /// range over the roots under it, which ends at the first other tenant's root: only
    /// the tenant's own nested routes can make it longer.
    pub fn conflict(&self, workflow: &Workflow) -> Option<String> {
        workflow
            .http_triggers
            .iter()
            .find_map(|trigger| self.route_conflict(workflow, &trigger.route))
    }

    /// Why `ours`, a route of `workflow`, may not be served, or `None`.
    fn route_conflict(&self, workflow: &Workflow, ours: &Route) -> Option<String> {
        Some(match self.meeting(workflow, ours)? {
            Meeting::Same(claim) => same_route(ours, workflow, &claim.tenant, &claim.workflow),
            Meeting::Under(prefix) => under(ours, &format!("{prefix}/...")),
            Meeting::Over(_) => over(ours),
        })
    }

    /// How `route`, a route of `workflow`, meets the routes held here, if it conflicts
    /// with one.
    fn meeting<'a>(&'a self, workflow: &Workflow, route: &'a Route) -> Option<Meeting<'a>> {
        let root = root(route);
        let same = self
            .claims(root)
            .find(|claim| claim.prefix == route.is_prefix() && claim.is_other_than(workflow));
        if let Some(claim) = same {
            return Some(Meeting::Same(claim));
        }
        if route.is_catch_all() {
            return None;
        }
        if let Some(prefix) = self.foreign_prefix_over(workflow, root) {
            return Some(Meeting::Under(prefix));
        }
        let prefix = route.prefix()?;
        self.foreign_route_under(workflow, prefix)
            .map(Meeting::Over)
    }

    /// The claims on `root`.
    fn claims(&self, root: &str) -> impl Iterator<Item = &Claim> {
        self.by_root.get(root).into_iter().flatten()
    }

    /// The prefix (without `/...`) of another tenant's prefix route that matches
    /// `root`: `root` itself or a part of it that ends at a segment boundary. The
    /// catch-all's empty prefix claims nothing.
    fn foreign_prefix_over<'r>(&self, workflow: &Workflow, root: &'r str) -> Option<&'r str> {
        let boundaries = root.match_indices('/').map(|(at, _)| at);
        boundaries
            .chain([root.len()])
            .filter(|&end| end > 0)
            .map(|end| &root[..end])
            .find(|prefix| {
                self.claims(prefix)
                    .any(|claim| claim.prefix && claim.is_foreign_to(workflow))
            })
    }

    /// Another tenant's route that `<prefix>/...` matches, other than the prefix route
    /// itself: the exact route `<prefix>`, or a route whose root lies below
    /// `<prefix>/`.
    fn foreign_route_under(&self, workflow: &Workflow, prefix: &str) -> Option<String> {
        let exact = self
            .claims(prefix)
            .any(|claim| !claim.prefix && claim.is_foreign_to(workflow));
        if exact {
            return Some(prefix.to_owned());
        }
        // The roots that start with `<prefix>/` sort between it and `<prefix>0`, `0`
        // being the character after `/`.
        let below = format!("{prefix}/");
        let end = format!("{prefix}0");
        let range = (
            Bound::Included(below.as_str()),
            Bound::Excluded(end.as_str()),
        );
        self.by_root
            .range::<str, _>(range)
            .find_map(|(root, claims)| {
                let claim = claims.iter().find(|claim| claim.is_foreign_to(workflow))?;
                Some(if claim.prefix {
                    format!("{root}/...")
                } else {
                    root.clone()
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workflow(name: &str, tenant: &str, routes: &[&str]) -> Workflow {
        let mut text = format!("name = \"{name}\"\ntenant = \"{tenant}\"\n");
        text.push_str("[functions.main]\ncomponent = \"main.wasm\"\n");
        for route in routes {
            text.push_str(&format!(
                "[[triggers.http]]\nroute = \"{route}\"\nfunction = \"main\"\n"
            ));
        }
        Workflow::parse("workflow.toml", &text).unwrap()
    }

    const ROUTES: [&str; 16] = [
        "/...", "/a", "/a/...", "/a/b", "/a/b/...", "/a/b/c", "/ab", "/ab/...", "/a!", "/a!/...",
        "/a0", "/a/.b", "/b/...", "/a/b0", "/é/...", "/é/x",
    ];

    #[test]
    fn it_agrees_with_a_scan_of_every_route_on_every_pair_of_routes() {
        // Every route of one tenant's deployed workflow against every route of a new
        // workflow of each tenant (the same one, another), with and without another
        // route beside it; the index of the deployed routes and the one-off check
        // (which indexes the new workflow's) give the same message.
        for theirs in ROUTES {
            for beside in [None, Some("/z/...")] {
                let mut deployed_routes = vec![theirs];
                deployed_routes.extend(beside);
                let deployed = [workflow("old", "victim", &deployed_routes)];
                let owners = RouteOwners::from_iter(&deployed);
                for ours in ROUTES {
                    for tenant in ["victim", "mallory"] {
                        let new = workflow("new", tenant, &[ours]);
                        let found = owners.conflict(&new);
                        assert_eq!(
                            found.is_some(),
                            conflicts_by_scan(&new, &deployed),
                            "{tenant}'s {ours} beside victim's {deployed_routes:?}: {found:?}",
                        );
                        // The check from the new workflow's side says the same.
                        assert_eq!(route_conflict(&new, &deployed), found);
                    }
                }
            }
        }
    }

    fn message(new: &Workflow, deployed: &[Workflow]) -> Option<String> {
        route_conflict(new, deployed)
    }

    #[test]
    fn another_tenants_route_prefix_cannot_be_entered_or_covered() {
        let victim = [workflow(
            "shop",
            "victim",
            &["/shop/...", "/api/orders", "/x/y/..."],
        )];
        let under = workflow("thief", "mallory", &["/shop/checkout"]);
        assert_eq!(
            message(&under, &victim).unwrap(),
            "route `/shop/checkout` lies under `/shop/...`, which belongs to another tenant"
        );
        let over = workflow("thief", "mallory", &["/api/..."]);
        assert_eq!(
            message(&over, &victim).unwrap(),
            "route `/api/...` lies over a route of another tenant"
        );
        let over_prefix = workflow("thief", "mallory", &["/x/..."]);
        assert_eq!(
            message(&over_prefix, &victim).unwrap(),
            "route `/x/...` lies over a route of another tenant"
        );
        let same = workflow("thief", "mallory", &["/free", "/shop/..."]);
        assert_eq!(
            message(&same, &victim).unwrap(),
            "route `/shop/...` is already served by another tenant"
        );
        // A sibling sharing letters is not under the prefix, nor a parent over it.
        let beside = workflow("thief", "mallory", &["/shopping/...", "/api/ordersx", "/x"]);
        assert_eq!(message(&beside, &victim), None);
    }

    #[test]
    fn routes_of_one_tenant_nest_but_are_not_served_twice() {
        let deployed = [workflow("shop", "victim", &["/shop/..."])];
        let nested = workflow("checkout", "victim", &["/shop/checkout"]);
        assert_eq!(message(&nested, &deployed), None);
        let twice = workflow("copy", "victim", &["/shop/..."]);
        assert_eq!(
            message(&twice, &deployed).unwrap(),
            "route `/shop/...` is already served by workflow `shop`"
        );
    }

    #[test]
    fn the_catch_all_claims_no_prefix_but_is_served_once() {
        let fallback = [workflow("fallback", "ops", &["/..."])];
        let under = workflow("shop", "victim", &["/shop/..."]);
        assert_eq!(message(&under, &fallback), None);
        let again = workflow("other", "mallory", &["/..."]);
        assert_eq!(
            message(&again, &fallback).unwrap(),
            "route `/...` is already served by another tenant"
        );
        assert_eq!(message(&fallback[0], &[under]), None);
    }

    #[test]
    fn removing_a_workflow_frees_its_routes_and_only_its() {
        let shop = workflow("shop", "victim", &["/shop/...", "/shop"]);
        let blog = workflow("blog", "victim", &["/shop/blog", "/blog"]);
        let mut owners = RouteOwners::from_iter([&shop, &blog]);
        assert_eq!(owners.len(), 4);
        let thief = workflow("thief", "mallory", &["/shop/blog/..."]);
        assert!(owners.conflict(&thief).is_some());
        owners.remove(&shop);
        assert_eq!(owners.len(), 2);
        // `/shop/blog` is blog's still.
        assert!(owners.conflict(&thief).is_some());
        assert_eq!(owners.conflict(&workflow("t", "mallory", &["/shop"])), None);
        owners.remove(&blog);
        assert!(owners.is_empty());
        assert_eq!(owners.conflict(&thief), None);
    }

    #[test]
    fn a_new_version_is_checked_against_the_others_not_itself() {
        let deployed = [
            workflow("shop", "victim", &["/shop/..."]),
            workflow("blog", "victim", &["/blog"]),
        ];
        let owners = RouteOwners::from_iter(&deployed);
        assert_eq!(owners.conflict(&deployed[0]), None);
        let moved = workflow("shop", "victim", &["/shop/...", "/blog"]);
        assert_eq!(
            owners.conflict(&moved).unwrap(),
            "route `/blog` is already served by workflow `blog`"
        );
    }

    #[test]
    fn a_check_looks_past_only_the_tenants_own_routes() {
        // Thousands of another tenant's routes, none under or over the new one, and
        // the new workflow's routes nested in its own: the check finds nothing, and
        // finds a foreign route under a prefix however many own routes come first.
        let mut deployed: Vec<Workflow> = (0..50)
            .map(|w| {
                let routes: Vec<String> = (0..128).map(|r| format!("/t{w}/r{r}")).collect();
                let routes: Vec<&str> = routes.iter().map(String::as_str).collect();
                workflow(&format!("many-{w}"), "many", &routes)
            })
            .collect();
        deployed.push(workflow("own", "victim", &["/v/a", "/v/b", "/v/c/..."]));
        let owners = RouteOwners::from_iter(&deployed);
        assert_eq!(owners.len(), 50 * 128 + 3);
        let new = workflow("new", "victim", &["/v/...", "/v/d"]);
        assert_eq!(owners.conflict(&new), None);
        let thief = workflow("new", "mallory", &["/t49/...", "/v/..."]);
        assert_eq!(
            owners.conflict(&thief).unwrap(),
            "route `/t49/...` lies over a route of another tenant"
        );
    }
}
