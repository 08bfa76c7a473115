//! Whether a workflow's HTTP routes may be served beside other workflows' routes: one
//! rule for every writer of deployments (the gateway's deploy path and the Kubernetes
//! operator), so they cannot disagree about who owns a route.

use crate::Workflow;

/// Why `workflow` may not be served beside `deployed`, or `None` when it may.
///
/// One of its routes conflicts when another workflow of `deployed` serves it already,
/// or when it lies under or over a route of another tenant (a route prefix has one
/// owner). Routes of one tenant may nest; the catch-all `/...`, the operator's
/// fallback, claims no prefix. A workflow of the same name is the one being replaced
/// and is skipped. The message never names another tenant's workflow.
pub fn route_conflict<'a>(
    workflow: &Workflow,
    deployed: impl IntoIterator<Item = &'a Workflow>,
) -> Option<String> {
    for other in deployed {
        if other.name == workflow.name {
            continue;
        }
        let same_tenant = other.tenant == workflow.tenant;
        for ours in workflow.http_triggers.iter().map(|t| &t.route) {
            for theirs in other.http_triggers.iter().map(|t| &t.route) {
                if theirs == ours && same_tenant {
                    return Some(format!(
                        "route `{ours}` is already served by workflow `{}`",
                        other.name
                    ));
                }
                if theirs == ours {
                    return Some(format!(
                        "route `{ours}` is already served by another tenant"
                    ));
                }
                if same_tenant
                    || ours.is_catch_all()
                    || theirs.is_catch_all()
                    || !ours.overlaps(theirs)
                {
                    continue;
                }
                // `theirs` is over `ours` when the root of `ours` lies in it.
                let root = ours.prefix().unwrap_or(ours.as_str());
                let relation = if theirs.is_prefix() && theirs.matches(root) {
                    "under"
                } else {
                    "over"
                };
                return Some(format!(
                    "route `{ours}` lies {relation} `{theirs}`, which belongs to another tenant"
                ));
            }
        }
    }
    None
}
