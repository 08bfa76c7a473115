//! Worker pods: a worker's id is its pod's name, so when a worker pod is deleted its
//! worker is forgotten in Redis at once and its workflows are placed again, without
//! waiting for its heartbeat to expire.

use super::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::sync::Arc;

/// Follows the worker pods of the operator's namespace until the task is dropped.
pub(crate) async fn follow(context: Arc<Context>) {
    let api: Api<Pod> = Api::namespaced(context.client.clone(), &context.config.namespace);
    let config = watcher::Config::default().labels(&context.config.worker_selector);
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Delete(pod)) => forget(&context, &pod.name_any()).await,
            Ok(_) => {}
            // The watcher retries on its own (with backoff).
            Err(err) => tracing::warn!("watching worker pods: {err}"),
        }
    }
}

/// Forgets worker `id` and wakes placement and the statuses.
async fn forget(context: &Context, id: &str) {
    match context.shared.forget_worker(id).await {
        Ok(()) => {
            tracing::info!(worker = id, "worker pod deleted; forgetting the worker");
            context.place_now.notify_one();
            context.reconcile_all.notify_one();
        }
        // Its heartbeat expires all the same; the scheduler rounds forget it then.
        Err(err) => tracing::warn!(
            worker = id,
            "forgetting a deleted worker pod's worker: {err}"
        ),
    }
}
