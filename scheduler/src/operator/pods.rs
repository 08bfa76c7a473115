//! Worker pods: a worker's id is its pod's name, so when a worker pod is deleted its
//! worker is forgotten in Redis at once and its workflows are placed again, without
//! waiting for its heartbeat to expire.
//!
//! The operator also tells the other processes which worker pods exist, with their IP
//! and UID ([`SharedState::replace_worker_pods`]): the registry is written by the
//! workers themselves, so only an entry that matches its pod is believed
//! (`faas_shared_state`'s `worker_pods` module says why).

use super::Context;
use faas_shared_state::WorkerPod;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Follows the worker pods of the operator's namespace until the task is dropped.
pub(crate) async fn follow(context: Arc<Context>) {
    let api: Api<Pod> = Api::namespaced(context.client.clone(), &context.config.namespace);
    let config = watcher::Config::default().labels(&context.config.worker_selector);
    let mut events = watcher(api, config).default_backoff().boxed();
    // The pods of a (re)list, written at once when it is complete.
    let mut listed = BTreeMap::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitApply(pod)) => {
                if let Some(seen) = worker_pod(&pod) {
                    listed.insert(pod.name_any(), seen);
                }
            }
            Ok(watcher::Event::InitDone) => {
                if let Err(err) = context.shared.replace_worker_pods(&listed).await {
                    tracing::warn!("recording the worker pods: {err}");
                }
                wake(&context);
            }
            Ok(watcher::Event::Apply(pod)) => {
                if let Some(seen) = worker_pod(&pod)
                    && let Err(err) = context.shared.put_worker_pod(&pod.name_any(), &seen).await
                {
                    tracing::warn!(pod = pod.name_any(), "recording a worker pod: {err}");
                }
                wake(&context);
            }
            Ok(watcher::Event::Delete(pod)) => forget(&context, &pod.name_any()).await,
            // The watcher retries on its own (with backoff).
            Err(err) => tracing::warn!("watching worker pods: {err}"),
        }
    }
}

/// What the API server says of `pod`, once it has an IP.
fn worker_pod(pod: &Pod) -> Option<WorkerPod> {
    let ip = pod.status.as_ref()?.pod_ip.as_ref()?.parse().ok()?;
    let uid = pod.metadata.uid.clone()?;
    Some(WorkerPod { ip, uid })
}

/// Wakes placement and the statuses: a worker may count from now on.
fn wake(context: &Context) {
    context.place_now.notify_one();
    context.reconcile_all.notify_one();
}

/// Forgets worker `id` and wakes placement and the statuses.
async fn forget(context: &Context, id: &str) {
    if let Err(err) = context.shared.remove_worker_pod(id).await {
        tracing::warn!(worker = id, "forgetting a deleted worker pod: {err}");
    }
    match context.shared.forget_worker(id).await {
        Ok(()) => {
            tracing::info!(worker = id, "worker pod deleted; forgetting the worker");
            wake(context);
        }
        // Its heartbeat expires all the same; the scheduler rounds forget it then.
        Err(err) => tracing::warn!(
            worker = id,
            "forgetting a deleted worker pod's worker: {err}"
        ),
    }
}
