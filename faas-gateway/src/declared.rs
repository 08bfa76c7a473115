//! The names and routes the cluster's Workflow resources claim (Kubernetes mode),
//! followed by a watch.
//!
//! A deploy checks its name and routes against every Workflow declared, not only those
//! the operator recorded: one applied a moment ago claims them too. The gateway used to
//! list and validate every Workflow of the cluster for each deploy, so every deploy, of
//! every tenant, cost as much as all the Workflows there are. One tenant holding many
//! large ones (a resource may take 1.5 MiB, Karmem schemas included) made every
//! tenant's deploys slow and loaded the API server with each. Now the watch reads each
//! Workflow once per change, validates it once per generation, and keeps only what it
//! claims: its name, tenant and routes.

use faas_kube::Workflow as Resource;
use faas_kube::status::DEGRADED;
use faas_workflow::{RunSettings, Workflow};
use futures_util::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

/// A Workflow resource by namespace and name.
type Key = (String, String);

/// What one Workflow resource claims, as last seen.
#[derive(Debug, Clone)]
struct Seen {
    /// The resource's uid and generation when it was validated: another generation
    /// (a new spec) or another uid (deleted and made again) is validated again.
    uid: Option<String>,
    generation: Option<i64>,
    /// What it claims: `None` when its spec is invalid (the operator refuses it, so
    /// it claims nothing).
    claim: Option<Arc<Workflow>>,
    /// Whether the operator marked it `Degraded`: a refused Workflow claims nothing,
    /// or a tenant could apply, in its own namespace, Workflows naming another
    /// tenant's workflow or routes, and block that tenant's own deploys.
    degraded: bool,
}

/// The claims of every Workflow in the cluster, kept up to date by a watch that runs
/// until this is dropped.
#[derive(Debug)]
pub(crate) struct DeclaredWorkflows {
    seen: Arc<Mutex<BTreeMap<Key, Seen>>>,
    /// Whether the watch has listed every Workflow once.
    listed: watch::Receiver<bool>,
    follow: tokio::task::JoinHandle<()>,
}

impl DeclaredWorkflows {
    /// Starts watching every namespace's Workflows through `client`. Must be called
    /// inside a Tokio runtime.
    pub(crate) fn follow(client: kube::Client) -> Self {
        let seen = Arc::new(Mutex::new(BTreeMap::new()));
        let (listed_tx, listed) = watch::channel(false);
        let follow = tokio::spawn(follow(Api::all(client), seen.clone(), listed_tx));
        Self {
            seen,
            listed,
            follow,
        }
    }

    /// What each Workflow that the operator has not refused claims (its name, tenant
    /// and HTTP routes, with nothing else of its spec), once the watch has listed them
    /// all; `None` if it has not within `wait`.
    pub(crate) async fn claims(&self, wait: std::time::Duration) -> Option<Vec<Arc<Workflow>>> {
        let mut listed = self.listed.clone();
        tokio::time::timeout(wait, listed.wait_for(|listed| *listed))
            .await
            .ok()?
            .ok()?;
        Some(
            lock(&self.seen)
                .values()
                .filter(|seen| !seen.degraded)
                .filter_map(|seen| seen.claim.clone())
                .collect(),
        )
    }
}

impl Drop for DeclaredWorkflows {
    fn drop(&mut self) {
        self.follow.abort();
    }
}

/// Follows the Workflows of `api` into `seen`, and says in `listed` once they were all
/// listed. A new watch (the first, or after the API server ended one) lists every
/// Workflow first (`Init` .. `InitDone`): the list replaces what was seen, so one deleted
/// while no watch ran is forgotten.
async fn follow(
    api: Api<Resource>,
    seen: Arc<Mutex<BTreeMap<Key, Seen>>>,
    listed: watch::Sender<bool>,
) {
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listing = BTreeMap::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(resource)) => {
                let key = key_of(&resource);
                let before = lock(&seen).get(&key).cloned();
                listing.insert(key, see(resource, before).await);
            }
            Ok(watcher::Event::InitDone) => {
                *lock(&seen) = std::mem::take(&mut listing);
                listed.send_replace(true);
            }
            Ok(watcher::Event::Apply(resource)) => {
                let key = key_of(&resource);
                let before = lock(&seen).get(&key).cloned();
                let now = see(resource, before).await;
                lock(&seen).insert(key, now);
            }
            Ok(watcher::Event::Delete(resource)) => {
                lock(&seen).remove(&key_of(&resource));
            }
            // The watcher retries on its own (with backoff); deploys meanwhile check
            // against what was seen last.
            Err(err) => tracing::warn!("watching the Workflow resources: {err}"),
        }
    }
}

/// What `resource` claims, validating its spec only if `before` (what was seen of it
/// last) is of another generation.
async fn see(resource: Resource, before: Option<Seen>) -> Seen {
    let uid = resource.metadata.uid.clone();
    let generation = resource.metadata.generation;
    let degraded = resource
        .status
        .as_ref()
        .is_some_and(|status| status.is(DEGRADED));
    if let Some(before) =
        before.filter(|before| before.uid == uid && before.generation == generation)
    {
        return Seen { degraded, ..before };
    }
    // Validating compiles the Karmem schemas a spec holds: off the async threads.
    let claim = tokio::task::spawn_blocking(move || {
        faas_kube::validate(&resource)
            .ok()
            .map(|valid| Arc::new(claim_of(valid.workflow)))
    })
    .await
    .ok()
    .flatten();
    Seen {
        uid,
        generation,
        claim,
        degraded,
    }
}

/// `workflow` with only what it claims: its name, tenant and HTTP routes.
fn claim_of(workflow: Workflow) -> Workflow {
    Workflow {
        description: None,
        functions: BTreeMap::new(),
        steps: BTreeMap::new(),
        edges: Vec::new(),
        settings: RunSettings::default(),
        redis_triggers: Vec::new(),
        stream_triggers: Vec::new(),
        ..workflow
    }
}

fn key_of(resource: &Resource) -> Key {
    (
        resource.metadata.namespace.clone().unwrap_or_default(),
        resource.metadata.name.clone().unwrap_or_default(),
    )
}

fn lock(seen: &Mutex<BTreeMap<Key, Seen>>) -> MutexGuard<'_, BTreeMap<Key, Seen>> {
    seen.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
