//! Turns at the state database for key-value writes, handed to tenants in rotation.
//!
//! The state database has one connection that writes, and one write of a large value
//! holds it for a millisecond or more (one that triggers a WAL checkpoint, which syncs
//! the file, far longer). Were writes served in arrival order, a tenant whose
//! instances all write at once would queue every other tenant's writes behind all of
//! its own; with turns, a write waits behind at most one write of each other tenant
//! that has writes waiting, however many that tenant queued, and it waits without
//! holding a thread. A tenant's own writes keep their order.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// The one turn at the database, and the tenants waiting for it.
#[derive(Debug, Default)]
pub(super) struct TenantTurns {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Whether a [`Turn`] is out (held, or on its way to a waiting call).
    taken: bool,
    /// Tenants with calls waiting, in the order they get the next turns.
    rotation: VecDeque<String>,
    /// Each waiting tenant's calls, oldest first.
    waiting: HashMap<String, VecDeque<oneshot::Sender<Turn>>>,
}

/// The right to use the database, until dropped; dropping it hands it to the next
/// tenant in the rotation.
#[derive(Debug)]
pub(super) struct Turn {
    /// `None` once the turn was handed on another way (see [`TenantTurns::hand_on`]).
    turns: Option<Arc<TenantTurns>>,
}

impl TenantTurns {
    /// Waits for `tenant`'s turn. A call that stops waiting (its future dropped, as
    /// when its event's deadline passes) gives up its place, and a turn handed to it
    /// meanwhile goes on to the next.
    pub(super) async fn take(self: &Arc<Self>, tenant: &str) -> Turn {
        let waiting = {
            let mut state = self.lock();
            if !state.taken {
                state.taken = true;
                return self.turn();
            }
            let (sender, receiver) = oneshot::channel();
            let state = &mut *state;
            let calls = state.waiting.entry(tenant.to_owned()).or_default();
            if calls.is_empty() {
                state.rotation.push_back(tenant.to_owned());
            }
            calls.push_back(sender);
            receiver
        };
        // A sender is only ever dropped after sending, or with the whole state.
        waiting
            .await
            .expect("the turns outlive every call waiting for one")
    }

    fn turn(self: &Arc<Self>) -> Turn {
        Turn {
            turns: Some(Arc::clone(self)),
        }
    }

    /// Hands the turn to the oldest call of the next tenant in the rotation, skipping
    /// calls that stopped waiting; frees it when no call waits.
    fn hand_on(self: &Arc<Self>) {
        let mut state = self.lock();
        while let Some(tenant) = state.rotation.pop_front() {
            let Some(calls) = state.waiting.get_mut(&tenant) else {
                continue;
            };
            let next = calls.pop_front();
            if calls.is_empty() {
                state.waiting.remove(&tenant);
            } else {
                state.rotation.push_back(tenant);
            }
            let Some(next) = next else { continue };
            match next.send(self.turn()) {
                Ok(()) => return,
                // That call stopped waiting: the turn is still ours to hand on.
                Err(mut turn) => turn.turns = None,
            }
        }
        state.taken = false;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(turns) = self.turns.take() {
            turns.hand_on();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future as _;
    use std::time::Duration;
    use tokio::sync::mpsc;

    type Served = mpsc::UnboundedSender<&'static str>;

    /// Queues a call of `tenant` that sends its name on `served` when it gets the
    /// turn, then gives the turn back; returns once the call is waiting.
    async fn queue(turns: &Arc<TenantTurns>, served: &Served, tenant: &'static str) {
        let (turns, served) = (Arc::clone(turns), served.clone());
        tokio::spawn(async move {
            let _turn = turns.take(tenant).await;
            served.send(tenant).unwrap();
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    async fn order_served(
        order: &mut mpsc::UnboundedReceiver<&'static str>,
        calls: usize,
    ) -> Vec<&'static str> {
        let mut served = Vec::new();
        for _ in 0..calls {
            // A turn lost on the way would leave the rest waiting forever.
            let next = tokio::time::timeout(Duration::from_secs(5), order.recv());
            served.push(next.await.expect("a waiting call got no turn").unwrap());
        }
        served
    }

    #[tokio::test]
    async fn a_tenant_with_many_calls_waiting_does_not_go_before_another_tenants_one_call() {
        let turns = Arc::new(TenantTurns::default());
        let (served, mut order) = mpsc::unbounded_channel();
        let held = turns.take("hog").await;
        for tenant in ["hog", "hog", "hog", "victim", "other", "victim"] {
            queue(&turns, &served, tenant).await;
        }
        drop(held);
        assert_eq!(
            order_served(&mut order, 6).await,
            ["hog", "victim", "other", "hog", "victim", "hog"]
        );
        // Every call was served, so the turn is free again at once.
        drop(turns.take("anyone").await);
    }

    #[tokio::test]
    async fn a_call_that_stops_waiting_hands_the_turn_on() {
        let turns = Arc::new(TenantTurns::default());
        let (served, mut order) = mpsc::unbounded_channel();
        let held = turns.take("a").await;
        let gave_up = tokio::spawn({
            let turns = Arc::clone(&turns);
            async move { drop(turns.take("b").await) }
        });
        queue(&turns, &served, "c").await;
        gave_up.abort();
        assert!(gave_up.await.unwrap_err().is_cancelled());
        drop(held);
        assert_eq!(order_served(&mut order, 1).await, ["c"]);
    }

    #[tokio::test]
    async fn a_turn_sent_to_a_call_that_never_looks_is_handed_on() {
        let turns = Arc::new(TenantTurns::default());
        let (served, mut order) = mpsc::unbounded_channel();
        let held = turns.take("a").await;
        // Polled once, so it waits; then the turn is sent to it, and it is dropped
        // without looking: the turn goes on when its channel is dropped.
        let mut never_looks = Box::pin(turns.take("b"));
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(never_looks.as_mut().poll(&mut context).is_pending());
        queue(&turns, &served, "c").await;
        drop(held);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(order.try_recv().is_err(), "c waits behind b");
        drop(never_looks);
        assert_eq!(order_served(&mut order, 1).await, ["c"]);
    }
}
