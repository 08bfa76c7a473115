//! The lines a process holds for the Redis log writer, shared fairly by tenants.
//!
//! One queue per process takes every tenant's guest lines, and it is bounded, so what
//! does not fit is dropped. Dropped first come first, a tenant whose guests log in a
//! loop would fill it and every other tenant's lines would be the ones lost, and the
//! writer would spend its appends on the flood. So each tenant's lines wait in a
//! queue of their own: when the whole is full, a line makes room by dropping the oldest
//! line of the tenant with the most waiting (its own, when that is its tenant), and the
//! writer takes one line per tenant in turn.

use faas_invoke::LogLine;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tokio::sync::Notify;

/// Lines waiting for the writer, by tenant.
pub(crate) struct LogQueue {
    capacity: usize,
    waiting: Mutex<Waiting>,
    ready: Notify,
}

#[derive(Default)]
struct Waiting {
    /// Each tenant's lines, oldest first; only tenants with lines are here.
    by_tenant: HashMap<String, VecDeque<LogLine>>,
    /// The tenants of `by_tenant`, in the order their turns come.
    turns: VecDeque<String>,
    /// All lines waiting.
    len: usize,
    /// No more lines will come: the writer drains what waits and stops.
    closed: bool,
}

impl LogQueue {
    /// An empty queue holding at most `capacity` lines (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            waiting: Mutex::default(),
            ready: Notify::new(),
        }
    }

    /// Queues `line`; returns whether a line was dropped to keep within the capacity
    /// (`line` itself, or the oldest of the tenant with the most lines waiting).
    pub(crate) fn push(&self, line: LogLine) -> bool {
        let mut waiting = self.lock();
        let mut dropped = false;
        if waiting.len >= self.capacity {
            if !waiting.drop_from_longest(&line.tenant) {
                return true;
            }
            dropped = true;
        }
        match waiting.by_tenant.get_mut(&line.tenant) {
            Some(lines) => lines.push_back(line),
            None => {
                waiting.turns.push_back(line.tenant.clone());
                waiting
                    .by_tenant
                    .insert(line.tenant.clone(), VecDeque::from([line]));
            }
        }
        waiting.len += 1;
        drop(waiting);
        self.ready.notify_one();
        dropped
    }

    /// Ends the queue: the writer takes what waits, then stops.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// Waits for lines and moves up to `max` of them into `batch`, one per tenant in
    /// turn; returns false, moving none, once the queue is closed and empty.
    pub(crate) async fn take(&self, batch: &mut Vec<LogLine>, max: usize) -> bool {
        loop {
            // Made before looking, so a push between the look and the wait is not missed.
            let pushed = self.ready.notified();
            {
                let mut waiting = self.lock();
                if waiting.len > 0 {
                    waiting.take_in_turns(batch, max);
                    return true;
                }
                if waiting.closed {
                    return false;
                }
            }
            pushed.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        // Every change leaves the queue whole: a poisoned lock still holds it whole.
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Waiting {
    /// Drops the oldest line of the tenant with the most lines waiting, unless `tenant`
    /// has as many: then there is nothing to drop for it, and it returns false.
    fn drop_from_longest(&mut self, tenant: &str) -> bool {
        let own = self.by_tenant.get(tenant).map_or(0, VecDeque::len);
        let Some((longest, lines)) = self
            .by_tenant
            .iter_mut()
            .max_by_key(|(_, lines)| lines.len())
        else {
            return false;
        };
        if lines.len() <= own {
            return false;
        }
        lines.pop_front();
        if lines.is_empty() {
            let longest = longest.clone();
            self.forget(&longest);
        }
        self.len -= 1;
        true
    }

    /// Moves up to `max` lines into `batch`, one per tenant in turn.
    fn take_in_turns(&mut self, batch: &mut Vec<LogLine>, max: usize) {
        let mut taken = 0;
        while taken < max {
            let Some(tenant) = self.turns.pop_front() else {
                break;
            };
            let lines = self
                .by_tenant
                .get_mut(&tenant)
                .expect("a tenant with a turn has lines");
            batch.extend(lines.pop_front());
            taken += 1;
            if lines.is_empty() {
                self.by_tenant.remove(&tenant);
            } else {
                self.turns.push_back(tenant);
            }
        }
        self.len -= taken;
    }

    fn forget(&mut self, tenant: &str) {
        self.by_tenant.remove(tenant);
        self.turns.retain(|other| other != tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faas_invoke::{LogLevel, LogSource};

    fn line(tenant: &str, text: &str) -> LogLine {
        LogLine {
            time_ms: 1,
            tenant: tenant.into(),
            workflow: format!("{tenant}-flow"),
            function: "f".into(),
            step: None,
            run: None,
            level: LogLevel::Info,
            source: LogSource::Log,
            text: text.into(),
        }
    }

    fn texts(batch: &[LogLine]) -> Vec<String> {
        batch
            .iter()
            .map(|line| format!("{}:{}", line.tenant, line.text))
            .collect()
    }

    #[tokio::test]
    async fn a_flooding_tenant_loses_its_own_lines_not_another_tenants() {
        let queue = LogQueue::new(4);
        let dropped: usize = (0..10)
            .map(|index| queue.push(line("flood", &index.to_string())) as usize)
            .sum();
        assert_eq!(
            dropped, 6,
            "the flood fills the queue, then loses its new lines"
        );
        assert!(
            queue.push(line("quiet", "a")),
            "room is made from the flood"
        );
        assert!(queue.push(line("quiet", "b")));
        let mut batch = Vec::new();
        assert!(queue.take(&mut batch, 10).await);
        assert_eq!(
            texts(&batch),
            ["flood:2", "quiet:a", "flood:3", "quiet:b"],
            "the flood's oldest went, and the tenants take turns"
        );
    }

    #[tokio::test]
    async fn tenants_with_as_many_lines_waiting_keep_them() {
        let queue = LogQueue::new(4);
        for text in ["1", "2"] {
            assert!(!queue.push(line("a", text)));
            assert!(!queue.push(line("b", text)));
        }
        assert!(
            queue.push(line("a", "3")),
            "a holds as many as b: its new line goes"
        );
        let mut batch = Vec::new();
        assert!(queue.take(&mut batch, 3).await);
        assert_eq!(texts(&batch), ["a:1", "b:1", "a:2"]);
        batch.clear();
        assert!(queue.take(&mut batch, 3).await);
        assert_eq!(texts(&batch), ["b:2"]);
    }

    #[tokio::test]
    async fn the_writer_drains_what_waits_then_stops_once_closed() {
        let queue = std::sync::Arc::new(LogQueue::new(8));
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move {
                let mut batch = Vec::new();
                let mut batches = 0;
                while queue.take(&mut batch, 8).await {
                    batches += 1;
                }
                (batches, texts(&batch))
            }
        });
        tokio::task::yield_now().await;
        queue.push(line("a", "late"));
        queue.close();
        let (batches, lines) = waiting.await.unwrap();
        assert_eq!(lines, ["a:late"]);
        assert!(batches >= 1);
    }
}
