//! Worker pods: a worker is its pod. The operator records what the API server says of
//! each worker pod ([`SharedState::replace_worker_pods`]): in Kubernetes mode every
//! process takes the workers from there, not from what the workers wrote of
//! themselves, which every worker's Redis user may write (`faas_shared_state`'s
//! `worker_pods` module says why). When a worker pod is deleted, its worker is
//! forgotten in Redis at once and its workflows are placed again.

use super::Context;
use faas_shared_state::{DEFAULT_WORKER_CAPACITY, SharedState, WorkerPod};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often the operator checks that the worker pods are still recorded: a Redis
/// that restarted empty lost them, and the watch goes on with changes only.
const RECHECK: Duration = Duration::from_secs(2);

/// Every how many checks it lists and records them all anyway: so that a write that
/// failed, or one a former leader made late, is set right within a minute.
const RELIST_EVERY: u32 = 30;

/// The name of a worker container's port its internal API listens on (the chart's).
const INTERNAL_PORT: &str = "internal";

/// Follows the worker pods of the operator's namespace until the task is dropped.
pub(crate) async fn follow(context: Arc<Context>) {
    let api: Api<Pod> = Api::namespaced(context.client.clone(), &context.config.namespace);
    let config = watcher::Config::default().labels(&context.config.worker_selector);
    // A new watch lists every pod first (`Init` .. `InitDone`), in order with the
    // changes after: the list is written whole, and no change before it lands after.
    let watch = || {
        watcher(api.clone(), config.clone())
            .default_backoff()
            .boxed()
    };
    let mut events = watch();
    let mut recheck = tokio::time::interval(RECHECK);
    let mut checks = 0u32;
    // A list under way is let finish (listing again would start it over); a write
    // that failed is set right by the next list.
    let (mut listing, mut stale) = (true, false);
    // The pods of a (re)list, written at once when it is complete.
    let mut listed = BTreeMap::new();
    loop {
        let event = tokio::select! {
            event = events.next() => match event {
                Some(event) => event,
                None => return,
            },
            _ = recheck.tick() => {
                checks = checks.wrapping_add(1);
                if !listing
                    && (stale
                        || checks.is_multiple_of(RELIST_EVERY)
                        || lost(&context.shared).await)
                {
                    events = watch();
                    (listing, stale) = (true, false);
                }
                continue;
            }
        };
        match event {
            Ok(watcher::Event::Init) => {
                listing = true;
                listed.clear();
            }
            Ok(watcher::Event::InitApply(pod)) => {
                if let Some(seen) = worker_pod(&pod) {
                    listed.insert(pod.name_any(), seen);
                }
            }
            Ok(watcher::Event::InitDone) => {
                listing = false;
                if let Err(err) = context.shared.replace_worker_pods(&listed).await {
                    tracing::warn!("recording the worker pods (listed again in 2 s): {err}");
                    stale = true;
                }
                wake(&context);
            }
            Ok(watcher::Event::Apply(pod)) => {
                let name = pod.name_any();
                let recorded = match worker_pod(&pod) {
                    Some(seen) => context.shared.put_worker_pod(&name, &seen).await,
                    None => context.shared.remove_worker_pod(&name).await,
                };
                if let Err(err) = recorded {
                    tracing::warn!(
                        pod = name,
                        "recording a worker pod (listed again in 2 s): {err}"
                    );
                    stale = true;
                }
                wake(&context);
            }
            Ok(watcher::Event::Delete(pod)) => {
                if !forget(&context, &pod.name_any()).await {
                    stale = true;
                }
            }
            // The watcher retries on its own (with backoff).
            Err(err) => tracing::warn!("watching worker pods: {err}"),
        }
    }
}

/// Whether Redis no longer has the worker pods (it restarted empty, or their
/// recording failed): they are listed again then.
async fn lost(shared: &SharedState) -> bool {
    match shared.worker_pods_recorded().await {
        Ok(recorded) => {
            if !recorded {
                tracing::info!("the worker pods are not recorded: listing them again");
            }
            !recorded
        }
        Err(err) => {
            tracing::warn!("checking the worker pods are recorded: {err}");
            false
        }
    }
}

/// What the API server says of `pod` as a worker; `None` for one that is not one (yet,
/// or any more): no IP, no internal port, or its containers have ended.
fn worker_pod(pod: &Pod) -> Option<WorkerPod> {
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let ip = status.pod_ip.as_ref()?.parse().ok()?;
    let uid = pod.metadata.uid.clone()?;
    let (container, port) = pod.spec.as_ref()?.containers.iter().find_map(|container| {
        let port = container
            .ports
            .iter()
            .flatten()
            .find(|port| port.name.as_deref() == Some(INTERNAL_PORT))?;
        Some((container, u16::try_from(port.container_port).ok()?))
    })?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|condition| condition.type_ == "Ready" && condition.status == "True");
    Some(WorkerPod {
        ip,
        port,
        uid,
        capacity: capacity(container),
        ready,
        terminating: pod.metadata.deletion_timestamp.is_some(),
    })
}

/// The capacity `container` gives its worker: `--worker-capacity`, or
/// `FAAS_WORKER_CAPACITY`, or the default.
fn capacity(container: &Container) -> usize {
    let args = container.args.iter().flatten();
    let mut from_args = None;
    let mut next_is_it = false;
    for arg in args {
        if next_is_it {
            from_args = arg.parse().ok();
            next_is_it = false;
        } else if let Some(value) = arg.strip_prefix("--worker-capacity=") {
            from_args = value.parse().ok();
        } else {
            next_is_it = arg == "--worker-capacity";
        }
    }
    let from_env = || {
        container
            .env
            .iter()
            .flatten()
            .find(|var| var.name == "FAAS_WORKER_CAPACITY")?
            .value
            .as_ref()?
            .parse()
            .ok()
    };
    from_args
        .or_else(from_env)
        .unwrap_or(DEFAULT_WORKER_CAPACITY)
}

/// Wakes placement and the statuses: the workers may have changed.
fn wake(context: &Context) {
    context.place_now.notify_one();
    context.reconcile_all.notify_one();
}

/// Forgets worker `id` and wakes placement and the statuses; says whether its pod's
/// record went.
async fn forget(context: &Context, id: &str) -> bool {
    let removed = match context.shared.remove_worker_pod(id).await {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(
                worker = id,
                "forgetting a deleted worker pod (listed again in 2 s): {err}"
            );
            false
        }
    };
    match context.shared.forget_worker(id).await {
        Ok(()) => {
            tracing::info!(worker = id, "worker pod deleted; forgetting the worker");
            wake(context);
        }
        // The scheduler rounds forget it all the same.
        Err(err) => tracing::warn!(
            worker = id,
            "forgetting a deleted worker pod's worker: {err}"
        ),
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A worker pod as the API server would give it, with `changes` merged in.
    fn pod(changes: serde_json::Value) -> Pod {
        let mut pod = json!({
            "metadata": { "name": "faas-worker-1", "uid": "u-1" },
            "spec": { "containers": [{
                "name": "worker",
                "args": ["worker", "--worker-capacity=12"],
                "ports": [
                    { "name": "metrics", "containerPort": 9090 },
                    { "name": "internal", "containerPort": 8081 }
                ]
            }]},
            "status": {
                "phase": "Running",
                "podIP": "10.1.2.3",
                "conditions": [{ "type": "Ready", "status": "True" }]
            }
        });
        merge(&mut pod, changes);
        serde_json::from_value(pod).unwrap()
    }

    fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
        match (into, from) {
            (serde_json::Value::Object(into), serde_json::Value::Object(from)) => {
                for (key, value) in from {
                    merge(into.entry(key).or_insert(serde_json::Value::Null), value);
                }
            }
            (into, from) => *into = from,
        }
    }

    #[test]
    fn a_running_pod_is_its_worker_at_its_ip_and_internal_port() {
        let seen = worker_pod(&pod(json!({}))).unwrap();
        assert_eq!(
            seen,
            WorkerPod {
                ip: "10.1.2.3".parse().unwrap(),
                port: 8081,
                uid: "u-1".to_owned(),
                capacity: 12,
                ready: true,
                terminating: false,
            }
        );
        let deleting = pod(json!({
            "metadata": { "deletionTimestamp": "2026-12-02T00:00:00Z" },
            "status": { "conditions": [{ "type": "Ready", "status": "False" }] }
        }));
        let seen = worker_pod(&deleting).unwrap();
        assert!(seen.terminating && !seen.ready);
    }

    #[test]
    fn a_pod_without_an_ip_or_internal_port_or_that_ended_is_no_worker() {
        assert!(worker_pod(&pod(json!({ "status": { "podIP": null } }))).is_none());
        assert!(worker_pod(&pod(json!({ "status": { "phase": "Failed" } }))).is_none());
        let no_port = json!({ "spec": { "containers": [{ "name": "worker" }] } });
        assert!(worker_pod(&pod(no_port)).is_none());
    }

    #[test]
    fn the_capacity_is_the_workers_flag_or_variable_or_the_default() {
        let container = |args: &[&str], env: Option<&str>| -> Container {
            serde_json::from_value(json!({
                "name": "worker",
                "args": args,
                "env": env.map(|value| vec![json!({ "name": "FAAS_WORKER_CAPACITY", "value": value })]),
            }))
            .unwrap()
        };
        assert_eq!(
            capacity(&container(&["worker", "--worker-capacity", "7"], None)),
            7
        );
        assert_eq!(
            capacity(&container(&["worker", "--worker-capacity=9"], Some("3"))),
            9
        );
        assert_eq!(capacity(&container(&["worker"], Some("3"))), 3);
        assert_eq!(
            capacity(&container(&["worker"], None)),
            DEFAULT_WORKER_CAPACITY
        );
    }
}
