//! Where guests' log lines are kept for `faas logs` in embedded mode: a bounded buffer
//! per workflow, in memory. Each buffer holds at most its byte budget, and the buffers
//! of one tenant's workflows hold at most the tenant's (the oldest lines of its largest
//! buffer go first, so a buffer that stopped growing cannot starve a new one; dropped
//! lines are counted); a follower gets new lines through a bounded channel and is told
//! how many it missed when it falls behind, so no reader makes the gateway buffer
//! without bound either.

use crate::log_read_rate::{Admitted, LogReadRate};
use faas_invoke::{LogLine, LogSink};
use faas_store::Tenant;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// The default byte budget of one workflow's buffer.
pub const DEFAULT_LOG_BUDGET_BYTES: usize = 1 << 20;

/// The default byte budget of one tenant's buffers together: as in services mode,
/// where the same flag bounds a tenant's log streams in Redis.
pub const DEFAULT_TENANT_LOG_BYTES: usize = faas_store::logs::DEFAULT_LOG_MAX_BYTES as usize;

/// How many lines a follower may be behind before it is told it missed some.
const FOLLOW_LAG_LINES: usize = 256;

/// Which lines a reader wants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogQuery {
    /// Only lines of this function or step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Only lines of this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Only lines taken at or after this time (milliseconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Only lines of this tenant: [`LogStore::read`] sets it to the workflow's, so
    /// lines a removed workflow's last events wrote never reach a new owner of its
    /// name.
    #[serde(skip)]
    pub tenant: Option<String>,
}

impl LogQuery {
    /// Whether `line` is one the reader wants.
    pub fn matches(&self, line: &LogLine) -> bool {
        self.function
            .as_deref()
            .is_none_or(|wanted| line.function == wanted || line.step.as_deref() == Some(wanted))
            && self
                .run
                .as_deref()
                .is_none_or(|wanted| line.run.as_deref() == Some(wanted))
            && self.since_ms.is_none_or(|since| line.time_ms >= since)
            && self
                .tenant
                .as_deref()
                .is_none_or(|tenant| line.tenant == tenant)
    }
}

/// The answer to a logs query (not following).
#[derive(Debug, Serialize, Deserialize)]
pub struct LogsResponse {
    /// The lines kept that match, oldest first.
    pub lines: Vec<LogLine>,
    /// How many lines of this workflow were dropped (over the budget) since it was
    /// deployed on this gateway.
    pub dropped: u64,
}

/// What [`MemoryLogs::read_and_follow`] read.
pub struct MemoryRead {
    /// The lines that match, and the dropped count.
    pub answer: LogsResponse,
    /// The bytes of text of every line it looked at, matching or not: what the read
    /// cost.
    pub scanned: usize,
    /// The lines pushed after the read, when following.
    pub follow: Option<broadcast::Receiver<Arc<LogLine>>>,
}

/// One workflow's lines.
struct Buffer {
    lines: VecDeque<Arc<LogLine>>,
    bytes: usize,
    dropped: u64,
    follow: broadcast::Sender<Arc<LogLine>>,
}

impl Buffer {
    fn new() -> Self {
        Self {
            lines: VecDeque::new(),
            bytes: 0,
            dropped: 0,
            follow: broadcast::channel(FOLLOW_LAG_LINES).0,
        }
    }

    /// Drops its oldest line, counting it as dropped; returns the bytes that freed
    /// (for its tenant's count), or `None` when it holds no line.
    fn drop_oldest(&mut self) -> Option<usize> {
        let cost = self.lines.pop_front()?.cost();
        self.bytes -= cost;
        self.dropped += 1;
        Some(cost)
    }
}

/// One tenant's buffers, by workflow, and what they hold together.
struct TenantBuffers {
    bytes: usize,
    by_workflow: HashMap<String, Buffer>,
    /// What they may hold together (its own quota, or the default); 0 for no limit.
    budget: usize,
}

impl TenantBuffers {
    fn new(budget: usize) -> Self {
        Self {
            bytes: 0,
            by_workflow: HashMap::new(),
            budget,
        }
    }

    /// Drops the oldest lines of its largest buffer until it holds at most `budget`:
    /// so a buffer that stopped growing gives first, and a new one is not starved.
    fn trim_to(&mut self, budget: usize) {
        while self.bytes > budget {
            let Some(largest) = self.by_workflow.values_mut().max_by_key(|b| b.bytes) else {
                return;
            };
            let Some(freed) = largest.drop_oldest() else {
                return;
            };
            self.bytes -= freed;
        }
    }
}

/// The byte budgets of [`MemoryLogs`].
#[derive(Debug, Clone, Copy)]
pub struct LogBudgets {
    /// What one workflow's buffer may hold.
    pub per_workflow: usize,
    /// What the buffers of one tenant's workflows may hold together; 0 for no limit.
    pub per_tenant: usize,
}

impl Default for LogBudgets {
    fn default() -> Self {
        Self {
            per_workflow: DEFAULT_LOG_BUDGET_BYTES,
            per_tenant: DEFAULT_TENANT_LOG_BYTES,
        }
    }
}

/// Every tenant's buffers, by workflow: each buffer within one byte budget, each
/// tenant's together within another. Keyed by tenant first, so that a line a removed
/// workflow's last event wrote never lands in a new owner's buffer of the same name.
pub struct MemoryLogs {
    budgets: LogBudgets,
    state: Mutex<State>,
}

/// What [`MemoryLogs`] keeps under its lock.
#[derive(Default)]
struct State {
    by_tenant: HashMap<String, TenantBuffers>,
    /// The tenants whose buffers' budget is their own (`log_max_bytes` quota), not
    /// `budgets.per_tenant`; 0 for no limit. Read when a tenant's buffers are made
    /// and when the quotas change, not for every line.
    own_budgets: HashMap<String, usize>,
}

/// What `tenant`'s buffers may hold together: its own budget in `own_budgets`, or else
/// `default_budget`.
fn budget_of(own_budgets: &HashMap<String, usize>, tenant: &str, default_budget: usize) -> usize {
    own_budgets.get(tenant).copied().unwrap_or(default_budget)
}

impl MemoryLogs {
    /// Buffers within `budgets`.
    pub fn new(budgets: LogBudgets) -> Self {
        Self {
            budgets,
            state: Mutex::default(),
        }
    }

    /// Gives each of `tenants` with a `log_max_bytes` quota that budget for its
    /// buffers together, and every other tenant the default back: the whole list, as
    /// the tenant store has it. A lowered budget trims at the tenant's next line.
    pub fn apply_tenant_quotas(&self, tenants: &[Tenant]) {
        let own_budgets = tenants
            .iter()
            .filter_map(|tenant| {
                let bytes = tenant.quotas.log_max_bytes?;
                Some((
                    tenant.name.clone(),
                    usize::try_from(bytes).unwrap_or(usize::MAX),
                ))
            })
            .collect();
        let mut state = self.lock();
        state.own_budgets = own_budgets;
        let default_budget = self.budgets.per_tenant;
        let State {
            by_tenant,
            own_budgets,
        } = &mut *state;
        for (tenant, buffers) in by_tenant {
            buffers.budget = budget_of(own_budgets, tenant, default_budget);
        }
    }

    /// The lines of `tenant`'s `workflow` that match `query`, oldest first, and the
    /// dropped count.
    pub fn read(&self, tenant: &str, workflow: &str, query: &LogQuery) -> LogsResponse {
        self.read_and_follow(tenant, workflow, query, false).answer
    }

    /// As [`Self::read`] and, when `follow`, a receiver of the lines pushed after the
    /// read (taken under the same lock, so none is missed or seen twice).
    pub fn read_and_follow(
        &self,
        tenant: &str,
        workflow: &str,
        query: &LogQuery,
        follow: bool,
    ) -> MemoryRead {
        let mut state = self.lock();
        let receiver = follow.then(|| {
            let State {
                by_tenant,
                own_budgets,
            } = &mut *state;
            by_tenant
                .entry(tenant.to_owned())
                .or_insert_with(|| {
                    TenantBuffers::new(budget_of(own_budgets, tenant, self.budgets.per_tenant))
                })
                .by_workflow
                .entry(workflow.to_owned())
                .or_insert_with(Buffer::new)
                .follow
                .subscribe()
        });
        let buffer = state
            .by_tenant
            .get(tenant)
            .and_then(|buffers| buffers.by_workflow.get(workflow));
        // Only the lines' handles are taken under the lock, which every guest's line
        // pushed waits for: filtering and copying thousands of lines is done after.
        let (held, dropped): (Vec<Arc<LogLine>>, u64) = match buffer {
            Some(buffer) => (buffer.lines.iter().cloned().collect(), buffer.dropped),
            None => (Vec::new(), 0),
        };
        drop(state);
        let lines = held
            .iter()
            .filter(|line| query.matches(line))
            .map(|line| LogLine::clone(line))
            .collect();
        MemoryRead {
            answer: LogsResponse { lines, dropped },
            scanned: held.iter().map(|line| line.text.len()).sum(),
            follow: receiver,
        }
    }

    /// How many bytes `tenant`'s buffers hold, all together.
    pub fn tenant_bytes(&self, tenant: &str) -> usize {
        self.lock()
            .by_tenant
            .get(tenant)
            .map_or(0, |buffers| buffers.bytes)
    }

    /// Forgets the lines of `tenant`'s `workflow` (it was removed); its followers'
    /// streams end.
    pub fn remove(&self, tenant: &str, workflow: &str) {
        let by_tenant = &mut self.lock().by_tenant;
        let Some(buffers) = by_tenant.get_mut(tenant) else {
            return;
        };
        if let Some(buffer) = buffers.by_workflow.remove(workflow) {
            buffers.bytes -= buffer.bytes;
        }
        if buffers.by_workflow.is_empty() {
            by_tenant.remove(tenant);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves the buffers consistent enough to read.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl LogSink for MemoryLogs {
    fn push(&self, line: LogLine) {
        let cost = line.cost();
        let line = Arc::new(line);
        let mut state = self.lock();
        let State {
            by_tenant,
            own_budgets,
        } = &mut *state;
        // Looked up before the entry API, which would copy the names for every line.
        let buffers = match by_tenant.get_mut(&line.tenant) {
            Some(buffers) => buffers,
            None => by_tenant.entry(line.tenant.clone()).or_insert_with(|| {
                TenantBuffers::new(budget_of(
                    own_budgets,
                    &line.tenant,
                    self.budgets.per_tenant,
                ))
            }),
        };
        let buffer = match buffers.by_workflow.get_mut(&line.workflow) {
            Some(buffer) => buffer,
            None => buffers
                .by_workflow
                .entry(line.workflow.clone())
                .or_insert_with(Buffer::new),
        };
        buffer.bytes += cost;
        buffers.bytes += cost;
        buffer.lines.push_back(line.clone());
        while buffer.bytes > self.budgets.per_workflow {
            let Some(freed) = buffer.drop_oldest() else {
                break;
            };
            buffers.bytes -= freed;
        }
        // No follower is not an error; a slow one sees `Lagged` on its side.
        let _ = buffer.follow.send(line);
        if buffers.budget > 0 {
            buffers.trim_to(buffers.budget);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faas_invoke::{LogLevel, LogSource};

    fn line(workflow: &str, function: &str, run: Option<&str>, text: &str) -> LogLine {
        LogLine {
            time_ms: 1,
            tenant: "t".into(),
            workflow: workflow.into(),
            function: function.into(),
            step: run.map(|_| function.to_owned()),
            run: run.map(str::to_owned),
            level: LogLevel::Info,
            source: LogSource::Output,
            text: text.into(),
        }
    }

    #[test]
    fn a_buffer_stays_within_its_budget_and_counts_what_it_dropped() {
        let logs = MemoryLogs::new(LogBudgets {
            per_workflow: 4096,
            per_tenant: usize::MAX,
        });
        for _ in 0..1000 {
            logs.push(line("a", "f", None, &"x".repeat(100)));
        }
        logs.push(line("b", "g", None, "other"));
        let read = logs.read("t", "a", &LogQuery::default());
        let kept: usize = read.lines.iter().map(LogLine::cost).sum();
        assert!(kept <= 4096, "{kept}");
        assert_eq!(read.dropped as usize + read.lines.len(), 1000);
        assert_eq!(logs.read("t", "b", &LogQuery::default()).lines.len(), 1);
        assert_eq!(
            logs.tenant_bytes("t"),
            kept + line("b", "g", None, "other").cost()
        );
    }

    #[test]
    fn a_tenants_buffers_stay_within_its_budget_and_its_largest_gives_first() {
        let logs = MemoryLogs::new(LogBudgets {
            per_workflow: 1 << 20,
            per_tenant: 64 << 10,
        });
        let text = "x".repeat(1000);
        // A buffer that filled the tenant's budget and stopped growing...
        for _ in 0..200 {
            logs.push(line("idle", "f", None, &text));
        }
        assert!(logs.tenant_bytes("t") <= 64 << 10);
        // ...gives way to a new one, which keeps every line of its own.
        for _ in 0..20 {
            logs.push(line("new", "f", None, &text));
        }
        assert_eq!(logs.read("t", "new", &LogQuery::default()).lines.len(), 20);
        let idle = logs.read("t", "idle", &LogQuery::default());
        assert!(idle.dropped > 0 && !idle.lines.is_empty());
        assert!(logs.tenant_bytes("t") <= 64 << 10);
        // Another tenant's lines are neither trimmed for it nor counted against it.
        let mut theirs = line("theirs", "f", None, &text);
        theirs.tenant = "other".into();
        logs.push(theirs.clone());
        for _ in 0..100 {
            logs.push(line("new", "f", None, &text));
        }
        assert_eq!(logs.tenant_bytes("other"), theirs.cost());
        assert_eq!(
            logs.read("other", "theirs", &LogQuery::default())
                .lines
                .len(),
            1
        );
        // A removed workflow's lines are no longer counted.
        let before = logs.tenant_bytes("t");
        let removed: usize = logs
            .read("t", "idle", &LogQuery::default())
            .lines
            .iter()
            .map(LogLine::cost)
            .sum();
        logs.remove("t", "idle");
        assert_eq!(logs.tenant_bytes("t"), before - removed);
    }

    #[test]
    fn a_tenant_with_a_log_quota_of_its_own_is_held_to_it() {
        let logs = MemoryLogs::new(LogBudgets {
            per_workflow: 1 << 20,
            per_tenant: 64 << 10,
        });
        let tenant = |name: &str, log_max_bytes| Tenant {
            name: name.into(),
            created_at: 0,
            quotas: faas_store::Quotas {
                log_max_bytes,
                ..faas_store::Quotas::default()
            },
        };
        let text = "x".repeat(1000);
        let flood = |tenant: &str| {
            for _ in 0..500 {
                let mut line = line("w", "f", None, &text);
                line.tenant = tenant.into();
                logs.push(line);
            }
        };
        logs.apply_tenant_quotas(&[
            tenant("large", Some(256 << 10)),
            tenant("small", Some(16 << 10)),
        ]);
        for name in ["large", "small", "plain"] {
            flood(name);
        }
        let large = logs.tenant_bytes("large");
        assert!(large > 64 << 10 && large <= 256 << 10, "{large}");
        assert!(logs.tenant_bytes("small") <= 16 << 10);
        assert!(logs.tenant_bytes("plain") <= 64 << 10);
        // Its quota gone from the list, a tenant has the default again, from its next
        // line.
        logs.apply_tenant_quotas(&[tenant("small", Some(16 << 10))]);
        flood("large");
        assert!(logs.tenant_bytes("large") <= 64 << 10);
    }

    #[test]
    fn queries_filter_by_function_step_and_run() {
        let logs = MemoryLogs::new(LogBudgets::default());
        logs.push(line("a", "f", None, "1"));
        logs.push(line("a", "s", Some("r1"), "2"));
        logs.push(line("a", "s", Some("r2"), "3"));
        let texts = |query: LogQuery| -> Vec<String> {
            logs.read("t", "a", &query)
                .lines
                .into_iter()
                .map(|line| line.text)
                .collect()
        };
        assert_eq!(texts(LogQuery::default()), ["1", "2", "3"]);
        let by_run = LogQuery {
            run: Some("r2".into()),
            ..LogQuery::default()
        };
        assert_eq!(texts(by_run), ["3"]);
        let by_function = LogQuery {
            function: Some("f".into()),
            ..LogQuery::default()
        };
        assert_eq!(texts(by_function), ["1"]);
        // A line another tenant's event wrote under the same name is not shown.
        let mut theirs = line("a", "f", None, "4");
        theirs.tenant = "other".into();
        logs.push(theirs);
        assert_eq!(texts(LogQuery::default()), ["1", "2", "3"]);
    }

    /// A [`FollowAccess`] the test turns: whether it lets in, its generation, and how
    /// many times it was asked.
    #[derive(Clone, Default)]
    struct Turnstile {
        closed: Arc<std::sync::atomic::AtomicBool>,
        generation: Arc<std::sync::atomic::AtomicU64>,
        asked: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Turnstile {
        fn asked(&self) -> usize {
            self.asked.load(std::sync::atomic::Ordering::SeqCst)
        }

        /// Takes the access back, as a revocation in this process does when `notify`.
        fn close(&self, notify: bool) {
            self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
            if notify {
                self.generation
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    impl FollowAccess for Turnstile {
        fn generation(&self) -> u64 {
            self.generation.load(std::sync::atomic::Ordering::SeqCst)
        }

        async fn allowed(&self) -> bool {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            !self.closed.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// A follow stream fed by the test, and its feed.
    fn fed_stream() -> (
        tokio::sync::mpsc::UnboundedSender<bytes::Bytes>,
        FollowStream,
    ) {
        let (feed, receiver) = tokio::sync::mpsc::unbounded_channel();
        let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
            let chunk = receiver.recv().await?;
            Some((chunk, receiver))
        });
        (feed, Box::pin(stream))
    }

    async fn next_chunk(stream: &mut FollowStream) -> Option<bytes::Bytes> {
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            futures_util::StreamExt::next(stream),
        )
        .await
        .expect("the follow neither sent nor ended")
    }

    #[tokio::test]
    async fn a_follow_asks_at_its_start_and_when_access_may_have_changed_and_then_ends() {
        let (feed, stream) = fed_stream();
        let access = Turnstile::default();
        let hour = std::time::Duration::from_secs(3600);
        let mut followed = while_allowed(stream, access.clone(), hour);
        feed.send("first".into()).unwrap();
        assert_eq!(next_chunk(&mut followed).await.unwrap(), "first");
        assert_eq!(access.asked(), 1, "asked before the first chunk");
        // Lines go out without a look-up while nothing changed...
        for _ in 0..100 {
            feed.send("line".into()).unwrap();
            assert_eq!(next_chunk(&mut followed).await.unwrap(), "line");
        }
        assert_eq!(access.asked(), 1);
        // ...it asks again when something may have (and still lets in)...
        access
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        feed.send("still".into()).unwrap();
        assert_eq!(next_chunk(&mut followed).await.unwrap(), "still");
        assert_eq!(access.asked(), 2);
        // ...and ends, before the next line, once the access is taken back.
        access.close(true);
        feed.send("after".into()).unwrap();
        assert_eq!(next_chunk(&mut followed).await, None);
        assert_eq!(access.asked(), 3);
    }

    #[tokio::test]
    async fn a_follow_asks_every_interval_idle_or_busy() {
        // Long enough that no stall of a loaded test machine passes it between two
        // lines the test sends together.
        let every = std::time::Duration::from_secs(1);
        // Idle: no line comes, and the follow still ends once its access is gone.
        let (_feed, stream) = fed_stream();
        let access = Turnstile::default();
        let mut followed = while_allowed(stream, access.clone(), every);
        access.close(false);
        assert_eq!(next_chunk(&mut followed).await, None);
        // Busy: lines keep coming and its generation never moves (access taken back
        // in another process), yet the first line after the interval is not sent.
        let (feed, stream) = fed_stream();
        let access = Turnstile::default();
        let mut followed = while_allowed(stream, access.clone(), every);
        feed.send("first".into()).unwrap();
        assert_eq!(next_chunk(&mut followed).await.unwrap(), "first");
        access.close(false);
        feed.send("soon".into()).unwrap();
        assert_eq!(next_chunk(&mut followed).await.unwrap(), "soon");
        tokio::time::sleep(every * 2).await;
        feed.send("late".into()).unwrap();
        assert_eq!(next_chunk(&mut followed).await, None);
    }

    #[tokio::test]
    async fn a_follower_sees_new_lines_and_is_told_what_it_missed() {
        let logs = MemoryLogs::new(LogBudgets::default());
        let read = logs.read_and_follow("t", "a", &LogQuery::default(), true);
        let mut receiver = read.follow.unwrap();
        logs.push(line("a", "f", None, "new"));
        assert_eq!(receiver.recv().await.unwrap().text, "new");
        for _ in 0..FOLLOW_LAG_LINES + 10 {
            logs.push(line("a", "f", None, "flood"));
        }
        assert!(matches!(
            receiver.recv().await,
            Err(broadcast::error::RecvError::Lagged(10))
        ));
    }
}

/// How often a follow stream sends an empty line while no line comes, so that a
/// client that went away is noticed (by the failed write) and its stream dropped.
const FOLLOW_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a Redis follow stream looks for new lines, and how many it takes at once.
const REDIS_FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(250);
const REDIS_FOLLOW_LINES: usize = 256;

/// Where this gateway reads guests' log lines: its own memory (embedded mode, the
/// workers in the same process write there) or Redis (services mode). The gateway
/// writes there too: a line for each event that failed before a worker ran it.
#[derive(Clone)]
pub enum LogStore {
    /// Bounded buffers in this process.
    Memory(Arc<MemoryLogs>),
    /// The workers' streams in Redis.
    Redis(RedisLogs),
}

/// Services mode's log streams: read for `faas logs`, appended to like a worker does.
#[derive(Clone)]
pub struct RedisLogs {
    /// Reads the streams.
    pub reader: faas_store::logs::RedisLogReader,
    /// Appends this gateway's lines.
    pub writer: Arc<faas_store::logs::RedisLogWriter>,
}

impl LogSink for LogStore {
    fn push(&self, line: LogLine) {
        match self {
            Self::Memory(logs) => logs.push(line),
            Self::Redis(redis) => redis.writer.push(line),
        }
    }
}

impl LogStore {
    /// Applies the tenants' `log_max_bytes` quotas, the whole list as the tenant store
    /// has it (see [`MemoryLogs::apply_tenant_quotas`] and
    /// [`faas_store::logs::RedisLogWriter::apply_tenant_quotas`]).
    pub fn apply_tenant_quotas(&self, tenants: &[Tenant]) {
        match self {
            Self::Memory(logs) => logs.apply_tenant_quotas(tenants),
            Self::Redis(redis) => redis.writer.apply_tenant_quotas(tenants),
        }
    }

    /// The lines of `tenant`'s `workflow` matching `query` and, when `follow`, a
    /// stream of NDJSON chunks: those lines and then new ones as they come. With
    /// `rate`, what the store reads for it (before the query's filters), the first read
    /// (admitted by the caller) and each of a follow's, is charged to the tenant, and a
    /// follow reads nothing more while the tenant's allowance is spent ([`LogReadRate`]).
    ///
    /// # Errors
    /// When Redis fails.
    pub(crate) async fn read(
        &self,
        tenant: &str,
        workflow: &str,
        query: LogQuery,
        follow: bool,
        rate: Option<(Arc<LogReadRate>, Admitted)>,
    ) -> Result<ReadOutcome, faas_store::logs::LogStoreError> {
        let (rate, admitted) = rate.unzip();
        let charge = |bytes: usize| {
            if let (Some(rate), Some(admitted)) = (&rate, admitted) {
                admitted.settle(rate, tenant, bytes);
            }
        };
        let query = LogQuery {
            tenant: Some(tenant.to_owned()),
            ..query
        };
        match self {
            Self::Memory(logs) => {
                let read = logs.read_and_follow(tenant, workflow, &query, follow);
                // What it looked at, as in Redis, not only what matched: a filter that
                // matches nothing still walked its workflow's lines. A follow is sent
                // the new ones, which its tenant wrote, uncharged.
                charge(read.scanned);
                let answer = read.answer;
                Ok(match read.follow {
                    Some(receiver) => {
                        ReadOutcome::Follow(Box::pin(follow_stream(answer.lines, receiver, query)))
                    }
                    None => ReadOutcome::Lines(answer),
                })
            }
            Self::Redis(RedisLogs { reader, .. }) => {
                // A failed read is charged nothing.
                let batch = reader.recent(tenant, workflow).await;
                charge(batch.as_ref().map_or(0, |batch| batch.bytes));
                let batch = batch?;
                let lines: Vec<LogLine> = batch
                    .lines
                    .into_iter()
                    .filter(|line| query.matches(line))
                    .collect();
                if !follow {
                    return Ok(ReadOutcome::Lines(LogsResponse { lines, dropped: 0 }));
                }
                let first = futures_util::stream::iter(vec![ndjson_lines(&lines)]);
                let stream = (tenant.to_owned(), workflow.to_owned());
                let state = (reader.clone(), stream, batch.last_id, query, rate);
                let rest = futures_util::stream::unfold(state, |state| async move {
                    let (reader, stream, mut last_id, query, rate) = state;
                    let (tenant, workflow) = &stream;
                    let deadline = tokio::time::Instant::now() + FOLLOW_HEARTBEAT;
                    loop {
                        tokio::time::sleep(REDIS_FOLLOW_POLL).await;
                        let most = REDIS_FOLLOW_LINES * faas_store::logs::MAX_ENTRY_BYTES;
                        let admitted = rate.as_ref().map(|rate| rate.admit(tenant, most));
                        // A failed read is retried at the next poll (and charged
                        // nothing), and none is made while the tenant's allowance is
                        // spent; the heartbeat still goes out.
                        let read = match admitted {
                            Some(Err(_)) => None,
                            _ => Some(
                                reader
                                    .after(tenant, workflow, &last_id, REDIS_FOLLOW_LINES)
                                    .await,
                            ),
                        };
                        if let (Some(rate), Some(Ok(admitted))) = (&rate, admitted) {
                            let bytes = match &read {
                                Some(Ok(batch)) => batch.bytes,
                                _ => 0,
                            };
                            admitted.settle(rate, tenant, bytes);
                        }
                        if let Some(Ok(batch)) = read {
                            last_id = batch.last_id;
                            let lines: Vec<LogLine> = batch
                                .lines
                                .into_iter()
                                .filter(|line| query.matches(line))
                                .collect();
                            if !lines.is_empty() {
                                let chunk = ndjson_lines(&lines);
                                return Some((chunk, (reader, stream, last_id, query, rate)));
                            }
                        }
                        if tokio::time::Instant::now() >= deadline {
                            let chunk = bytes::Bytes::from_static(b"\n");
                            return Some((chunk, (reader, stream, last_id, query, rate)));
                        }
                    }
                });
                Ok(ReadOutcome::Follow(Box::pin(
                    futures_util::StreamExt::chain(first, rest),
                )))
            }
        }
    }

    /// Forgets `workflow`'s lines (it was removed).
    pub(crate) async fn remove(&self, tenant: &str, workflow: &str) {
        match self {
            Self::Memory(logs) => logs.remove(tenant, workflow),
            Self::Redis(RedisLogs { reader, .. }) => {
                if let Err(err) = reader.remove(tenant, workflow).await {
                    tracing::warn!(workflow, "removing the workflow's logs: {err}");
                }
            }
        }
    }
}

/// What a read gives: the lines, or a follow stream of NDJSON chunks.
pub(crate) enum ReadOutcome {
    /// Not following.
    Lines(LogsResponse),
    /// Following.
    Follow(FollowStream),
}

/// A follow's NDJSON chunks: lines, counts of missed lines, heartbeats.
pub(crate) type FollowStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = bytes::Bytes> + Send>>;

/// How often a follow asks again whether its reader may still read, lines coming or
/// not: as often as an idle one sends a heartbeat.
pub(crate) const FOLLOW_RECHECK: std::time::Duration = FOLLOW_HEARTBEAT;

/// What a follow was let in by (a token, its tenant, whose the workflow is), asked
/// again while the follow lasts: each can be taken back after the request was checked,
/// and a follow lasts as long as its client stays.
pub(crate) trait FollowAccess: Send + Sync + 'static {
    /// A number that moves whenever this process may have taken the access back (a
    /// revocation, a removal). Compared before each chunk, so it must be cheap: where it
    /// moved, [`Self::allowed`] is asked before the chunk goes out.
    fn generation(&self) -> u64;

    /// Whether the reader may still read: the check its request passed, made again.
    fn allowed(&self) -> impl std::future::Future<Output = bool> + Send;
}

/// `stream`, ended (cleanly, as when its workflow goes) once `access` no longer lets
/// its reader in. `access` is asked before the first chunk, every `every` after, and
/// before any chunk when its generation moved since last asked: so access taken back
/// by another process is noticed within `every`, and access taken back in this one
/// before any further line goes out. The chunks themselves cost one generation read
/// each, never a look-up.
pub(crate) fn while_allowed<A: FollowAccess>(
    stream: FollowStream,
    access: A,
    every: std::time::Duration,
) -> FollowStream {
    let recheck = Box::pin(tokio::time::sleep(every));
    // Asked before the first chunk too (`seen` is none): the access may have been taken
    // back between the request's own check and the read of its lines.
    let state = (stream, access, None, recheck);
    let checked = futures_util::stream::unfold(state, move |state| async move {
        let (mut stream, access, mut seen, mut recheck) = state;
        loop {
            // The check's time first, so that a stream with a chunk always ready is
            // checked too. Dropping `next()` when the timer wins loses nothing: a chunk
            // is taken only when it is ready.
            let chunk = tokio::select! {
                biased;
                () = &mut recheck => None,
                chunk = futures_util::StreamExt::next(&mut stream) => Some(chunk?),
            };
            let generation = access.generation();
            if chunk.is_none() || seen != Some(generation) {
                // Read before asking: a change made while the check runs moves it again.
                if !access.allowed().await {
                    return None;
                }
                seen = Some(generation);
                recheck.as_mut().reset(tokio::time::Instant::now() + every);
            }
            if let Some(chunk) = chunk {
                return Some((chunk, (stream, access, seen, recheck)));
            }
        }
    });
    Box::pin(checked)
}

/// `lines` as NDJSON.
fn ndjson_lines(lines: &[LogLine]) -> bytes::Bytes {
    lines
        .iter()
        .flat_map(|line| ndjson(line).to_vec())
        .collect::<Vec<u8>>()
        .into()
}

/// Parses a logs query string: `function=`, `run=`, `since_ms=`, `follow=1`.
///
/// # Errors
/// A parameter it does not know or a `since_ms` that is not a number, named.
pub(crate) fn parse_query(query: Option<&str>) -> Result<(LogQuery, bool), String> {
    let mut parsed = LogQuery::default();
    let mut follow = false;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "function" => parsed.function = Some(value.to_owned()),
            "run" => parsed.run = Some(value.to_owned()),
            "since_ms" => {
                parsed.since_ms = Some(value.parse().map_err(|_| {
                    format!("since_ms must be milliseconds since the Unix epoch, not `{value}`")
                })?)
            }
            "follow" => follow = matches!(value, "1" | "true" | ""),
            other => {
                return Err(format!(
                    "unknown logs parameter `{other}` (expected function, run, since_ms, follow)"
                ));
            }
        }
    }
    Ok((parsed, follow))
}

/// One NDJSON line of a follow stream: a [`LogLine`], or how many lines the reader
/// missed because it fell behind.
pub(crate) fn follow_stream(
    first: Vec<LogLine>,
    receiver: broadcast::Receiver<Arc<LogLine>>,
    query: LogQuery,
) -> impl futures_util::Stream<Item = bytes::Bytes> + Send + 'static {
    let first = futures_util::stream::iter(
        first
            .into_iter()
            .map(|line| ndjson(&line))
            .collect::<Vec<_>>(),
    );
    let rest =
        futures_util::stream::unfold((receiver, query), move |(mut receiver, query)| async move {
            loop {
                let next = tokio::time::timeout(FOLLOW_HEARTBEAT, receiver.recv()).await;
                let chunk = match next {
                    Err(_) => bytes::Bytes::from_static(b"\n"),
                    Ok(Ok(line)) if query.matches(&line) => ndjson(&*line),
                    Ok(Ok(_)) => continue,
                    Ok(Err(broadcast::error::RecvError::Lagged(missed))) => {
                        ndjson(&serde_json::json!({ "missed": missed }))
                    }
                    // The workflow was removed.
                    Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                };
                return Some((chunk, (receiver, query)));
            }
        });
    futures_util::StreamExt::chain(first, rest)
}

/// `value` as one NDJSON line.
fn ndjson<T: Serialize + ?Sized>(value: &T) -> bytes::Bytes {
    // Lines and counts always serialize.
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes.into()
}
