//! Kubernetes Events for what the operator did and saw, so that `kubectl describe
//! workflow` and `kubectl get events` tell the story a status only shows the end of: a
//! revision deployed, a spec or component refused, a load that failed, Ready again, a
//! workflow placed elsewhere or left without workers, and the worker Deployment
//! scaled to zero and back.
//!
//! Events are published on changes only (a requeue that finds the same status says
//! nothing), and repeats within a few minutes are counted on one Event by kube's
//! recorder. Publishing is best effort: a refused Event is logged, never a reason to
//! fail a reconcile.

use faas_kube::status::{DEGRADED, PLACED, READY, reason};
use faas_kube::{Workflow, WorkflowStatus};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// The controller name Events carry (`reportingController`).
const CONTROLLER: &str = "faas.dev/operator";

/// Publishes the operator's Events.
#[derive(Clone)]
pub(crate) struct Events {
    recorder: Recorder,
}

impl Events {
    /// Events reported by this replica of the operator (`identity`: its pod name).
    pub(crate) fn new(client: kube::Client, identity: &str) -> Self {
        let reporter = Reporter {
            controller: CONTROLLER.to_owned(),
            instance: Some(identity.to_owned()),
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Publishes on `workflow` what changed from its `old` status to `new`.
    pub(crate) async fn status_changed(
        &self,
        workflow: &Workflow,
        old: Option<&WorkflowStatus>,
        new: &WorkflowStatus,
    ) {
        let reference = workflow.object_ref(&());
        for event in status_events(old, new) {
            self.publish(&event, &reference).await;
        }
    }

    /// Publishes on the worker Deployment (`scale`: its scale subresource, which
    /// carries the Deployment's name, namespace and uid) that it was scaled to
    /// `replicas`, and `why`.
    pub(crate) async fn workers_scaled(
        &self,
        scale: &k8s_openapi::api::autoscaling::v1::Scale,
        replicas: i32,
        why: String,
    ) {
        let reference = ObjectReference {
            api_version: Some("apps/v1".to_owned()),
            kind: Some("Deployment".to_owned()),
            name: scale.metadata.name.clone(),
            namespace: scale.metadata.namespace.clone(),
            uid: scale.metadata.uid.clone(),
            ..ObjectReference::default()
        };
        let reason = if replicas == 0 {
            reason::SCALED_TO_ZERO
        } else {
            "ScaledUp"
        };
        let event = normal(reason, "Scale", why);
        self.publish(&event, &reference).await;
    }

    async fn publish(&self, event: &Event, reference: &ObjectReference) {
        if let Err(err) = self.recorder.publish(event, reference).await {
            tracing::warn!(
                reason = %event.reason,
                object = ?reference.name,
                "publishing a Kubernetes Event failed: {err}"
            );
        }
    }
}

/// What is worth an Event between a Workflow's `old` status and its `new` one:
/// - a new revision (`Deployed`);
/// - `Degraded` turning true, or true for another reason (a Warning with that reason:
///   a refused spec or component, a failed load);
/// - `Ready` turning true;
/// - `Placed` changing once a revision exists: placed elsewhere, scaled to zero, no
///   worker or no room (the last two are Warnings).
pub(crate) fn status_events(old: Option<&WorkflowStatus>, new: &WorkflowStatus) -> Vec<Event> {
    let was = |kind: &str| old.and_then(|status| status.condition(kind));
    let mut events = Vec::new();
    if let Some(revision) = new
        .revision
        .filter(|r| old.and_then(|o| o.revision) != Some(*r))
    {
        events.push(normal(
            "Deployed",
            "Deploy",
            format!("revision {revision} deployed"),
        ));
    }
    if let Some(degraded) = new.condition(DEGRADED).filter(|c| c.status == "True")
        && !same(was(DEGRADED), degraded, false)
    {
        let action = if degraded.reason == reason::LOAD_FAILED {
            "Load"
        } else {
            "Deploy"
        };
        events.push(Event {
            type_: EventType::Warning,
            ..normal(&degraded.reason, action, degraded.message.clone())
        });
    }
    if let Some(ready) = new.condition(READY).filter(|c| c.status == "True")
        && was(READY).is_none_or(|c| c.status != "True")
    {
        events.push(normal("Ready", "Reconcile", ready.message.clone()));
    }
    if let Some(placed) = new.condition(PLACED).filter(|_| new.revision.is_some())
        && !same(was(PLACED), placed, true)
    {
        let trouble = [reason::NO_WORKERS, reason::NO_CAPACITY].contains(&placed.reason.as_str());
        events.push(Event {
            type_: if trouble {
                EventType::Warning
            } else {
                EventType::Normal
            },
            ..normal(&placed.reason, "Place", placed.message.clone())
        });
    }
    events
}

/// Whether condition `new` says what `old` said: the same status and reason, and the
/// same message too if `message`.
fn same(old: Option<&Condition>, new: &Condition, message: bool) -> bool {
    old.is_some_and(|old| {
        old.status == new.status
            && old.reason == new.reason
            && (!message || old.message == new.message)
    })
}

/// The longest note the API server accepts on an Event, in bytes.
const MAX_NOTE_BYTES: usize = 1024;

/// A Normal Event. Its note is cut to what the API server accepts: a failed load's
/// message carries the worker's error, which can be longer, and an Event refused for
/// it would say nothing at all.
fn normal(reason: &str, action: &str, mut note: String) -> Event {
    if note.len() > MAX_NOTE_BYTES {
        const CUT: &str = "...";
        let mut end = MAX_NOTE_BYTES - CUT.len();
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str(CUT);
    }
    Event {
        type_: EventType::Normal,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn status(revision: Option<u64>, conditions: [(&str, bool, &str, &str); 3]) -> WorkflowStatus {
        let mut status = WorkflowStatus {
            revision,
            ..WorkflowStatus::default()
        };
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        for (kind, is, reason, message) in conditions {
            status.set_condition(kind, is, reason, message.to_owned(), now.clone(), None);
        }
        status
    }

    /// (type, reason) of each event.
    fn said(events: &[Event]) -> Vec<(EventType, &str)> {
        events
            .iter()
            .map(|e| (e.type_, e.reason.as_str()))
            .collect()
    }

    #[test]
    fn a_note_longer_than_the_api_server_takes_is_cut_on_a_character() {
        let long = "é".repeat(MAX_NOTE_BYTES);
        let note = normal("LoadFailed", "Load", long).note.unwrap();
        assert!(note.len() <= MAX_NOTE_BYTES, "{}", note.len());
        assert!(note.ends_with("..."));
        let short = normal("Ready", "Reconcile", "1 of 1".into()).note.unwrap();
        assert_eq!(short, "1 of 1");
    }

    #[test]
    fn a_workflow_says_what_changed_and_nothing_while_it_stays_the_same() {
        use EventType::{Normal, Warning};
        let refused = status(
            None,
            [
                (
                    READY,
                    false,
                    reason::INVALID_SPEC,
                    "spec.workflow.replicas: 0",
                ),
                (
                    PLACED,
                    false,
                    reason::INVALID_SPEC,
                    "spec.workflow.replicas: 0",
                ),
                (
                    DEGRADED,
                    true,
                    reason::INVALID_SPEC,
                    "spec.workflow.replicas: 0",
                ),
            ],
        );
        let events = status_events(None, &refused);
        assert_eq!(said(&events), [(Warning, reason::INVALID_SPEC)]);
        assert_eq!(events[0].note.as_deref(), Some("spec.workflow.replicas: 0"));
        assert!(status_events(Some(&refused), &refused).is_empty());

        let loading = status(
            Some(7),
            [
                (
                    READY,
                    false,
                    reason::LOADING,
                    "0 of 1 replica(s) serve revision 7",
                ),
                (PLACED, true, "Placed", "placed on w1"),
                (DEGRADED, false, reason::AS_EXPECTED, "nothing is wrong"),
            ],
        );
        assert_eq!(
            said(&status_events(Some(&refused), &loading)),
            [(Normal, "Deployed"), (Normal, "Placed")]
        );
        let ready = status(
            Some(7),
            [
                (READY, true, "Ready", "1 of 1 replica(s) serve revision 7"),
                (PLACED, true, "Placed", "placed on w1"),
                (DEGRADED, false, reason::AS_EXPECTED, "nothing is wrong"),
            ],
        );
        assert_eq!(
            said(&status_events(Some(&loading), &ready)),
            [(Normal, "Ready")]
        );
        assert!(status_events(Some(&ready), &ready).is_empty());

        // Moved to another worker, then a load fails there; then no worker is left.
        let moved = status(
            Some(7),
            [
                (READY, true, "Ready", "1 of 1 replica(s) serve revision 7"),
                (PLACED, true, "Placed", "placed on w2"),
                (DEGRADED, false, reason::AS_EXPECTED, "nothing is wrong"),
            ],
        );
        assert_eq!(
            said(&status_events(Some(&ready), &moved)),
            [(Normal, "Placed")]
        );
        let failed = status(
            Some(8),
            [
                (
                    READY,
                    false,
                    reason::LOAD_FAILED,
                    "worker w2 could not load revision 8",
                ),
                (PLACED, true, "Placed", "placed on w2"),
                (
                    DEGRADED,
                    true,
                    reason::LOAD_FAILED,
                    "worker w2 could not load revision 8",
                ),
            ],
        );
        let events = status_events(Some(&moved), &failed);
        assert_eq!(
            said(&events),
            [(Normal, "Deployed"), (Warning, reason::LOAD_FAILED)]
        );
        assert_eq!(events[1].action, "Load");
        let stranded = status(
            Some(8),
            [
                (READY, false, reason::NO_WORKERS, "no worker is registered"),
                (PLACED, false, reason::NO_WORKERS, "no worker is registered"),
                (DEGRADED, false, reason::AS_EXPECTED, "nothing is wrong"),
            ],
        );
        assert_eq!(
            said(&status_events(Some(&failed), &stranded)),
            [(Warning, reason::NO_WORKERS)]
        );
    }
}
