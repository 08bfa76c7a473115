//! How many Redis consumers a tenant's workflows take in all: one rule for every writer
//! of deployments (the gateway's deploy path and the Kubernetes operator).
//!
//! Each channel trigger (`[[triggers.redis]]`) and each stream trigger
//! (`[[triggers.stream]]`) is consumed on a Redis connection of its own: a stream's in
//! every gateway, a channel's in the gateway holding its lease. The caps per workflow
//! bound one manifest, but a tenant may deploy many workflows, and Redis, which every
//! tenant shares, refuses connections past its `maxclients` (10,000 by default): one
//! tenant's triggers could take them all. So a tenant's workflows may have a bounded
//! number of consumers in all.

use crate::Workflow;

/// The default of how many Redis consumers (channel and stream triggers) one tenant's
/// workflows may have in all.
pub const DEFAULT_MAX_REDIS_CONSUMERS_PER_TENANT: usize = 64;

/// The Redis consumers `workflow`'s triggers take: one per channel trigger and one per
/// stream trigger.
pub fn redis_consumers(workflow: &Workflow) -> usize {
    workflow.redis_triggers.len() + workflow.stream_triggers.len()
}

/// Why `workflow` may not be deployed beside `deployed`: with it, its tenant's
/// workflows would have more than `max` Redis consumers in all. `None` when they would
/// not, when `max` is 0 (no limit), or when `workflow` takes no more consumers than
/// the version it replaces (a workflow of the same name in `deployed`), so that a
/// lowered limit never keeps a tenant from deploying a fix.
pub fn redis_consumers_over<'a>(
    workflow: &Workflow,
    deployed: impl IntoIterator<Item = &'a Workflow>,
    max: usize,
) -> Option<String> {
    let ours = redis_consumers(workflow);
    if max == 0 || ours == 0 {
        return None;
    }
    let mut replaced = 0;
    let mut others = 0;
    for other in deployed {
        if other.tenant != workflow.tenant {
            continue;
        }
        if other.name == workflow.name {
            replaced = redis_consumers(other);
        } else {
            others += redis_consumers(other);
        }
    }
    let total = others + ours;
    if total <= max || ours <= replaced {
        return None;
    }
    Some(format!(
        "tenant `{}`'s workflows would have {total} channel and stream triggers in all, \
         past the limit of {max} (--max-redis-consumers-per-tenant), as each takes a Redis \
         connection in every gateway; its other workflows have {others}",
        workflow.tenant
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workflow of `tenant` with `channels` channel triggers and `streams` stream
    /// triggers.
    fn workflow(name: &str, tenant: &str, channels: usize, streams: usize) -> Workflow {
        let mut text = format!(
            "name = \"{name}\"\ntenant = \"{tenant}\"\n\n[functions.relay]\n\
             component = \"relay.wasm\"\nkind = \"step\"\n\n\
             [steps.relay]\nfunction = \"relay\"\ninput = \"json\"\noutput = \"json\"\n"
        );
        for index in 0..channels {
            text.push_str(&format!(
                "\n[[triggers.redis]]\nchannel = \"c{index}\"\nstep = \"relay\"\n"
            ));
        }
        for index in 0..streams {
            text.push_str(&format!(
                "\n[[triggers.stream]]\nstream = \"s{index}\"\nstep = \"relay\"\n"
            ));
        }
        Workflow::parse("workflow.toml", &text).unwrap()
    }

    #[test]
    fn a_tenants_consumers_are_counted_across_its_workflows_only() {
        let deployed = [
            workflow("a", "shop", 2, 3),
            workflow("b", "shop", 0, 4),
            workflow("big", "other", 32, 32),
        ];
        assert_eq!(redis_consumers(&deployed[0]), 5);
        let fits = workflow("c", "shop", 1, 1);
        assert_eq!(redis_consumers_over(&fits, &deployed, 11), None);
        let message = redis_consumers_over(&fits, &deployed, 10).unwrap();
        assert_eq!(
            message,
            "tenant `shop`'s workflows would have 11 channel and stream triggers in all, \
             past the limit of 10 (--max-redis-consumers-per-tenant), as each takes a \
             Redis connection in every gateway; its other workflows have 9"
        );
        assert_eq!(
            redis_consumers_over(&fits, &deployed, 0),
            None,
            "0: no limit"
        );
        let none = workflow("d", "shop", 0, 0);
        assert_eq!(redis_consumers_over(&none, &deployed, 1), None);
    }

    #[test]
    fn a_new_version_is_counted_instead_of_the_one_it_replaces() {
        let deployed = [workflow("a", "shop", 2, 3), workflow("b", "shop", 0, 4)];
        // `a` grows from 5 to 6: 10 in all.
        assert_eq!(
            redis_consumers_over(&workflow("a", "shop", 3, 3), &deployed, 10),
            None
        );
        assert!(redis_consumers_over(&workflow("a", "shop", 4, 3), &deployed, 10).is_some());
        // Over a limit lowered to 5, a version with no more consumers still deploys.
        assert_eq!(
            redis_consumers_over(&workflow("a", "shop", 1, 3), &deployed, 5),
            None
        );
        assert!(redis_consumers_over(&workflow("a", "shop", 3, 3), &deployed, 5).is_some());
    }
}
